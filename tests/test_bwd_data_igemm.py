"""conv_bwd_data igemm kernel family: correctness vs the float64 reference, launched directly.

Runs in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU. Shapes are tiny
and the parameter matrix is representative rather than a full cross product, so the whole file
stays well under the interpreter's time budget.
"""

import math
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, RunArgs, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS, resolve_fused_op  # noqa: E402
from instance_factory.geometry import ConvGeometry, stride_phases  # noqa: E402
from instance_factory.kernels import bwd_data_igemm as mod  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.reference import ref_conv_bwd_data, rel_error  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
ALG = ALGORITHMS[("conv_bwd_data", "igemm")]
BASE_CFG = dict(block_m=16, block_n=16, block_k=16, group_m=4, num_warps=4, num_stages=2, spec="default")


def P(ndim, G, N, K, C, f, i, s, d, lp, rp):  # noqa: N802 - mirrors ConvParams' argument order
    return ConvParams(ndim, G, N, K, C, f, i, s, d, lp, rp)


def run_case(p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", cfg: dict | None = None,
             op="passthrough", n_ds: int = 0, alpha: float = 1.0, beta: float = 1.0, user_ref=None,
             seed: int = 0, alg=None, base_cfg: dict | None = None) -> float:
    """Launch a bwd-data Algorithm (igemm unless ``alg``; its config ``base_cfg`` updated by ``cfg``) on
    fresh random data, the result NaN-poisoned, and compare with the float64 reference."""
    alg = alg or ALG
    torch.manual_seed(seed)
    lt = layout_for(layout_family, p.ndim)
    dt = DATA_TYPES[dtype]
    res_dtype = dt.result or dt.data
    cfg = alg.config.from_values({**(BASE_CFG if base_cfg is None else base_cfg), **(cfg or {})})
    fused, user_fn = resolve_fused_op(op, n_ds)
    assert alg.check_config(cfg) is None, alg.check_config(cfg)
    assert alg.decline(cfg, p, lt, dt, fused) is None, alg.decline(cfg, p, lt, dt, fused)

    dy = torch.randn(lt.shape("output", p), device=DEV).to(dt.data)
    w = torch.randn(lt.shape("weight", p), device=DEV).to(dt.data)
    ds = tuple(torch.randn(lt.shape("input", p), device=DEV).to(res_dtype) for _ in range(n_ds))
    out = torch.full(lt.shape("input", p), float("nan"), dtype=res_dtype, device=DEV)
    args = RunArgs(params=p, layout=lt, dtype=dt, fused=fused, user_fn=user_fn, alpha=alpha, beta=beta,
                   a=dy, b=w, ds=ds, out=out, cfg=cfg)
    assert alg.launch(args) is None
    ref = ref_conv_bwd_data(dy, w, p, lt.name, ds=ds, op=op, alpha=alpha, beta=beta, user_ref=user_ref)
    err = rel_error(out, ref)
    assert err <= dt.tolerance, f"{p} {lt.name} {dtype} {cfg} op={op}: rel error {err:.3e} > {dt.tolerance}"
    return err


# ------------------------------------------------------------------------------------------------
# every layout family x ndim (strided, dilated, asymmetric pads, G > 1, odd sizes)
# ------------------------------------------------------------------------------------------------
_BY_NDIM = {
    1: P(1, 2, 2, 3, 5, (3,), (7,), (2,), (1,), (1,), (0,)),
    2: P(2, 2, 2, 5, 3, (3, 2), (6, 5), (2, 1), (1, 2), (1, 0), (0, 1)),
    3: P(3, 2, 1, 3, 4, (2, 2, 3), (4, 3, 5), (2, 1, 2), (1, 1, 1), (0, 1, 1), (1, 0, 0)),
}


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", list(LAYOUT_FAMILIES))
def test_layouts_every_ndim(layout_family, ndim):
    run_case(_BY_NDIM[ndim], layout_family)


