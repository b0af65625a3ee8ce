"""The ``dwplane`` conv_bwd_data algorithm (depthwise on planar layouts, grad_out rows times a banded
matrix of each filter row's taps): the planar layout families x ndims, the tensor-core dtypes,
strides, dilations and paddings (column blocks of several widths, aligned and not), row blocks of
small planes, blocks wider and narrower than the problem, with and without prefetch, fused ops,
int64 offsets, the block plan, declines. Fresh random data, NaN-poisoned
result, float64 reference (the harness of test_direct_grouped.py); the interpreter on CPU, or a
CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.geometry import ConvGeometry  # noqa: E402
from instance_factory.kernels import depthwise_plane as dpl  # noqa: E402
from instance_factory.kernels import depthwise_plane_data as dpd  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "dwplane")]
CFG = dict(block_m=16, j=16, prefetch=1, num_warps=4, num_stages=1)
PLANAR = ("ngchw", "ngchw_kcyx", "gnhwc")


def check(p, dtype: str = "bf16", **kw) -> None:
    kw.setdefault("layout_family", "ngchw")
    err = run_case("data", p, dtype=dtype, algorithm="dwplane", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwplane dgrad {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


@pytest.mark.parametrize("layout_family", PLANAR)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_layouts_ndims(layout_family, ndim):
    check(shape(ndim, G=5, K=1, C=1), layout_family=layout_family, seed=91)


@pytest.mark.parametrize("dtype", dpd.DTYPES)
def test_dtypes(dtype):
    p = P(2, 6, 2, 1, 1, (3, 3), (7, 19), (2, 1), (1, 1), (1, 2), (0, 1))
    check(p, dtype=dtype, seed=92)


# (filter x, stride x, dilation x, pad x, j): several column blocks per row, stride 2 and 3, dilation 2,
# padding past the filter, a block holding few columns, a 31-tap row (conformer) in 64 columns
@pytest.mark.parametrize("fsdpj", [(3, 1, 1, 1, 16), (5, 2, 1, 2, 16), (3, 2, 2, 2, 16), (2, 3, 1, 0, 16),
                                   (3, 1, 1, 4, 16), (7, 1, 2, 6, 16), (15, 1, 1, 7, 32), (31, 1, 1, 15, 64)],
                         ids=["s1", "s2", "s2d2", "s3", "pad-past", "d2-few-cols", "wide", "k31"])
def test_columns(fsdpj):
    f, s, d, pw, j = fsdpj
    p = P(2, 3, 1, 1, 1, (2, f), (4, 40), (1, s), (1, d), (1, pw), (0, max(0, pw - 1)))
    check(p, layout_family="gnhwc", cfg=dict(j=j), seed=93)


@pytest.mark.parametrize("cfg", [dict(block_m=32, j=32, prefetch=0, num_warps=4, num_stages=2),
                                 dict(block_m=64, j=16, prefetch=1, num_warps=8, num_stages=1),
                                 dict(block_m=16, j=16, prefetch=0, num_warps=4, num_stages=1)],
                         ids=["j32", "wide-m", "no-prefetch"])
def test_configs(cfg):
    """Blocks of rows wider than the problem's, 8 warps on a small product, strided H and W."""
    check(P(2, 4, 1, 1, 1, (5, 3), (9, 11), (2, 2), (1, 1), (2, 1), (2, 0)), cfg=cfg, seed=94)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
def test_fused_ops(case):
    op, n_ds, user_ref = case
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          dtype="fp16", layout_family="ngchw", seed=95)


def test_int64():
    check(shape(3, G=4, K=1, C=1), force_int64=True, op="add", n_ds=1, layout_family="ngchw", seed=96)


