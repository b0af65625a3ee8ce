"""The ``dwslab`` conv_bwd_weight algorithm (depthwise, a slab of filter rows per program): both
channels-last layout families, 2D and 3D (a slab crossing a z boundary), dtypes, splits, slabs
that fit the filter exactly, are partly past it and span several programs, windows that slide and
reload, fused ops, int64 offsets, determinism, declines (channels-first layouts among them). Fresh random data, NaN-poisoned result, float64 reference
(the harness of test_direct_grouped.py); the interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import depthwise_slab as dsb  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_weight", "dwslab")]
CFG = dict(block_r=2, block_fy=2, block_ch=8, block_x=0, unroll=0, prefetch=1, num_warps=1, split=3)


def check(p, dtype: str = "fp32", **kw) -> None:
    err = run_case("weight", p, dtype=dtype, algorithm="dwslab", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwslab {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


# both channels-last families (1D has one filter row: declined, dwslide's; channels-first: relayout's)
@pytest.mark.parametrize("ndim,layout_family,kc", [(2, "gnhwc", (3, 1)), (3, "gnhwc", (2, 1)), (3, "nhwgc", (1, 1))])
def test_layouts_ndims(ndim, layout_family, kc):
    assert layout_family in LAYOUT_FAMILIES
    check(shape(ndim, G=5, K=kc[0], C=kc[1]), layout_family=layout_family, seed=81)


@pytest.mark.parametrize("dtype,split", [("fp32", 1), ("fp32_tf32", 7), ("fp16", 7), ("bf16", 1), ("bf16_fp32w", 7)])
def test_dtypes_splits(dtype, split):
    p = P(2, 8, 3, 1, 1, (3, 3), (7, 9), (2, 1), (1, 1), (1, 2), (0, 1))
    check(p, dtype=dtype, cfg=dict(split=split), seed=82)


# (filter rows, block_fy): slabs that fit, one partly past the filter, several slabs per filter
# (3D: a slab crossing z), with windows that slide by 1, by 2 and reload (stride 1 at dilation 2)
@pytest.mark.parametrize("case", [
    dict(p=P(2, 9, 2, 1, 1, (4, 5), (7, 13), (1, 1), (2, 1), (1, 2), (2, 1)), cfg=dict(block_fy=4, prefetch=0)),
    dict(p=P(2, 9, 2, 1, 1, (3, 5), (6, 13), (2, 2), (1, 1), (1, 2), (0, 1)), cfg=dict(block_fy=4, block_r=4)),
    dict(p=P(3, 4, 2, 1, 1, (2, 3, 3), (4, 6, 9), (1, 1, 1), (1, 2, 2), (1, 1, 0), (0, 1, 2)),
         cfg=dict(block_fy=4, block_x=2, unroll=1)),
    dict(p=P(2, 9, 2, 1, 1, (7, 9), (9, 12), (1, 1), (1, 1), (3, 4), (3, 4)), cfg=dict(block_fy=8, block_ch=4)),
], ids=["fit4", "partial-s2", "3d-cross-z-reload", "7x9-wide"])
def test_slabs(case):
    check(case["p"], cfg=case["cfg"], seed=83)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
def test_fused_ops(case):
    op, n_ds, user_ref = case
    split = 3 if n_ds >= 2 else 1  # both the in-kernel epilogue and the reduce's
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          cfg=dict(split=split), dtype="fp16" if n_ds == 3 else "fp32", seed=84)


def test_deterministic_and_int64():
    p = shape(3, G=4, K=2, C=1)
    _, a = run_case("weight", p, cfg=dict(split=7), seed=85, return_out=True, algorithm="dwslab", base_cfg=CFG)
    _, b = run_case("weight", p, cfg=dict(split=7), seed=85, return_out=True, algorithm="dwslab", base_cfg=CFG)
    assert torch.equal(a, b)
    check(p, cfg=dict(split=3), force_int64=True, op="add", n_ds=1, seed=86)


def test_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, dsb.DwSlabConfig) and cfg.check() is None
    wide = P(2, 4, 2, 16, 16, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = 1, K <= 4" in ALG.decline(cfg, wide, lt, dt, fused)
    assert "fp16_fp8" in ALG.decline(cfg, shape(2, G=4, K=1, C=1), lt, DATA_TYPES["fp16_fp8"], fused)
    assert "filter's 1 rows" in ALG.decline(cfg, shape(1, G=4, K=1, C=1), layout_for("nhwgc", 1), dt, fused)
    for family in ("ngchw", "ngchw_kcyx"):
        assert "through relayout" in ALG.decline(cfg, shape(2, G=4, K=1, C=1), layout_for(family, 2), dt, fused)
    f3 = P(2, 4, 2, 1, 1, (3, 3), (9, 9), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "wider than the filter's 3 rows" in ALG.decline(cfg.replace(block_fy=8), f3, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_fy=4), f3, lt, dt, fused) is None
    big = P(2, 4, 2, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    assert "registers" in ALG.decline(cfg.replace(block_r=8, block_fy=8, block_ch=32, num_warps=4), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_r=4, block_fy=8, block_ch=32, num_warps=4), big, lt, dt, fused) is None
    assert ALG.check_config(dict(CFG, block_fy=1)) == (
        "block_fy=1 must be at least 2 (one filter row per program is dwslide)")
    assert ALG.check_config(dict(CFG, block_fy=3)) == "block_fy=3 must be a power of two from 1 to 1024"
    assert ALG.check_config(dict(CFG, block_x=9)) == "block_x=9 must be 0 (min(FX, 8)) or a tap count from 1 to 8"
    assert ALG.check_config(dict(CFG, prefetch=2)) == "prefetch=2 must be 0 or 1"
    assert dsb.auto_split(1000, 4, 8, 2, 132) == 125 and dsb.auto_split(10**6, 6, 2, 2, 132) == 352
