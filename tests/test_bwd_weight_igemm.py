"""conv_bwd_weight implicit-GEMM families (igemm, splitk_atomic, splitk_reduce, two_stage) in the
Triton interpreter against the float64 reference: layouts x ndim, dtypes, split factors, determinism,
blocked-summation chunk boundaries and accuracy, geometry, fused ops, the 1x1 spec, declines and config
checks. Tiny shapes: the file runs in well
under 150 s on a 2-core CPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory import algorithms  # noqa: E402
from instance_factory.algorithms import ALGORITHMS, RunArgs  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS, resolve_fused_op  # noqa: E402
from instance_factory.kernels import bwd_weight_igemm as bw  # noqa: E402
from instance_factory.kernels.bwd_weight_igemm_plan import walk_step  # noqa: E402
from instance_factory.layouts import (  # noqa: E402
    LAYOUT_FAMILIES,  # noqa: E402
    all_layouts,
    layout_for,
)
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.reference import ref_conv_bwd_weight, rel_error  # noqa: E402

pytestmark = pytest.mark.skipif(
    not algorithms.interpreting() and not torch.cuda.is_available(),
    reason="needs TRITON_INTERPRET=1 or a CUDA GPU",
)

DEVICE = "cuda" if (torch.cuda.is_available() and not algorithms.interpreting()) else "cpu"
OP = "conv_bwd_weight"


def _alg(algorithm):
    return ALGORITHMS[(OP, algorithm)]


def _cfg(algorithm, **kw):
    """The algorithm's config (not checked: a test may want an impossible one)."""
    cfg = dict(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2,
               split_k=1 if algorithm == "igemm" else 2, spec="default")
    cfg.update(kw)
    return _alg(algorithm).config.from_values(cfg)


def _run(algorithm, p, layout, dtype="fp32", *, op="passthrough", n_ds=0, user_ref=None,
         alpha=1.0, beta=1.0, cfg=None, seed=0, tensors=None):
    """Launch one instance on fresh random data (NaN-poisoned output); return (out, ref, err, tol)."""
    lt = layout_for(layout, p.ndim) if isinstance(layout, str) else layout
    dt = DATA_TYPES[dtype]
    gen = torch.Generator().manual_seed(seed)
    if tensors is None:
        x = torch.randn(lt.shape("input", p), generator=gen).to(dt.data).to(DEVICE)
        dy = torch.randn(lt.shape("output", p), generator=gen).to(dt.data).to(DEVICE)
        res_dtype = dt.result or dt.data
        ds = tuple(torch.randn(lt.shape("weight", p), generator=gen).to(res_dtype).to(DEVICE)
                   for _ in range(n_ds))
    else:
        x, dy, ds = tensors
        res_dtype = dt.result or dt.data
    fused, user_fn = resolve_fused_op(op, len(ds))
    out = torch.full(lt.shape("weight", p), float("nan"), dtype=res_dtype, device=DEVICE)
    cfg = cfg or _cfg(algorithm)
    alg = _alg(algorithm)
    assert alg.check_config(cfg) is None, alg.check_config(cfg)
    why = alg.decline(cfg, p, lt, dt, fused)
    assert why is None, why
    args = RunArgs(p, lt, dt, fused, user_fn, alpha, beta, x, dy, ds, out, cfg)
    assert alg.launch(args) is None
    ref_op = op if isinstance(op, str) else "custom"
    ref = ref_conv_bwd_weight(x, dy, p, lt.name, ds=ds, op=ref_op, alpha=alpha, beta=beta,
                              user_ref=user_ref)
    return out, ref, rel_error(out, ref), dt.tolerance


def _check(algorithm, p, layout, dtype="fp32", **kw):
    out, ref, err, tol = _run(algorithm, p, layout, dtype, **kw)
    assert err <= tol, f"{algorithm} {layout} {dtype} {p.key()}: rel error {err:.3g} > {tol}"
    return out


def _p(ndim, G=1, N=2, K=3, C=5, f=None, i=None, s=None, d=None, lp=None, rp=None):
    one = (1,) * ndim
    zero = (0,) * ndim
    return ConvParams(ndim, G, N, K, C, f or (3,) * ndim, i or (5,) * ndim, s or one, d or one,
                      lp or zero, rp or zero)