def test_block_plan():
    bp = dpd.BlockPlan
    # stride 1, 3 taps, pad 1: grad_in columns 0..13 take grad_out columns -1..14, all 16
    assert dpd.block_plan(16, 3, 1, 1, 1, 1, 40, 40) == bp(1, 14, -1, 1, 16)
    # 8-wide vectors: the first grad_out column rounds down to -8, 16 columns fit in 32 (4 blocks a row) ...
    assert dpd.block_plan(32, 3, 1, 1, 1, 8, 32, 32) == bp(1, 16, -8, 8, 32)
    # ... but where 4-wide vectors need fewer blocks per row, they are taken (2-wide ones count double)
    assert dpd.block_plan(32, 3, 1, 1, 1, 8, 56, 56) == bp(1, 24, -4, 4, 32)
    assert dpd.block_plan(32, 3, 1, 1, 1, 8, 48, 48) == bp(1, 24, -4, 4, 32)
    # stride 2: blocks of 2*vec columns; 3 taps pad 1 reach grad_out column -1
    assert dpd.block_plan(32, 3, 2, 1, 1, 1, 112, 56) == bp(1, 32, -1, 1, 32)
    assert dpd.block_plan(32, 3, 2, 1, 1, 4, 112, 56) == bp(1, 32, -4, 4, 32)
    # a 31-tap row does not fit 16 columns at all; 64 hold 34
    assert dpd.block_plan(16, 31, 1, 1, 15, 1, 512, 512).tw == 0
    assert dpd.block_plan(64, 31, 1, 1, 15, 1, 512, 512) == bp(1, 34, -15, 1, 64)
    # small planes: whole rows per block (7-wide: 4 rows in 32 columns; 14-wide: 2), not with an H stride
    assert dpd.block_plan(32, 5, 1, 1, 2, 1, 7, 7) == bp(4, 7, 0, 1, 32)
    assert dpd.block_plan(32, 3, 1, 1, 1, 2, 14, 14) == bp(2, 14, 0, 2, 32)
    assert dpd.block_plan(32, 3, 1, 1, 1, 2, 14, 14, stride_h=2).rows == 1
    assert dpd.block_plan(64, 7, 1, 1, 3, 4, 28, 28) == bp(2, 28, 0, 4, 64)
    assert dpd.block_plan(32, 3, 1, 1, 1, 8, 56, 56).rows == 1
    # stride 2 along W: a 14-wide grad_in row reads 7 grad_out columns; 2 rows in 32 result columns
    assert dpd.block_plan(32, 3, 2, 1, 1, 1, 14, 7) == bp(2, 14, 0, 1, 32)


