"""The ``bdwin`` conv_bwd_weight algorithm (blockdiag's tiles, the output rows walked with the filter
rows' input tiles held in registers): every layout family and ndim, dtypes, the window's moves
(stride 1 and 2 reuse rows, dilation and stride 3 reload them), padding wider than the filter,
1- and 2-row filters, splits, columns wider than a block, fused ops, declines. Every case runs a
registered instance through ``verify_instance`` (fresh random data, NaN-poisoned result, float64
reference, the dtype's tolerance); the interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_grouped_blockdiag as blockdiag_tests  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402, F401  (a @triton.jit function needs tl in its globals)
from test_direct_grouped import run_case  # noqa: E402
from test_grouped_blockdiag import shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels.grouped_window import (  # noqa: E402
    BdwinWeightConfig,
    column_taps,
    unit_split,
    window_shift,
)
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
OP = "conv_bwd_weight"
ALG = ALGORITHMS[(OP, "bdwin")]
SMALL = dict(block_w=16, block_n=16, taps_x=0, prefetch=0, mma_rows="x", num_warps=4, split=0)


def instance(p: ConvParams, layout: str, dtype: str, fused: str = "passthrough", **cfg):
    """A registered bdwin instance for the combination, its parameters replaced by ``cfg``."""
    return blockdiag_tests.instance(OP, p, layout, dtype, fused, "bdwin", **cfg)


def check(p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", fused: str = "passthrough",
          n_ds: int = 0, **cfg) -> None:
    blockdiag_tests.check(OP, p, layout_family, dtype, fused, n_ds, "bdwin", **{**SMALL, **cfg})


def test_config_checks_window_and_split():
    cfg = ALG.config.from_values(SMALL)
    assert isinstance(cfg, BdwinWeightConfig) and cfg.check() is None
    assert cfg.replace(block_w=8).check() == "block_w and block_n must be at least 16 (tl.dot's smallest tile)"
    assert cfg.replace(prefetch=2).check() == "prefetch=2 is not 0 or 1"
    assert ALG.check_config(dict(block_w=16)) == (
        "config lacks block_n, taps_x, prefetch, mma_rows, num_warps, split "
        "(bdwin takes block_w, block_n, taps_x, prefetch, mma_rows, num_warps, split)")
    assert cfg.replace(taps_x=9).check() == "taps_x=9 must be an int from 0 (all the filter's columns) to 8"
    assert column_taps(3, 0) == 3 and column_taps(3, 1) == 1 and column_taps(3, 2) == 2 and column_taps(1, 2) == 1
    assert cfg.replace(mma_rows="k").check() == "mma_rows='k' is not one of ('x', 'dy')"
    assert window_shift(1, 1, 3) == 1 and window_shift(2, 1, 3) == 2 and window_shift(3, 1, 3) == 3
    assert window_shift(1, 2, 3) == 3 and window_shift(4, 2, 3) == 2 and window_shift(1, 1, 1) == 1
    assert unit_split(units=64, base_programs=16, sms=132) == 64  # at most one chunk per unit
    assert unit_split(units=10_000, base_programs=16, sms=132) == 66  # ~8 programs per SM


def test_declines_say_why():
    cfg = ALG.config.from_values(SMALL)
    lt = layout_for("nhwgc", 2)
    fused = FUSED_OPS["passthrough"]
    fp16 = DATA_TYPES["fp16"]
    dense = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert ALG.decline(cfg, dense, lt, fp16, fused) == "bdwin is for grouped convolutions (G > 1); a dense one is igemm's"
    assert "depthwise (C = K = 1 per group)" in ALG.decline(cfg, shape(2, 8, 1, 1), lt, fp16, fused)
    tall = ConvParams(2, 4, 2, 8, 8, (5, 5), (9, 9), (1, 1), (1, 1), (2, 2), (2, 2))
    assert ALG.decline(cfg, tall, lt, fp16, fused) == (
        "the filter has 5 rows: bdwin's window holds at most 3 (bdrow walks taller filters)")
    wide = ALG.config.from_values(dict(SMALL, block_w=128, block_n=64))
    assert "KiB of registers, over 80 KiB for 4 warps" in ALG.decline(
        wide, ConvParams(2, 4, 2, 16, 16, (3, 3), (9, 9), (1, 1), (1, 1), (1, 1), (1, 1)), lt, fp16, fused)
    assert "not fp16_fp8" in ALG.decline(cfg, shape(2, 4, 4, 4), lt, DATA_TYPES["fp16_fp8"], fused)


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", ["nhwgc", "gnhwc", "ngchw", "ngchw_kcyx"])
def test_layouts_and_ndims(ndim, layout_family):
    check(shape(ndim, 5, 4, 3), layout_family)


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16", "bf16_fp32w"])
def test_dtypes(dtype):
    check(shape(2, 6, 4, 4), dtype=dtype)


@pytest.mark.parametrize("K,C", [(3, 1), (8, 8), (2, 7), (16, 16), (24, 24)])
def test_channels_per_group(K, C):
    """A depth multiplier, C != K, a C that is not a power of two, one group wider than 16."""
    check(shape(2, 19 if C == 1 else 3, K, C), dtype="fp16", block_n=32 if C > 16 else 16)


# the window's moves: reuse by 1 row (s1), by 2 (s2), none (s3, dilation 2 at stride 1), dilation
# that divides the stride (s2 d2: reuse by 1), 2-row and 1-row filters, padding past the filter
@pytest.mark.parametrize("fsdp", [((3, 3), (1, 1), (1, 1), (1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1)),
                                  ((3, 3), (3, 1), (1, 1), (4, 0)), ((3, 3), (1, 1), (2, 3), (2, 3)),
                                  ((3, 3), (2, 1), (2, 1), (2, 1)), ((2, 2), (1, 1), (1, 1), (0, 1)),
                                  ((2, 3), (2, 2), (1, 1), (1, 1)), ((1, 3), (1, 2), (1, 1), (0, 1))],
                         ids=["s1", "s2", "s3-pad-past-filter", "dilated", "s2d2", "2x2", "2x3s2", "1x3"])
@pytest.mark.parametrize("prefetch,mma_rows,taps_x", [(0, "x", 0), (1, "dy", 1)])
def test_window_moves(fsdp, prefetch, mma_rows, taps_x):
    f, s, d, pad = fsdp
    check(ConvParams(2, 4, 2, 8, 8, f, (9, 11), s, d, pad, (1, 2)), dtype="fp16", prefetch=prefetch,
          mma_rows=mma_rows, taps_x=taps_x)


@pytest.mark.parametrize("taps_x", [1, 2])
def test_column_tap_blocks(taps_x):
    """A 5-wide filter row in blocks of 1 or 2 column taps (the last block of 2 half empty), 3-D."""
    check(ConvParams(3, 3, 2, 8, 8, (2, 3, 5), (3, 5, 9), (1, 1, 1), (1, 1, 1), (1, 1, 2), (0, 1, 2)),
          dtype="bf16", taps_x=taps_x, prefetch=1)


@pytest.mark.parametrize("split", [1, 2, 3, 5])
def test_splits(split):
    """Units (n, block of columns) of a 2-image, 2-block output in 1 .. 4 chunks (5 clamps to 4),
    the next row's tiles prefetched across a unit's end."""
    check(ConvParams(2, 3, 2, 4, 4, (3, 3), (5, 21), (1, 1), (1, 1), (1, 1), (1, 1)), split=split, prefetch=1)


@pytest.mark.parametrize("block_w", [16, 32])
def test_columns_wider_than_blocks(block_w):
    """Rows of 70 outputs: several column blocks per row, the last one partly past the row."""
    check(ConvParams(1, 4, 2, 4, 4, (5,), (70,), (1,), (1,), (2,), (2,)), dtype="fp16", block_w=block_w)


def test_3d_depth_taps_in_the_grid():
    """A 3x3x3 filter over planes whose depth padding leaves some programs' planes outside the input."""
    check(ConvParams(3, 2, 2, 8, 8, (3, 3, 3), (3, 5, 6), (2, 1, 1), (1, 1, 1), (1, 1, 1), (2, 1, 1)), dtype="fp16",
          prefetch=1)