# ------------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------------
def test_families_registered():
    for fam in ("igemm", "splitk_atomic", "splitk_reduce", "two_stage"):
        alg = _alg(fam)
        assert alg.param_names == ("block_m", "block_n", "block_k", "group_m", "num_warps",
                                   "num_stages", "split_k", "spec")
        assert alg.description


# ------------------------------------------------------------------------------------------------
# every layout family x ndim (fp32 ieee), the four algorithms rotated through the matrix
# ------------------------------------------------------------------------------------------------
_GEOM = {
    1: dict(f=(3,), i=(7,), s=(2,), d=(1,), lp=(1,), rp=(2,)),
    2: dict(f=(2, 3), i=(5, 6), s=(1, 2), d=(2, 1), lp=(1, 0), rp=(0, 1)),
    3: dict(f=(2, 1, 2), i=(3, 4, 5), s=(1, 2, 1), d=(1, 1, 2), lp=(0, 1, 1), rp=(1, 0, 0)),
}


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout", list(LAYOUT_FAMILIES))
def test_layouts_by_ndim(layout, ndim):
    fams = bw.ALGORITHM_NAMES
    algorithm = fams[(list(LAYOUT_FAMILIES).index(layout) + ndim) % len(fams)]
    p = _p(ndim, G=2, N=2, K=3, C=5, **_GEOM[ndim])
    _check(algorithm, p, layout, "fp32")


def test_all_layout_triples_covered():
    names = {(lt.layout_family, lt.ndim) for lt in all_layouts()}
    assert names == {(f, n) for f in LAYOUT_FAMILIES for n in (1, 2, 3)}


# ------------------------------------------------------------------------------------------------
# dtypes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16", "bf16_fp32w"])
@pytest.mark.parametrize("algorithm", ["igemm", "splitk_atomic", "splitk_reduce", "two_stage"])
def test_dtypes(algorithm, dtype):
    p = _p(2, G=1, N=2, K=6, C=7, f=(3, 3), i=(5, 4), lp=(1, 1), rp=(1, 0))
    out = _check(algorithm, p, "nhwgc", dtype)
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


# ------------------------------------------------------------------------------------------------
# split-K: uneven factors in both modes (and two_stage), never dropping a remainder
# ------------------------------------------------------------------------------------------------
_SPLIT_P = _p(2, G=1, N=2, K=5, C=3, f=(2, 1), i=(7, 7), lp=(1, 0), rp=(0, 0))  # R = 2*7*7 = 98


@pytest.mark.parametrize("split", [1, 2, 3, 7])
@pytest.mark.parametrize("algorithm", ["splitk_atomic", "splitk_reduce", "two_stage"])
def test_split_factors(algorithm, split):
    # 98 reduction rows = 7 block_k iterations (last one partial): 2 -> 4+3, 3 -> 3+3+1, 7 -> 1 each
    _check(algorithm, _SPLIT_P, "gnhwc", "fp32", cfg=_cfg(algorithm, split_k=split))


@pytest.mark.parametrize("algorithm", ["splitk_atomic", "splitk_reduce"])
def test_split_more_than_iterations(algorithm):
    # 1D, R = 2*6 = 12 < block_k: one iteration, 5 of the 6 splits are empty and must add exact zeros
    p = _p(1, G=1, N=2, K=3, C=4, f=(3,), i=(6,), lp=(1,), rp=(1,))
    _check(algorithm, p, "ngchw", "fp32", cfg=_cfg(algorithm, split_k=6))


