"""The cost model's rolling-row walk term (tuning/walk_model.py): grid fill, strips, declines."""

from instance_factory.problem import ConvParams
from instance_factory.tuning import cost_model as cm
from instance_factory.tuning import roofline
from instance_factory.tuning.walk_model import direct_data_s, roll_walk_s, tile_data_s

# MobileNetV2's G32 112x112 3x3 depthwise layer at N 64: a whole-phase walk of 64-wide tiles and 32
# channels has 128 programs (under one per SM); 16-row strips of 32-wide tiles have 3,136
LAYER = ConvParams(2, 32, 64, 1, 1, (3, 3), (112, 112), (1, 1), (1, 1), (1, 1), (1, 1))
WHOLE = dict(block_w=64, block_ch=32, rows=0, num_warps=4)
STRIPS = dict(block_w=32, block_ch=32, rows=16, num_warps=2)


def test_a_grid_under_the_sms_is_modelled_slower():
    whole = roll_walk_s(LAYER, WHOLE, 50e12, 132)
    strips = roll_walk_s(LAYER, STRIPS, 50e12, 132)
    assert whole > 2 * strips  # measured on the H100 (session 24): 0.53 of the strips' speed
    # the model's time for these families is this term (the problem's FLOPs alone are config-blind)
    assert cm.model_ms("conv_bwd_data", LAYER, "bf16", "dwtaps", WHOLE) > cm.model_ms(
        "conv_bwd_data", LAYER, "bf16", "dwtaps", STRIPS)


def test_strip_halo_and_batch():
    """Shorter strips repeat the slots' warm-up rows; a bigger batch fills more of the GPU per row."""
    big = ConvParams(2, 32, 512, 1, 1, (3, 3), (112, 112), (1, 1), (1, 1), (1, 1), (1, 1))
    one_row = dict(STRIPS, rows=1)
    assert roll_walk_s(big, one_row, 50e12, 132) > roll_walk_s(big, STRIPS, 50e12, 132)
    assert roll_walk_s(big, WHOLE, 50e12, 132) < 8 * roll_walk_s(LAYER, WHOLE, 50e12, 132)


def test_not_a_walk():
    dilated = ConvParams(2, 32, 64, 1, 1, (3, 3), (28, 28), (1, 1), (2, 2), (2, 2), (2, 2))
    assert roll_walk_s(dilated, STRIPS, 50e12, 132) is None  # dilation 2 at stride 1: not a rolling walk
    assert roll_walk_s(LAYER, dict(block_p=64, block_ch=64, num_warps=4), 50e12, 132) is None


def test_direct_dgrad_by_its_grid():
    """direct dgrad: EfficientNet's G480 14x14 layer fills the GPU with 16x128 tiles (3,136 programs);
    one wide tile per image plane leaves most SMs idle. Configs without direct's fields are not modelled."""
    layer = ConvParams(2, 480, 64, 1, 1, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    small = direct_data_s(layer, dict(block_p=16, block_ch=128, num_warps=4), 50e12, 132)
    assert small is not None and small > 0
    tiny_batch = ConvParams(2, 480, 1, 1, 1, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    per_image = direct_data_s(tiny_batch, dict(block_p=16, block_ch=128, num_warps=4), 50e12, 132)
    assert per_image > small / 64  # one image cannot fill the SMs: not 64x less time
    assert direct_data_s(layer, STRIPS, 50e12, 132) is None
    assert cm.model_ms("conv_bwd_data", layer, "bf16", "direct", dict(block_p=16, block_ch=128, num_warps=4)) > 0


def test_dwtile_by_its_grid_and_registers():
    """dwtile: its registers grow with the elements per thread times the taps whose loads are in flight at
    once, so 16 elements per thread keep fewer warps resident (slower per FLOP) than 8 (MobileNetV2's G144
    56x56 3x3 layer); the roofline prices the family by this term, and configs without its fields are not
    modelled."""
    layer = ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    eight = dict(block_h=4, block_w=8, block_ch=16, num_warps=2)  # 8 elements per thread
    sixteen = dict(eight, block_ch=32)  # 16 per thread: twice the FLOPs per program
    assert tile_data_s(layer, sixteen, 50e12, 132) > tile_data_s(layer, eight, 50e12, 132)
    assert roofline.work_modelled("conv_bwd_data", "dwtile", eight)
    assert cm.model_ms("conv_bwd_data", layer, "bf16", "dwtile", eight) > 0
    assert tile_data_s(layer, dict(block_p=64, block_ch=64, num_warps=4), 50e12, 132) is None


def test_dwtile_row_loop_holds_one_filter_row():
    """With the filter rows in a runtime loop (row_stages 1) only a row's taps hold registers: more warps stay
    resident, so the same tile is priced faster, by more on a 7x7 (7 of 49 taps live) than on a 3x3 (3 of 9)."""
    def gain(filt: int) -> float:
        pad = filt // 2
        layer = ConvParams(2, 96, 64, 1, 1, (filt, filt), (56, 56), (1, 1), (1, 1), (pad, pad), (pad, pad))
        unrolled = dict(block_h=4, block_w=8, block_ch=32, row_stages=0, num_warps=2)
        return tile_data_s(layer, unrolled, 50e12, 132) / tile_data_s(layer, dict(unrolled, row_stages=1), 50e12, 132)

    assert gain(7) > gain(3) > 1.0


def test_dwtile_floor_is_one_launch():
    """dwtile's fastest rows are real work on the smallest layers of its sets (0.021 ms on the H200), not its launch
    cost: its floor is capped at one launch (here igemm's), so a tiny held-out band (12 channels, 1x11, 56x56: 0.012 ms
    measured) is not priced at that floor and handed to direct (session 51, 0.31 of the best)."""
    nhwgc = "NHWGC/GKYXC/NHWGK"
    big_dw = ConvParams(2, 96, 64, 1, 1, (7, 7), (56, 56), (1, 1), (1, 1), (3, 3), (3, 3))
    dense = ConvParams(2, 1, 64, 256, 256, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    tile = '{"block_h": 2, "block_w": 32, "block_ch": 16, "row_stages": 0, "num_warps": 4}'
    rows = [{"problem_key": f"conv_bwd_data|{nhwgc}|fp16|passthrough|{p.key()}", "status": "ok", "instance": inst,
             "algorithm": alg, "instance_params": cfg, "median_ms": ms}
            for p, inst, alg, cfg, ms in ((big_dw, "t", "dwtile", tile, 0.0208), (dense, "i", "igemm", "{}", 0.0095))]
    ev = cm.Evidence.from_rows(rows)
    assert cm.LAUNCHES[("conv_bwd_data", "dwtile")] == 1
    assert abs(ev.floor("conv_bwd_data", "dwtile") - 0.0095) < 1e-9