# ------------------------------------------------------------------------------------------------
# dtypes: fp32 (ieee), fp32 with tf32, fp16, bf16
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16"])
@pytest.mark.parametrize("case", [
    ("nhwgc", P(2, 2, 2, 8, 6, (3, 3), (5, 6), (1, 1), (1, 1), (1, 1), (1, 1))),
    ("ngchw_kcyx", P(3, 1, 1, 5, 3, (2, 3, 2), (4, 4, 5), (2, 2, 1), (1, 2, 1), (1, 0, 1), (0, 2, 1))),
    ("gnhwc", P(1, 3, 2, 7, 5, (3,), (7,), (3,), (2,), (2,), (1,))),
], ids=["2d-nhwgc-s1", "3d-kcyx-s2", "1d-gnhwc-s3d2"])
def test_dtypes(dtype, case):
    layout_family, p = case
    run_case(p, layout_family, dtype)


# ------------------------------------------------------------------------------------------------
# geometry corner cases
# ------------------------------------------------------------------------------------------------
GEOMETRY = {
    "s3-asym-pad": P(2, 1, 2, 4, 5, (3, 3), (7, 7), (3, 3), (1, 1), (2, 0), (0, 2)),
    "s2-d2": P(2, 2, 1, 3, 3, (3, 3), (7, 6), (2, 2), (2, 2), (2, 1), (1, 2)),
    "s3-d2": P(1, 1, 2, 3, 4, (3,), (7,), (3,), (2,), (1,), (2,)),
    "s2-d3": P(2, 1, 1, 3, 2, (2, 3), (7, 7), (2, 2), (3, 3), (0, 2), (1, 0)),
    "stride>filter": P(2, 2, 2, 3, 4, (2, 1), (7, 7), (3, 4), (1, 1), (0, 0), (1, 2)),
    "stride>filter-3d": P(3, 1, 1, 2, 3, (1, 2, 1), (5, 5, 5), (2, 3, 3), (1, 1, 1), (0, 1, 1), (0, 0, 1)),
    "input<stride": P(2, 1, 2, 3, 3, (1, 2), (2, 3), (3, 4), (1, 1), (0, 0), (1, 0)),
    "C=1": P(2, 3, 2, 5, 1, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1)),
    "K=1": P(2, 2, 2, 1, 5, (3, 2), (5, 6), (2, 2), (1, 1), (1, 0), (0, 1)),
    "depthwise": P(2, 4, 2, 1, 1, (3, 3), (6, 5), (2, 1), (1, 1), (1, 1), (1, 1)),
    "pad>=filter": P(1, 1, 1, 3, 3, (2,), (5,), (1,), (1,), (3,), (2,)),
    "big-dil-1d": P(1, 2, 2, 4, 3, (3,), (7,), (1,), (3,), (0,), (1,)),
    "odd-7x7-s1": P(2, 1, 1, 7, 7, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1)),
    "G=5-3d": P(3, 5, 1, 3, 2, (3, 1, 2), (3, 4, 4), (1, 2, 1), (1, 1, 2), (1, 0, 0), (1, 1, 1)),
    # more than 32 taps per phase along a padded dim: the loop compares ho instead of testing tap bits
    "40-tap-1d": P(1, 1, 2, 3, 2, (40,), (45,), (1,), (1,), (20,), (19,)),
    "40-tap-2d-s2": P(2, 1, 1, 2, 3, (3, 70), (2, 75), (1, 2), (1, 1), (1, 35), (1, 34)),
    # 1xN with pad only along W (H needs no mask), and an unpadded 1x1 s2 (no dim needs one)
    "1x5-padw": P(2, 2, 2, 3, 4, (1, 5), (5, 9), (1, 1), (1, 1), (0, 2), (0, 2)),
    "1x1-s2-3d": P(3, 1, 2, 5, 3, (1, 1, 1), (3, 5, 6), (2, 2, 2), (1, 1, 1), (0, 0, 0), (0, 0, 0)),
}


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    p = GEOMETRY[name]
    layout_family = ("nhwgc", "ngchw", "gnhwc", "ngchw_kcyx")[list(GEOMETRY).index(name) % 4]
    run_case(p, layout_family)


