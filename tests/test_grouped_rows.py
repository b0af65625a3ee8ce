"""The ``bdrow`` conv_bwd_weight algorithm (blockdiag's tiles, the reduction walked by output-row
blocks): every layout family and ndim, dtypes, splits (chunks that start and end inside a row),
rows shorter and longer than a block, strides, dilations, padding wider than the filter, taps
spread over programs, fused ops, declines. Every case runs a registered instance through
``verify_instance`` (fresh random data, NaN-poisoned result, float64 reference, the dtype's
tolerance); the interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_grouped_blockdiag as blockdiag_tests  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402, F401  (a @triton.jit function needs tl in its globals)
from test_direct_grouped import run_case  # noqa: E402
from test_grouped_blockdiag import shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels.grouped_rows import BdrowWeightConfig, row_split  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
OP = "conv_bwd_weight"
ALG = ALGORITHMS[(OP, "bdrow")]
SMALL = dict(block_w=16, block_n=16, num_warps=4, num_stages=2, split=0)


def instance(p: ConvParams, layout: str, dtype: str, fused: str = "passthrough", **cfg):
    """A registered bdrow instance for the combination, its parameters replaced by ``cfg``."""
    return blockdiag_tests.instance(OP, p, layout, dtype, fused, "bdrow", **cfg)


def check(p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", fused: str = "passthrough",
          n_ds: int = 0, **cfg) -> None:
    blockdiag_tests.check(OP, p, layout_family, dtype, fused, n_ds, "bdrow", **{**SMALL, **cfg})


def test_config_checks_and_split():
    cfg = ALG.config.from_values(SMALL)
    assert isinstance(cfg, BdrowWeightConfig) and cfg.check() is None
    assert cfg.replace(block_w=8).check() == "block_w and block_n must be at least 16 (tl.dot's smallest tile)"
    assert cfg.replace(block_w=48).check() == "block_w=48 must be a power of two from 1 to 1024"
    assert cfg.replace(num_stages=5).check() == "num_stages=5 is not one of (1, 2, 3, 4)"
    assert ALG.check_config(dict(block_w=16)) == ("config lacks block_n, num_warps, num_stages, split "
                                                  "(bdrow takes block_w, block_n, num_warps, num_stages, split)")
    assert row_split(steps=10_000, base_programs=16, sms=132) == 66  # ~8 programs per SM
    assert row_split(steps=40, base_programs=16, sms=132) == 5  # chunks of at least 8 steps


def test_declines_say_why():
    cfg = ALG.config.from_values(SMALL)
    lt = layout_for("nhwgc", 2)
    fused = FUSED_OPS["passthrough"]
    dense = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert ALG.decline(cfg, dense, lt, DATA_TYPES["fp16"], fused) == (
        "bdrow is for grouped convolutions (G > 1); a dense one is igemm's")
    wide = ConvParams(2, 2, 2, 128, 128, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "bdrow serves C, K per group <= 64" in ALG.decline(cfg, wide, lt, DATA_TYPES["fp16"], fused)
    c24 = ConvParams(2, 2, 2, 24, 24, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "wider than block_n=16" in ALG.decline(cfg, c24, lt, DATA_TYPES["fp16"], fused)
    assert "not fp16_fp8" in ALG.decline(cfg, shape(2, 4, 4, 4), lt, DATA_TYPES["fp16_fp8"], fused)
    assert "depthwise (C = K = 1 per group) is dwslide's" in ALG.decline(cfg, shape(2, 8, 1, 1), lt,
                                                                         DATA_TYPES["fp16"], fused)


def test_taps_per_program_fit_shared_memory():
    """Taps side by side shrink until one stage of operand tiles fits the pipeline's shared memory
    (the H100 matrix had fp32 bw128_n64_w8 at 272 KiB, an OutOfResources crash); a tile that cannot
    hold even one tap is declined with the reason."""
    from instance_factory.kernels.grouped_rows import program_taps
    from instance_factory.kernels.host import PIPELINE_SMEM_BUDGET

    nt = program_taps(9, 32, 64, 8, 128, 4)  # G3 K24 C40 3x3, fp32, bw128_n64_w8
    assert 0 < nt < 9 and (32 + triton.next_power_of_2(nt) * 64) * 128 * 4 <= PIPELINE_SMEM_BUDGET
    assert program_taps(9, 32, 64, 8, 128, 2) == 5  # 2-byte data: the accumulator cap (8) decides
    assert program_taps(9, 128, 128, 8, 1024, 4) == 0
    p = ConvParams(2, 3, 2, 24, 40, (3, 3), (9, 9), (2, 2), (2, 2), (2, 2), (1, 1))
    lt = layout_for("gnhwc", 2)
    fused = FUSED_OPS["passthrough"]
    big = ALG.config.from_values(dict(block_w=128, block_n=64, num_warps=8, num_stages=2, split=0))
    assert ALG.decline(big, p, lt, DATA_TYPES["fp32_tf32"], fused) is None
    huge = ALG.config.from_values(dict(block_w=1024, block_n=64, num_warps=8, num_stages=2, split=0))
    assert "KiB of shared memory for one tap" in ALG.decline(huge, p, lt, DATA_TYPES["fp32"], fused)
    check(p, "gnhwc", "fp32_tf32", block_w=128, block_n=64, num_warps=8, num_stages=2)


def test_channel_alignment_vectorizes_24_channel_groups():
    """G=5 groups of 24 channels: row strides 120 reach the kernel divided by 8 (exact results)."""
    check(ConvParams(2, 5, 2, 24, 24, (3, 3), (6, 7), (1, 1), (1, 1), (1, 1), (1, 1)), dtype="bf16",
          block_n=32)


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


# splits of a 2 x 3 x 7 output (rows of 7, blocks of 16 or 4 steps of 2 blocks with block_w 4 is
# not allowed: 16 is the smallest) whose chunks start and end mid-row, mid-image, mid-batch
@pytest.mark.parametrize("split", [1, 2, 3, 5, 6])
def test_splits_cross_rows_and_images(split):
    p = ConvParams(2, 3, 2, 4, 4, (3, 3), (3, 37), (1, 1), (1, 1), (1, 1), (1, 1))
    check(p, split=split)


@pytest.mark.parametrize("block_w", [16, 32, 64])
def test_row_longer_than_blocks(block_w):
    """Rows of 70 outputs: several blocks per row, the last one partly past the row."""
    check(ConvParams(1, 4, 2, 4, 4, (5,), (70,), (1,), (1,), (2,), (2,)), dtype="fp16", block_w=block_w)


@pytest.mark.parametrize("fsdp", [((3, 3), (2, 2), (1, 1), (1, 1)), ((3, 3), (1, 1), (2, 3), (2, 3)),
                                  ((2, 2), (2, 2), (1, 1), (0, 0)), ((3, 3), (3, 1), (1, 1), (4, 0))],
                         ids=["s2", "dilated", "2x2s2", "s3-pad-past-filter"])
def test_strides_dilations_padding(fsdp):
    f, s, d, pad = fsdp
    check(ConvParams(2, 4, 2, 8, 8, f, (9, 11), s, d, pad, (1, 2)), dtype="fp16")


def test_taps_spread_over_programs():
    """A 7x7 filter with 32-wide tiles: the taps do not fit one program's N axis."""
    p = ConvParams(2, 2, 1, 16, 16, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    check(p, dtype="fp16", block_n=16, split=2)


def test_deterministic_and_int64():
    """The fixed-order reduce gives the same bits twice; int64 offsets give the same result."""
    p = ConvParams(2, 4, 2, 8, 8, (3, 3), (9, 11), (1, 1), (1, 1), (1, 1), (1, 1))
    kw = dict(dtype="fp16", cfg=dict(split=5), seed=81, return_out=True, algorithm="bdrow", base_cfg=SMALL)
    err, a = run_case("weight", p, **kw)
    _, b = run_case("weight", p, **kw)
    err64, c = run_case("weight", p, force_int64=True, **kw)
    assert err <= DATA_TYPES["fp16"].tolerance and torch.equal(a, b) and torch.equal(a, c), (err, err64)


@pytest.mark.parametrize("fused,n_ds", [("scale", 0), ("bilinear", 1), ("add", 2), ("add_relu", 1)])
@pytest.mark.parametrize("split", [1, 3])
def test_fused_ops(fused, n_ds, split):
    check(shape(2, 4, 4, 4), fused=fused, n_ds=n_ds, split=split)


def test_custom_epilogue():
    blockdiag_tests.check_custom_epilogue(OP, "bdrow", **{**SMALL, "split": 2})