@pytest.mark.parametrize("algorithm", ["splitk_reduce", "two_stage"])
def test_deterministic_bitwise(algorithm):
    p = _p(2, G=1, N=2, K=4, C=3, f=(3, 3), i=(6, 5), lp=(1, 1), rp=(1, 1))
    cfg = _cfg(algorithm, split_k=3)
    first, _, err, tol = _run(algorithm, p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = _run(algorithm, p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_auto_split_k():
    p = _p(2, G=1, N=2, K=4, C=3, f=(1, 1), i=(7, 7))
    cfg = _cfg("splitk_reduce", split_k=0)
    # one tile, 7 iterations -> capped at 7 // MIN_ITERS_PER_SPLIT = 1 ... with small block_k more
    assert bw.choose_split_k(p, cfg, 132) == max(1, 7 // bw.MIN_ITERS_PER_SPLIT)
    big = ConvParams(2, 1, 64, 64, 64, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    cfg64 = cfg.replace(block_m=64, block_n=64, block_k=64)
    s = bw.choose_split_k(big, cfg64, 132)
    tiles = 9  # one 64x64 tile per tap
    iters = math.ceil(64 * 56 * 56 / 64)
    assert 2 * 132 <= tiles * s <= 4 * 132 + tiles and iters // s >= bw.MIN_ITERS_PER_SPLIT
    assert bw.choose_split_k(big, cfg64, 132, algorithm="igemm") == 1
    wide = ConvParams(2, 32, 8, 256, 256, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    assert bw.choose_split_k(wide, cfg64, 132) == 1  # 32*9*16 tiles already fill many waves
    assert bw.sm_count(torch.device("cpu")) == 132
    # the launch resolves split_k = 0 itself
    _check("splitk_atomic", p, "nhwgc", "fp32", cfg=_cfg("splitk_atomic", split_k=0))


# ------------------------------------------------------------------------------------------------
# blocked (two-level) summation: inner sums of chunk_iters() iterations folded into an outer one
# ------------------------------------------------------------------------------------------------
def test_chunk_iters_default():
    assert bw._CHUNK_ITERS == 0  # the test hook is off in production
    for bk in (16, 32, 64, 128, 256):
        n = bw.chunk_iters(bk)
        assert n * bk <= bw.CHUNK_ELEMS and 64 <= n <= 1024  # bounded inner sums, long pipelined runs


@pytest.mark.parametrize("chunk,algorithm,split,layout,dtype", [
    (2, "igemm", 1, "gnhwc", "fp32"),  # 7 iterations: 2+2+2+1
    (2, "splitk_atomic", 2, "nhwgc", "bf16_fp32w"),  # splits of 4 and 3: (2+2) and (2+1)
    (2, "splitk_reduce", 3, "gnhwc", "fp16"),  # splits of 3, 3, 1: (2+1), (2+1), (1)
    (3, "two_stage", 2, "ngchw", "fp32"),  # (3+1) and (3)
    (1, "splitk_reduce", 7, "nhwgc", "fp32"),  # one iteration per split and per chunk
])
def test_chunk_boundaries(monkeypatch, chunk, algorithm, split, layout, dtype):
    monkeypatch.setattr(bw, "_CHUNK_ITERS", chunk)
    _check(algorithm, _SPLIT_P, layout, dtype, cfg=_cfg(algorithm, split_k=split))


def test_chunk_boundaries_1x1_and_int64(monkeypatch):
    monkeypatch.setattr(bw, "_CHUNK_ITERS", 2)
    p = _p(2, G=2, N=2, K=5, C=3, f=(1, 1), i=(5, 7))  # R = 70: 5 iterations
    _check("splitk_atomic", p, "ngchw", "fp32", cfg=_cfg("splitk_atomic", spec="1x1s1p0", split_k=2))
    monkeypatch.setattr(bw, "_FORCE_INT64", True)
    _check("two_stage", _SPLIT_P, "nhwgc", "fp32", cfg=_cfg("two_stage", split_k=3))


@pytest.mark.parametrize("algorithm", ["splitk_reduce", "two_stage"])
def test_chunked_deterministic_bitwise(monkeypatch, algorithm):
    monkeypatch.setattr(bw, "_CHUNK_ITERS", 2)
    cfg = _cfg(algorithm, split_k=2)
    first, _, err, tol = _run(algorithm, _SPLIT_P, "nhwgc", "fp32", cfg=cfg, seed=5)
    assert err <= tol
    again, _, _, _ = _run(algorithm, _SPLIT_P, "nhwgc", "fp32", cfg=cfg, seed=5)
    assert torch.equal(first.view(torch.int32), again.view(torch.int32))


@pytest.mark.skipif(not algorithms.interpreting(), reason="interpreter-only fp8 emulation check")
def test_chunk_boundaries_fp8_in_interpreter(monkeypatch):
    monkeypatch.setattr(bw, "_FP8_IN_INTERPRETER", True)
    monkeypatch.setattr(bw, "_CHUNK_ITERS", 2)
    p = _p(2, G=1, N=2, K=6, C=5, f=(3, 3), i=(6, 6), lp=(1, 1), rp=(1, 1))  # 72 rows: 3 iterations
    _check("igemm", p, "nhwgc", "fp16_fp8", cfg=_cfg("igemm", block_k=32))


def test_blocked_sum_beats_plain_sum(monkeypatch):
    # adversarial long reduction: 512 block_k=16 iterations of all-positive products, so the plain
    # accumulator grows ~512x the partials it keeps adding; blocked (chunks of 32) keeps both levels
    # short. fp32 ieee, one 16x16 tile; the error ratio is ~5x in the interpreter.
    iters = 512
    p = _p(1, G=1, N=1, K=16, C=16, f=(1,), i=(16 * iters,))
    lt = layout_for("nhwgc", 1)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(lt.shape("input", p), generator=gen).to(DEVICE)
    dy = torch.rand(lt.shape("output", p), generator=gen).to(DEVICE)
    cfg = _cfg("igemm", spec="1x1s1p0")
    errs = {}
    for mode, chunk in (("plain", 1 << 20), ("blocked", 32)):
        monkeypatch.setattr(bw, "_CHUNK_ITERS", chunk)
        errs[mode] = _run("igemm", p, lt, "fp32", cfg=cfg, tensors=(x, dy, ()))[2]
    assert errs["plain"] > 1e-7, errs  # the plain sum really loses bits here
    assert errs["blocked"] * 3 < errs["plain"], errs


# ------------------------------------------------------------------------------------------------
# geometry: strides / dilation / asymmetric pads, groups, odd sizes, C or K = 1, multi-tile
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm,layout,p", [
    ("igemm", "nhwgc", _p(3, G=3, N=1, K=2, C=3, f=(3, 2, 3), i=(5, 4, 7), s=(2, 1, 3), d=(1, 2, 2),
                          lp=(2, 0, 3), rp=(0, 1, 1))),
    ("splitk_reduce", "ngchw", _p(2, G=2, N=2, K=7, C=5, f=(3, 3), i=(7, 6), s=(3, 2), d=(2, 1),
                                  lp=(0, 2), rp=(3, 0))),
    ("two_stage", "ngchw_kcyx", _p(1, G=4, N=2, K=3, C=3, f=(4,), i=(7,), s=(2,), d=(2,), lp=(3,),
                                   rp=(0,))),
])
def test_strided_dilated_padded(algorithm, layout, p):
    _check(algorithm, p, layout, "fp32")


@pytest.mark.parametrize("algorithm,K,C", [("igemm", 1, 5), ("splitk_atomic", 6, 1), ("two_stage", 1, 1),
                                        ("splitk_reduce", 1, 3)])
def test_single_channel(algorithm, K, C):
    p = _p(2, G=3, N=2, K=K, C=C, f=(3, 3), i=(5, 5), lp=(1, 1), rp=(1, 1))
    _check(algorithm, p, "nhwgc", "fp32")


@pytest.mark.parametrize("algorithm", ["igemm", "splitk_reduce", "two_stage"])
def test_multi_tile_grouped_order(algorithm):
    # K, C and C*taps span several 16-wide tiles; group_m=2 exercises the swizzle with a ragged edge
    p = _p(1, G=2, N=1, K=40, C=19, f=(2,), i=(5,), lp=(1,), rp=(0,))
    _check(algorithm, p, "gnhwc", "fp32", cfg=_cfg(algorithm, group_m=2))


def test_bigger_tiles():
    p = _p(2, G=1, N=2, K=5, C=6, f=(2, 2), i=(5, 5))
    cfg = _cfg("splitk_reduce", block_m=32, block_n=64, block_k=32, num_warps=8, num_stages=3)
    _check("splitk_reduce", p, "nhwgc", "fp16", cfg=cfg)


def test_walk_step_digits():
    """block_k split into (w, h, d, n) increments of the reduction's mixed radix."""
    assert walk_step(64, (1, 14, 14), False) == (8, 4, 0, 0)  # 4 rows and 8 columns
    assert walk_step(64, (1, 5, 5), False) == (4, 2, 0, 2)  # 2 whole images, 2 rows, 4 columns
    assert walk_step(32, (2, 3, 4), False) == (0, 2, 0, 1)
    assert walk_step(16, (1, 2, 5), True) == (6, 0, 0, 1)  # (n, p): p of radix 10


# block_k 32 over outputs far smaller than a block (several images per step) and over rows longer
# than one: every digit of the incremental walk carries, in 2D and 3D, with splits starting mid-image
@pytest.mark.parametrize("p,cfg", [
    (_p(2, N=9, K=4, C=3, f=(2, 2), i=(4, 3), s=(1, 2), lp=(1, 0), rp=(0, 1)), dict(block_k=32, split_k=3)),
    (_p(3, N=4, K=3, C=4, f=(2, 1, 2), i=(3, 2, 5), s=(2, 1, 2), lp=(1, 0, 1)), dict(block_k=32, split_k=2)),
    (_p(1, N=3, K=4, C=4, f=(3,), i=(40,), lp=(1,), rp=(1,)), dict(block_k=16, split_k=5)),
    (_p(2, N=5, K=4, C=6, f=(1, 1), i=(3, 3)), dict(block_k=16, split_k=3, spec="1x1s1p0")),
], ids=["2d-images-per-step", "3d-planes", "1d-long-rows", "1x1-unflattened"])
def test_incremental_walk(p, cfg):
    _check("splitk_reduce", p, "nhwgc", "fp32", cfg=_cfg("splitk_reduce", **cfg))
    _check("splitk_reduce", p, "ngchw", "fp32", cfg=_cfg("splitk_reduce", **cfg))  # 1x1: (n, p) walk


def test_int64_offsets_path(monkeypatch):
    monkeypatch.setattr(bw, "_FORCE_INT64", True)
    p = _p(2, G=2, N=2, K=3, C=4, f=(2, 3), i=(5, 4), s=(2, 1), lp=(1, 1), rp=(0, 1))
    _check("splitk_reduce", p, "nhwgc", "fp32", cfg=_cfg("splitk_reduce", split_k=3))
    _check("two_stage", p, "ngchw", "fp32", cfg=_cfg("two_stage", split_k=2))
    _check("igemm", _p(2, K=3, C=4, f=(1, 1), i=(4, 5)), "ngchw", "fp32",
           cfg=_cfg("igemm", spec="1x1s1p0"))


# ------------------------------------------------------------------------------------------------
# fused ops (in the GEMM epilogue for igemm, in the finalize pass for the split families)
# ------------------------------------------------------------------------------------------------
@triton.jit
def _leaky(acc):
    return tl.where(acc > 0, acc, 0.125 * acc)


def _leaky_ref(acc):
    return torch.where(acc > 0, acc, 0.125 * acc)


@triton.jit
def _mix(acc, d0, d1):
    return 0.5 * acc + d0 * d1


def _mix_ref(acc, d0, d1):
    return 0.5 * acc + d0 * d1


_FUSED_CASES = [
    ("scale", 0, None, "igemm"),
    ("scale", 0, None, "splitk_atomic"),
    ("bilinear", 1, None, "igemm"),
    ("bilinear", 1, None, "splitk_reduce"),
    ("add", 3, None, "two_stage"),
    ("add", 1, None, "igemm"),
    ("add_relu", 1, None, "splitk_atomic"),
    (_leaky, 0, _leaky_ref, "igemm"),
    (_mix, 2, _mix_ref, "splitk_reduce"),
    (_mix, 2, _mix_ref, "two_stage"),
]


@pytest.mark.parametrize("op,n_ds,user_ref,algorithm", _FUSED_CASES,
                         ids=[f"{o if isinstance(o, str) else 'user'}-{f}" for o, _, _, f in _FUSED_CASES])
def test_fused_ops(op, n_ds, user_ref, algorithm):
    p = _p(2, G=2, N=1, K=3, C=4, f=(2, 2), i=(4, 5), lp=(1, 0), rp=(0, 1))
    _check(algorithm, p, "ngchw_kcyx", "fp32", op=op, n_ds=n_ds, user_ref=user_ref, alpha=1.75, beta=-0.5)


def test_fused_op_mixed_dtype():
    p = _p(1, G=1, N=2, K=4, C=6, f=(3,), i=(7,), lp=(1,), rp=(1,))
    _check("splitk_reduce", p, "nhwgc", "bf16_fp32w", op="bilinear", n_ds=1, alpha=0.5, beta=2.0)
    _check("igemm", p, "nhwgc", "fp16", op="scale", alpha=-3.0)


def test_every_fused_op_declared():
    assert set(FUSED_OPS) == {"passthrough", "scale", "bilinear", "add", "add_relu", "custom"}
    p = _p(2)
    lt = layout_for("nhwgc", 2)
    for fam in bw.ALGORITHM_NAMES:
        for fo in FUSED_OPS.values():
            assert _alg(fam).decline(_cfg(fam), p, lt, DATA_TYPES["fp16"], fo) is None


# ------------------------------------------------------------------------------------------------
# 1x1 stride-1 pad-0 specialization
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm,layout,ndim", [
    ("igemm", "nhwgc", 2),  # n and spatial adjacent: one linear reduction stride
    ("splitk_reduce", "ngchw", 3),  # n apart from the spatial axes
    ("splitk_atomic", "ngchw_kcyx", 1),
    ("two_stage", "gnhwc", 2),
])
def test_1x1_spec(algorithm, layout, ndim):
    one = (1,) * ndim
    p = _p(ndim, G=2, N=2, K=5, C=3, f=one, i={1: (7,), 2: (3, 5), 3: (2, 3, 3)}[ndim])
    assert p.is_1x1_stride1_pad0
    _check(algorithm, p, layout, "fp32", cfg=_cfg(algorithm, spec="1x1s1p0", split_k=1 if algorithm == "igemm" else 3))


def test_1x1_spec_declines_other_problems():
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    for p in (_p(2, f=(1, 1), s=(2, 1)), _p(2, f=(1, 1), lp=(1, 0)), _p(2, f=(3, 3))):
        why = _alg("igemm").decline(_cfg("igemm", spec="1x1s1p0"), p, lt, DATA_TYPES["fp32"], fo)
        assert why and "1x1" in why
    # the default spec runs 1x1 problems too
    _check("igemm", _p(2, K=3, C=2, f=(1, 1), i=(4, 4)), "nhwgc", "fp32")


# ------------------------------------------------------------------------------------------------
# fp8 compute
# ------------------------------------------------------------------------------------------------
def test_fp8_declines_without_sm89():
    p = _p(2)
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    for fam in bw.ALGORITHM_NAMES:
        why = _alg(fam).decline(_cfg(fam), p, lt, DATA_TYPES["fp16_fp8"], fo)
        if algorithms.interpreting() or not torch.cuda.is_available() \
                or torch.cuda.get_device_capability() < (8, 9):
            assert why is not None and "fp8 compute needs an sm_89+ GPU" in why
    if algorithms.interpreting():
        x = torch.randn(lt.shape("input", p)).half()
        dy = torch.randn(lt.shape("output", p)).half()
        out = torch.empty(lt.shape("weight", p), dtype=torch.float16)
        args = RunArgs(p, lt, DATA_TYPES["fp16_fp8"], fo, None, 1.0, 1.0, x, dy, (), out, _cfg("igemm"))
        with pytest.raises(ValueError, match="sm_89"):
            _alg("igemm").launch(args)


@pytest.mark.skipif(not algorithms.interpreting(), reason="interpreter-only fp8 emulation check")
@pytest.mark.parametrize("algorithm", ["igemm", "splitk_reduce"])
def test_fp8_scaling_math_in_interpreter(monkeypatch, algorithm):
    # the interpreter emulates fp8 dot: check the per-row/column power-of-two scaling, including
    # values far outside e4m3's range (they would overflow / flush without scaling)
    monkeypatch.setattr(bw, "_FP8_IN_INTERPRETER", True)
    p = _p(2, G=1, N=2, K=6, C=5, f=(3, 3), i=(6, 6), lp=(1, 1), rp=(1, 1))
    lt = layout_for("nhwgc", 2)
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(lt.shape("input", p), generator=gen) * 3000.0).half()
    dy = (torch.randn(lt.shape("output", p), generator=gen) * 1e-3).half()
    _check(algorithm, p, lt, "fp16_fp8", tensors=(x, dy, ()), cfg=_cfg(algorithm, block_k=32))
    why = _alg(algorithm).decline(_cfg(algorithm), p, lt, DATA_TYPES["fp16_fp8"], FUSED_OPS["passthrough"])
    assert why and "block_k >= 32" in why


