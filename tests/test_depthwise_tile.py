"""The ``dwtile`` conv_bwd_data algorithm (depthwise at stride 1 on channels-last tensors, a 2D tile of
input positions per program with compile-time taps): ndims, dtypes, filters, dilations, asymmetric and
wide pads, tiles and channel blocks narrower and wider than the problem, channel counts with narrow
vectors, fused ops, int64 offsets, declines. Fresh random data, NaN-poisoned result, float64 reference
(the harness of test_direct_grouped.py); the interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import depthwise_tile as tile  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "dwtile")]
CFG = dict(block_h=4, block_w=4, block_ch=8, row_stages=0, num_warps=1)


def check(p, dtype: str = "fp32", **kw) -> None:
    err = run_case("data", p, dtype=dtype, algorithm="dwtile", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwtile {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


# 1D (a 5-tap filter, dilation 2), 2D (3x5, asymmetric pads), 3D (3x3x2, dilation along D, pads past the
# filter along W): the input tile rows and columns past the problem, the channel tail past G
@pytest.mark.parametrize("p", [P(1, 12, 2, 1, 1, (5,), (13,), (1,), (2,), (4,), (3,)),
                               P(2, 12, 2, 1, 1, (3, 5), (7, 9), (1, 1), (1, 1), (1, 2), (0, 3)),
                               P(3, 10, 2, 1, 1, (3, 3, 2), (4, 5, 6), (1, 1, 1), (2, 1, 1), (2, 1, 2), (1, 0, 1))],
                         ids=["1d", "2d", "3d"])
def test_ndims(p):
    check(p, cfg=dict(block_h=1, block_w=8) if p.ndim == 1 else None, seed=101)


@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    check(P(2, 16, 2, 1, 1, (3, 3), (9, 7), (1, 1), (1, 1), (1, 1), (1, 1)), dtype=dtype, seed=102)


@pytest.mark.parametrize("cfg", [dict(block_h=1, block_w=1, block_ch=1, num_warps=1),
                                 dict(block_h=2, block_w=8, block_ch=16, num_warps=2),
                                 dict(block_h=8, block_w=16, block_ch=4, num_warps=4)],
                         ids=["single", "wide-channels", "tall-tile"])
def test_configs(cfg):
    """G=9 (no 16-byte vectors, a channel block past G), a 7x7 filter on a plane smaller than the tile."""
    check(P(2, 9, 2, 1, 1, (7, 7), (6, 11), (1, 1), (1, 1), (3, 3), (3, 3)), cfg=cfg, seed=103)


@pytest.mark.parametrize("p", [P(2, 16, 2, 1, 1, (3, 3), (13, 12), (1, 1), (1, 1), (1, 1), (1, 1)),
                               P(2, 24, 1, 1, 1, (5, 3), (14, 13), (1, 1), (2, 1), (4, 1), (4, 1)),
                               P(3, 16, 1, 1, 1, (3, 3, 3), (5, 12, 12), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1))],
                         ids=["2d", "2d-dilated", "3d"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_interior_and_edge_tiles(p, dtype):
    """Planes large enough for tiles whose every tap lies inside (the unmasked path) beside edge tiles,
    with a whole channel block (G a multiple of 8) and, at G=24 with 16-channel blocks, a partial one."""
    check(p, dtype=dtype, cfg=dict(block_ch=16 if p.G == 24 else 8), seed=108)


@pytest.mark.parametrize("p", [P(1, 12, 2, 1, 1, (5,), (13,), (1,), (2,), (4,), (3,)),
                               P(2, 24, 1, 1, 1, (5, 3), (14, 13), (1, 1), (2, 1), (4, 1), (4, 1)),
                               P(3, 10, 2, 1, 1, (3, 3, 2), (4, 5, 6), (1, 1, 1), (2, 1, 1), (2, 1, 2), (1, 0, 1))],
                         ids=["1d", "2d-dilated", "3d"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_row_loop(p, dtype):
    """row_stages=1: the filter rows in a runtime loop (rows of no taps, dilated rows, a 3D filter's planes
    unrolled around it), interior and edge tiles."""
    cfg = dict(block_h=1, block_w=8) if p.ndim == 1 else dict(block_ch=16 if p.G == 24 else 8)
    check(p, dtype=dtype, cfg=dict(cfg, row_stages=1), seed=109)


def test_valid_and_oversized_pads():
    """No padding (grad_out smaller than grad_in) and pads wider than the filter (rows with no taps)."""
    check(P(2, 8, 2, 1, 1, (3, 3), (8, 8), (1, 1), (1, 1), (0, 0), (0, 0)), seed=104)
    check(P(2, 8, 1, 1, 1, (3, 3), (5, 6), (1, 1), (1, 1), (3, 4), (2, 1)), seed=105)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
def test_fused_ops(case):
    op, n_ds, user_ref = case
    check(P(2, 8, 2, 1, 1, (3, 3), (5, 6), (1, 1), (1, 1), (1, 1), (1, 1)), op=op, n_ds=n_ds, alpha=1.75,
          beta=-0.5, user_ref=user_ref, dtype="fp16" if n_ds == 3 else "fp32", seed=106)


def test_int64():
    check(P(3, 8, 2, 1, 1, (3, 3, 3), (3, 4, 5), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)), force_int64=True,
          op="add", n_ds=1, seed=107)


def test_plan():
    p = P(2, 40, 3, 1, 1, (3, 3), (9, 17), (1, 1), (1, 1), (1, 1), (1, 1))
    plan = tile.TilePlan.plan(p, 4, 8, 16)
    assert (plan.tiles_h, plan.tiles_w, plan.ch_blocks) == (3, 3, 3)
    assert plan.programs(p) == 3 * 3 * 3 * 3


def test_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, tile.DwTileConfig) and cfg.check() is None
    dw = P(2, 16, 2, 1, 1, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    assert ALG.decline(cfg, dw, lt, dt, fused) is None
    grouped = P(2, 4, 2, 2, 2, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = K = 1" in ALG.decline(cfg, grouped, lt, dt, fused)
    assert "fp16_fp8" in ALG.decline(cfg, dw, lt, DATA_TYPES["fp16_fp8"], fused)
    strided = P(2, 16, 2, 1, 1, (3, 3), (8, 8), (2, 1), (1, 1), (1, 1), (1, 1))
    assert "stride (2, 1)" in ALG.decline(cfg, strided, lt, dt, fused)
    huge = P(2, 16, 2, 1, 1, (9, 9), (12, 12), (1, 1), (1, 1), (4, 4), (4, 4))
    assert "81 taps" in ALG.decline(cfg, huge, lt, dt, fused)
    for planar in ("gnhwc", "ngchw"):
        assert "dwplane" in ALG.decline(cfg, dw, layout_for(planar, 2), dt, fused)
    thin = P(2, 16, 2, 1, 1, (3, 3), (2, 9), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "larger than the 2x9 input" in ALG.decline(cfg, thin, lt, dt, fused)
    assert "grad_in elements per thread" in ALG.decline(cfg.replace(block_h=8, block_w=8, block_ch=64, num_warps=2),
                                                       dw, lt, dt, fused)
    assert ALG.check_config(dict(CFG, block_h=3)) == "block_h=3 must be a power of two from 1 to 1024"
    assert ALG.check_config(dict(CFG, row_stages=2)).startswith("row_stages=2 must be 0 (every tap unrolled) or 1")
    assert ALG.check_config(dict(block_h=8)) == ("config lacks block_w, block_ch, row_stages, num_warps (dwtile takes "
                                                 "block_h, block_w, block_ch, row_stages, num_warps)")
