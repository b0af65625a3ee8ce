"""conv_bwd_data ``tma`` kernel family: correctness vs the float64 reference, launched directly.

TMA boxes whose out-of-bounds zero fill is the padding halo: the cases put patches across every
border (pads wider than the filter, taps that leave grad_out on both sides, patches larger than the
plane), stride phases with and without taps, dilation, 1D/2D/3D (D taps skipped by loop bounds), G > 1
(a box never crosses into the next group's channels), every fused op, and the declines. Runs in
Triton's interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_data_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_data_tma  # noqa: E402, F401  (registers the algorithm)
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "tma")]
# small patches in the interpreter; on a GPU the registered tiles' smallest shapes
BASE_CFG = dict(block_h=8, block_w=8, block_n=16, block_k=16, num_warps=4, num_stages=2)


def P(ndim, G, N, K, C, f, i, s, d, lp, rp):  # noqa: N802 - mirrors ConvParams' argument order
    return ConvParams(ndim, G, N, K, C, f, i, s, d, lp, rp)


def run_case(p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", cfg: dict | None = None,
             **kw) -> float:
    """igemm's test runner (fresh random data, NaN-poisoned result, float64 reference) on tma."""
    return igemm_tests.run_case(p, layout_family, dtype, cfg, alg=ALG, base_cfg=BASE_CFG, **kw)


GEOMETRY = {
    "3x3-s1-p1": P(2, 1, 2, 16, 16, (3, 3), (9, 11), (1, 1), (1, 1), (1, 1), (1, 1)),
    "3x3-s2-p1": P(2, 1, 2, 16, 8, (3, 3), (13, 10), (2, 2), (1, 1), (1, 1), (1, 1)),
    "1x1-s2": P(2, 1, 1, 8, 16, (1, 1), (9, 9), (2, 2), (1, 1), (0, 0), (0, 0)),
    "7x7-s2-p3": P(2, 1, 1, 8, 8, (7, 7), (12, 11), (2, 2), (1, 1), (3, 3), (3, 3)),
    "s3-asym-pad": P(2, 1, 2, 8, 8, (3, 3), (10, 9), (3, 3), (1, 1), (2, 0), (0, 2)),
    "s2-d2": P(2, 1, 1, 8, 8, (3, 3), (9, 8), (2, 2), (2, 2), (2, 1), (1, 2)),
    "stride>filter": P(2, 1, 2, 8, 8, (2, 1), (9, 9), (3, 4), (1, 1), (0, 0), (1, 2)),
    "pad>=filter": P(1, 1, 1, 8, 8, (2,), (9,), (1,), (1,), (3,), (2,)),
    "1d-k3-s2": P(1, 1, 2, 16, 8, (3,), (37,), (2,), (1,), (1,), (1,)),
    "3d-3x3x3": P(3, 1, 1, 8, 8, (3, 3, 3), (4, 5, 6), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    "3d-s2-d": P(3, 1, 2, 8, 8, (3, 1, 2), (5, 4, 6), (2, 1, 2), (2, 1, 1), (2, 0, 1), (1, 0, 0)),
    "G=3": P(2, 3, 2, 8, 24, (3, 3), (6, 7), (1, 1), (1, 1), (1, 1), (1, 1)),
    "K<block_k,C<block_n": P(2, 2, 1, 8, 8, (3, 3), (6, 6), (2, 1), (1, 1), (1, 1), (0, 1)),
}


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    layout_family = ("nhwgc", "gnhwc")[list(GEOMETRY).index(name) % 2]
    run_case(GEOMETRY[name], layout_family)


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    run_case(P(2, 2, 2, 16, 16, (3, 3), (7, 9), (2, 1), (1, 1), (1, 1), (1, 0)), "nhwgc", dtype)


@pytest.mark.parametrize("patch", [(1, 64), (4, 16), (16, 4)])
def test_patch_shapes(patch):
    """Patches wider and taller than the plane, and one-row patches."""
    bh, bw = patch
    run_case(P(2, 1, 1, 16, 16, (3, 3), (7, 20), (1, 2), (1, 1), (1, 1), (1, 1)),
             cfg=dict(block_h=bh, block_w=bw))


@pytest.mark.parametrize("op,n_ds", [("scale", 0), ("bilinear", 1), ("add", 1), ("add", 3), ("add_relu", 1)])
def test_fused_ops(op, n_ds):
    run_case(P(2, 2, 1, 8, 16, (3, 3), (6, 7), (2, 2), (1, 1), (1, 1), (1, 1)), "nhwgc", "fp32",
             op=op, n_ds=n_ds, alpha=0.75, beta=-1.25)


@triton.jit
def _user_gate(acc, d0):
    return tl.where(d0 > 0, acc * d0, acc - 0.5 * d0)


def test_custom_epilogue():
    run_case(P(2, 1, 1, 8, 8, (3, 3), (5, 6), (1, 1), (1, 1), (1, 1), (1, 1)), op=_user_gate, n_ds=1,
             user_ref=lambda acc, d0: torch.where(d0 > 0, acc * d0, acc - 0.5 * d0))


def test_declines_say_why():
    cfg = ALG.config.from_values(BASE_CFG)
    fused = FUSED_OPS["passthrough"]
    p = P(2, 1, 1, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "unit K stride" in ALG.decline(cfg, p, layout_for("ngchw", 2), DATA_TYPES["fp16"], fused)
    odd = P(2, 2, 1, 12, 6, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "16 bytes" in ALG.decline(cfg, odd, layout_for("nhwgc", 2), DATA_TYPES["fp16"], fused)
    assert "no 'fp16_fp8' variant" in ALG.decline(cfg, p, layout_for("nhwgc", 2), DATA_TYPES["fp16_fp8"], fused)
    assert cfg.replace(block_h=3).check() == "block_h=3 must be a power of two <= 256 (a TMA box dim)"
    assert "64..256 rows" in cfg.replace(block_h=4, block_w=4).check()


@pytest.mark.parametrize("name", ["3x3-s2-p1", "7x7-s2-p3", "s2-d2", "1d-k3-s2", "3d-s2-d", "G=3"])
def test_tf32_reads_a_k_major_copy_of_the_weight(name, bound_kernels):
    """tf32's wgmma reads K-major tiles only: tma bwd data runs on a [G, taps, C, K] copy of the weight
    (every tap of every phase indexes it); 16-bit data reads the weight's own tiles."""
    launches = bound_kernels(bwd_data_tma)
    run_case(GEOMETRY[name], ("nhwgc", "gnhwc")[len(name) % 2], "fp32_tf32")
    assert launches[-1]["W_KMAJOR"]
    if name == "G=3":
        run_case(GEOMETRY[name], "nhwgc", "bf16")
        assert launches[-1]["W_KMAJOR"] is False