# ------------------------------------------------------------------------------------------------
# config checks
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad,what", [
    (dict(block_m=24), "power of two"),
    (dict(block_n=8), "below 16"),
    (dict(block_k=512), "above 256"),
    (dict(num_warps=3), "num_warps"),
    (dict(num_stages=0), "num_stages"),
    (dict(group_m=0), "group_m"),
    (dict(split_k=-1), "split_k"),
    (dict(spec="3x3"), "spec"),
    (dict(block_m=256, block_n=256, block_k=128, num_stages=4, num_warps=8), "shared memory"),
    (dict(block_m=256, block_n=256, block_k=16, num_stages=1, num_warps=4), "registers"),
])
def test_check_config_rejects(bad, what):
    for fam in bw.ALGORITHM_NAMES:
        cfg = _cfg(fam, **bad)
        why = _alg(fam).check_config(cfg)
        assert why is not None and what in why, (fam, why)


def test_check_config_split_rules():
    assert _alg("igemm").check_config(_cfg("igemm", split_k=2)) is not None
    assert _alg("igemm").check_config(_cfg("igemm", split_k=0)) is not None
    for fam in ("splitk_atomic", "splitk_reduce", "two_stage"):
        for sk in (0, 1, 7):
            assert _alg(fam).check_config(_cfg(fam, split_k=sk)) is None
    missing = _cfg("igemm").as_dict()
    del missing["spec"]
    assert "spec" in _alg("igemm").check_config(missing)


