"""conv_bwd_data ``pointwise`` kernel family: correctness vs the float64 reference, launched directly.

A persistent TMA GEMM over merged positions: the cases put tails on every axis (positions, K and C
not multiples of the tile), more tiles than programs (each program walks several tiles, across
groups), both channels-last layout families in 1D/2D/3D, every dtype and fused op, and the declines.
Runs in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
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
from instance_factory.kernels import bwd_data_pointwise  # noqa: E402  (registers the algorithm)
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "pointwise")]
BASE_CFG = dict(block_m=64, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2)


def P(ndim, G, N, K, C, i):  # noqa: N802 - a pointwise problem: 1x1, stride 1, no padding
    one = (1,) * ndim
    return ConvParams(ndim, G, N, K, C, one, i, one, one, (0,) * ndim, (0,) * ndim)


def run_case(p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", cfg: dict | None = None,
             **kw) -> float:
    """igemm's test runner (fresh random data, NaN-poisoned result, float64 reference) on pointwise."""
    return igemm_tests.run_case(p, layout_family, dtype, cfg, alg=ALG, base_cfg=BASE_CFG, **kw)


GEOMETRY = {
    # 2*7*9 = 126 positions: one full 64-row tile and a tail; K = 40 leaves a 16-wide k tail of 8
    "2d-tails": P(2, 1, 2, 40, 24, (7, 9)),
    "2d-G=3": P(2, 3, 3, 16, 32, (5, 6)),
    "1d": P(1, 2, 4, 24, 16, (33,)),
    "3d": P(3, 1, 2, 16, 48, (3, 4, 5)),
    "3d-G=2": P(3, 2, 1, 32, 16, (2, 5, 7)),
    "one-position": P(2, 1, 1, 16, 16, (1, 1)),
}


@pytest.mark.parametrize("layout_family", ["nhwgc", "gnhwc"])
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name, layout_family):
    run_case(GEOMETRY[name], layout_family)


def S(ndim, G, N, K, C, i, s):  # noqa: N802 - a strided pointwise problem: 1x1, stride s, no padding
    one = (1,) * ndim
    return ConvParams(ndim, G, N, K, C, one, i, s, one, (0,) * ndim, (0,) * ndim)


STRIDED = {
    # 7x9 at stride 2: grad_out 4x5, grad_in's last row and column between strided ones and after
    "2d-s2-odd": S(2, 1, 2, 40, 24, (7, 9), (2, 2)),
    "2d-s2-even-G=3": S(2, 3, 3, 16, 32, (6, 8), (2, 2)),
    "2d-s3x1": S(2, 1, 2, 16, 16, (8, 5), (3, 1)),
    "1d-s2": S(1, 2, 4, 24, 16, (33,), (2,)),
    "3d-s2": S(3, 1, 2, 16, 48, (3, 4, 5), (2, 2, 2)),
    "3d-s1x2x2-G=2": S(3, 2, 1, 32, 16, (2, 5, 7), (1, 2, 2)),
    "one-output-position": S(2, 1, 2, 16, 16, (1, 2), (2, 2)),
}


@pytest.mark.parametrize("layout_family", ["nhwgc", "gnhwc"])
@pytest.mark.parametrize("name", list(STRIDED))
def test_strided(name, layout_family):
    """grad_in's strided positions from the GEMM, the ones between from the fill loop (the result is
    poisoned with NaN first, so a position neither writes fails)."""
    run_case(STRIDED[name], layout_family)


@pytest.mark.parametrize("op,n_ds", [("bilinear", 1), ("add", 2), ("add_relu", 1)])
def test_strided_fused_ops(op, n_ds):
    """The positions no grad_out position reads get E = f(0, D...), not zero."""
    run_case(S(2, 2, 2, 16, 16, (5, 6), (2, 2)), "nhwgc", "fp32", op=op, n_ds=n_ds, alpha=0.75, beta=-1.25)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_strided_dtypes_and_more_tiles_than_programs(dtype, monkeypatch):
    monkeypatch.setattr(bwd_data_pointwise, "sm_count", lambda dev: 1)
    run_case(S(2, 2, 3, 32, 48, (9, 11), (2, 2)), "nhwgc", dtype, cfg=dict(group_m=1))


