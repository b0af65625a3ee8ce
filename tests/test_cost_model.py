"""The miss policy's cost model: features, the roofline, kernel signatures, and leave-one-out quality
on the shipped database (what the untuned default would have served on each tuned problem)."""

import json
import math
from pathlib import Path

import pytest

from instance_factory.problem import ConvParams
from instance_factory.registry import get_registry
from instance_factory.tuning import cost_model as C
from instance_factory.tuning import problem_distance as PD
from instance_factory.tuning import roofline as R
from instance_factory.tuning.database import read_db, registry_kernel_hashes, valid_rows
from instance_factory.tuning.miss_eval import leave_one_out, summarize, summary_markdown
from instance_factory.tuning.model_constants import (
    ALIGN_PENALTY,
    DIRECT_UNALIGNED_FACTOR,
    LAYOUT_PENALTY,
    NDIM_PENALTY,
)
from instance_factory.tuning.packed_tiles import blockdiag_dgrad_work

ROOT = Path(__file__).resolve().parent.parent
#: the file with the most rows of the current kernels (the H200 file keeps 34 problems since session 9)
SHIPPED = ROOT / "tuning_db" / "nvidia-h100-80gb-hbm3.csv.gz"
LAYOUT = "NHWGC/GKYXC/NHWGK"
DENSE = ConvParams(2, 1, 32, 256, 256, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1))


