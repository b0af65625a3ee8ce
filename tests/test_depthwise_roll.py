"""The ``dwroll`` conv_bwd_data algorithm (depthwise, rolling row accumulators): every layout family
and ndim, dtypes, strides and dilations along H (phases with fewer taps than slots, phases with none),
dilation along W and D, strips shorter and longer than a phase, unroll factors, column tiles and
channel blocks narrower and wider than the problem, fused ops, int64 offsets, declines. Fresh random
data, NaN-poisoned result, float64 reference (the harness of test_direct_grouped.py); the interpreter
on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import depthwise_roll as roll  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "dwroll")]
CFG = dict(block_w=8, block_ch=8, rows=3, unroll=1, prefetch=1, num_warps=1)


def check(p, dtype: str = "fp32", **kw) -> None:
    err = run_case("data", p, dtype=dtype, algorithm="dwroll", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwroll {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


def _hd(f, s, d, lp=1, rp=1, hw=(9, 10), n=2, g=5):
    """A 2D problem whose H axis has filter f, stride s, dilation d (W: 3 taps, stride 2)."""
    return P(2, g, n, 1, 1, (f, 3), hw, (s, 2), (d, 1), (lp, 1), (rp, 0))


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", list(LAYOUT_FAMILIES))
def test_layouts_ndims(ndim, layout_family):
    check(shape(ndim, G=5, K=1, C=1), layout_family=layout_family, seed=81)


@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    check(P(2, 12, 1, 1, 1, (5, 5), (11, 9), (2, 1), (1, 1), (2, 2), (2, 1)), dtype=dtype, seed=82)


# (filter, stride, dilation) along H with a strip config: slots 7 (every phase full), stride 2 (phases of
# 3 and 2 taps), stride 3 > filter 2 (a phase without taps), dilation 2 at stride 2 (one phase gets every
# tap), stride 4 at dilation 2, a filter of one tap, eight slots; whole phases, strips of 2 and of 5 rows
_STRIPS = [dict(rows=0, unroll=0), dict(rows=2, unroll=1, prefetch=0), dict(rows=5, unroll=3)]


@pytest.mark.parametrize("case", [((7, 1, 1), 0), ((5, 2, 1), 1), ((2, 3, 1), 2), ((3, 2, 2), 0), ((5, 4, 2), 1),
                                  ((1, 1, 1), 2), ((8, 1, 1), 1), ((5, 2, 1), 2)],
                         ids=["f7-whole", "f5s2-rows2-pf0", "s3-empty-phase-rows5-u3", "s2d2-whole", "s4d2-rows2-pf0",
                              "f1-rows5-u3", "slots8-rows2-pf0", "f5s2-rows5-u3"])
def test_rows_and_strips(case):
    (f, s, d), strip = case
    check(_hd(f, s, d, lp=f // 2, rp=(f - 1) // 2, hw=(13, 7), n=1), cfg=_STRIPS[strip], seed=83)


# the one-wide config runs one program per (input row, column, channel): a problem just big enough for
# several of each (G=3, 4 x 5 inputs; the other configs' problem took 1,188 programs, 3 minutes)
_TINY = P(2, 3, 1, 1, 1, (3, 3), (4, 5), (1, 1), (1, 1), (1, 2), (1, 0))
_MID = P(2, 9, 1, 1, 1, (3, 5), (6, 11), (1, 1), (1, 1), (1, 2), (1, 2))


@pytest.mark.parametrize("cfg,p", [(dict(block_w=1, block_ch=1, rows=1, unroll=1, prefetch=0, num_warps=1), _TINY),
                                   (dict(block_w=4, block_ch=2, rows=4, unroll=2, prefetch=1, num_warps=1), _MID),
                                   (dict(block_w=32, block_ch=16, rows=0, unroll=0, prefetch=1, num_warps=2), _MID)],
                         ids=["cfg0", "cfg1", "cfg2"])
def test_configs(cfg, p):
    """Column tiles and channel blocks narrower and wider than the problem (G=9 and G=3: no 16-byte
    vectors); strips of one row and of 4 (a partial last strip)."""
    check(p, cfg=cfg, seed=84)


@pytest.mark.parametrize("prefetch", [0, 1])
def test_dilated_w_and_d_and_padding_past_the_filter(prefetch):
    """Dilation along W (any) and D; pads as wide as the dilated filter (rows with no taps inside);
    a one-tap D filter at stride 2 (prefetch on: planes without taps). The 3-deep D filter runs once:
    prefetch only acts on filters one tap deep in D, so both values launch the same kernel."""
    cfg = dict(prefetch=prefetch)
    check(P(2, 4, 2, 1, 1, (3, 3), (7, 12), (1, 1), (1, 3), (2, 3), (2, 6)), cfg=cfg, seed=85)
    if not prefetch:
        check(P(3, 3, 1, 1, 1, (3, 2, 3), (7, 4, 6), (2, 1, 3), (3, 1, 1), (2, 1, 1), (1, 0, 2)), cfg=cfg, seed=86)
    check(P(3, 3, 2, 1, 1, (1, 3, 3), (5, 4, 6), (2, 1, 2), (1, 1, 1), (1, 1, 1), (0, 1, 1)), cfg=cfg, seed=89)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
def test_fused_ops(case):
    op, n_ds, user_ref = case
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          dtype="fp16" if n_ds == 3 else "fp32", seed=87)


def test_int64():
    check(shape(3, G=4, K=1, C=1), force_int64=True, op="add", n_ds=1, seed=88)


def test_row_slots():
    assert roll.row_slots(7, 1, 1) == 7
    assert roll.row_slots(5, 2, 1) == 3
    assert roll.row_slots(3, 2, 2) == 3  # one phase gets all three taps (on consecutive rows), the other none
    assert roll.row_slots(3, 1, 2) is None  # dilation 2 at stride 1: taps two rows apart


def test_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, roll.DwRollConfig) and cfg.check() is None
    grouped = P(2, 4, 2, 2, 2, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = K = 1" in ALG.decline(cfg, grouped, lt, dt, fused)
    assert "fp16_fp8" in ALG.decline(cfg, shape(2, G=4, K=1, C=1), lt, DATA_TYPES["fp16_fp8"], fused)
    dilated = P(2, 4, 2, 1, 1, (3, 3), (9, 9), (1, 1), (2, 1), (2, 1), (2, 1))
    assert "dilation along H to divide the stride" in ALG.decline(cfg, dilated, lt, dt, fused)
    tall = P(2, 4, 2, 1, 1, (9, 3), (12, 9), (1, 1), (1, 1), (4, 1), (4, 1))
    assert "9 filter taps along H" in ALG.decline(cfg, tall, lt, dt, fused)
    big = P(2, 4, 2, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    assert "registers" in ALG.decline(cfg.replace(block_w=128, block_ch=32, num_warps=4), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_w=32, block_ch=32, num_warps=4), big, lt, dt, fused) is None
    assert ALG.check_config(dict(CFG, rows=-1)) == "rows=-1 must be 0 (the whole phase) or a row count from 1 to 4096"
    assert ALG.check_config(dict(CFG, unroll=9)) == "unroll=9 must be 0 (the slot count) or a factor from 1 to 8"
    assert ALG.check_config(dict(CFG, prefetch=2)) == "prefetch=2 must be 0 or 1"
    assert ALG.check_config(dict(CFG, block_w=3)) == "block_w=3 must be a power of two from 1 to 1024"
    assert ALG.check_config(dict(block_w=8)) == (
        "config lacks block_ch, rows, unroll, prefetch, num_warps "
        "(dwroll takes block_w, block_ch, rows, unroll, prefetch, num_warps)")
