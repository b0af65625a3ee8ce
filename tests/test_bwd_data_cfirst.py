"""conv_bwd_data ``cfirst`` (1x1 layers in channels-first layouts as a GEMM per image over position
runs): correctness vs the float64 reference on both channels-first families (GKYXC and GKCYX weights),
1-D/2-D/3-D, groups, tails on positions (within and across images), K and C, run alignments 1..16,
every dtype, fused ops incl. a user function; the declines. Runs in the Triton interpreter on CPU
tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_data_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, RunArgs, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_data_cfirst  # noqa: E402  (registers the algorithm)
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "cfirst")]
BASE_CFG = dict(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2)


def P(ndim, G, N, K, C, i):  # noqa: N802 - a pointwise problem: 1x1, stride 1, no padding
    one = (1,) * ndim
    return ConvParams(ndim, G, N, K, C, one, i, one, one, (0,) * ndim, (0,) * ndim)


def run_case(p: ConvParams, layout_family: str = "ngchw", dtype: str = "fp32", cfg: dict | None = None,
             **kw) -> float:
    """igemm's test runner (fresh random data, NaN-poisoned result, float64 reference) on cfirst."""
    return igemm_tests.run_case(p, layout_family, dtype, cfg, alg=ALG, base_cfg=BASE_CFG, **kw)


GEOMETRY = {
    # 7*9 = 63 positions per image (alignment 1): three full 16-row tiles and a tail of 15, per image;
    # K = 40: a k tail of 8; C = 24: a c tail of 8
    "2d-tails": P(2, 1, 3, 40, 24, (7, 9)),
    "2d-G=3": P(2, 3, 2, 16, 32, (4, 6)),  # 24 positions: alignment 8
    "1d": P(1, 2, 3, 24, 16, (36,)),  # alignment 4
    "3d": P(3, 1, 2, 16, 48, (2, 4, 4)),  # 32: alignment 16
    "3d-G=2": P(3, 2, 1, 32, 16, (2, 5, 7)),
    "depthwise": P(2, 8, 2, 1, 1, (5, 5)),
    "one-position": P(2, 1, 2, 16, 16, (1, 1)),
}


@pytest.mark.parametrize("layout_family", ["ngchw", "ngchw_kcyx"])
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name, layout_family):
    run_case(GEOMETRY[name], layout_family)


def test_run_alignment():
    assert [bwd_data_cfirst.run_alignment(s) for s in (49, 196, 784, 3136, 18, 1)] == [1, 4, 16, 16, 2, 1]


def test_larger_tiles_and_even_k():
    # K a multiple of block_k (the unmasked loop), several tiles of each image and of C
    run_case(P(2, 1, 2, 64, 80, (10, 13)), cfg=dict(block_m=64, block_n=32, block_k=32, group_m=4))


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    run_case(GEOMETRY["2d-tails"], "ngchw_kcyx", dtype)


@pytest.mark.parametrize("layout_family", ["ngchw", "ngchw_kcyx"])
@pytest.mark.parametrize("op,n_ds", [("scale", 0), ("bilinear", 1), ("add", 2), ("add_relu", 1)])
def test_fused_ops(op, n_ds, layout_family):
    run_case(GEOMETRY["2d-G=3"], layout_family, op=op, n_ds=n_ds, alpha=1.5, beta=-0.75)


@triton.jit
def _user_gate(acc, d0):
    return acc * tl.sigmoid(d0)


def test_custom_epilogue():
    run_case(GEOMETRY["1d"], op=_user_gate, n_ds=1,
             user_ref=lambda acc, d0: acc * torch.sigmoid(d0))


def test_declines_say_why():
    p = GEOMETRY["2d-tails"]
    fo = FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(BASE_CFG)
    why = ALG.decline(cfg, p, layout_for("nhwgc", 2), DATA_TYPES["bf16"], fo)
    assert why and "channels-last" in why
    why = ALG.decline(cfg, p, layout_for("ngchw", 2), DATA_TYPES["bf16_fp32w"], fo)
    assert why and "bf16_fp32w" in why
    big = ALG.config.from_values(dict(BASE_CFG, block_m=256, block_n=256, block_k=64, num_warps=8, num_stages=4))
    why = ALG.decline(big, p, layout_for("ngchw", 2), DATA_TYPES["fp32"], fo)
    assert why and "shared memory" in why
    one = (1, 1)
    for other in (ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), one, one, one, one),
                  ConvParams(2, 1, 2, 8, 8, one, (6, 6), (2, 2), one, (0, 0), (0, 0)),
                  ConvParams(2, 1, 2, 8, 8, one, (6, 6), one, one, (1, 0), (0, 0))):
        why = ALG.decline(cfg, other, layout_for("ngchw", 2), DATA_TYPES["bf16"], fo)
        assert why and "1x1 filters with stride 1 and no padding" in why
    assert ALG.config.from_values(dict(BASE_CFG, block_m=8)).check()


def test_bind_refuses_a_declined_problem():
    p = GEOMETRY["2d-tails"]
    lt = layout_for("nhwgc", 2)
    dy = torch.randn(lt.shape("output", p))
    w = torch.randn(lt.shape("weight", p))
    out = torch.empty(lt.shape("input", p))
    args = RunArgs(params=p, layout=lt, dtype=DATA_TYPES["fp32"], fused=FUSED_OPS["passthrough"], user_fn=None,
                   alpha=1.0, beta=1.0, a=dy, b=w, ds=(), out=out, cfg=ALG.config.from_values(BASE_CFG))
    with pytest.raises(ValueError, match="cannot run"):
        ALG.bind(args)