def test_decline_fp32_smem_by_dtype():
    # fits at 2 bytes per element, not at 4: declined for fp32 data only
    cfg = _cfg("splitk_reduce", block_m=128, block_n=128, block_k=64, num_stages=4, num_warps=8)
    assert _alg("splitk_reduce").check_config(cfg) is None
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    assert _alg("splitk_reduce").decline(cfg, _p(2), lt, DATA_TYPES["fp16"], fo) is None
    why = _alg("splitk_reduce").decline(cfg, _p(2), lt, DATA_TYPES["fp32"], fo)
    assert why and "shared memory" in why


def test_launch_rejects_wrong_result_dtype():
    p = _p(1, K=2, C=2, f=(3,), i=(5,))
    lt = layout_for("nhwgc", 1)
    x = torch.randn(lt.shape("input", p)).to(torch.bfloat16)
    dy = torch.randn(lt.shape("output", p)).to(torch.bfloat16)
    out = torch.empty(lt.shape("weight", p), dtype=torch.bfloat16)  # bf16_fp32w wants float32
    args = RunArgs(p, lt, DATA_TYPES["bf16_fp32w"], FUSED_OPS["passthrough"], None, 1.0, 1.0,
                   x, dy, (), out, _cfg("igemm"))
    with pytest.raises(ValueError, match="float32 result"):
        _alg("igemm").launch(args)


@pytest.mark.parametrize("tile,split", [((16, 32, 128), 512), ((32, 16, 256), 0), ((64, 16, 128), 512)])
def test_skinny_1x1_long_steps(tile, split):
    # session 27's few-channel 1x1 configs: tiles under 64x64, 128/256 positions a step, 512 splits (more
    # than the reduction has steps: the spare splits add nothing); K and C not multiples of the tile
    m, n, k = tile
    p = _p(2, N=3, K=24, C=40, f=(1, 1), i=(9, 13))
    cfg = _cfg("splitk_atomic", block_m=m, block_n=n, block_k=k, num_stages=3, split_k=split, spec="1x1s1p0")
    for dtype in ("bf16", "fp16"):
        _check("splitk_atomic", p, "nhwgc", dtype, cfg=cfg, beta=0.0)
