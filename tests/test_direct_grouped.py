"""Direct (no tl.dot) depthwise / few-channel kernels, conv_bwd_data and conv_bwd_weight.

Launched through their registered Algorithms on fresh random data (never zeros), results poisoned
with NaN beforehand, compared with the float64 references within the dtype's tolerance. Runs in
Triton's interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU; tiny shapes and large
blocks keep the interpreter fast (few programs).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, RunArgs, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS, resolve_fused_op  # noqa: E402
from instance_factory.kernels import depthwise_wgrad as dw_mod  # noqa: E402
from instance_factory.kernels import direct_grouped as mod  # noqa: E402
from instance_factory.kernels.common import split_chunks  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight, rel_error  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
DATA = ALGORITHMS[("conv_bwd_data", "direct")]
WEIGHT = ALGORITHMS[("conv_bwd_weight", "direct")]
DATA_CFG = dict(block_p=64, block_ch=8, num_warps=4)
WEIGHT_CFG = dict(block_p=16, block_ch=32, num_warps=4, split=3)
DEPTHWISE = ALGORITHMS[("conv_bwd_weight", "depthwise")]
DEPTHWISE_CFG = dict(block_w=8, block_ch=16, num_warps=4, split=3)


def P(ndim, G, N, K, C, f, i, s, d, lp, rp):  # noqa: N802 - mirrors ConvParams' argument order
    return ConvParams(ndim, G, N, K, C, f, i, s, d, lp, rp)


# one small problem per ndim with stride, dilation and asymmetric pads
def shape(ndim: int, G: int, K: int, C: int, N: int = 2) -> ConvParams:
    if ndim == 1:
        return P(1, G, N, K, C, (3,), (11,), (2,), (2,), (2,), (1,))
    if ndim == 2:
        return P(2, G, N, K, C, (3, 2), (5, 6), (1, 3), (1, 2), (1, 0), (0, 2))
    return P(3, G, N, K, C, (2, 3, 3), (3, 4, 5), (1, 2, 1), (2, 1, 1), (1, 1, 0), (0, 1, 2))


def _rand(shape_, dtype) -> torch.Tensor:
    t = torch.randn(shape_, device=DEV)
    return t.to(dtype)


def run_case(op_name: str, p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32",
             cfg: dict | None = None, op="passthrough", n_ds: int = 0, alpha: float = 1.0,
             beta: float = 1.0, user_ref=None, seed: int = 0, force_int64: bool = False,
             return_out: bool = False, depthwise: bool = False, algorithm: str | None = None,
             base_cfg: dict | None = None):
    """Launch one direct Algorithm (``depthwise``: the depthwise bwd-weight algorithm; ``algorithm``:
    another algorithm of the op, with ``base_cfg``) on fresh random data; return the error vs the
    float64 reference."""
    torch.manual_seed(seed)
    lt = layout_for(layout_family, p.ndim)
    dt = DATA_TYPES[dtype]
    res_dtype = dt.result or dt.data
    alg = DATA if op_name == "data" else DEPTHWISE if depthwise else WEIGHT
    base = DATA_CFG if op_name == "data" else DEPTHWISE_CFG if depthwise else WEIGHT_CFG
    if algorithm is not None:
        alg = ALGORITHMS[("conv_bwd_data" if op_name == "data" else "conv_bwd_weight", algorithm)]
        base = base_cfg
    cfg = alg.config.from_values({**base, **(cfg or {})})
    fused, user_fn = resolve_fused_op(op, n_ds)
    assert alg.check_config(cfg) is None, alg.check_config(cfg)
    assert alg.decline(cfg, p, lt, dt, fused) is None, alg.decline(cfg, p, lt, dt, fused)
    result = "input" if op_name == "data" else "weight"
    ds = tuple(_rand(lt.shape(result, p), res_dtype) for _ in range(n_ds))
    out = torch.full(lt.shape(result, p), float("nan"), dtype=res_dtype, device=DEV)
    if op_name == "data":
        a = _rand(lt.shape("output", p), dt.data)  # grad_out
        b = _rand(lt.shape("weight", p), dt.data)
    else:
        a = _rand(lt.shape("input", p), dt.data)
        b = _rand(lt.shape("output", p), dt.data)  # grad_out
    args = RunArgs(params=p, layout=lt, dtype=dt, fused=fused, user_fn=user_fn, alpha=alpha, beta=beta,
                   a=a, b=b, ds=ds, out=out, cfg=cfg)
    if force_int64:
        bind = mod.bind_bwd_data if op_name == "data" else dw_mod.bind if depthwise else mod.bind_bwd_weight
        if algorithm is not None:
            bind = alg.bind
        assert bind(args, force_int64=True)(args.a, args.b, args.out, args.ds, args.alpha, args.beta) is None
    else:
        assert alg.launch(args) is None
    kw = dict(ds=ds, op=op, alpha=alpha, beta=beta, user_ref=user_ref)
    if op_name == "data":
        ref = ref_conv_bwd_data(a, b, p, lt.name, **kw)
    else:
        ref = ref_conv_bwd_weight(a, b, p, lt.name, **kw)
    assert out.dtype == res_dtype
    err = rel_error(out, ref)
    if return_out:
        return err, out
    return err


def check(op_name: str, p: ConvParams, dtype: str = "fp32", **kw) -> None:
    err = run_case(op_name, p, dtype=dtype, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"{op_name} {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


OPS = ("data", "weight")


# ------------------------------------------------------------------------------------------------
# registration, configs, declines
# ------------------------------------------------------------------------------------------------
def test_registered():
    assert DATA.param_names == ("block_p", "block_ch", "num_warps")
    assert WEIGHT.param_names == ("block_p", "block_ch", "num_warps", "split")
    assert DATA.name == WEIGHT.name == "direct"


@pytest.mark.parametrize("cfg", [dict(block_p=64, block_ch=128, num_warps=4),
                                 dict(block_p=1, block_ch=1, num_warps=1),
                                 dict(block_p=32, block_ch=256, num_warps=8)])
def test_check_config_data_ok(cfg):
    assert DATA.check_config(cfg) is None


@pytest.mark.parametrize("cfg,word", [
    (dict(block_p=48, block_ch=128, num_warps=4), "block_p"),
    (dict(block_p=64, block_ch=96, num_warps=4), "block_ch"),
    (dict(block_p=64, block_ch=128, num_warps=3), "num_warps"),
    (dict(block_p=64, block_ch=128, num_warps=16), "num_warps"),
    (dict(block_p=1024, block_ch=1024, num_warps=4), "accumulators"),
    (dict(block_p=64, block_ch=128), "num_warps"),
])
def test_check_config_data_bad(cfg, word):
    reason = DATA.check_config(cfg)
    assert reason and word in reason


@pytest.mark.parametrize("cfg", [dict(block_p=128, block_ch=64, num_warps=4, split=0),
                                 dict(block_p=1, block_ch=1, num_warps=1, split=1),
                                 dict(block_p=16, block_ch=1024, num_warps=8, split=4096)])
def test_check_config_weight_ok(cfg):
    assert WEIGHT.check_config(cfg) is None


@pytest.mark.parametrize("cfg,word", [
    (dict(block_p=2048, block_ch=1, num_warps=4, split=0), "block_p"),
    (dict(block_p=3, block_ch=128, num_warps=4, split=0), "block_p"),
    (dict(block_p=256, block_ch=128, num_warps=4, split=0), "registers"),
    (dict(block_p=4, block_ch=2048, num_warps=4, split=0), "block_ch"),
    (dict(block_p=4, block_ch=128, num_warps=4, split=-1), "split"),
    (dict(block_p=4, block_ch=128, num_warps=4, split=1.5), "split"),
    (dict(block_p=4, block_ch=128, num_warps=4), "split"),
])
def test_check_config_weight_bad(cfg, word):
    reason = WEIGHT.check_config(cfg)
    assert reason and word in reason


@pytest.mark.parametrize("alg", [DATA, WEIGHT], ids=OPS)
def test_declines(alg):
    lt = layout_for("nhwgc", 2)
    cfg = alg.config.from_values(DATA_CFG if alg is DATA else WEIGHT_CFG)
    fused = FUSED_OPS["passthrough"]
    big = P(2, 4, 2, 4, 16, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    reason = alg.decline(cfg, big, lt, DATA_TYPES["fp16"], fused)
    assert reason and "C,K per group <= 8" in reason and "C=16, K=4" in reason
    big_k = P(2, 4, 2, 9, 1, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "K=9" in alg.decline(cfg, big_k, lt, DATA_TYPES["fp32"], fused)
    ok = P(2, 144, 2, 1, 1, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    reason = alg.decline(cfg, ok, lt, DATA_TYPES["fp16_fp8"], fused)
    assert reason and "fp8" in reason
    for name in ("fp32", "fp32_tf32", "fp16", "bf16"):
        for layout_ in (layout_for(f, 2) for f in LAYOUT_FAMILIES):
            for fop in FUSED_OPS.values():
                assert alg.decline(cfg, ok, layout_, DATA_TYPES[name], fop) is None
    wide = P(2, 8, 1, 8, 8, (3, 3), (4, 4), (1, 1), (1, 1), (1, 1), (1, 1))
    assert alg.decline(cfg, wide, lt, DATA_TYPES["bf16"], fused) is None
    bf16w = alg.decline(cfg, ok, lt, DATA_TYPES["bf16_fp32w"], fused)
    assert (bf16w is None) == (alg is WEIGHT)
    if alg is DATA:
        assert "bf16_fp32w" in bf16w


def test_auto_split():
    p = P(2, 144, 8, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    s = mod.auto_split(p, 64, 64, 4, 2, 132)
    assert 1 < s <= 4096
    positions = 8 * 56 * 56
    assert positions // s >= 128  # chunks long enough to amortize the partials, >= 2 tiles
    tiny = P(2, 144, 1, 1, 1, (3, 3), (4, 4), (1, 1), (1, 1), (1, 1), (1, 1))
    assert mod.auto_split(tiny, 64, 64, 4, 2, 132) == 1
    assert mod.auto_split(p, 64, 64, 4, 2, 264) >= s


# ------------------------------------------------------------------------------------------------
# correctness
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", list(LAYOUT_FAMILIES))
def test_layouts_ndims(op_name, ndim, layout_family):
    """Every layout family x ndim, C != K (C=2, K=3), stride/dilation/asymmetric pads."""
    check(op_name, shape(ndim, G=3, K=3, C=2), seed=ndim)


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_depthwise(op_name, ndim):
    """C = K = 1 with several channel blocks (G=11, block_ch=4: last block partly masked)."""
    cfg = dict(block_ch=4) if op_name == "data" else dict(block_ch=4, split=1)
    check(op_name, shape(ndim, G=11, K=1, C=1), cfg=cfg, seed=10 + ndim)


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("G,K,C", [(3, 4, 4), (2, 3, 2), (2, 2, 3), (1, 8, 8)])
def test_few_channels(op_name, G, K, C):
    p = P(2, G, 2, K, C, (3, 3), (6, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    check(op_name, p, cfg=dict(block_ch=16), seed=G * 100 + K * 10 + C)


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_strides(op_name, stride):
    p = P(2, 4, 2, 1, 1, (3, 3), (8, 7), (stride, stride), (1, 1), (1, 2), (2, 0))
    check(op_name, p, seed=stride)


@pytest.mark.parametrize("op_name", OPS)
def test_dilation_stride_mix(op_name):
    # dilation 2 with stride 2 (gcd > 1: every other phase gets no taps in H) and 3 (gcd 1)
    p = P(2, 3, 2, 2, 2, (3, 3), (9, 10), (2, 3), (2, 2), (2, 1), (0, 3))
    check(op_name, p, layout_family="ngchw", seed=7)


@pytest.mark.parametrize("op", ["passthrough", "add"])
def test_data_phases_without_taps(op):
    """Filter 1, stride 3: two of three phases get no tap and must still store f(0, D...)."""
    p = P(1, 5, 2, 1, 1, (1,), (10,), (3,), (1,), (0,), (0,))
    err, out = run_case("data", p, op=op, n_ds=1 if op == "add" else 0, return_out=True)
    assert err <= DATA_TYPES["fp32"].tolerance
    if op == "passthrough":
        assert torch.all(out[:, 1::3] == 0) and torch.all(out[:, 2::3] == 0)


def test_data_stride_beyond_filter_dilated():
    """Filter 2 with dilation 3 and stride 3 in 1D; big right pad: positions hit from out of range."""
    p = P(1, 6, 1, 2, 1, (2,), (13,), (3,), (3,), (1,), (4,))
    check("data", p, op="bilinear", n_ds=1, alpha=0.5, beta=2.0)


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dtypes(op_name, dtype):
    check(op_name, shape(2, G=4, K=2, C=2), dtype=dtype, seed=3)


@pytest.mark.parametrize("op", ["passthrough", "bilinear"])
def test_weight_bf16_fp32w(op):
    check("weight", shape(2, G=5, K=1, C=1), dtype="bf16_fp32w", op=op, n_ds=int(op == "bilinear"),
          alpha=0.75, beta=-1.5, cfg=dict(split=7))


@triton.jit
def _user_two(acc, d0, d1):
    return acc * 0.5 + d0 * d1 - 0.25


@triton.jit
def _user_leaky(acc):
    return tl.where(acc > 0, acc, 0.1 * acc)


FUSED_CASES = [
    ("passthrough", 0, None),
    ("scale", 0, None),
    ("bilinear", 1, None),
    ("add", 1, None),
    ("add", 3, None),
    ("add_relu", 1, None),
    (_user_leaky, 0, lambda acc: torch.where(acc > 0, acc, 0.1 * acc)),
    (_user_two, 2, lambda acc, d0, d1: acc * 0.5 + d0 * d1 - 0.25),
]


@pytest.mark.parametrize("op_name,split", [("data", 1), ("weight", 1), ("weight", 3)],
                         ids=["data", "weight-split1", "weight-split3"])
@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu",
                              "user0", "user2"])
def test_fused_ops(op_name, split, case):
    op, n_ds, user_ref = case
    cfg = dict(split=split) if op_name == "weight" else None
    check(op_name, shape(2, G=3, K=2, C=2), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5,
          user_ref=user_ref, cfg=cfg, dtype="fp16" if n_ds == 3 else "fp32", seed=5)


@pytest.mark.parametrize("cfg", [
    dict(block_p=1, block_ch=4, num_warps=1, split=1),
    dict(block_p=8, block_ch=8, num_warps=2, split=3),
    dict(block_p=64, block_ch=64, num_warps=4, split=7),
    dict(block_p=32, block_ch=16, num_warps=8, split=0),
])
def test_weight_configs(cfg):
    check("weight", shape(2, G=5, K=2, C=1), cfg=cfg, seed=11)


@pytest.mark.parametrize("cfg,ndim", [
    (dict(block_p=4, block_ch=1, num_warps=1), 1),
    (dict(block_p=16, block_ch=4, num_warps=2), 2),
    (dict(block_p=128, block_ch=16, num_warps=8), 2),
])
def test_data_configs(cfg, ndim):
    check("data", shape(ndim, G=5, K=2, C=1), cfg=cfg, seed=12)


def test_weight_tap_blocks():
    """A 7x7 filter with block_ch=128, num_warps=1: 8 taps per program (7 blocks of 7), the rest
    on grid axis 1."""
    assert mod.taps_per_program(49, 128, 1) == 7
    assert mod.taps_per_program(9, 128, 4) == 9 and mod.taps_per_program(49, 128, 4) == 13
    p = P(2, 3, 1, 1, 1, (7, 7), (6, 6), (1, 1), (1, 1), (3, 3), (3, 3))
    check("weight", p, cfg=dict(block_p=8, block_ch=128, num_warps=1, split=2), seed=13)


def test_weight_split_exceeds_positions():
    """split larger than the reduction length: clamped, no chunk dropped."""
    p = P(1, 3, 1, 2, 2, (3,), (4,), (1,), (1,), (0,), (0,))  # 2 output positions
    check("weight", p, cfg=dict(split=7), op="add", n_ds=1)


def test_weight_deterministic():
    p = shape(2, G=4, K=2, C=2)
    _, a = run_case("weight", p, cfg=dict(split=7), seed=21, return_out=True)
    _, b = run_case("weight", p, cfg=dict(split=7), seed=21, return_out=True)
    assert torch.equal(a, b)


@pytest.mark.parametrize("op_name,K", [("data", 2), ("weight", 2), ("weight", 1)],
                         ids=["data", "weight-grouped", "weight-depthwise"])
def test_int64_offsets(op_name, K):
    """The 64-bit offset path (taken for tensors of 2**31 elements or more), forced on a small one."""
    cfg = dict(split=3) if op_name == "weight" else None
    check(op_name, shape(3, G=3, K=K, C=1), cfg=cfg, force_int64=True, op="add", n_ds=1, seed=31)


@pytest.mark.parametrize("cfg", [dict(block_p=8, block_ch=2, num_warps=1, split=2),
                                 dict(block_p=32, block_ch=8, num_warps=4, split=0)])
def test_weight_depthwise_configs(cfg):
    """Depthwise tiles with several position tiles per chunk and a partly masked last tile."""
    p = P(2, 5, 3, 1, 1, (3, 3), (7, 9), (1, 1), (1, 1), (1, 1), (1, 1))
    check("weight", p, cfg=cfg, seed=41)


def test_weight_split_reduce_many_steps():
    """More splits than one reduce step (64): the partials are summed in several [64 x 32] steps,
    the same bits every run."""
    # 81 positions: 81 chunks of one position, partials summed in two steps (64 + 17); 11 channels x 3
    # taps = 33 weights: two reduce programs of 32
    p = P(2, 11, 1, 1, 1, (1, 3), (9, 9), (1, 1), (1, 1), (0, 1), (0, 1))
    assert split_chunks(150, p.N * 9 * 9) == (81, 1)
    e1, a = run_case("weight", p, cfg=dict(block_p=2, block_ch=16, split=150), seed=42, return_out=True)
    e2, b = run_case("weight", p, cfg=dict(block_p=2, block_ch=16, split=150), seed=42, return_out=True)
    assert e1 <= 1e-5 and torch.equal(a, b)


# ------------------------------------------------------------------------------------------------
# the depthwise bwd-weight algorithm (C = K = 1, one filter row per program)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", list(LAYOUT_FAMILIES))
def test_depthwise_family_layouts_ndims(ndim, layout_family):
    check("weight", shape(ndim, G=5, K=1, C=1), layout_family=layout_family, depthwise=True, seed=51)


# every split (one: the epilogue in the main kernel; 2, 3, 7: uneven chunks and the reduce; 0: auto) in
# fp32, and every other dtype with one split and with several (its loads, and its store from the main
# kernel and from the reduce)
@pytest.mark.parametrize("dtype,split", [("fp32", s) for s in (1, 2, 3, 7, 0)]
                         + [(d, s) for d in ("fp32_tf32", "fp16", "bf16", "bf16_fp32w") for s in (1, 3)])
def test_depthwise_family_dtypes_splits(dtype, split):
    p = P(2, 7, 3, 1, 1, (3, 3), (7, 9), (2, 1), (1, 2), (1, 2), (0, 1))
    check("weight", p, dtype=dtype, cfg=dict(split=split), depthwise=True, seed=52)


# the one-wide config runs a program per (filter row, column, channel): a problem just big enough for
# several of each (G=3, 3 x 6 inputs)
_DW_TINY = P(2, 3, 1, 1, 1, (2, 5), (3, 6), (1, 1), (1, 1), (1, 2), (0, 2))
_DW_MID = P(2, 9, 2, 1, 1, (2, 5), (6, 11), (1, 1), (1, 1), (1, 2), (0, 2))


@pytest.mark.parametrize("cfg,p", [(dict(block_w=1, block_ch=1, num_warps=1, split=1), _DW_TINY),
                                   (dict(block_w=4, block_ch=4, num_warps=2, split=5), _DW_MID),
                                   (dict(block_w=32, block_ch=64, num_warps=8, split=0), _DW_MID)],
                         ids=["cfg0", "cfg1", "cfg2"])
def test_depthwise_family_configs(cfg, p):
    """Tiles narrower and wider than the output row (several column tiles, a masked last one) and
    fewer or more channels than G; a 5-tap row (padded to 8)."""
    check("weight", p, cfg=cfg, depthwise=True, seed=53)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
@pytest.mark.parametrize("split", [1, 3])
def test_depthwise_family_fused_ops(case, split):
    op, n_ds, user_ref = case
    check("weight", shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          cfg=dict(split=split), dtype="fp16" if n_ds == 3 else "fp32", depthwise=True, seed=54)


def test_depthwise_family_deterministic_and_int64():
    p = shape(3, G=4, K=1, C=1)
    _, a = run_case("weight", p, cfg=dict(split=7), seed=55, return_out=True, depthwise=True)
    _, b = run_case("weight", p, cfg=dict(split=7), seed=55, return_out=True, depthwise=True)
    assert torch.equal(a, b)
    check("weight", p, cfg=dict(split=3), force_int64=True, op="add", n_ds=1, depthwise=True, seed=56)


def test_depthwise_family_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = DEPTHWISE.config.from_values(DEPTHWISE_CFG)
    assert isinstance(cfg, dw_mod.DepthwiseConfig) and cfg.check() is None
    grouped = P(2, 4, 2, 2, 1, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = K = 1" in DEPTHWISE.decline(cfg, grouped, lt, dt, fused)
    assert "fp8" in DEPTHWISE.decline(cfg, shape(2, G=4, K=1, C=1), lt, DATA_TYPES["fp16_fp8"], fused)
    wide = P(2, 4, 2, 1, 1, (1, 33), (5, 40), (1, 1), (1, 1), (0, 0), (0, 0))  # 33 taps -> 64 per row
    assert "accumulators" in DEPTHWISE.decline(cfg.replace(block_w=64, block_ch=64), wide, lt, dt, fused)
    assert cfg.replace(block_w=3).check() == "block_w=3 must be a power of two from 1 to 1024"
    assert DEPTHWISE.check_config(dict(DEPTHWISE_CFG, split=-1)) == "split=-1 must be an int from 0 (auto) to 4096"
    assert DEPTHWISE.check_config(dict(block_w=8)) == ("config lacks block_ch, num_warps, split "
                                                       "(depthwise takes block_w, block_ch, num_warps, split)")
    big = P(2, 144, 8, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    s = dw_mod.auto_split(big, 16, 32, 132)
    assert 1 < s <= 8 * 56 // 4 and dw_mod.auto_split(big, 16, 32, 264) >= s


def test_nan_never_passes():
    p = shape(1, G=2, K=1, C=1)
    assert run_case("data", p) <= 1e-5
    lt = layout_for("nhwgc", 1)
    out = torch.full(lt.shape("input", p), float("nan"))
    assert rel_error(out, torch.ones_like(out)) == float("inf")