def test_zero_tap_phases_exist():
    """The stride>filter cases really exercise phases that get no taps (their output = f(0, D))."""
    for name in ("stride>filter", "stride>filter-3d", "input<stride"):
        p = GEOMETRY[name]
        geo = ConvGeometry.build(p, layout_for("nhwgc", p.ndim))
        dims = stride_phases(geo)
        assert all(pd.count > 0 for per_dim in dims for pd in per_dim)  # empty residues are left out
        assert any(pd.ntaps == 0 for per_dim in dims for pd in per_dim)


def test_phase_table_is_per_dim():
    """A huge stride costs rows per dim, not prod(stride) rows (CK's 4096x2048-stride case)."""
    from instance_factory.kernels.bwd_data_igemm import _phase_table

    p = P(2, 1, 1, 1, 1, (3, 3), (5000, 3000), (4096, 2048), (1, 1), (1, 1), (1, 1))
    geo = ConvGeometry.build(p, layout_for("nhwgc", 2))
    table, (nd, nh, nw), m_max = _phase_table(mod._phase_rows(geo, False), "cpu")
    assert (nd, nh, nw) == (1, 4096, 2048)
    assert table.numel() == 5 * (1 + 4096 + 2048)
    assert m_max == 1 * 2 * 2


@pytest.mark.parametrize("layout_family, p, align", [
    ("nhwgc", P(2, 3, 2, 8, 8, (3, 3), (5, 6), (1, 1), (1, 1), (1, 1), (1, 1)), 8),
    ("nhwgc", P(2, 5, 1, 24, 24, (3, 3), (4, 5), (2, 1), (1, 1), (1, 1), (0, 1)), 8),
    ("gnhwc", P(3, 2, 1, 10, 6, (2, 1, 3), (3, 4, 5), (1, 2, 1), (1, 1, 1), (0, 0, 1), (1, 0, 1)), 2),
    ("nhwgc", P(1, 1, 2, 16, 32, (3,), (9,), (2,), (1,), (1,), (1,)), 16),
    ("ngchw", P(2, 3, 2, 8, 8, (3, 3), (5, 6), (1, 1), (1, 1), (1, 1), (1, 1)), 1),
    ("nhwgc", P(2, 2, 2, 8, 5, (3, 3), (5, 6), (1, 1), (1, 1), (1, 1), (1, 1)), 1),
])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_channel_alignment(layout_family, p, align, dtype):
    """Row strides, K and C reach the kernel divided by their power-of-two alignment and are
    multiplied back there (16-byte loads for 8 or 24 channels per group): exact results for every
    alignment, and channels-first layouts or odd C keep alignment 1."""
    geo = ConvGeometry.build(p, layout_for(layout_family, p.ndim))
    assert geo.channel_alignment() == align
    run_case(p, layout_family, dtype, cfg=dict(block_m=32, block_n=16, block_k=16))


