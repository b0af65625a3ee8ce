"""bdtap: blockdiag's grouped dgrad with the phase's taps walked as one pipelined loop.

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
from instance_factory.kernels.grouped_taps import BdtapDataConfig, tap_step  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
ALG = ALGORITHMS[("conv_bwd_data", "bdtap")]
OP = "conv_bwd_data"
SMALL = dict(algorithm="bdtap", block_m=64, block_n=16, num_warps=4, num_stages=2)


@pytest.mark.parametrize("stride,dil,want", [(1, 1, 1), (2, 1, 2), (2, 2, 1), (3, 2, 3), (4, 2, 2), (1, 3, 1)])
def test_tap_step(stride, dil, want):
    assert tap_step(stride, dil) == want


def test_config_checks_and_declines():
    cfg = ALG.config.from_values(dict(block_m=64, block_n=16, num_warps=4, num_stages=3))
    assert isinstance(cfg, BdtapDataConfig) and cfg.check() is None
    assert cfg.replace(num_stages=0).check() == "num_stages=0 must be an int in 1..8"
    assert cfg.replace(block_n=8).check() == "block_m and block_n must be at least 16 (tl.dot's smallest tile)"
    assert ALG.check_config(dict(block_m=64)) == (
        "config lacks block_n, num_warps, num_stages (bdtap takes block_m, block_n, num_warps, num_stages)")
    lt = layout_for("nhwgc", 2)
    fused = FUSED_OPS["passthrough"]
    dense = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "G > 1" in ALG.decline(cfg, dense, lt, DATA_TYPES["fp16"], fused)
    big = cfg.replace(block_m=1024, block_n=64)
    wide = ConvParams(2, 2, 2, 64, 64, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "KiB of shared memory" in ALG.decline(big, wide, lt, DATA_TYPES["fp32"], fused)


# ------------------------------------------------------------------------------------------------
# correctness: the tap progressions under stride, dilation and asymmetric pads
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ndim,layout_family", [(1, "nhwgc"), (2, "gnhwc"), (3, "nhwgc"), (2, "ngchw_kcyx")])
def test_layouts_and_ndims(ndim, layout_family):
    check(OP, shape(ndim, 5, 4, 3), layout_family, **SMALL)


@pytest.mark.parametrize("stride,dil", [((2, 3), (2, 1)), ((3, 2), (2, 3)), ((4, 2), (2, 2))])
def test_stride_dilation_phases(stride, dil):
    """Strides sharing a factor with the dilation: taps step by s / gcd(s, dil), some phases get
    none (they must still write f(0, D))."""
    p = ConvParams(2, 3, 2, 4, 4, (3, 4), (9, 10), stride, dil, (2, 1), (1, 3))
    check(OP, p, fused="bilinear", n_ds=1, **SMALL)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_dtypes_and_stages(dtype):
    check(OP, shape(2, 6, 8, 8), dtype=dtype, **{**SMALL, "block_n": 32, "num_stages": 4})


@pytest.mark.parametrize("K,C", [(1, 1), (2, 7), (24, 24)])
def test_channels_per_group(K, C):
    block_n = 32 if C > 16 else 16
    check(OP, shape(2, 19 if C == 1 else 3, K, C), dtype="fp16", **{**SMALL, "block_n": block_n})


def test_custom_epilogue():
    blockdiag_tests.check_custom_epilogue(OP, "bdtap", **{k: v for k, v in SMALL.items() if k != "algorithm"})
