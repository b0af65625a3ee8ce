"""conv_bwd_data ``padshift`` kernel family: correctness vs the float64 reference, launched directly.

Shifted TMA GEMMs over a zero-padded copy of grad_out, one per stride phase: the cases cover strides
1-3 with their phases' different tap counts (and phases without any tap, which store f(0, D)), dilation,
asymmetric pads, odd sizes, G > 1, both channels-last layout families in 1D/2D/3D, every dtype and fused
op, the plan's grid and table, and the declines. Runs in Triton's interpreter on CPU tensors
(TRITON_INTERPRET=1) or on a CUDA GPU.
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
from instance_factory.kernels import bwd_data_padshift  # noqa: E402  (registers the algorithm)
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "padshift")]
BASE_CFG = dict(block_m=64, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2)


def run_case(p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", cfg: dict | None = None,
             **kw) -> float:
    """igemm's test runner (fresh random data, NaN-poisoned result, float64 reference) on padshift."""
    return igemm_tests.run_case(p, layout_family, dtype, cfg, alg=ALG, base_cfg=BASE_CFG, **kw)


def P(ndim, G, N, K, C, f, i, s=None, d=None, lp=None, rp=None):  # noqa: N802
    s, d = s or (1,) * ndim, d or (1,) * ndim
    lp = lp if lp is not None else tuple(x // 2 for x in f)
    rp = rp if rp is not None else lp
    return ConvParams(ndim, G, N, K, C, f, i, s, d, lp, rp)


GEOMETRY = {
    "3x3-s1": P(2, 1, 2, 24, 16, (3, 3), (5, 7)),
    "3x3-s2-odd": P(2, 1, 2, 16, 24, (3, 3), (7, 9), (2, 2)),  # phases of 4 / 2 / 2 / 1 taps
    "3x3-s2-even-G=2": P(2, 2, 3, 16, 16, (3, 3), (6, 8), (2, 2)),
    "5x5-s2-dil2": P(2, 1, 1, 16, 16, (3, 3), (9, 8), (2, 2), (2, 2), (2, 2), (2, 2)),
    "2x2-s3-zero-phases": P(2, 1, 2, 16, 32, (2, 2), (8, 7), (3, 3), None, (0, 0), (0, 0)),
    "1x1-s2-pad1": P(2, 1, 2, 16, 16, (1, 1), (6, 5), (2, 2), None, (1, 1), (1, 1)),
    "asym-pad": P(2, 1, 2, 16, 16, (3, 2), (6, 7), (1, 2), (1, 1), (2, 0), (0, 1)),
    "1d-k5-s2": P(1, 2, 3, 16, 24, (5,), (19,), (2,)),
    "3d-s2": P(3, 1, 2, 16, 16, (3, 3, 3), (3, 5, 4), (2, 2, 2)),
    "3d-s1x2x1-G=2": P(3, 2, 1, 16, 16, (3, 1, 3), (4, 5, 3), (1, 2, 1)),
    "taps-past-the-edge": P(2, 1, 1, 16, 16, (5, 5), (3, 3), (1, 1), None, (4, 4), (0, 0)),
}


@pytest.mark.parametrize("layout_family", ["nhwgc", "gnhwc"])
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name, layout_family):
    run_case(GEOMETRY[name], layout_family)


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    run_case(P(2, 2, 2, 32, 16, (3, 3), (7, 6), (2, 2)), "nhwgc", dtype)


def test_k_and_c_tails_and_several_tiles():
    """K and C not multiples of the tile (zero-filled boxes), more rows and channel tiles than one."""
    run_case(P(2, 1, 3, 40, 56, (3, 3), (9, 10), (2, 1)), cfg=dict(group_m=1))
    run_case(P(2, 1, 3, 40, 56, (3, 3), (9, 10), (1, 2)), "gnhwc", cfg=dict(block_m=128, block_n=32, group_m=4))


@pytest.mark.parametrize("op,n_ds", [("scale", 0), ("bilinear", 1), ("add", 2), ("add_relu", 1)])
def test_fused_ops(op, n_ds):
    """Zero-tap phases (2x2 stride 3) store E = f(0, D...), the others E = f(acc, D...)."""
    run_case(P(2, 1, 2, 16, 16, (2, 2), (7, 5), (3, 3), None, (0, 0), (0, 0)), "nhwgc", "fp32",
             op=op, n_ds=n_ds, alpha=0.75, beta=-1.25)


@triton.jit
def _user_gate(acc, d0):
    return tl.where(d0 > 0, acc * d0, acc - 0.5 * d0)


def test_custom_epilogue():
    run_case(P(2, 1, 1, 16, 16, (3, 3), (5, 6), (2, 2)), op=_user_gate, n_ds=1,
             user_ref=lambda acc, d0: torch.where(d0 > 0, acc * d0, acc - 0.5 * d0))


def test_plan_grid_and_table():
    """3x3 stride 2 pad 1 on 28x28: grad_out 14x14; phase 0 reads ho = i (shift 0), phase 1 ho = i and i+1,
    so the grid is 15x15 with lo = 0, and the phases hold 1, 2, 2 and 4 taps."""
    pl = bwd_data_padshift.plan(P(2, 1, 4, 16, 16, (3, 3), (28, 28), (2, 2)))
    assert pl.grid3 == (1, 15, 15) and pl.lo3 == (0, 0, 0) and pl.rows == 4 * 225 and pl.phases == 4
    width = len(pl.table) // pl.phases
    counts = sorted(pl.table[k * width] for k in range(pl.phases))
    assert counts == [1, 2, 2, 4] and pl.max_taps == 4
    one = next(k for k in range(pl.phases) if pl.table[k * width] == 1)
    assert pl.table[one * width + 7: one * width + 9] == (0, 4)  # shift 0, the centre tap (1, 1)
    s1 = bwd_data_padshift.plan(P(2, 1, 1, 16, 16, (3, 3), (14, 14)))
    assert s1.grid3 == (1, 16, 16) and s1.lo3 == (0, -1, -1) and s1.phases == 1 and s1.max_taps == 9


def test_declines_say_why():
    cfg = ALG.config.from_values(BASE_CFG)
    fused = FUSED_OPS["passthrough"]
    fp16 = DATA_TYPES["fp16"]
    nhwgc = layout_for("nhwgc", 2)
    p = P(2, 1, 1, 16, 16, (3, 3), (6, 6), (2, 2))
    assert ALG.decline(cfg, p, nhwgc, fp16, fused) is None
    assert "unit K stride" in ALG.decline(cfg, p, layout_for("ngchw", 2), fp16, fused)
    pw = P(2, 1, 1, 16, 16, (1, 1), (6, 6), (2, 2), None, (0, 0), (0, 0))
    assert "pointwise runs it" in ALG.decline(cfg, pw, nhwgc, fp16, fused)
    odd = P(2, 2, 1, 12, 6, (3, 3), (6, 6))
    assert "16 bytes" in ALG.decline(cfg, odd, nhwgc, fp16, fused)
    many = P(2, 1, 1, 16, 16, (9, 9), (12, 12))  # 81 taps in the one phase
    assert "81 taps" in ALG.decline(cfg, many, nhwgc, fp16, fused)
    assert "no 'fp16_fp8' variant" in ALG.decline(cfg, p, nhwgc, DATA_TYPES["fp16_fp8"], fused)
    big = cfg.replace(block_m=256, block_n=256, block_k=64, num_warps=8, num_stages=4)
    assert "shared memory" in ALG.decline(big, p, nhwgc, fp16, fused)
