"""The ``dwplane`` conv_bwd_weight algorithm (depthwise on planar layouts, taps along x read off the
diagonals of a tensor-core product): the planar layout families x ndims, the tensor-core dtypes,
splits, strides and dilations (column blocks of several widths), asymmetric padding, block sizes
narrower and wider than the problem, fused ops, int64 offsets, determinism, declines. Fresh random
data, NaN-poisoned result, float64 reference (the harness of test_direct_grouped.py); the
interpreter on CPU, or a CUDA GPU."""

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
from instance_factory.layouts import layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_weight", "dwplane")]
CFG = dict(block_m=16, j=16, prefetch=1, num_warps=4, num_stages=2, split=3)
PLANAR = ("ngchw", "ngchw_kcyx", "gnhwc")


def check(p, dtype: str = "bf16", **kw) -> None:
    kw.setdefault("layout_family", "ngchw")
    err = run_case("weight", p, dtype=dtype, algorithm="dwplane", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwplane {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


@pytest.mark.parametrize("layout_family", PLANAR)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_layouts_ndims(layout_family, ndim):
    check(shape(ndim, G=5, K=1, C=1), layout_family=layout_family, seed=81)


@pytest.mark.parametrize("dtype", dpl.DTYPES)
@pytest.mark.parametrize("split", [1, 7])
def test_dtypes_splits(dtype, split):
    p = P(2, 6, 1, 1, 1, (3, 3), (7, 19), (2, 1), (1, 1), (1, 2), (0, 1))
    check(p, dtype=dtype, cfg=dict(split=split), seed=82)


# (filter x, stride x, dilation x, j): several column blocks per row, a block holding one output
# column, stride 2 and 3, dilation 2, a 31-tap row (conformer) in 64 columns
@pytest.mark.parametrize("fsdj", [(3, 1, 1, 16), (5, 2, 1, 16), (3, 2, 2, 16), (2, 3, 1, 16), (7, 1, 2, 16),
                                  (15, 1, 1, 16), (31, 1, 1, 64)],
                         ids=["s1", "s2", "s2d2", "s3", "d2-one-col", "wide", "k31"])
def test_columns(fsdj):
    f, s, d, j = fsdj
    p = P(2, 3, 1, 1, 1, (2, f), (4, 40), (1, s), (1, d), (1, f // 2), (0, 1))
    check(p, layout_family="gnhwc", cfg=dict(j=j), seed=83)


# (input, filter, stride, dilation, left pad, right pad, j, layout family): blocks of whole rows on small
# planes: two rows and a partial last block, stride 2 along W, dilation 2 with asymmetric pads, a filter
# taller than the plane, one row of a plane wider than a column block, 3D, 1D, a product over
# _GATHER_MAX (its taps read off by masked sums: [4*32, 64]), one row with dilation 2 along H
ROW_CASES = [
    ((5, 6), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 16, "ngchw"),
    ((6, 9), (3, 3), (1, 2), (1, 1), (1, 1), (1, 0), 32, "gnhwc"),
    ((7, 8), (3, 3), (1, 1), (1, 2), (1, 2), (1, 0), 16, "ngchw_kcyx"),
    ((3, 7), (5, 5), (1, 1), (1, 1), (2, 2), (2, 2), 16, "ngchw"),
    ((4, 30), (3, 7), (1, 1), (1, 1), (1, 3), (1, 3), 32, "gnhwc"),
    ((3, 4, 5), (2, 3, 3), (1, 1, 1), (2, 1, 1), (1, 1, 0), (0, 1, 2), 16, "ngchw"),
    ((30,), (7,), (1,), (1,), (3,), (3,), 32, "ngchw"),
    ((5, 30), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 64, "ngchw"),
    ((6, 30), (3, 3), (1, 1), (2, 1), (2, 1), (2, 1), 32, "gnhwc"),
]


@pytest.mark.parametrize("case", ROW_CASES, ids=["two-rows", "s2", "d2-asym", "tall-filter", "one-row", "3d", "1d",
                                             "masked-taps", "one-row-d2"])
@pytest.mark.parametrize("split", [1, 3])
def test_row_blocks(case, split):
    inp, f, s, d, lp, rp, j, family = case
    nd = len(inp)
    p = P(nd, 3, 2, 1, 1, f, inp, s, d, lp, rp)
    geo = ConvGeometry.build(p, layout_for(family, nd))
    plan = dpl.geometry_plan(geo, j, CFG["num_warps"])
    assert plan.rows > 0, plan
    if j == 64:  # masked-taps: several rows a block, a product over _GATHER_MAX
        assert plan.rows > 1 and plan.xrp * plan.wp * j > 4096, plan
    check(p, layout_family=family, cfg=dict(j=j, split=split), dtype="fp16" if split == 3 else "bf16", seed=89)


def test_row_plan():
    """Row blocks where their x tiles load fewer elements than column blocks: stride 1 along H, whole rows
    within j, an x tile within the accumulators."""
    assert dpl.block_plan(32, 7, 1, 1, 3, 4, 28, 28, 28, 1, fy=7, max_x=256) == dpl.PlaneBlocks(1, 28, 3, 4, 8, 32)
    assert dpl.block_plan(32, 5, 1, 1, 2, 1, 7, 7, 7, 1, fy=5, max_x=256) == dpl.PlaneBlocks(4, 28, 2, 1, 8, 8)
    assert dpl.block_plan(32, 7, 1, 1, 3, 4, 28, 28, 28, 1, fy=7, max_x=128).rows == 0  # 8 rows x 32 columns
    assert dpl.block_plan(64, 7, 1, 1, 3, 8, 56, 56, 56, 1, fy=7, max_x=128).rows == 0
    assert dpl.block_plan(32, 3, 1, 1, 1, 2, 14, 14, 14, 2, fy=3, max_x=256).rows == 0  # stride 2 along H
    assert dpl.block_plan(32, 3, 1, 1, 1, 2, 14, 14, 14).rows == 0  # plane unknown
    # 3x3 on 14x14 at j 32: two rows a block, four input rows of 16 columns
    assert dpl.block_plan(32, 3, 1, 1, 1, 2, 14, 14, 14, 1, fy=3, max_x=256) == dpl.PlaneBlocks(2, 28, 1, 2, 4, 16)
    # one row (its taps read off by one masked sum per tx) with dilation 2 along H: 5 input rows padded to 8
    assert dpl.block_plan(32, 3, 1, 1, 1, 2, 30, 30, 6, 1, fy=3, dil_h=2, max_x=256) == dpl.PlaneBlocks(1, 30, 1, 2, 8, 32)
    # a 2-wide plane: its tile widened to the dot's 16 rows
    assert dpl.block_plan(16, 3, 1, 1, 1, 1, 2, 2, 6, 1, fy=3, max_x=256) == dpl.PlaneBlocks(6, 12, 1, 1, 8, 2)


@pytest.mark.parametrize("cfg", [dict(block_m=32, j=32, prefetch=0, num_warps=4, num_stages=3, split=0),
                                 dict(block_m=64, j=16, prefetch=1, num_warps=8, num_stages=1, split=2)],
                         ids=["auto-split", "wide-m"])
def test_configs(cfg):
    """Blocks of rows wider than a chunk, the automatic split, 8 warps on a small product."""
    check(P(2, 4, 1, 1, 1, (5, 3), (9, 11), (1, 2), (1, 1), (2, 1), (2, 0)), cfg=cfg, seed=84)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
@pytest.mark.parametrize("split", [1, 3])
def test_fused_ops(case, split):
    op, n_ds, user_ref = case
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          cfg=dict(split=split), dtype="fp16", layout_family="ngchw", seed=85)


def test_deterministic_and_int64():
    p = shape(3, G=4, K=1, C=1)
    kw = dict(cfg=dict(split=7), seed=86, return_out=True, algorithm="dwplane", base_cfg=CFG, layout_family="ngchw",
              dtype="bf16")
    _, a = run_case("weight", p, **kw)
    _, b = run_case("weight", p, **kw)
    assert torch.equal(a, b)
    check(p, cfg=dict(split=3), force_int64=True, op="add", n_ds=1, layout_family="ngchw", seed=87)


def test_block_columns():
    assert dpl.block_columns(32, 3, 1, 1) == (30, 0)
    assert dpl.block_columns(32, 3, 2, 1) == (15, 0)
    assert dpl.block_columns(32, 7, 1, 2) == (20, 0)
    assert dpl.block_columns(64, 31, 1, 1) == (34, 0)
    assert dpl.block_columns(16, 31, 1, 1)[0] == 0
    # 8-element vectors: the block starts at ow0 - 8 (pad 1 rounded up), its first tap 7 columns in
    assert dpl.block_columns(32, 3, 1, 1, 1, 8) == (16, 7)
    assert dpl.block_columns(64, 3, 2, 1, 1, 8) == (24, 7)
    assert dpl.block_columns(64, 7, 1, 1, 3, 4) == (56, 1)


def test_plane_vector_and_aligned_blocks():
    """56-wide planes take 8-element vectors; the aligned path matches the reference (stride 2,
    asymmetric padding, widths whose vector is 4 and 2)."""
    geo = ConvGeometry.build(P(2, 3, 2, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1)), layout_for("ngchw", 2))
    assert dpl.plane_vector(geo) == 8
    for inp, s, lp, rp in (((6, 48), 2, 1, 1), ((4, 28), 1, 2, 0), ((5, 14), 1, 1, 1)):
        check(P(2, 2, 2, 1, 1, (3, 3), inp, (1, s), (1, 1), (1, lp), (1, rp)), cfg=dict(j=32), seed=88)


def test_declines_and_configs():
    lt, dt, fused = layout_for("ngchw", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, dpl.DwPlaneConfig) and cfg.check() is None
    dw = shape(2, G=4, K=1, C=1)
    assert ALG.decline(cfg, dw, lt, dt, fused) is None
    assert "tensor cores" in ALG.decline(cfg, dw, lt, DATA_TYPES["fp32"], fused)
    assert "C = K = 1" in ALG.decline(cfg, shape(2, G=4, K=2, C=1), lt, dt, fused)
    assert "channels-last kernels fit NHWGC" in ALG.decline(cfg, dw, layout_for("nhwgc", 2), dt, fused)
    assert "W stride is 4" in dpl.planar_reason(ConvGeometry.build(dw, layout_for("nhwgc", 2)))
    # group-major with several channels per group is not planar; with one it is
    multi = ConvGeometry.build(shape(2, G=4, K=2, C=2), layout_for("gnhwc", 2))
    assert "W stride is 2" in dpl.planar_reason(multi)
    assert ALG.decline(cfg, dw, layout_for("gnhwc", 2), dt, fused) is None
    k31 = P(1, 4, 1, 1, 1, (31,), (64,), (1,), (1,), (15,), (15,))
    assert "no output column" in ALG.decline(cfg.replace(j=16), k31, layout_for("ngchw", 1), dt, fused)
    big = P(2, 4, 1, 1, 1, (7, 7), (90, 90), (1, 1), (1, 1), (3, 3), (3, 3))
    assert "accumulators" in ALG.decline(cfg.replace(j=64, num_warps=4), big, lt, dt, fused)
    assert "accumulators" in ALG.decline(cfg.replace(j=64, num_warps=8), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(j=32, num_warps=4), big, lt, dt, fused) is None
    # a 9x9 plane: blocks of rows whose x run fits the accumulators where 8 filter rows x 64 columns do not
    small = P(2, 4, 1, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    assert ALG.decline(cfg.replace(j=64, num_warps=4), small, lt, dt, fused) is None
    assert ALG.check_config(dict(CFG, j=8)) == "block_m=16 and j=8 must be at least 16 (the dot's smallest tile)"
    assert ALG.check_config(dict(CFG, num_stages=5)) == "num_stages=5 must be 1 to 4"
    assert ALG.check_config(dict(CFG, prefetch=2)) == "prefetch=2 must be 0 or 1"
    assert ALG.check_config(dict(CFG, block_m=24)) == "block_m=24 must be a power of two from 1 to 1024"


def test_model_work_and_roofline():
    """The cost model's dwplane work: row blocks of tw output columns (8-wide vectors on a 56-wide
    output), FYP*J + J tile elements and FYP*J*J products per block; narrower vectors cost more."""
    from instance_factory.tuning.roofline import model_ms

    p = P(2, 96, 64, 1, 1, (3, 3), (112, 112), (2, 2), (1, 1), (1, 1), (1, 1))
    blocks = 96 * 64 * 56 * 7  # tw = 8: 56 / 8 blocks per output row
    assert dpl.model_work(p, 32) == (blocks * 5 * 32, blocks * 4 * 32 * 32, 8)
    k31 = P(1, 256, 16, 1, 1, (31,), (512,), (1,), (1,), (15,), (15,))
    assert dpl.model_work(k31, 64) == (256 * 16 * 16 * 2 * 64, 256 * 16 * 16 * 64 * 64, 8)
    seven = P(2, 960, 64, 1, 1, (5, 5), (7, 7), (1, 1), (1, 1), (2, 2), (2, 2))
    assert dpl.model_work(seven, 32)[2] == 1
    cfg = dict(block_m=32, j=32)
    per_elem = [model_ms("conv_bwd_weight", q, "bf16", "dwplane", cfg) / dpl.model_work(q, 32)[0] for q in (p, seven)]
    assert per_elem[1] == pytest.approx(4 * per_elem[0], rel=0.01)  # 1-wide vectors: 4x the time per element