def test_programs_walk_several_tiles():
    """More tiles than persistent programs: the grid is capped at the SM count, so with 16-row
    stand-in tiles each program walks tiles of several groups and channel tiles."""
    p = P(2, 2, 4, 16, 48, (8, 9))  # 288 positions: 5 x 64-row tiles x 3 channel tiles x 2 groups
    run_case(p, cfg=dict(group_m=1))
    run_case(p, "gnhwc", cfg=dict(group_m=8))


def test_persistent_grid_is_capped(monkeypatch, bound_kernels):
    """The launch has at most programs_per_sm x SMs programs, however many tiles there are."""
    launches = bound_kernels(bwd_data_pointwise)
    monkeypatch.setattr(bwd_data_pointwise, "sm_count", lambda dev: 2)
    p = P(2, 1, 2, 16, 32, (8, 10))  # 160 positions: 3 row tiles x 2 channel tiles
    run_case(p)
    cfg = ALG.config.from_values(BASE_CFG)
    assert launches[-1]["grid"] == (min(6, 2 * bwd_data_pointwise.programs_per_sm(cfg, DATA_TYPES["fp32"])),)


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    run_case(P(2, 2, 2, 32, 16, (5, 7)), "nhwgc", dtype)


@pytest.mark.parametrize("op,n_ds", [("scale", 0), ("bilinear", 1), ("add", 1), ("add", 4), ("add_relu", 1)])
def test_fused_ops(op, n_ds):
    run_case(P(2, 2, 1, 16, 16, (6, 7)), "nhwgc", "fp32", op=op, n_ds=n_ds, alpha=0.75, beta=-1.25)


@triton.jit
def _user_gate(acc, d0):
    return tl.where(d0 > 0, acc * d0, acc - 0.5 * d0)


def test_custom_epilogue():
    run_case(P(2, 1, 1, 16, 16, (5, 6)), op=_user_gate, n_ds=1,
             user_ref=lambda acc, d0: torch.where(d0 > 0, acc * d0, acc - 0.5 * d0))


def test_declines_say_why():
    cfg = ALG.config.from_values(BASE_CFG)
    fused = FUSED_OPS["passthrough"]
    fp16 = DATA_TYPES["fp16"]
    nhwgc = layout_for("nhwgc", 2)
    p = P(2, 1, 1, 16, 16, (6, 6))
    assert ALG.decline(cfg, p, nhwgc, fp16, fused) is None
    assert "unit K stride" in ALG.decline(cfg, p, layout_for("ngchw", 2), fp16, fused)
    three = ConvParams(2, 1, 1, 16, 16, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "1x1 filter with no padding" in ALG.decline(cfg, three, nhwgc, fp16, fused)
    padded = ConvParams(2, 1, 1, 16, 16, (1, 1), (6, 6), (2, 2), (1, 1), (1, 1), (0, 0))
    assert "padding (1, 1)/(0, 0)" in ALG.decline(cfg, padded, nhwgc, fp16, fused)
    strided = ConvParams(2, 1, 1, 16, 16, (1, 1), (6, 6), (2, 2), (1, 1), (0, 0), (0, 0))
    assert ALG.decline(cfg, strided, nhwgc, fp16, fused) is None
    odd = P(2, 2, 1, 12, 6, (6, 6))
    assert "16 bytes" in ALG.decline(cfg, odd, nhwgc, fp16, fused)
    assert "no 'fp16_fp8' variant" in ALG.decline(cfg, p, nhwgc, DATA_TYPES["fp16_fp8"], fused)
    assert "power of two" in cfg.replace(block_k=24).check()
    assert "block_m=32 must be >= 64" in cfg.replace(block_m=32).check()
    assert "registers" in cfg.replace(block_m=256, block_n=256, num_warps=8).check()


@pytest.mark.parametrize("tile,tf32_fits", [
    (dict(block_m=128, block_n=256, block_k=32, num_warps=8, num_stages=3), False),  # sm_90: 272 KiB, OutOfResources
    (dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3), False),  # 256 KiB
    (dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3), True),   # 224 KiB: builds
    (dict(block_m=256, block_n=128, block_k=32, num_warps=8, num_stages=3), True),   # 208 KiB: builds
])
def test_declines_count_the_epilogues_shared_memory(tile, tf32_fits):
    """The persistent loop keeps the operand pipeline alive while the epilogue stages the fp32
    accumulator through shared memory: tf32 tiles whose two parts pass 227 KiB are declined (sm_90
    builds of these four failed / built as marked); the same tiles fit in 16-bit."""
    cfg = ALG.config.from_values({**BASE_CFG, **tile})
    p, nhwgc, fused = P(2, 1, 1, 16, 16, (6, 6)), layout_for("nhwgc", 2), FUSED_OPS["passthrough"]
    why = ALG.decline(cfg, p, nhwgc, DATA_TYPES["fp32_tf32"], fused)
    assert (why is None) == tf32_fits, why
    if not tf32_fits:
        assert "shared memory for fp32_tf32 (operand pipeline and epilogue)" in why
    assert ALG.decline(cfg, p, nhwgc, DATA_TYPES["bf16"], fused) is None


