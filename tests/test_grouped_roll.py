"""bdroll: grouped dgrad walking grad_out rows once per W tap, rolling H-tap accumulator tiles.

Every case runs a registered instance through ``verify_instance`` (fresh random data, a
NaN-poisoned result, float64 reference, the dtype's tolerance). Runs in the Triton interpreter on
CPU tensors or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_grouped_blockdiag as blockdiag_tests  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402, F401  (a @triton.jit function needs tl in its globals)
from test_grouped_blockdiag import check, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels.grouped_roll import MAX_BLOCK_W, MAX_TAPS, BdrollDataConfig  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
ALG = ALGORITHMS[("conv_bwd_data", "bdroll")]
OP = "conv_bwd_data"
SMALL = dict(algorithm="bdroll", block_w=16, block_n=16, rows=0, num_warps=4, num_stages=2)


def test_config_checks_and_declines():
    cfg = ALG.config.from_values(dict(block_w=32, block_n=16, rows=8, num_warps=4, num_stages=3))
    assert isinstance(cfg, BdrollDataConfig) and cfg.check() is None
    assert cfg.replace(rows=-1).check() == "rows=-1 must be 0 (the whole phase) or a row count from 1 to 4096"
    assert cfg.replace(num_stages=0).check() == "num_stages=0 must be an int in 1..8"
    assert cfg.replace(block_w=8).check() == "block_w and block_n must be at least 16 (tl.dot's smallest tile)"
    lt = layout_for("nhwgc", 2)
    fused = FUSED_OPS["passthrough"]
    fp16 = DATA_TYPES["fp16"]
    dense = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "G > 1" in ALG.decline(cfg, dense, lt, fp16, fused)
    odd_dil = ConvParams(2, 2, 2, 4, 4, (3, 3), (9, 9), (3, 1), (2, 1), (1, 1), (1, 1))
    assert "does not divide the stride" in ALG.decline(cfg, odd_dil, lt, fp16, fused)
    for filt in ((MAX_TAPS + 1, 3), (3, MAX_TAPS + 1)):
        tall = ConvParams(2, 2, 2, 4, 4, filt, (9, 9), (1, 1), (1, 1), (1, 1), (1, 1))
        assert f"at most {MAX_TAPS} x {MAX_TAPS} weight tiles" in ALG.decline(cfg, tall, lt, fp16, fused)
    vol = ConvParams(3, 2, 2, 4, 4, (3, 3, 3), (5, 5, 5), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1))
    assert "1D/2D" in ALG.decline(cfg, vol, lt, fp16, fused)
    assert "fails to compile" in cfg.replace(block_w=2 * MAX_BLOCK_W).check()
    wide = ConvParams(2, 2, 2, 64, 64, (3, 3), (9, 9), (1, 1), (1, 1), (1, 1), (1, 1))
    big = cfg.replace(block_n=64)
    assert "registers per thread" in ALG.decline(big, wide, lt, fp16, fused)
    assert "channels-first" in ALG.decline(cfg, odd_dil, layout_for("ngchw", 2), fp16, fused)
    assert ALG.decline(big.replace(num_warps=8), ConvParams(2, 2, 2, 8, 8, (3, 3), (9, 9), (2, 2), (1, 1),
                                                            (1, 1), (1, 1)), lt, fp16, fused) is None


@pytest.mark.parametrize("ndim,layout_family", [(1, "nhwgc"), (2, "gnhwc"), (2, "nhwgc"), (1, "gnhwc")])
def test_layouts_and_ndims(ndim, layout_family):
    check(OP, shape(ndim, 5, 4, 3), layout_family, **SMALL)


@pytest.mark.parametrize("stride,dil,rows", [((2, 3), (2, 1), 0), ((4, 2), (2, 2), 2), ((1, 1), (1, 1), 3)])
def test_stride_dilation_strips(stride, dil, rows):
    """Strides sharing a factor with the dilation (taps step by s / gcd(s, dil)), phases without
    taps (they must still write f(0, D)), strips that split a phase's rows."""
    p = ConvParams(2, 3, 2, 4, 4, (3, 3), (9, 10), stride, dil, (2, 1), (1, 3))
    check(OP, p, fused="bilinear", n_ds=1, **{**SMALL, "rows": rows})


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_dtypes(dtype):
    check(OP, shape(2, 6, 8, 8), dtype=dtype, **{**SMALL, "block_n": 32, "rows": 2})


@pytest.mark.parametrize("K,C", [(1, 1), (2, 7), (24, 24)])
def test_channels_per_group(K, C):
    block_n = 32 if C > 16 else 16
    check(OP, shape(2, 19 if C == 1 else 3, K, C), dtype="fp16", **{**SMALL, "block_n": block_n})


def test_custom_epilogue():
    blockdiag_tests.check_custom_epilogue(OP, "bdroll", **{k: v for k, v in SMALL.items() if k != "algorithm"})