@pytest.mark.parametrize("name, masks, most_taps", [
    ("odd-7x7-s1", (False, True, True), 3),
    ("1x5-padw", (False, False, True), 5),
    ("1x1-s2-3d", (False, False, False), 0),
    ("40-tap-1d", (False, False, True), 40),
    ("40-tap-2d-s2", (False, True, True), 35),
])
def test_row_masks_only_where_taps_leave_grad_out(name, masks, most_taps):
    """The loop masks a dim's rows only where a tap can read outside grad_out, and per-row tap bit
    masks hold at most 32 taps (the 40-tap cases take the compare path; test_geometry runs both)."""
    p = GEOMETRY[name]
    geo = ConvGeometry.build(p, layout_for("nhwgc", p.ndim))
    hsteps = [geo.dil3[a] // math.gcd(geo.stride3[a], geo.dil3[a]) for a in range(3)]
    assert mod._row_masks(mod._phase_rows(geo, False), hsteps, geo.out3) == (masks, most_taps)


# ------------------------------------------------------------------------------------------------
# fused multiple-D epilogues (on a problem with zero-tap phases, so E = f(0, D) is checked too)
# ------------------------------------------------------------------------------------------------
@triton.jit
def _user_gate(acc, d0):
    return tl.where(d0 > 0, acc * d0, acc - 0.5 * d0)


def _user_gate_ref(acc, d0):
    return torch.where(d0 > 0, acc * d0, acc - 0.5 * d0)


_FUSED_P = P(2, 2, 2, 3, 5, (2, 2), (6, 5), (3, 2), (1, 1), (1, 0), (0, 1))
FUSED = [
    ("passthrough", 0, 1.0, 1.0, None),
    ("scale", 0, 0.37, 1.0, None),
    ("bilinear", 1, 1.5, -0.75, None),
    ("add", 1, 1.0, 1.0, None),
    ("add", 3, 1.0, 1.0, None),
    ("add_relu", 1, 1.0, 1.0, None),
    (_user_gate, 1, 1.0, 1.0, _user_gate_ref),
]


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("fused", FUSED, ids=lambda f: f"{getattr(f[0], '__name__', f[0])}-{f[1]}ds")
def test_fused_ops(fused, dtype):
    op, n_ds, alpha, beta, user_ref = fused
    run_case(_FUSED_P, "nhwgc", dtype, op=op, n_ds=n_ds, alpha=alpha, beta=beta, user_ref=user_ref)


def test_fused_ops_covered():
    named = {f[0] for f in FUSED if isinstance(f[0], str)}
    assert named == {n for n in FUSED_OPS if n != "custom"}


def test_fused_bf16_3d_channels_first():
    p = P(3, 2, 1, 3, 4, (2, 1, 2), (3, 4, 4), (2, 1, 3), (1, 1, 1), (0, 0, 1), (1, 0, 0))
    run_case(p, "ngchw", "bf16", op="bilinear", n_ds=1, alpha=0.5, beta=2.0)


# ------------------------------------------------------------------------------------------------
# tile configs: several m/n/k tiles, group_m rasterization, partial tiles, odd K and C
# ------------------------------------------------------------------------------------------------
_TILE_P = P(2, 2, 2, 37, 35, (3, 2), (7, 6), (2, 2), (1, 1), (1, 1), (1, 0))
CONFIGS = [
    dict(block_m=16, block_n=16, block_k=16, group_m=1, num_warps=1, num_stages=1),
    dict(block_m=16, block_n=16, block_k=32, group_m=2, num_warps=2, num_stages=3),
    dict(block_m=32, block_n=16, block_k=16, group_m=8, num_warps=4, num_stages=2),
    dict(block_m=16, block_n=64, block_k=16, group_m=3, num_warps=8, num_stages=4),
    dict(block_m=64, block_n=32, block_k=64, group_m=4, num_warps=16, num_stages=2),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "x".join(str(v) for v in c.values()))
def test_tile_configs(cfg):
    run_case(_TILE_P, "nhwgc", "fp32", cfg=cfg)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_tile_config_even_k_and_n(dtype):
    """K % block_k == 0 and C % block_n == 0 take the unmasked k / c load paths."""
    p = P(2, 1, 2, 32, 16, (3, 3), (6, 5), (2, 1), (1, 1), (1, 1), (1, 1))
    run_case(p, "nhwgc", dtype, cfg=dict(block_m=32, block_n=16, block_k=16, group_m=2))


# ------------------------------------------------------------------------------------------------
# the 1x1s1p0 spec (plain GEMM) and the 64-bit offset path
# ------------------------------------------------------------------------------------------------
_ONE_BY_ONE = {
    1: P(1, 2, 2, 5, 3, (1,), (7,), (1,), (1,), (0,), (0,)),
    2: P(2, 3, 2, 4, 6, (1, 1), (5, 3), (1, 1), (2, 2), (0, 0), (0, 0)),
    3: P(3, 1, 1, 6, 5, (1, 1, 1), (3, 2, 4), (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0)),
}


@pytest.mark.parametrize("layout_family", list(LAYOUT_FAMILIES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_spec_1x1(ndim, layout_family):
    run_case(_ONE_BY_ONE[ndim], layout_family, "fp32", cfg=dict(spec="1x1s1p0"))


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32_tf32"])
def test_spec_1x1_dtypes_fused(dtype):
    p = P(2, 2, 2, 32, 16, (1, 1), (5, 4), (1, 1), (1, 1), (0, 0), (0, 0))
    run_case(p, "nhwgc", dtype, cfg=dict(spec="1x1s1p0", block_m=32), op="add", n_ds=2)


def test_default_spec_on_1x1_problem():
    run_case(_ONE_BY_ONE[2], "ngchw", "fp32")


@pytest.mark.parametrize("spec", ["default", "1x1s1p0"])
def test_int64_offsets(spec, monkeypatch):
    """Force the 64-bit offset path (real > 2**31-element tensors do not fit a test)."""
    monkeypatch.setattr(ConvGeometry, "needs_int64", property(lambda self: True))
    p = GEOMETRY["s2-d2"] if spec == "default" else _ONE_BY_ONE[2]
    run_case(p, "nhwgc", "fp32", cfg=dict(spec=spec), op="add", n_ds=1)


# ------------------------------------------------------------------------------------------------
# registration, check_config, decline
# ------------------------------------------------------------------------------------------------
def test_registered():
    assert ALG is mod.ALGORITHM
    assert ALG.op == "conv_bwd_data" and ALG.name == "igemm"
    assert ALG.param_names == ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages",
                               "spec")
    assert ALG.description


@pytest.mark.parametrize("bad, needle", [
    (dict(block_m=8), "power of two"),
    (dict(block_n=24), "power of two"),
    (dict(block_k=8), "power of two"),
    (dict(block_m=512), "over"),
    (dict(num_warps=3), "num_warps"),
    (dict(num_stages=0), "num_stages"),
    (dict(group_m=0), "group_m"),
    (dict(spec="winograd"), "spec"),
    (dict(block_m=256, block_n=256, block_k=256, num_stages=2), "shared memory"),
])
def test_check_config_rejects(bad, needle):
    reason = ALG.check_config({**BASE_CFG, **bad})
    assert reason is not None and needle in reason


def test_check_config_accepts():
    for cfg in CONFIGS:
        assert ALG.check_config({**BASE_CFG, **cfg}) is None
    assert ALG.check_config({**BASE_CFG, "spec": "1x1s1p0"}) is None
    assert ALG.check_config(dict(BASE_CFG, block_m=128, block_n=256, block_k=64, num_stages=3)) is None


def test_decline():
    lt = layout_for("nhwgc", 2)
    p3 = GEOMETRY["s2-d2"]
    p1 = _ONE_BY_ONE[2]
    passthrough = FUSED_OPS["passthrough"]
    base = ALG.config.from_values(BASE_CFG)
    cfg_1x1 = base.replace(spec="1x1s1p0")
    reason = ALG.decline(cfg_1x1, p3, lt, DATA_TYPES["fp32"], passthrough)
    assert reason is not None and "1x1" in reason
    assert ALG.decline(cfg_1x1, p1, lt, DATA_TYPES["fp16"], passthrough) is None
    for name in ("fp16_fp8", "bf16_fp32w"):
        reason = ALG.decline(base, p3, lt, DATA_TYPES[name], passthrough)
        assert reason is not None and name in reason
    for name in ("fp32", "fp32_tf32", "fp16", "bf16"):
        assert ALG.decline(base, p3, lt, DATA_TYPES[name], passthrough) is None
    # a tile that fits for 2-byte operands but not for fp32 is declined per dtype
    big = base.replace(block_m=128, block_n=256, block_k=64, num_stages=3)
    assert ALG.decline(big, p3, lt, DATA_TYPES["fp16"], passthrough) is None
    reason = ALG.decline(big, p3, lt, DATA_TYPES["fp32"], passthrough)
    assert reason is not None and "shared memory" in reason