def test_conv_class_and_gemm_shape():
    assert C.conv_class(DENSE) == "dense"
    assert C.conv_class(ConvParams(2, 8, 2, 4, 4, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))) == "grouped"
    assert C.conv_class(ConvParams(2, 8, 2, 1, 1, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))) == "depthwise"
    assert C.gemm_shape("conv_bwd_data", DENSE) == (1, 32 * 28 * 28, 256, 256 * 9)
    assert C.gemm_shape("conv_bwd_weight", DENSE) == (9, 256, 256, 32 * 28 * 28)
    assert C.gemm_shape("conv_bwd_weight", DENSE, "two_stage") == (1, 256, 256 * 9, 32 * 28 * 28)
    s2 = ConvParams(2, 1, 2, 8, 8, (3, 3), (8, 8), (2, 2), (1, 1), (1, 1), (1, 1))
    assert C.gemm_shape("conv_bwd_data", s2) == (4, 2 * 16, 8, 8 * 9 // 4)  # per stride phase


def test_signature_is_the_kernel_not_its_dtype_or_layout():
    reg = get_registry()
    fp16, _ = reg.candidates("conv_bwd_weight", DENSE, LAYOUT, "fp16", "passthrough")
    bf16, _ = reg.candidates("conv_bwd_weight", DENSE, LAYOUT, "bf16", "passthrough")
    sig16 = {C.signature(i.algorithm, i.cfg) for i in fp16}
    assert sig16 == {C.signature(i.algorithm, i.cfg) for i in bf16}
    from instance_factory.tuning.database import instance_params_json

    i = fp16[0]
    assert C.signature(i.algorithm, instance_params_json(i.cfg)) == C.signature(i.algorithm, i.cfg)


def test_model_scales_with_work_and_charges_tile_padding():
    cfg = {"block_m": 128, "block_n": 128, "block_k": 32, "split_k": 1}
    big = ConvParams(2, 1, 128, 256, 256, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    t_small = C.model_ms("conv_bwd_data", DENSE, "bf16", "igemm", cfg)
    t_big = C.model_ms("conv_bwd_data", big, "bf16", "igemm", cfg)
    assert 10 < t_big / t_small < 20  # 16x the work
    assert C.model_ms("conv_bwd_data", DENSE, "fp32", "igemm", cfg) > 5 * t_small  # no tensor cores
    dw = ConvParams(2, 256, 32, 1, 1, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1))
    tiled = C.model_ms("conv_bwd_weight", dw, "bf16", "igemm", {"block_m": 64, "block_n": 64, "split_k": 1})
    direct = C.model_ms("conv_bwd_weight", dw, "bf16", "direct", {"block_ch": 64})
    assert tiled > 10 * direct
    assert C.model_ms("conv_bwd_data", DENSE, "bf16", "igemm", cfg, host_floor_ms=5.0) == pytest.approx(5.0, rel=1e-3)


def test_dgrad_charges_the_channel_blocks_of_each_tap():
    # bwd data reduces each tap's K channels in block_k chunks: K = 32 under block_k = 64 runs as many
    # steps as K = 64 (DenseNet's growth layers); block_k = 32 wastes none, and bwd weight is untouched
    growth = ConvParams(2, 1, 128, 32, 512, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    wide = ConvParams(2, 1, 128, 64, 512, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    k64 = {"block_m": 128, "block_n": 128, "block_k": 64, "split_k": 1}
    k32 = dict(k64, block_k=32)
    assert R.dgrad_channel_padding("conv_bwd_data", growth, k64) == 2.0
    assert R.dgrad_channel_padding("conv_bwd_data", growth, k32) == 1.0
    assert R.dgrad_channel_padding("conv_bwd_weight", growth, k64) == 1.0
    t = {name: C.model_ms("conv_bwd_data", p, "bf16", "igemm", cfg)
         for name, p, cfg in (("g64", growth, k64), ("g32", growth, k32), ("w64", wide, k64))}
    assert t["g64"] == pytest.approx(t["w64"], rel=0.05) and t["g64"] > 1.8 * t["g32"]


def test_bdrow_is_modelled_by_its_block_diagonal_tiles():
    """bdrow (grouped wgrad) is a tensor-core kernel: its model follows the padded block-diagonal
    work (GPT groups per tile), not a CUDA-core rate, so it scales with the layer."""
    cfg = {"block_w": 64, "block_n": 64, "num_warps": 4, "num_stages": 3, "split": 1}
    g32 = ConvParams(2, 32, 128, 32, 32, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    g64 = ConvParams(2, 64, 128, 32, 32, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    t32 = C.model_ms("conv_bwd_weight", g32, "bf16", "bdrow", cfg)
    assert 1.7 < C.model_ms("conv_bwd_weight", g64, "bf16", "bdrow", cfg) / t32 < 2.3
    # C = K = 24: two groups per 64-wide tile, 48 of 64 rows and columns used (C = 32: all of them)
    g24 = ConvParams(2, 32, 128, 24, 24, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    assert C.model_ms("conv_bwd_weight", g24, "bf16", "bdrow", cfg) == pytest.approx(t32, rel=0.05)


def test_bdwin_is_modelled_by_its_window_tiles():
    """bdwin (grouped wgrad, filter rows' input tiles in registers) is a tensor-core kernel modelled by
    its tiles: it scales with the groups, a 3-wide filter row stacked to 4 taps costs 4/3 of one
    tap per program (taps_x 1) at the same groups per tile, and bdwin has its two launches."""
    cfg = {"block_w": 32, "block_n": 16, "taps_x": 0, "prefetch": 1, "mma_rows": "x", "num_warps": 4, "split": 0}
    g32 = ConvParams(2, 32, 64, 8, 8, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    g64 = ConvParams(2, 64, 64, 8, 8, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    t32 = C.model_ms("conv_bwd_weight", g32, "bf16", "bdwin", cfg)
    assert 1.7 < C.model_ms("conv_bwd_weight", g64, "bf16", "bdwin", cfg) / t32 < 2.3
    from instance_factory.tuning.packed_tiles import bdwin_work

    all_taps, _, _, _ = bdwin_work(g32, cfg, 132, 2)
    one_tap, _, _, _ = bdwin_work(g32, {**cfg, "taps_x": 1}, 132, 2)
    assert all_taps / one_tap == pytest.approx(4 / 3)
    assert C.LAUNCHES[("conv_bwd_weight", "bdwin")] == 2


def test_bdwin_model_follows_its_shared_memory_traffic():
    """bdwin is bound by the shared-memory/L1 pipe, not its MMAs: the model's time is that traffic,
    so it stays above the host floor and doubles with the batch. With the MMA count alone the model
    sat on the floor at N 32 and N 64 alike, the neighbour's correction carried N 64's time to N 32,
    and the untuned default of held-out RegNetY G5 C24 28x28 N 32 was bdrow (0.052 ms, bdwin 0.039)."""
    cfg = {"block_w": 16, "block_n": 32, "taps_x": 0, "prefetch": 0, "mma_rows": "x", "num_warps": 4, "split": 0}

    def at(n):
        return ConvParams(2, 5, n, 24, 24, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1))

    t32, t64 = (C.model_ms("conv_bwd_weight", at(n), "bf16", "bdwin", cfg, sms=132) for n in (32, 64))
    assert t64 / t32 == pytest.approx(2.0, rel=0.05) and t32 > 0.01


def test_blockdiag_dgrad_is_modelled_by_its_packed_groups():
    """blockdiag / bdtap / bdroll pack GPT whole groups into one tile: G64 C4 and G32 C8 fill the same
    tiles (256 channels either way), and the packed model is far below one group per tile (C = 4
    padded to a 32-wide tile, the generic GEMM count)."""
    cfg = {"block_m": 128, "block_n": 32, "num_warps": 4}

    def p(G, ch):
        return ConvParams(2, G, 64, ch, ch, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))

    for alg, c in (("blockdiag", cfg), ("bdtap", {**cfg, "num_stages": 3}),
                   ("bdroll", {"block_w": 128, "block_n": 32, "rows": 0, "num_warps": 4, "num_stages": 2})):
        c4, c8 = (blockdiag_dgrad_work(p(G, ch), alg, c, 132)[0] for G, ch in ((64, 4), (32, 8)))
        assert c4 == pytest.approx(c8, rel=0.01)
    one_group = C.model_ms("conv_bwd_data", p(64, 4), "bf16", "igemm", {**cfg, "block_k": 32})
    packed = C.model_ms("conv_bwd_data", p(64, 4), "bf16", "blockdiag", cfg)
    assert packed < one_group


def test_unaligned_groups_double_the_pointer_gemms(monkeypatch):
    cfg = {"block_m": 64, "block_n": 64, "block_k": 64, "split_k": 1}

    def ms(G, ch, alg="igemm"):
        p = ConvParams(2, G, 128, ch, ch, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
        return C.model_ms("conv_bwd_weight", p, "bf16", alg, cfg)

    unaligned, dense24, aligned = ms(37, 24), ms(1, 24), ms(32, 32)
    monkeypatch.setattr(R, "UNALIGNED_FACTOR", 1.0)
    assert unaligned == pytest.approx(2 * ms(37, 24))  # G*C = 888: no divisor of 16
    assert dense24 == pytest.approx(ms(1, 24))  # dense layers keep their model
    assert aligned == pytest.approx(ms(32, 32))  # C = 32, G*C = 1024


def test_nearer_problems_and_same_kind_are_closer():
    near = ConvParams(2, 1, 32, 256, 256, (3, 3), (32, 32), (1, 1), (1, 1), (1, 1), (1, 1))
    far = ConvParams(2, 1, 32, 64, 64, (1, 1), (7, 7), (1, 1), (1, 1), (0, 0), (0, 0))
    d = C.neighbor_distance
    assert d("conv_bwd_data", DENSE, DENSE) == 0.0
    assert d("conv_bwd_data", DENSE, near) < d("conv_bwd_data", DENSE, far)
    kw = dict(layout=LAYOUT, q_layout=LAYOUT, fused="passthrough", q_fused="passthrough")
    same = d("conv_bwd_data", DENSE, near, dtype="fp16", q_dtype="fp16", **kw)
    sib = d("conv_bwd_data", DENSE, near, dtype="fp16", q_dtype="bf16", **kw)
    other = d("conv_bwd_data", DENSE, near, dtype="fp16", q_dtype="fp32", **kw)
    assert same < sib < other


def test_band_filters_are_far_from_square_ones():
    """A 1x7 band and a 3x3 square have almost the same tap count, but the depthwise kernels that slide along
    one axis win on bands and lose on squares (session 44: a SegNeXt 1x7 row priced Xception's 3x3 wgrad
    at 0.10 of its best): the filter's aspect ratio is a feature of its own."""
    def dw(filt, pad):
        return ConvParams(2, 64, 32, 1, 1, filt, (56, 56), (1, 1), (1, 1), pad, pad)

    d = C.neighbor_distance
    square, band, long_band = dw((3, 3), (1, 1)), dw((1, 7), (0, 3)), dw((1, 11), (0, 5))
    assert d("conv_bwd_weight", square, band) > 2.0 * d("conv_bwd_weight", band, long_band)
    assert d("conv_bwd_data", square, dw((5, 5), (2, 2))) < d("conv_bwd_data", square, band)


def test_one_wide_bands_along_w_and_h_are_apart():
    """1x21 slides one filter row along W, 21x1 walks 21 filter rows of one tap: a 1x21 NGCHW wgrad took its
    21x1 twin's pick (two_stage, 0.24 of relayout) while the two were at distance 0 (session 49). Wider bands
    (5x51 / 51x5) keep their transposed twin as a neighbour: the same kernels won both."""
    def dw(filt, pad):
        return ConvParams(2, 64, 16, 1, 1, filt, (64, 64), (1, 1), (1, 1), pad, pad)

    d = C.neighbor_distance
    wide, tall, longer = dw((1, 21), (0, 10)), dw((21, 1), (10, 0)), dw((1, 31), (0, 15))
    assert d("conv_bwd_weight", wide, tall) > 2.0 * d("conv_bwd_weight", wide, longer)
    assert d("conv_bwd_weight", dw((5, 51), (2, 25)), dw((51, 5), (25, 2))) == 0.0
    assert d("conv_bwd_weight", dw((3, 3), (1, 1)), dw((3, 3), (1, 1))) == 0.0


def test_group_major_is_its_own_layout_family_with_several_groups():
    """Few-channel kernels read group-major tensors 2-32 bytes a position: their channels-last timings
    say little there. With one group the two layouts are the same memory."""
    grouped = ConvParams(2, 32, 8, 8, 8, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1))
    kw = dict(fused="passthrough", q_fused="passthrough")
    d = C.neighbor_distance
    gm, cl, cf = "GNHWC/GKYXC/GNHWK", "NHWGC/GKYXC/NHWGK", "NGCHW/GKYXC/NGKHW"
    assert d("conv_bwd_weight", grouped, grouped, layout=gm, q_layout=cl, **kw) == LAYOUT_PENALTY
    assert d("conv_bwd_weight", grouped, grouped, layout=gm, q_layout=gm, **kw) == 0.0
    assert d("conv_bwd_data", DENSE, DENSE, layout=gm, q_layout=cl, **kw) == 0.0
    assert (PD.layout_family(gm, 32), PD.layout_family(gm, 1), PD.layout_family(cf, 32)) == ("gm", "cl", "cf")


def test_a_gkcyx_weight_is_its_own_family_except_for_depthwise_layers():
    """Pointer GEMMs read a GKCYX weight's channel vectors strided by the taps: ResNeXt's G32 C64 7x7 dgrad ran
    igemm 3x slower than with GKYXC, and GKYXC neighbours priced it at a fifth of its time (session 49).
    Depthwise weights are a few taps per channel: both weight layouts stay one family there."""
    grouped = ConvParams(2, 32, 64, 64, 64, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    dw = ConvParams(2, 96, 64, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    kw = dict(fused="passthrough", q_fused="passthrough")
    kcyx, kyxc = "NGCHW/GKCYX/NGKHW", "NGCHW/GKYXC/NGKHW"
    assert C.neighbor_distance("conv_bwd_data", grouped, grouped, layout=kcyx, q_layout=kyxc, **kw) == LAYOUT_PENALTY
    assert C.neighbor_distance("conv_bwd_data", dw, dw, layout=kcyx, q_layout=kyxc, **kw) == 0.0
    assert (PD.layout_family(kcyx, 32), PD.layout_family(kcyx, 96, depthwise=True)) == ("cfk", "cf")
    assert PD.layout_family("NGCW/GKCX/NGKW", 1) == "cfk" and PD.layout_family("cf") == "cf"


def test_channel_alignment_is_a_penalty_between_grouped_layers():
    """Groups whose channel counts have no divisor of 16 (RegNet's 40 / 56) load channels one element at a time
    in the pointer GEMMs and run tapshare; ResNeXt's 32 / 64 do neither: neither says much about the other
    (session 50). Two aligned or two unaligned groups pay nothing."""
    def g(c, groups=32):
        return ConvParams(2, groups, 64, c, c, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    kw = dict(fused="passthrough", q_fused="passthrough")
    d = C.neighbor_distance
    assert d("conv_bwd_weight", g(32), g(32), **kw) == 0.0 == d("conv_bwd_weight", g(40), g(40), **kw)
    aligned_pair = d("conv_bwd_weight", g(32), g(48), **kw)
    mixed_pair = d("conv_bwd_weight", g(32), g(40), **kw)
    assert mixed_pair > aligned_pair  # 40 is nearer 32 than 48 is, but unaligned
    assert mixed_pair == pytest.approx(PD.feature_distance(PD.features("conv_bwd_weight", g(32)),
                                                           PD.features("conv_bwd_weight", g(40))) + ALIGN_PENALTY)
    dense = ConvParams(2, 1, 64, 40, 40, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    assert not R.unaligned_groups(dense) and R.unaligned_groups(g(40)) and not R.unaligned_groups(g(64))


def test_tapshare_is_priced_by_its_programs_boxes_and_l2_reads():
    """tapshare's roofline: the GEMM work of every tap over whole boxes, the programs bind launches (a block of
    taps each), and an input box per tap plus the shared grad_out box read from L2."""
    p = ConvParams(2, 36, 64, 56, 56, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    cfg = dict(block_m=64, block_n=64, block_h=8, block_w=8, taps_y=1, taps_x=3, num_warps=8, num_stages=3,
               split_k=0)
    from instance_factory.tuning.box_rounding import boxed_reduction
    assert boxed_reduction(p, "tapshare", cfg, 64 * 49) == 64 * 64  # a 7x7 plane in one 8x8 box
    one_row = R.model_ms("conv_bwd_weight", p, "fp16", "tapshare", cfg)
    all_taps = R.model_ms("conv_bwd_weight", p, "fp16", "tapshare", dict(cfg, taps_y=3, block_m=32, block_n=32,
                                                                           num_warps=4))
    one_tap = R.model_ms("conv_bwd_weight", p, "fp16", "tapshare", dict(cfg, taps_x=1))
    assert 0 < all_taps and 0 < one_row < one_tap  # three taps read grad_out's box once, one tap three times


def test_rank_excludes_a_problem_and_orders_by_prediction():
    rows = read_db(SHIPPED)
    key = rows["problem_key"].iloc[0]
    ev = C.Evidence.from_rows(rows.to_dict("records"))
    t = next(p for p in ev.problems if p.key == key)
    mine = rows[rows["problem_key"] == key]
    cands = [(r.instance, r.algorithm, __import__("json").loads(r.instance_params)) for r in mine.itertuples()]
    r = C.rank(t.op, t.params, t.layout, t.dtype, t.fused, cands, ev, exclude=key)
    assert key not in [k for _, k in r.neighbors] and len(r.predictions) == len(cands)
    times = [p.predicted_ms for p in r.predictions]
    assert times == sorted(times) and all(math.isfinite(x) and x > 0 for x in times)


@pytest.fixture(scope="module")
def loo():
    rows = valid_rows(read_db(SHIPPED), kernel_hashes=registry_kernel_hashes(), ok_only=False)
    return leave_one_out(rows.to_dict("records"))


def test_leave_one_out_on_the_shipped_database_is_near_the_tuned_best(loo):
    """Hide each tuned problem in turn: the cost model's pick must be close to its measured best, and
    better than the previous rule (the nearest tuned problem's winner)."""
    s = {(x["op"], x["class"]): x for x in summarize(loo)}
    overall = s[("all", "all")]
    assert overall["problems"] >= 100
    assert overall["geomean"] >= 0.85, summary_markdown(loo)
    assert overall["geomean"] > overall["baseline_geomean"], summary_markdown(loo)
    assert overall["below_0.5"] <= 0.02 * overall["problems"], summary_markdown(loo)
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        assert s[(op, "dense")]["geomean"] >= 0.8, summary_markdown(loo)


def test_hiding_a_layer_hides_it_at_every_batch_size_and_dtype():
    """``hide="layer"`` scores each problem as a layer nobody tuned: the rank sees no problem of the
    same geometry (any N, dtype, layout); on the grouped dgrad rows the pick stays near the best."""
    from instance_factory.tuning.miss_eval import layer_signature

    rows = valid_rows(read_db(SHIPPED), kernel_hashes=registry_kernel_hashes(), ok_only=False)
    rows = rows[(rows["op"] == "conv_bwd_data") & (rows["G"] > 1) & ((rows["C"] > 1) | (rows["K"] > 1))]
    recs = rows.to_dict("records")
    ev = C.Evidence.from_rows(recs)
    t = next(q for q in ev.problems if q.params.N == 64 and q.dtype == "bf16")
    same = {q.key for q in ev.problems if layer_signature(q.params) == layer_signature(t.params)}
    assert len(same) >= 2  # the layer at another dtype or batch size is in the file
    mine = rows[rows["problem_key"] == t.key]
    cands = [(r.instance, r.algorithm, __import__("json").loads(r.instance_params)) for r in mine.itertuples()]
    r = C.rank(t.op, t.params, t.layout, t.dtype, t.fused, cands, ev, exclude=same)
    assert not same & {k for _, k in r.neighbors}
    with pytest.raises(ValueError, match="hide='batch'"):
        leave_one_out(recs, hide="batch")
    res = leave_one_out(recs, hide="layer")
    s = {(x["op"], x["class"]): x for x in summarize(res)}
    assert s[("conv_bwd_data", "grouped")]["geomean"] >= 0.85, summary_markdown(res)


def test_a_disturbed_timing_counts_with_its_p20():
    """Host contention only adds time to a short kernel's events: a row whose p80 is over twice its
    p20 stands for its p20, a steady one for its median; no finite positive time gives None."""
    steady = {"median_ms": 0.05, "p20_ms": 0.048, "p80_ms": 0.055}
    disturbed = {"median_ms": 0.0646, "p20_ms": 0.0236, "p80_ms": 0.2422}
    assert C.kernel_ms(steady) == 0.05
    assert C.kernel_ms(disturbed) == 0.0236
    assert C.kernel_ms({"median_ms": 0.05, "p20_ms": float("nan"), "p80_ms": None}) == 0.05
    assert C.kernel_ms({"median_ms": float("nan")}) is None and C.kernel_ms({"median_ms": 0}) is None
    # the evidence ranks a problem's kernels by it: the disturbed run is the faster kernel here
    p = ConvParams(2, 1, 2, 16, 16, (1, 1), (8, 8), (1, 1), (1, 1), (0, 0), (0, 0))
    key = f"conv_bwd_data|NHWGC/GKYXC/NHWGK|bf16|passthrough|{p.key()}"
    rows = [{"problem_key": key, "status": "ok", "instance": name, "algorithm": "igemm", "instance_params": "{}",
             **t} for name, t in (("a", steady), ("b", disturbed))]
    ev = C.Evidence.from_rows(rows)
    assert ev.problems[0].winner == "b" and ev.problems[0].best_ms == 0.0236


def test_a_family_floor_is_capped_by_its_launches():
    """igemm bwd weight is only measured on large layers, so its fastest row overstates what one
    launch costs; its floor falls to the one-launch floor measured on bwd-data igemm, a two-launch
    family's to (1 + EXTRA_LAUNCH) times that, and a family measured lower keeps its own floor."""
    small = ConvParams(2, 1, 1, 16, 16, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    large = ConvParams(2, 1, 64, 256, 256, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))

    def row(op, alg, p, ms):
        return {"problem_key": f"{op}|NHWGC/GKYXC/NHWGK|bf16|passthrough|{p.key()}", "status": "ok",
                "instance": f"{op}-{alg}", "algorithm": alg, "instance_params": "{}", "median_ms": ms}

    ev = C.Evidence.from_rows([row("conv_bwd_data", "igemm", small, 0.0125),
                               row("conv_bwd_weight", "igemm", large, 0.5),
                               row("conv_bwd_weight", "splitk_reduce", large, 0.4),
                               row("conv_bwd_weight", "splitk_atomic", small, 0.015)])
    assert ev.floor("conv_bwd_weight", "igemm") == pytest.approx(0.0125)
    assert ev.floor("conv_bwd_weight", "splitk_reduce") == pytest.approx(0.0125 * (1 + C.EXTRA_LAUNCH))
    assert ev.floor("conv_bwd_weight", "splitk_atomic") == pytest.approx(0.015)


def test_dimensionality_separates_neighbours():
    """A 2-D layer's neighbours are 2-D ones first: the 1-D Conformer k31 depthwise layer sits a
    dimensionality penalty further from a 2-D 7x7 depthwise one than its features alone put it."""
    conv2d = ConvParams(2, 384, 64, 1, 1, (7, 7), (14, 14), (1, 1), (1, 1), (3, 3), (3, 3))
    conv1d = ConvParams(1, 256, 16, 1, 1, (31,), (512,), (1,), (1,), (15,), (15,))
    plain = PD.feature_distance(C.features("conv_bwd_weight", conv2d), C.features("conv_bwd_weight", conv1d))
    assert C.neighbor_distance("conv_bwd_weight", conv2d, conv1d) == pytest.approx(plain + NDIM_PENALTY)
    assert NDIM_PENALTY > 0


def test_leave_one_out_with_another_gpus_rows():
    """Foreign rows are evidence as at run time, and hidden with the problem: the same layer measured on
    another GPU kind never vouches for the hidden problem's pick, while a neighbour measured there does."""
    def p(n):
        return ConvParams(2, 1, n, 64, 64, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))

    def row(params, inst, ms, device):
        return {"problem_key": f"conv_bwd_data|NHWGC/GKYXC/NHWGK|bf16|passthrough|{params.key()}", "status": "ok",
                "instance": inst, "algorithm": "igemm", "instance_params": f'{{"variant": "{inst}"}}', "median_ms": ms,
                "device": device}

    # two kernels the model cannot tell apart: without evidence they tie and the first row wins
    own = [row(p(8), "fast", 0.01, "X"), row(p(8), "slow", 0.02, "X")]
    assert leave_one_out(own)[0]["chosen"] == "fast"
    # on GPU Y the same problem says "slow" wins: hidden with the problem, it must not flip the pick
    misleading = [row(p(8), "fast", 0.05, "Y"), row(p(8), "slow", 0.001, "Y")]
    assert leave_one_out(own, foreign_rows=misleading)[0]["chosen"] == "fast"
    # a neighbour (batch 16) measured on Y where "fast" wins is evidence: it overturns the tie
    own = own[::-1]
    assert leave_one_out(own)[0]["chosen"] == "slow"
    helpful = [row(p(16), "fast", 0.02, "Y"), row(p(16), "slow", 0.2, "Y")]
    res = leave_one_out(own, foreign_rows=helpful)
    assert len(res) == 1 and res[0]["chosen"] == "fast" and res[0]["ratio"] == 1.0
    # and the misleading rows, were they not hidden, would have: they name the problem itself
    assert leave_one_out(own[::-1], foreign_rows=[row(p(4), "fast", 0.05, "Y"),
                                                  row(p(4), "slow", 0.001, "Y")])[0]["chosen"] == "slow"


def test_a_grid_of_one_program_an_sm_runs_below_the_peak(monkeypatch):
    """64 tiles without a split (ResNet-50's 1024x512 stride-2 1x1 wgrad at N64) leave one CTA an SM:
    the model charges ONE_CTA_EFFICIENCY; a grid of several programs an SM is not charged."""
    p = ConvParams(2, 1, 64, 1024, 512, (1, 1), (28, 28), (2, 2), (1, 1), (0, 0), (0, 0))
    cfg = {"block_m": 64, "block_n": 128, "block_k": 64, "split_k": 1}
    big = ConvParams(2, 1, 64, 4096, 2048, (1, 1), (28, 28), (2, 2), (1, 1), (0, 0), (0, 0))
    got = {}
    for eff in (1.0, R.ONE_CTA_EFFICIENCY):
        monkeypatch.setattr(R, "ONE_CTA_EFFICIENCY", eff)
        got[eff] = (C.model_ms("conv_bwd_weight", p, "bf16", "igemm", cfg, 132),
                    C.model_ms("conv_bwd_weight", big, "bf16", "igemm", cfg, 132))
    assert R.ONE_CTA_EFFICIENCY < 1.0
    assert got[R.ONE_CTA_EFFICIENCY][0] == pytest.approx(got[1.0][0] / R.ONE_CTA_EFFICIENCY)
    assert got[R.ONE_CTA_EFFICIENCY][1] == got[1.0][1]  # 1024 tiles: several programs an SM


def test_a_disturbed_row_counts_with_its_sibling_dtypes_timing():
    """A pruned row is one run; when the same kernel's full timing on the fp16/bf16 sibling problem is
    over DISTURBED_SIBLING_FACTOR x faster, that run was disturbed and the sibling's times stand for it.
    The same for a fully timed (ok) row: the faster twin stands, the slower is repaired."""
    p = ConvParams(2, 1, 128, 32, 192, (1, 1), (28, 28), (1, 1), (1, 1), (0, 0), (0, 0))

    def row(dt, status, ms, bm=64, device="H100"):
        return {"problem_key": f"conv_bwd_data|NGCHW/GKYXC/NGKHW|{dt}|passthrough|{p.key()}", "status": status,
                "instance": f"conv_bwd_data-cfirst-NGCHW_GKYXC_NGKHW-{dt}-passthrough-m{bm}", "device": device,
                "algorithm": "cfirst", "instance_params": f'{{"block_m": {bm}}}', "median_ms": ms, "p20_ms": ms,
                "p80_ms": ms}

    timed, disturbed = row("bf16", "ok", 0.0236), row("fp16", "pruned", 0.7333)
    honest = row("fp16", "pruned", 0.04, bm=128)  # no sibling timing: kept
    fixed = C.repair_disturbed([timed, disturbed, honest])
    assert fixed[1]["median_ms"] == 0.0236 and fixed[1]["status"] == "pruned" and fixed[2] is honest
    slow = row("fp16", "pruned", 0.03)
    assert C.repair_disturbed([timed, slow])[1] is slow  # within the factor: a real (slow) single run
    assert C.repair_disturbed([row("bf16", "ok", 0.0236, device="H200"), disturbed])[1] is disturbed
    slow_ok = row("fp16", "ok", 0.123)  # a whole timing disturbed (session 30: 30 reps where its twin had 472)
    fixed = C.repair_disturbed([timed, slow_ok])
    assert fixed[0] is timed and fixed[1]["median_ms"] == 0.0236 and fixed[1]["status"] == "ok"
    near_ok = row("fp16", "ok", 0.04)
    assert C.repair_disturbed([timed, near_ok])[1] is near_ok  # within the factor: a real difference
    # as evidence: the fp16 problem (timed on another kernel) no longer sees m64 as 30x slow
    ev = C.Evidence.from_rows([timed, disturbed, row("fp16", "ok", 0.025, bm=128)])
    fp16 = next(t for t in ev.problems if t.dtype == "fp16")
    m64 = next(sig for sig in fp16.corrections if '"block_m": 64' in sig or "block_m=64" in sig)
    bf16 = next(t for t in ev.problems if t.dtype == "bf16")
    assert fp16.corrections[m64] == pytest.approx(bf16.corrections[m64])


def test_tf32_split_kernels_keep_their_own_corrections():
    """The TMA wgrad families run fp32 (tf32 compute) as three bf16 products: modelled at a third of the
    bf16 rate, and a bf16 row of the same tile is not evidence for the fp32 kernel (session 32)."""
    op = "conv_bwd_weight"
    big = ConvParams(2, 1, 128, 512, 512, (1, 1), (28, 28), (1, 1), (1, 1), (0, 0), (0, 0))
    cfg = {"block_m": 128, "block_n": 128, "block_k": 64, "rows": 1, "group_m": 8, "num_warps": 8,
           "num_stages": 3, "split_k": 0}
    assert C.kernel_variant(op, "fp32_tf32", "tma") == "tma+split"
    assert C.kernel_variant(op, "bf16", "tma") == "tma" and C.kernel_variant(op, "fp32_tf32", "igemm") == "igemm"
    bf16 = C.model_ms(op, big, "bf16", "tma", cfg)
    assert C.model_ms(op, big, "fp32_tf32", "tma", cfg) == pytest.approx(3 * bf16, rel=0.05)  # compute-bound
    assert C.model_ms(op, big, "fp32_tf32", "igemm", cfg) == pytest.approx(2 * bf16, rel=0.05)  # tf32's rate

    sig = json.dumps(cfg)
    name = "conv_bwd_weight-tma-NHWGC_GKYXC_NHWGK-{}-passthrough-m128_n128"

    def row(dt, ms, algorithm="tma"):
        return {"problem_key": f"{op}|{LAYOUT}|{dt}|passthrough|{big.key()}", "status": "ok", "device": "H100",
                "instance": name.format(dt).replace("-tma-", f"-{algorithm}-"), "algorithm": algorithm,
                "instance_params": sig, "median_ms": ms, "p20_ms": ms, "p80_ms": ms}

    ev = C.Evidence.from_rows([row("bf16", 0.1)])
    basis = C.rank(op, big, LAYOUT, "fp32_tf32", "passthrough", [("x", "tma", cfg)], ev).best.basis
    assert not basis.startswith("measured")  # the bf16 tile's timing says little about the split kernel
    assert C.rank(op, big, LAYOUT, "fp16", "passthrough", [("x", "tma", cfg)], ev).best.basis.startswith("measured")
    ev = C.Evidence.from_rows([row("bf16", 0.1), row("fp32_tf32", 0.4)])
    pred = C.rank(op, big, LAYOUT, "fp32_tf32", "passthrough", [("x", "tma", cfg)], ev, exclude="").best
    assert pred.basis.startswith("measured") and pred.predicted_ms == pytest.approx(0.4, rel=0.1)


def _row(op, layout, params, inst, alg, ms, dtype="bf16", cfg="{}"):
    return {"problem_key": f"{op}|{layout}|{dtype}|passthrough|{params.key()}", "status": "ok", "instance": inst,
            "algorithm": alg, "instance_params": cfg, "median_ms": ms}


GM = "GNHWC/GKYXC/GNHWK"


def test_relayout_is_priced_as_its_twin_plus_its_copies():
    """relayout runs the channels-last twin's instance after copying the activations: its prediction
    is the twin's tuned best plus the copy bytes at the copy bandwidth fitted from the relayout rows
    that have a tuned twin, whatever the neighbours' relayout rows measured for other twins."""
    op = "conv_bwd_weight"
    dw = ConvParams(2, 96, 64, 1, 1, (7, 7), (56, 56), (1, 1), (1, 1), (3, 3), (3, 3))
    near = ConvParams(2, 96, 32, 1, 1, (7, 7), (56, 56), (1, 1), (1, 1), (3, 3), (3, 3))
    nbytes = R.relayout_copy_bytes(near, GM, "bf16")
    assert nbytes == 2 * 2 * (near.numel("input") + near.numel("output"))  # GKYXC weight: no copy
    assert R.relayout_copy_bytes(near, "NGCHW/GKCYX/NGKHW", "bf16") == nbytes + 4 * near.numel("weight")
    copy_ms = 1e3 * nbytes / 2.0e12  # the neighbour's relayout ran at 2 TB/s of copies
    rows = [_row(op, LAYOUT, near, "nat", "dwslide", 0.1), _row(op, GM, near, "rel", "relayout", 0.1 + copy_ms),
            _row(op, GM, near, "nat_gm", "dwslide", 0.5), _row(op, LAYOUT, dw, "nat", "dwslide", 0.15)]
    ev = C.Evidence.from_rows(rows)
    assert ev.copy_bw == pytest.approx(2.0e12)
    cands = [("rel", "relayout", {"inner": "lookup"}), ("nat_gm", "dwslide", {})]
    twin = [("nat", "dwslide", {})]
    r = C.rank(op, dw, GM, "bf16", "passthrough", cands, ev, twin_candidates=twin)
    rel = next(p for p in r.predictions if p.name == "rel")
    want = 0.15 + 1e3 * R.relayout_copy_bytes(dw, GM, "bf16") / 2.0e12
    assert rel.predicted_ms == pytest.approx(want) and "twin's tuned best" in rel.basis
    assert r.best.name == "rel"
    # the twin hidden too (a layer nobody tuned): its own ranking prices it, the copies stay
    hidden = {f"{op}|{LAYOUT}|bf16|passthrough|{dw.key()}"}
    rel = next(p for p in C.rank(op, dw, GM, "bf16", "passthrough", cands, ev, exclude=hidden, twin_candidates=twin).predictions
               if p.name == "rel")
    assert "twin's predicted best" in rel.basis and rel.predicted_ms > want - 0.15
    # without a twin, relayout is corrected by its neighbours like any kernel
    assert "twin" not in next(p for p in C.rank(op, dw, GM, "bf16", "passthrough", cands, ev).predictions
                              if p.name == "rel").basis


def test_a_kernel_measured_only_far_away_borrows_its_familys_correction():
    """A kernel's rows count only from neighbours within MAX_EVIDENCE_DISTANCE: a dense layer's timing
    (another conv class, 6 away before any feature) no longer prices it on a grouped layer."""
    op = "conv_bwd_weight"
    grouped = ConvParams(2, 32, 64, 8, 8, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    dense = ConvParams(2, 1, 64, 256, 256, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    assert C.neighbor_distance(op, grouped, dense) > C.MAX_EVIDENCE_DISTANCE
    ev = C.Evidence.from_rows([_row(op, LAYOUT, dense, "k", "two_stage", 0.05, cfg='{"block_m": 16}')])
    r = C.rank(op, grouped, LAYOUT, "bf16", "passthrough", [("k", "two_stage", {"block_m": 16})], ev)
    assert not r.best.basis.startswith("measured")


def test_direct_on_an_unaligned_channels_last_stride_pays_the_unaligned_factor(monkeypatch):
    """``direct`` has no alignment constexpr: with G*C (the channels-last position stride) off a multiple of
    16 its channel loads split (session 42: 2.3-3.5x the best on G = 120 / 728 / 72 depthwise layers). The
    walks, which divide their strides by the vector width, and the planar layouts keep their model."""
    op = "conv_bwd_data"

    def ms(G, alg="direct", cfg=None, **layout):
        p = ConvParams(2, G, 32, 1, 1, (3, 3), (19, 19), (1, 1), (1, 1), (1, 1), (1, 1))
        cfg = cfg or {"block_p": 16, "block_ch": 128, "num_warps": 4}
        return C.model_ms(op, p, "bf16", alg, cfg, **layout)

    walk = {"block_w": 16, "block_ch": 32, "rows": 0, "num_warps": 2}
    unaligned, planar, walk_ms = ms(728), ms(728, channels_first=True), ms(728, "dwtaps", walk)
    monkeypatch.setattr(R, "DIRECT_UNALIGNED_FACTOR", 1.0)
    assert unaligned == pytest.approx(DIRECT_UNALIGNED_FACTOR * ms(728))
    assert planar == pytest.approx(ms(728, channels_first=True))
    assert walk_ms == pytest.approx(ms(728, "dwtaps", walk))
    assert R._unaligned_channel_stride(ConvParams(2, 728, 32, 1, 1, (3, 3), (19, 19), (1, 1), (1, 1), (1, 1), (1, 1)))
    for aligned_or_short in (736, 12):  # a multiple of 16, or one short vector a position either way
        assert not R._unaligned_channel_stride(ConvParams(2, aligned_or_short, 32, 1, 1, (3, 3), (19, 19), (1, 1),
                                                          (1, 1), (1, 1), (1, 1)))


def _ranked(ev, op, params, cands, layout=LAYOUT):
    return {p.name: p for p in C.rank(op, params, layout, "bf16", "passthrough", cands, ev).predictions}


def test_an_unmeasured_kernel_pays_the_distance_of_the_rows_that_price_it():
    """A kernel priced by its family's or everyone's correction pays the distance penalty of those rows, like a
    measured kernel does: it no longer outranks a kernel measured on the same neighbours by the penalty alone."""
    op = "conv_bwd_data"
    p = ConvParams(2, 37, 32, 24, 24, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    q = ConvParams(2, 32, 64, 64, 64, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    d = C.neighbor_distance(op, p, q)
    assert d > 1
    cfg = {"block_m": 64, "block_n": 32, "num_warps": 4}
    ev = C.Evidence.from_rows([_row(op, GM, q, "m", "blockdiag", 0.05, cfg=json.dumps(cfg))])
    cands = [("m", "blockdiag", cfg), ("o", "blockdiag", {**cfg, "block_m": 128}), ("x", "bdtap", cfg)]
    got = _ranked(ev, op, p, cands, GM)
    assert got["m"].basis.startswith("measured") and "family's correction" in got["o"].basis
    assert "neighbours' mean" in got["x"].basis
    parts = {name: R.model_parts(op, p, "bf16", alg, c, host_floor_ms=ev.floor(op, alg), group_major=True)
             for name, alg, c in cands}
    work_q, floor_q = R.model_parts(op, q, "bf16", "blockdiag", cfg, host_floor_ms=ev.floor(op, "blockdiag"),
                                    group_major=True)
    corr = R.work_correction(math.log(0.05), work_q, floor_q)  # the neighbour's own correction
    for name, unseen in (("m", 0.0), ("o", C.UNSEEN_KERNEL)):  # the work scaled, the floor kept
        work, floor = parts[name]
        want = R.with_floor(work * math.exp(corr + unseen + C.DISTANCE_PENALTY * d), floor)
        assert got[name].predicted_ms == pytest.approx(want, rel=1e-6)
    # a family none of the closest measured: the whole call scaled by the others' mean correction
    want = R.with_floor(*parts["x"]) * math.exp(corr + C.UNSEEN_ALGORITHM + C.DISTANCE_PENALTY * d)
    assert got["x"].predicted_ms == pytest.approx(want, rel=1e-6)


def test_a_family_none_of_the_closest_measured_is_priced_by_its_own_farther_rows():
    """A family that none of the NEAREST_PROBLEMS closest problems measured takes its correction from the
    nearest problems of the same dimensionality that did (with their distance penalty), not from the other
    families' mean; rows of another dimensionality do not price it."""
    op = "conv_bwd_weight"
    p = ConvParams(2, 256, 32, 1, 1, (3, 3), (74, 74), (1, 1), (1, 1), (1, 1), (1, 1))
    near = [ConvParams(2, g, 32, 1, 1, (3, 3), (74, 74), (1, 1), (1, 1), (1, 1), (1, 1)) for g in (240, 272, 224, 288,
                                                                                                        208, 304)]
    far2d = ConvParams(2, 64, 32, 1, 1, (3, 3), (112, 112), (1, 1), (1, 1), (1, 1), (1, 1))
    far1d = ConvParams(1, 256, 32, 1, 1, (3,), (400,), (1,), (1,), (1,), (1,))
    cfg, measured = {"block_p": 32, "block_ch": 32, "num_warps": 4}, {"block_p": 64, "block_ch": 32, "num_warps": 4}
    rows = [_row(op, GM, q, "fast", "dwslide", 0.01) for q in near]
    ev = C.Evidence.from_rows(rows + [_row(op, GM, far2d, "d64", "direct", 2.0, cfg=json.dumps(measured))])
    assert sorted(C.neighbor_distance(op, p, q) for q in near)[-1] < C.neighbor_distance(op, p, far2d)
    got = _ranked(ev, op, p, [("d", "direct", cfg)], GM)["d"]
    assert "farther problems" in got.basis
    far_row = next(t for t in ev.problems if t.params == far2d)
    (far_corr,) = far_row.corrections.values()  # log(measured / model) there
    want = far_corr + C.UNSEEN_KERNEL + C.DISTANCE_PENALTY * C.neighbor_distance(op, p, far2d)
    assert not R.work_modelled(op, "direct", cfg)  # priced by FLOPs: the correction scales the whole call
    assert math.log(got.predicted_ms / got.model_ms) == pytest.approx(want, rel=1e-6)
    ev1d = C.Evidence.from_rows(rows + [_row(op, "GNWC/GKXC/GNWK", far1d, "d64", "direct", 2.0,
                                             cfg=json.dumps(measured))])
    assert "neighbours' mean" in _ranked(ev1d, op, p, [("d", "direct", cfg)], GM)["d"].basis


def test_a_correction_scales_the_work_and_leaves_the_launch_floor():
    """A kernel measured at 3x its roofline on a large layer is predicted at about 3x its work on another
    large layer, but near its floor on a tiny one: the floor is what a launch costs, not a rate that the
    neighbour's efficiency scales (session 45: tiny layers served a two-launch family because the
    one-launch igemm's floor was scaled by its far neighbours' corrections)."""
    small = ConvParams(2, 1, 1, 16, 16, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    large = ConvParams(2, 1, 64, 256, 256, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    cfg = {"block_m": 64, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4, "num_stages": 3,
           "split_k": 1, "spec": "default"}
    op, alg = "conv_bwd_weight", "igemm"
    work, _ = R.model_parts(op, large, "bf16", alg, cfg)

    def row(p, ms):
        return {"problem_key": f"{op}|{LAYOUT}|bf16|passthrough|{p.key()}", "status": "ok",
                "instance": f"{op}-{alg}-x", "algorithm": alg, "instance_params": json.dumps(cfg), "median_ms": ms}

    ev = C.Evidence.from_rows([row(large, 3 * work), row(small, 0.01)])
    floor = ev.floor(op, alg)
    tiny = C.rank(op, small, LAYOUT, "bf16", "passthrough", [("x", alg, cfg)], ev, exclude=row(small, 0)["problem_key"])
    assert tiny.best.predicted_ms < 1.5 * floor  # the old rule: ~3x the floor
    big = ConvParams(2, 1, 64, 256, 256, (3, 3), (48, 48), (1, 1), (1, 1), (1, 1), (1, 1))
    pred = C.rank(op, big, LAYOUT, "bf16", "passthrough", [("x", alg, cfg)], ev).best.predicted_ms
    big_work, _ = R.model_parts(op, big, "bf16", alg, cfg)
    assert 2.5 * big_work < pred < 4.5 * big_work


@pytest.mark.parametrize("measured", [0.012, 0.05, 1.0])
def test_the_work_correction_inverts_the_floor_blend(measured):
    work, floor = 0.02, 0.01
    c = R.work_correction(math.log(measured), work, floor)
    assert R.with_floor(work * math.exp(c), floor) == pytest.approx(measured, rel=1e-9)


def test_kernels_priced_by_flops_alone_keep_whole_call_corrections():
    """The tile, byte and walk models scale their work; kernels priced by FLOPs at the CUDA cores' rate (direct,
    depthwise wgrad) keep the whole-call correction: their time above the floor on small planes does not follow
    their FLOPs (H200 leave-one-out: a G46 C8 7x7 wgrad served direct at 0.21 of bdwin otherwise)."""
    gemm = {"block_m": 64, "block_n": 64, "block_k": 64}
    assert R.work_modelled("conv_bwd_weight", "igemm", gemm) and R.work_modelled("conv_bwd_data", "tma",
                                                                                   {"block_h": 8, "block_n": 64})
    assert R.work_modelled("conv_bwd_data", "dwtaps", {}) and R.work_modelled("conv_bwd_data", "direct", {})
    assert R.work_modelled("conv_bwd_weight", "dwplane", {}) and R.work_modelled("conv_bwd_weight", "relayout", {})
    assert not R.work_modelled("conv_bwd_weight", "direct", {"block_p": 32, "block_ch": 32})
    op, p = "conv_bwd_weight", ConvParams(2, 46, 64, 8, 8, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    q = ConvParams(2, 19, 64, 8, 8, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    cfg = {"block_p": 32, "block_ch": 32, "num_warps": 4}
    ev = C.Evidence.from_rows([_row(op, LAYOUT, q, "d", "direct", 0.0756, cfg=json.dumps(cfg))])
    got = _ranked(ev, op, p, [("d", "direct", cfg)], LAYOUT)["d"]
    (corr,) = ev.tuned[f"{op}|{LAYOUT}|bf16|passthrough|{q.key()}"].corrections.values()
    d = C.neighbor_distance(op, p, q)
    assert got.predicted_ms == pytest.approx(got.model_ms * math.exp(corr + C.DISTANCE_PENALTY * d), rel=1e-6)
