"""The block-diagonal tensor-core dgrad for few-channel grouped convolutions ("blockdiag"; its wgrad
tiles run in bdrow, tests/test_grouped_rows.py).

Every case runs a registered instance through ``verify_instance`` (the public checks, fresh random
data, a NaN-poisoned result, float64 reference, the dtype's tolerance). Runs in the Triton
interpreter on CPU tensors or on a CUDA GPU.
"""

import dataclasses
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402, F401  (a @triton.jit function needs tl in its globals)

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels.grouped_blockdiag import BlockdiagDataConfig, tile_groups  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.registry import get_registry  # noqa: E402
from instance_factory.verify import Case, verify_instance  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreting() else "cuda"
DATA = ALGORITHMS[("conv_bwd_data", "blockdiag")]
OP = "conv_bwd_data"


def shape(ndim: int, G: int, K: int, C: int, N: int = 2) -> ConvParams:
    """One small problem per ndim with stride, dilation and asymmetric pads."""
    if ndim == 1:
        return ConvParams(1, G, N, K, C, (3,), (11,), (2,), (2,), (2,), (1,))
    if ndim == 2:
        return ConvParams(2, G, N, K, C, (3, 2), (5, 6), (1, 3), (1, 2), (1, 0), (0, 2))
    return ConvParams(3, G, N, K, C, (2, 3, 3), (3, 4, 5), (1, 2, 1), (2, 1, 1), (1, 1, 0), (0, 1, 2))


def instance(op: str, p: ConvParams, layout: str, dtype: str, fused: str = "passthrough",
             algorithm: str = "blockdiag", **cfg):
    """A registered instance of ``algorithm`` (blockdiag; bdrow for tests/test_grouped_rows.py) for
    the combination with these parameters (configs the YAML does not declare, e.g. other splits,
    replace the parameters of a registered one)."""
    runnable, declined = get_registry().candidates(op, p, layout, dtype, fused)
    for inst in runnable:
        if inst.alg.name == algorithm:
            inst = dataclasses.replace(inst, config=tuple((k, cfg.get(k, v)) for k, v in inst.config))
            assert inst.alg.check_config(inst.cfg) is None
            if inst.decline(p) is None:
                return inst
    reasons = {r for i, r in declined if i.alg.name == algorithm}
    raise AssertionError(f"no {algorithm} instance {cfg} runs {p.key()}: {reasons}")


def check(op: str, p: ConvParams, layout_family: str = "nhwgc", dtype: str = "fp32", fused: str = "passthrough",
          n_ds: int = 0, algorithm: str = "blockdiag", **cfg) -> None:
    layout = layout_for(layout_family, p.ndim).name
    inst = instance(op, p, layout, dtype, fused, algorithm, **cfg)
    res = verify_instance(inst, Case(op, p, layout, dtype, fused, n_ds), DEV)
    assert res.passed, f"{res.instance} {p.key()}: rel. error {res.error:.3g} > {res.tolerance}"


SMALL_DATA = dict(block_m=64, block_n=16, num_warps=4)


# ------------------------------------------------------------------------------------------------
# tiles, configs, declines
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("K,C,block_n,want", [
    (1, 1, 16, (16, 16, 16)),  # depthwise: 16 groups per tile
    (4, 4, 16, (4, 16, 16)),
    (8, 8, 16, (2, 16, 16)),
    (8, 8, 64, (8, 64, 64)),
    (3, 5, 16, (3, 16, 16)),  # C=5: 3 groups in 15 of 16 columns
    (24, 24, 32, (1, 32, 32)),
    (64, 4, 64, (2, 16, 128)),  # rows capped at 128
])
def test_tile_groups(K, C, block_n, want):
    assert tile_groups(K, C, block_n) == want