def test_two_programs_an_sm_only_when_both_fit():
    """64x128 tf32 tiles with 4 stages take 128 KiB each (operands + epilogue): one program an SM."""
    small = ALG.config.from_values({**BASE_CFG, **dict(block_m=64, block_n=128, block_k=32, num_warps=4)})
    assert bwd_data_pointwise.programs_per_sm(small.replace(num_stages=3), DATA_TYPES["fp32_tf32"]) == 2
    assert bwd_data_pointwise.programs_per_sm(small.replace(num_stages=4), DATA_TYPES["fp32_tf32"]) == 1
    assert bwd_data_pointwise.programs_per_sm(small.replace(num_stages=4), DATA_TYPES["bf16"]) == 2


def test_bind_refuses_a_declined_problem():
    p = ConvParams(2, 1, 1, 16, 16, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    lt = layout_for("nhwgc", 2)
    dt = DATA_TYPES["fp32"]
    args = RunArgs(params=p, layout=lt, dtype=dt, fused=FUSED_OPS["passthrough"], user_fn=None, alpha=1.0,
                   beta=0.0, a=torch.zeros(lt.shape("output", p)), b=torch.zeros(lt.shape("weight", p)), ds=(),
                   out=torch.zeros(lt.shape("input", p)), cfg=ALG.config.from_values(BASE_CFG))
    with pytest.raises(ValueError, match="pointwise instance cannot run"):
        ALG.bind(args)


def test_registered_configs_are_persistent_tiles():
    """The shipped configs: whole warpgroup tiles, operand boxes that fit beside the epilogue."""
    from instance_factory.factory import expand_file
    names = {i.name.rsplit("-", 1)[1] for i in expand_file("configs/conv_bwd_data.yaml").instances
             if i.algorithm == "pointwise"}
    assert "m128_n256_k64_gm8_w8_s3" in names and "m128_n128_k64_gm8_w4_s3" in names
    assert len(names) == 30


@pytest.mark.parametrize("k,strides", [(32, (1, 1)), (20, (2, 2))])
def test_tf32_reads_a_k_major_copy_of_the_weight(k, strides, bound_kernels):
    """tf32's wgmma reads K-major tiles only: bwd data runs on a [G, C, K] copy of the weight (its rows are
    16-byte aligned: pointwise already needs K % 4 == 0 in fp32 for grad_out's boxes); 16-bit data reads the
    weight itself."""
    launches = bound_kernels(bwd_data_pointwise)
    p = S(2, 2, 2, k, 24, (6, 7), strides) if strides != (1, 1) else P(2, 2, 2, k, 24, (5, 7))
    run_case(p, "nhwgc", "fp32_tf32")
    assert launches[-1]["W_KMAJOR"]
    if k == 32:
        run_case(p, "gnhwc", "fp32_tf32")
        assert launches[-1]["W_KMAJOR"]
        run_case(p, "nhwgc", "fp16")  # 16-bit wgmma reads the weight's own (N-major) tiles
        assert launches[-1]["W_KMAJOR"] is False