def test_deterministic_and_int64():
    """The fixed-order reduce gives the same bits twice; int64 offsets give the same result."""
    p = ConvParams(2, 4, 2, 8, 8, (3, 3), (9, 11), (1, 1), (1, 1), (1, 1), (1, 1))
    kw = dict(dtype="fp16", cfg=dict(split=2), seed=81, return_out=True, algorithm="bdwin", base_cfg=SMALL)
    err, a = run_case("weight", p, **kw)
    _, b = run_case("weight", p, **kw)
    err64, c = run_case("weight", p, force_int64=True, **kw)
    assert err <= DATA_TYPES["fp16"].tolerance and torch.equal(a, b) and torch.equal(a, c), (err, err64)


@pytest.mark.parametrize("fused,n_ds", [("scale", 0), ("bilinear", 1), ("add", 2), ("add_relu", 1)])
@pytest.mark.parametrize("split,mma_rows", [(1, "x"), (3, "x"), (1, "dy")])
def test_fused_ops(fused, n_ds, split, mma_rows):
    check(shape(2, 4, 4, 4), fused=fused, n_ds=n_ds, split=split, mma_rows=mma_rows)


def test_custom_epilogue():
    blockdiag_tests.check_custom_epilogue(OP, "bdwin", **{**SMALL, "split": 2})