def test_config_checks():
    data = DATA.config.from_values(SMALL_DATA)
    assert isinstance(data, BlockdiagDataConfig)
    assert data.check() is None and DATA.check_config(SMALL_DATA) is None
    assert data.replace(block_n=8).check() == "block_m and block_n must be at least 16 (tl.dot's smallest tile)"
    assert data.replace(block_m=24).check() == "block_m=24 must be a power of two from 1 to 1024"
    assert data.replace(num_warps=3).check() == "num_warps=3 is not one of (1, 2, 4, 8)"
    assert data.replace(block_m=1024, block_n=64).check() == (
        "block_m*block_n=65536 needs more than 128 fp32 accumulators per thread with num_warps=4")
    assert DATA.check_config(dict(block_m=64)) == "config lacks block_n, num_warps (blockdiag takes block_m, block_n, num_warps)"


def test_weight_pass_is_bdrows():
    assert ("conv_bwd_weight", "blockdiag") not in ALGORITHMS and ("conv_bwd_weight", "bdrow") in ALGORITHMS


def test_declines_say_why():
    cfg = DATA.config.from_values(SMALL_DATA)
    lt = layout_for("nhwgc", 2)
    fused = FUSED_OPS["passthrough"]
    dense = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "G > 1" in DATA.decline(cfg, dense, lt, DATA_TYPES["fp16"], fused)
    wide = ConvParams(2, 2, 2, 128, 128, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "igemm" in DATA.decline(cfg, wide, lt, DATA_TYPES["fp16"], fused)
    c24 = ConvParams(2, 2, 2, 24, 24, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "block_n" in DATA.decline(cfg, c24, lt, DATA_TYPES["fp16"], fused)
    assert "fp16_fp8" in (DATA.decline(cfg, shape(2, 4, 4, 4), lt, DATA_TYPES["fp16_fp8"], fused) or "")


# ------------------------------------------------------------------------------------------------
# correctness
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", ["nhwgc", "gnhwc", "ngchw", "ngchw_kcyx"])
def test_layouts_and_ndims(ndim, layout_family):
    check(OP, shape(ndim, 5, 4, 3), layout_family, **SMALL_DATA)


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    check(OP, shape(2, 6, 4, 4), dtype=dtype, **SMALL_DATA)


@pytest.mark.parametrize("K,C", [(1, 1), (8, 8), (2, 7), (16, 16), (24, 24)])
def test_channels_per_group(K, C):
    """Depthwise, C != K, a C that is not a power of two, one group wider than 16."""
    block_n = 32 if C > 16 else 16
    check(OP, shape(2, 19 if C == 1 else 3, K, C), dtype="fp16", **{**SMALL_DATA, "block_n": block_n})


def test_data_strided_phases_without_taps():
    """Stride 3 with a 1x1 filter: most phases get no tap and must still write f(0, D)."""
    p = ConvParams(2, 4, 2, 4, 4, (1, 1), (7, 8), (3, 3), (1, 1), (0, 0), (0, 0))
    check(OP, p, fused="bilinear", n_ds=1, **SMALL_DATA)


@pytest.mark.parametrize("fused,n_ds", [("scale", 0), ("bilinear", 1), ("add", 2), ("add_relu", 1)])
def test_fused_ops(fused, n_ds):
    check(OP, shape(2, 4, 4, 4), fused=fused, n_ds=n_ds, **SMALL_DATA)


@triton.jit
def _halve_plus(acc, d0):
    return 0.5 * acc + d0 * d0


def check_custom_epilogue(op: str, algorithm: str, **cfg) -> None:
    """A user-written Triton epilogue (0.5 * acc + d0^2) through ``algorithm``'s instance with ``cfg``
    (the grouped families' tests share it)."""
    p = shape(2, 4, 4, 4)
    layout = layout_for("nhwgc", 2).name
    res = verify_instance(instance(op, p, layout, "fp32", "custom", algorithm, **cfg),
                          Case(op, p, layout, "fp32", "custom", 1), DEV,
                          user_fn=_halve_plus, user_ref=lambda acc, d0: 0.5 * acc + d0 * d0)
    assert res.passed, res


def test_custom_epilogue():
    check_custom_epilogue(OP, "blockdiag", **SMALL_DATA)