@pytest.mark.parametrize("case", ["7x7-5x5", "14-s2w", "dil2", "3d-sd2", "pad-past", "h-not-whole"])
def test_row_blocks(case):
    """Small planes in row blocks: several grad_in rows per block, grad_out read as a flat run of rows."""
    p = {"7x7-5x5": P(2, 3, 2, 1, 1, (5, 5), (7, 7), (1, 1), (1, 1), (2, 2), (2, 2)),
         "14-s2w": P(2, 3, 2, 1, 1, (3, 3), (9, 14), (1, 2), (1, 1), (1, 1), (1, 0)),
         "dil2": P(2, 3, 2, 1, 1, (3, 3), (6, 10), (1, 1), (2, 2), (2, 2), (2, 2)),
         "3d-sd2": P(3, 3, 1, 1, 1, (3, 3, 3), (5, 6, 6), (2, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
         "pad-past": P(2, 2, 2, 1, 1, (3, 3), (5, 5), (1, 1), (1, 1), (3, 3), (2, 2)),
         "h-not-whole": P(2, 2, 1, 1, 1, (3, 3), (9, 7), (1, 1), (1, 1), (1, 0), (1, 2))}[case]
    geo = ConvGeometry.build(p, layout_for("ngchw", p.ndim))
    plan = dpd.block_plan(32, p.filter[-1], p.stride[-1], p.dilation[-1], p.left_pad[-1], dpl.plane_vector(geo),
                          p.input[-1], p.output[-1], p.stride[-2])
    assert plan.rows >= 2, plan
    for fam in ("ngchw", "gnhwc"):
        check(p, layout_family=fam, cfg=dict(j=32), seed=98)
    check(p, dtype="fp32_tf32", cfg=dict(j=32), op="bilinear", n_ds=1, alpha=0.5, beta=2.0, seed=99)


def test_run_plan():
    """Run blocks: one flat grad_out run per block where it loads fewer elements than a run per filter row."""
    bp = dpd.BlockPlan
    base = dpd.block_plan(32, 5, 1, 1, 2, 2, 14, 14)
    assert base == bp(2, 14, 0, 2, 32)
    # 14x14, 5x5, pad 2: 2 rows a block read grad_out rows ih-2 .. ih+3, 6 x 14 -> a run of 128 (not 8 x 32)
    assert dpd.run_plan(base, 2, 5, 1, 2, 14, 14, 14, 14, 8, 256) == bp(2, 14, 0, 2, 32, 128, 2)
    assert dpd.run_plan(base, 2, 5, 1, 2, 14, 14, 14, 14, 8, 64) == base  # the run does not fit the tile
    # a block of the whole 7x7 plane runs over the 7 grad_out rows only (lead 0): 49 -> 64
    base7 = dpd.block_plan(64, 5, 1, 1, 2, 1, 7, 7)
    assert dpd.run_plan(base7, 1, 5, 1, 2, 7, 7, 7, 7, 8, 256) == bp(7, 7, 0, 1, 64, 64, 0)
    # dilation 2 along H: 4 rows read 4 + 2*2 grad_out rows from ih - (4 - pad); at 2 rows the run ties
    base64 = dpd.block_plan(64, 3, 1, 1, 1, 2, 14, 14)
    assert dpd.run_plan(base64, 2, 3, 2, 1, 14, 12, 14, 14, 4, 256) == bp(4, 14, 0, 2, 64, 128, 3)
    assert dpd.run_plan(base, 2, 3, 2, 1, 14, 12, 14, 14, 4, 256) == base
    # 56-wide rows: a run of 3 rows is no smaller than 4 filter-row runs of 64 columns
    base56 = dpd.block_plan(64, 3, 1, 1, 1, 8, 56, 56)
    assert dpd.run_plan(base56, 8, 3, 1, 1, 56, 56, 56, 56, 4, 256) == base56
    assert dpd.max_run(64, 32, 4) == 256 and dpd.max_run(32, 64, 4) == 256 and dpd.max_run(16, 16, 4) == 1024


@pytest.mark.parametrize("case", ["7x7-5x5-whole", "14-5x5", "dil2", "3d-fz1-sd2", "pad-past", "asym", "s2w",
                                  "odd", "1row"])
def test_run_blocks(case):
    """Run blocks: the plan takes them, and the result matches the reference (both planar families, tf32 with a
    fused bilinear)."""
    p, j = {"7x7-5x5-whole": (P(2, 3, 2, 1, 1, (5, 5), (7, 7), (1, 1), (1, 1), (2, 2), (2, 2)), 64),
            "14-5x5": (P(2, 3, 2, 1, 1, (5, 5), (9, 14), (1, 1), (1, 1), (2, 2), (2, 2)), 32),
            "dil2": (P(2, 3, 2, 1, 1, (3, 3), (9, 10), (1, 1), (2, 2), (2, 2), (2, 2)), 64),
            "3d-fz1-sd2": (P(3, 3, 1, 1, 1, (1, 3, 3), (5, 6, 6), (2, 1, 1), (1, 1, 1), (0, 1, 1), (0, 1, 1)), 16),
            "pad-past": (P(2, 2, 2, 1, 1, (3, 3), (5, 5), (1, 1), (1, 1), (3, 3), (2, 2)), 32),
            "asym": (P(2, 2, 1, 1, 1, (3, 3), (9, 7), (1, 1), (1, 1), (1, 0), (0, 2)), 16),
            "s2w": (P(2, 3, 2, 1, 1, (3, 3), (9, 14), (1, 2), (1, 1), (1, 1), (1, 0)), 32),
            "odd": (P(2, 3, 2, 1, 1, (3, 3), (11, 13), (1, 1), (1, 1), (1, 1), (1, 1)), 32),
            "1row": (P(2, 2, 1, 1, 1, (3, 3), (4, 20), (1, 1), (1, 1), (1, 1), (1, 1)), 32)}[case]
    geo = ConvGeometry.build(p, layout_for("ngchw", p.ndim))
    plan = dpd.problem_plan(p, j, dpl.plane_vector(geo), dpd.max_run(CFG["block_m"], j, CFG["num_warps"]))
    assert plan.run > 0, plan
    for fam in ("ngchw", "gnhwc"):
        check(p, layout_family=fam, cfg=dict(j=j), seed=101)
    check(p, dtype="fp32_tf32", cfg=dict(j=j), op="bilinear", n_ds=1, alpha=0.5, beta=2.0, seed=102)
    check(p, dtype="fp16", cfg=dict(j=j, prefetch=0), seed=103)


def test_plane_vector_and_aligned_blocks():
    """56-wide planes take 8-element vectors; the aligned path matches the reference (stride 2,
    asymmetric padding, widths whose vector is 4 and 2)."""
    geo = ConvGeometry.build(P(2, 3, 2, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)), layout_for("ngchw", 2))
    assert dpl.plane_vector(geo) == 8
    for inp, s, lp, rp in (((6, 48), 2, 1, 1), ((4, 28), 1, 2, 0), ((5, 14), 1, 1, 1), ((3, 56), 1, 3, 3)):
        f = 7 if lp == 3 else 3
        check(P(2, 2, 2, 1, 1, (3, f), inp, (1, s), (1, 1), (1, lp), (1, rp)), cfg=dict(j=32), seed=97)


def test_declines_and_configs():
    lt, dt, fused = layout_for("ngchw", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, dpd.DwPlaneDataConfig) and cfg.check() is None
    dw = shape(2, G=4, K=1, C=1)
    assert ALG.decline(cfg, dw, lt, dt, fused) is None
    assert "tensor cores" in ALG.decline(cfg, dw, lt, DATA_TYPES["fp32"], fused)
    assert "C = K = 1" in ALG.decline(cfg, shape(2, G=4, K=2, C=1), lt, dt, fused)
    assert "channels-last kernels fit NHWGC" in ALG.decline(cfg, dw, layout_for("nhwgc", 2), dt, fused)
    assert ALG.decline(cfg, dw, layout_for("gnhwc", 2), dt, fused) is None
    k31 = P(1, 4, 1, 1, 1, (31,), (64,), (1,), (1,), (15,), (15,))
    assert "no grad_in column" in ALG.decline(cfg, k31, layout_for("ngchw", 1), dt, fused)
    big = P(2, 4, 1, 1, 1, (7, 7), (9, 40), (1, 1), (1, 1), (3, 3), (3, 3))
    assert "per thread" in ALG.decline(cfg.replace(block_m=128, j=64, num_warps=4), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_m=64, j=32, num_warps=4), big, lt, dt, fused) is None
    # a 9x9 plane's run of 128 fits the same tile: 7 filter rows x 64 would not
    small = P(2, 4, 1, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    assert ALG.decline(cfg.replace(block_m=128, j=64, num_warps=4), small, lt, dt, fused) is None
    assert ALG.check_config(dict(CFG, j=8)) == "block_m=16 and j=8 must be at least 16 (the dot's smallest tile)"
    assert ALG.check_config(dict(CFG, num_stages=5)) == "num_stages=5 must be 1 to 4"
    assert ALG.check_config(dict(CFG, prefetch=2)) == "prefetch=2 must be 0 or 1"


def test_model_work():
    """Blocks of tw grad_in columns (8-wide vectors on a 56-wide plane), RP*J + J tile elements and
    RP*J*J products per block."""
    p = P(2, 96, 64, 1, 1, (7, 7), (56, 56), (1, 1), (1, 1), (3, 3), (3, 3))
    plan = dpd.block_plan(32, 7, 1, 1, 3, 8, 56, 56)
    blocks = 96 * 64 * 56 * -(-56 // plan.tw)
    assert dpd.model_work(p, 32) == (blocks * 9 * 32, blocks * 8 * 32 * 32, plan.vec)
    # 7x7 planes in run blocks of 4 rows: 2 blocks a plane, each a run of 8 grad_out rows (56 -> 64)
    seven = P(2, 960, 64, 1, 1, (5, 5), (7, 7), (1, 1), (1, 1), (2, 2), (2, 2))
    assert dpd.model_work(seven, 32) == (960 * 64 * 2 * (64 + 32), 960 * 64 * 2 * 64 * 32, 1)
