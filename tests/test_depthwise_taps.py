"""The ``dwtaps`` conv_bwd_data algorithm (depthwise, dwroll's walk with compile-time taps and a
per-phase weight table): every layout family and ndim, dtypes, strides and dilations along H and W
(phases with fewer taps than the table holds, phases with none), strips, column tiles and channel
blocks narrower and wider than the problem, fused ops, int64 offsets, the tap map, declines. Fresh
random data, NaN-poisoned result, float64 reference (the harness of test_direct_grouped.py); the
interpreter on CPU, or a CUDA GPU."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from test_direct_grouped import FUSED_CASES, P, run_case, shape  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import depthwise_taps as taps  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

ALG = ALGORITHMS[("conv_bwd_data", "dwtaps")]
CFG = dict(block_w=8, block_ch=8, rows=3, num_warps=1)


def check(p, dtype: str = "fp32", **kw) -> None:
    err = run_case("data", p, dtype=dtype, algorithm="dwtaps", base_cfg=CFG, **kw)
    tol = DATA_TYPES[dtype].tolerance
    assert err <= tol, f"dwtaps {p} {dtype} {kw}: rel. error {err:.3g} > {tol}"


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("layout_family", list(LAYOUT_FAMILIES))
def test_layouts_ndims(ndim, layout_family):
    check(shape(ndim, G=5, K=1, C=1), layout_family=layout_family, seed=91)


@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16"])
def test_dtypes(dtype):
    check(P(2, 12, 1, 1, 1, (5, 5), (11, 9), (2, 1), (1, 1), (2, 2), (2, 1)), dtype=dtype, seed=92)


# (filter, stride, dilation) along H and along W: a 7x7 filter (every phase full), stride 2 (phases of 3
# and 2 taps), stride 3 > filter 2 (phases without taps), dilation 2 at stride 2 (one phase gets every
# tap), stride 4 at dilation 2, one tap, eight slots and eight W taps, dilation 3 along W at stride 2
@pytest.mark.parametrize("case", [((7, 1, 1), (7, 1, 1), 0), ((5, 2, 1), (5, 2, 1), 2), ((2, 3, 1), (2, 3, 1), 5),
                                  ((3, 2, 2), (3, 2, 2), 0), ((5, 4, 2), (3, 4, 2), 2), ((1, 1, 1), (1, 1, 1), 5),
                                  ((8, 1, 1), (8, 1, 1), 2), ((3, 1, 1), (3, 2, 3), 0)],
                         ids=["f7-whole", "f5s2-rows2", "s3-empty-phases-rows5", "s2d2-whole", "s4d2-rows2",
                              "f1-rows5", "slots8-wtaps8-rows2", "w-s2d3-whole"])
def test_phases_and_strips(case):
    (fy, sy, dy), (fx, sx, dx), rows = case
    p = P(2, 5, 1, 1, 1, (fy, fx), (13, 11), (sy, sx), (dy, dx), (fy // 2, fx // 2), ((fy - 1) // 2, (fx - 1) // 2))
    check(p, cfg=dict(rows=rows), seed=93)


_MID = P(2, 9, 1, 1, 1, (3, 5), (6, 11), (1, 1), (1, 1), (1, 2), (1, 2))


@pytest.mark.parametrize("cfg", [dict(block_w=1, block_ch=1, rows=1, num_warps=1),
                                 dict(block_w=4, block_ch=2, rows=4, num_warps=1),
                                 dict(block_w=32, block_ch=16, rows=0, num_warps=2)],
                         ids=["cfg0", "cfg1", "cfg2"])
def test_configs(cfg):
    """Column tiles and channel blocks narrower and wider than the problem (G=9: no 16-byte vectors, a
    table block past G); strips of one row and of 4 (a partial last strip)."""
    check(_MID, cfg=cfg, seed=94)


def test_dilated_w_and_d_and_padding_past_the_filter():
    """Dilation along W and D; pads as wide as the dilated filter (rows with no taps inside); 3-D
    filters at strides 2 and 3 along D (planes without taps)."""
    check(P(2, 4, 2, 1, 1, (3, 3), (7, 12), (1, 1), (1, 3), (2, 3), (2, 6)), seed=95)
    check(P(3, 3, 1, 1, 1, (3, 2, 3), (7, 4, 6), (2, 1, 3), (3, 1, 1), (2, 1, 1), (1, 0, 2)), seed=96)
    check(P(3, 3, 2, 1, 1, (1, 3, 3), (5, 4, 6), (2, 1, 2), (1, 1, 1), (1, 1, 1), (0, 1, 1)), seed=97)


@pytest.mark.parametrize("case", FUSED_CASES,
                         ids=["passthrough", "scale", "bilinear", "add1", "add3", "add_relu", "user0", "user2"])
def test_fused_ops(case):
    op, n_ds, user_ref = case
    check(shape(2, G=3, K=1, C=1), op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, user_ref=user_ref,
          dtype="fp16" if n_ds == 3 else "fp32", seed=98)


def test_int64():
    check(shape(3, G=4, K=1, C=1), force_int64=True, op="add", n_ds=1, seed=99)


def test_tap_map():
    """The table's filter taps per [H phase, W phase, z, slot, W tap]: stride 1 holds every tap in
    order; stride 2 with a 3-tap filter (pad 1) gives phase 0 the middle tap, phase 1 taps 0 and 2 (in the walk's order)."""
    p = P(2, 4, 1, 1, 1, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    assert taps.tap_map(p) == list(range(9))
    p2 = P(1, 4, 1, 1, 1, (3,), (8,), (2,), (1,), (1,), (1,))
    # 1-D: H is a unit axis (one phase, one slot); W phase 0: tap 1 then none, phase 1: taps 0, 2
    assert taps.tap_map(p2) == [1, -1, 0, 2]


def test_declines_and_configs():
    lt, dt, fused = layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"]
    cfg = ALG.config.from_values(CFG)
    assert isinstance(cfg, taps.DwTapsConfig) and cfg.check() is None
    grouped = P(2, 4, 2, 2, 2, (3, 3), (5, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    assert "C = K = 1" in ALG.decline(cfg, grouped, lt, dt, fused)
    assert "fp16_fp8" in ALG.decline(cfg, shape(2, G=4, K=1, C=1), lt, DATA_TYPES["fp16_fp8"], fused)
    dilated = P(2, 4, 2, 1, 1, (3, 3), (9, 9), (1, 1), (2, 1), (2, 1), (2, 1))
    assert "dilation along H to divide the stride" in ALG.decline(cfg, dilated, lt, dt, fused)
    tall = P(2, 4, 2, 1, 1, (9, 3), (12, 9), (1, 1), (1, 1), (4, 1), (4, 1))
    assert "9 filter taps along H" in ALG.decline(cfg, tall, lt, dt, fused)
    wide = P(2, 4, 2, 1, 1, (3, 9), (9, 12), (1, 1), (1, 1), (1, 4), (1, 4))
    assert "9 filter taps along W" in ALG.decline(cfg, wide, lt, dt, fused)
    big = P(2, 4, 2, 1, 1, (7, 7), (9, 9), (1, 1), (1, 1), (3, 3), (3, 3))
    assert "registers" in ALG.decline(cfg.replace(block_w=128, block_ch=32, num_warps=4), big, lt, dt, fused)
    assert ALG.decline(cfg.replace(block_w=32, block_ch=32, num_warps=4), big, lt, dt, fused) is None
    assert ALG.check_config(dict(CFG, rows=-1)) == "rows=-1 must be 0 (the whole phase) or a row count from 1 to 4096"
    assert ALG.check_config(dict(CFG, block_w=3)) == "block_w=3 must be a power of two from 1 to 1024"
    assert ALG.check_config(dict(block_w=8)) == (
        "config lacks block_ch, rows, num_warps (dwtaps takes block_w, block_ch, rows, num_warps)")
