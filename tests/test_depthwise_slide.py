"""The ``dwslide`` conv_bwd_weight algorithm (depthwise, sliding register window along the row):
every layout family and ndim, dtypes, splits, window sizes (whole row, tap blocks, a last block
partly past the filter), strides that slide by 1 and 2 slots and ones that reload (stride not a
multiple of the dilation), unroll factors, fused ops, int64 offsets, determinism, declines. Fresh
random data, NaN-poisoned result, float64 reference (the harness of test_direct_grouped.py); the
interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import depthwise_slide as dsl  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_weight", "dwslide")]
CFG = dict(block_r=4, block_ch=8, block_x=0, unroll=0, prefetch=1, num_stages=1, num_warps=1, split=3)


def check(p, dtype: str = "fp32", **kw) -> None:
    err = run_case("weight", p, dtype=dtype, algorithm="dwslide", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwslide {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


# depthwise on every layout family x ndim; the depth multiplier (K=3: k inside each group's channels, the
# weight's k stride) on every layout family and every ndim, not their product
_LAYOUT_CASES = ([("depthwise", f, n) for f in LAYOUT_FAMILIES for n in (1, 2, 3)]
                 + [("multiplier3", f, n) for f, n in zip(LAYOUT_FAMILIES, (1, 2, 3, 2), strict=True)])


@pytest.mark.parametrize("kind,layout_family,ndim", _LAYOUT_CASES, ids=["-".join(map(str, c)) for c in _LAYOUT_CASES])
def test_layouts_ndims(kind, layout_family, ndim):
    check(shape(ndim, G=5, K=3 if kind == "multiplier3" else 1, C=1), layout_family=layout_family, seed=71)


@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16", "bf16_fp32w"])
@pytest.mark.parametrize("split", [1, 7])
def test_dtypes_splits(dtype, split):
    p = P(2, 8, 3, 1, 1, (3, 3), (7, 9), (2, 1), (1, 1), (1, 2), (0, 1))
    check(p, dtype=dtype, cfg=dict(split=split), seed=72)


# (filter x, stride x, dilation x): slides by 1, by 2, by 1 at dilation 2 (stride 2), reloads
# (stride 3 > window 2; stride 1 at dilation 2), a window longer than the row
@pytest.mark.parametrize("fsd", [(5, 1, 1), (5, 2, 1), (4, 2, 2), (2, 3, 1), (3, 1, 2), (9, 1, 1)],
                         ids=["s1", "s2", "s2d2", "s3-reload", "d2-reload", "wide"])
# num_stages 3: the interpreter runs the loop unpipelined, so this checks the build's arguments and results; the
# pipelined schedule itself was verified on the GPU (tuning rows, CK list: docs/BENCHMARKS.md, session 48)
@pytest.mark.parametrize("window", [dict(block_x=0, unroll=0, prefetch=0), dict(block_x=3, unroll=1, prefetch=1),
                                    dict(block_x=8, unroll=2, prefetch=1, num_stages=3)],
                         ids=["auto-pf0", "x3-u1-pf1", "x8-u2-pf1-s3"])
def test_windows(fsd, window):
    f, s, d = fsd
    check(P(2, 5, 2, 1, 1, (2, f), (5, 13), (1, s), (1, d), (1, 2), (0, 1)), cfg=window, seed=73)


# the one-wide config runs a program per (tap, channel) and a step per (output row, column): a problem
# just big enough for several of each (G=3, 3 x 6 inputs; the other configs' problem took 2 minutes)
_TINY = P(2, 3, 1, 1, 1, (2, 5), (3, 6), (1, 1), (1, 1), (1, 2), (0, 2))
_MID = P(2, 9, 1, 1, 1, (2, 5), (6, 11), (1, 1), (1, 1), (1, 2), (0, 2))


@pytest.mark.parametrize("cfg,p", [
    (dict(block_r=1, block_ch=1, block_x=1, unroll=1, prefetch=0, num_warps=1, split=1), _TINY),
    (dict(block_r=8, block_ch=4, block_x=2, unroll=3, prefetch=1, num_warps=1, split=5), _MID),
    (dict(block_r=16, block_ch=16, block_x=0, unroll=0, prefetch=1, num_warps=2, split=0), _MID),
], ids=["cfg0", "cfg1", "cfg2"])
def test_configs(cfg, p):
    """Rows in flight narrower and wider than a chunk, channel blocks narrower and wider than G*K
    (G=9 and G=3: no 16-byte vectors), one-tap and two-tap windows over a 5-tap row, auto split."""
    check(p, cfg=cfg, seed=74)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
@pytest.mark.parametrize("split", [1, 3])
def test_fused_ops(case, split):
    op, n_ds, user_ref = case
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          cfg=dict(split=split), dtype="fp16" if n_ds == 3 else "fp32", seed=75)


def test_deterministic_and_int64():
    p = shape(3, G=4, K=2, C=1)
    _, a = run_case("weight", p, cfg=dict(split=7), seed=76, return_out=True, algorithm="dwslide", base_cfg=CFG)
    _, b = run_case("weight", p, cfg=dict(split=7), seed=76, return_out=True, algorithm="dwslide", base_cfg=CFG)
    assert torch.equal(a, b)
    check(p, cfg=dict(split=3), force_int64=True, op="add", n_ds=1, seed=77)


def test_window_plan():
    assert dsl.window_plan(7, 1, 1, 0, 0) == (7, 1, 7)  # 7 taps slide by one: unrolled 7 times
    assert dsl.window_plan(5, 2, 1, 0, 0) == (5, 2, 3)
    assert dsl.window_plan(31, 1, 1, 0, 0) == (8, 1, 8)  # four tap blocks of eight
    assert dsl.window_plan(3, 1, 2, 0, 0) == (3, 0, 1)  # stride 1 at dilation 2: reload
    assert dsl.window_plan(3, 4, 2, 0, 2) == (3, 2, 2)
    assert dsl.window_plan(3, 3, 1, 0, 0) == (3, 0, 1)  # no overlap between columns


def test_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, dsl.DwSlideConfig) and cfg.block_x == 0 and cfg.check() is None
    wide = P(2, 4, 2, 16, 16, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = 1, K <= 4" in ALG.decline(cfg, wide, lt, dt, fused)
    assert "fp16_fp8" in ALG.decline(cfg, shape(2, G=4, K=1, C=1), lt, DATA_TYPES["fp16_fp8"], fused)
    big = P(2, 4, 2, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    assert "registers" in ALG.decline(cfg.replace(block_r=32, block_ch=64, num_warps=4), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_r=32, block_ch=32, num_warps=4), big, lt, dt, fused) is None
    assert ALG.check_config(dict(CFG, block_x=9)) == "block_x=9 must be 0 (min(FX, 8)) or a tap count from 1 to 8"
    assert ALG.check_config(dict(CFG, unroll=-1)) == "unroll=-1 must be 0 (the window's lifetime) or a factor from 1 to 16"
    assert ALG.check_config(dict(CFG, prefetch=2)) == "prefetch=2 must be 0 or 1"
    assert ALG.check_config(dict(CFG, block_r=3)) == "block_r=3 must be a power of two from 1 to 1024"
    assert ALG.check_config(dict(block_r=8)) == (
        "config lacks block_ch, block_x, unroll, prefetch, num_stages, num_warps, split "
        "(dwslide takes block_r, block_ch, block_x, unroll, prefetch, num_stages, num_warps, split)")
    assert ALG.check_config(dict(CFG, num_stages=0)) == "num_stages=0 must be 1 to 4"
    assert dsl.auto_split(1000, 4, 8, 132) == 125 and dsl.auto_split(10**6, 4, 32, 132) == 264
