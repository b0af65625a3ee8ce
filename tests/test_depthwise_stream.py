"""The ``dwstream`` conv_bwd_weight algorithm (depthwise, one stream over the
output): every layout family and ndim, dtypes, splits, tap blocks, prefetch on and off, fused ops,
int64 offsets, determinism, declines. Fresh random data, NaN-poisoned result, float64 reference
(the harness of test_direct_grouped.py); the interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import depthwise_stream as dws  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_weight", "dwstream")]
CFG = dict(block_t=0, block_w=4, block_ch=8, prefetch=1, num_warps=4, split=3)


def check(p, dtype: str = "fp32", **kw) -> None:
    err = run_case("weight", p, dtype=dtype, algorithm="dwstream", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwstream {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


# depthwise on every layout family x ndim; the depth multiplier (K=3: k inside each group's channels, the
# weight's k stride) on every layout family and every ndim, not their product
_LAYOUT_CASES = ([("depthwise", f, n) for f in LAYOUT_FAMILIES for n in (1, 2, 3)]
                 + [("multiplier3", f, n) for f, n in zip(LAYOUT_FAMILIES, (1, 2, 3, 2), strict=True)])


@pytest.mark.parametrize("kind,layout_family,ndim", _LAYOUT_CASES, ids=["-".join(map(str, c)) for c in _LAYOUT_CASES])
def test_layouts_ndims(kind, layout_family, ndim):
    check(shape(ndim, G=5, K=3 if kind == "multiplier3" else 1, C=1), layout_family=layout_family, seed=61)


@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16", "bf16_fp32w"])
@pytest.mark.parametrize("split", [1, 7])
def test_dtypes_splits(dtype, split):
    p = P(2, 8, 3, 1, 1, (3, 3), (7, 9), (2, 1), (1, 2), (1, 2), (0, 1))
    check(p, dtype=dtype, cfg=dict(split=split), seed=62)


# the one-wide config runs a program per (tap, column, channel): a problem just big enough for several of
# each (G=3, 3 x 4 inputs; the other configs' problem took 990 programs, 2 minutes)
_TINY = P(2, 3, 1, 1, 1, (2, 5), (3, 4), (1, 1), (1, 1), (1, 2), (0, 2))
_MID = P(2, 9, 1, 1, 1, (2, 5), (6, 11), (1, 1), (1, 1), (1, 2), (0, 2))


@pytest.mark.parametrize("cfg,p", [(dict(block_t=1, block_w=1, block_ch=1, prefetch=0, num_warps=1, split=1), _TINY),
                                   (dict(block_t=4, block_w=2, block_ch=4, prefetch=1, num_warps=2, split=5), _MID),
                                   (dict(block_t=16, block_w=16, block_ch=32, prefetch=0, num_warps=4, split=0), _MID),
                                   (dict(block_t=2, block_w=8, block_ch=16, prefetch=1, num_warps=8, split=4), _MID)],
                         ids=["cfg0", "cfg1", "cfg2", "cfg3"])
def test_configs(cfg, p):
    """Tap blocks that split the filter unevenly, column tiles narrower and wider than the row (a
    masked last one), channel blocks narrower and wider than G*K*C (G=9 and G=3: no 16-byte vectors)."""
    check(p, cfg=cfg, seed=63)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
@pytest.mark.parametrize("split", [3])
def test_fused_ops(case, split):
    op, n_ds, user_ref = case
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          cfg=dict(split=split), dtype="fp16" if n_ds == 3 else "fp32", seed=64)


def test_deterministic_and_int64():
    p = shape(3, G=4, K=2, C=1)
    _, a = run_case("weight", p, cfg=dict(split=7), seed=65, return_out=True, algorithm="dwstream", base_cfg=CFG)
    _, b = run_case("weight", p, cfg=dict(split=7), seed=65, return_out=True, algorithm="dwstream", base_cfg=CFG)
    assert torch.equal(a, b)
    check(p, cfg=dict(split=3), force_int64=True, op="add", n_ds=1, seed=66)


def test_vector_width():
    assert dws.vector_width((56 * 96, 96, 96), 96) == 8
    assert dws.vector_width((56 * 72, 72), 72) == 8
    assert dws.vector_width((28 * 28, 28), 28) == 4
    assert dws.vector_width((9, 9), 9) == 1


def test_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, dws.DwStreamConfig) and cfg.block_t == 0 and cfg.check() is None
    wide = P(2, 4, 2, 16, 16, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = 1, K <= 4" in ALG.decline(cfg, wide, lt, dt, fused)
    assert "fp16_fp8" in ALG.decline(cfg, shape(2, G=4, K=1, C=1), lt, DATA_TYPES["fp16_fp8"], fused)
    big = P(2, 4, 2, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))  # 49 taps -> 64 per program
    assert "accumulators" in ALG.decline(cfg.replace(block_w=16, block_ch=64), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_t=16, block_w=4, block_ch=32), big, lt, dt, fused) is None
    assert cfg.replace(block_t=3).check() == "block_t=3 must be 0 (all taps) or a power of two up to 64"
    assert ALG.check_config(dict(CFG, prefetch=2)) == "prefetch=2 must be 0 or 1"
    assert ALG.check_config(dict(CFG, block_w=3)) == "block_w=3 must be a power of two from 1 to 1024"
    assert ALG.check_config(dict(block_w=8)) == ("config lacks block_t, block_ch, prefetch, num_warps, split "
                                                 "(dwstream takes block_t, block_w, block_ch, prefetch, num_warps, split)")
    assert dws.auto_split(1000, 4, 132) == 250 and dws.auto_split(10**6, 4, 132) == 528
