"""conv_bwd_weight ``pointwise`` family (1x1 layers as one split-K TMA GEMM launch, the splits summed
in-kernel by the last to arrive): correctness vs the float64 reference, launched directly with
test_bwd_weight_igemm's runner.

The cases walk positions merged into one run (stride 1), two axes (stride 2 on an even plane: n and
oh merge) and three (an odd plane, 3-D), boxes of several rows over rows narrower than the box,
K and C not multiples of the tile, channel tiles that run past a group's channels, ragged last
splits, many tiles x splits (the arrival counters), repeated launches (the counters return to zero,
the sum order is fixed), every fused op on both store paths, the tensor-core dtypes (16-bit and tf32) and the declines.
Runs in the Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_pointwise as pw  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
ALG = igemm_tests._alg("pointwise")


def _cfg(**kw):
    """A small tile (on a GPU too: the registered configs are checked by their own CK run)."""
    cfg = dict(block_m=64, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2, split_k=3, reduce="last")
    cfg.update(kw)
    return ALG.config.from_values(cfg)


def _check(p, layout="nhwgc", dtype="bf16", **kw):
    kw.setdefault("cfg", _cfg())
    return igemm_tests._check("pointwise", p, layout, dtype, **kw)


GEOMETRY = {
    "s1-one-run": _p(2, G=1, N=3, K=32, C=16, f=(1, 1), i=(5, 7)),
    "s2-even-rows": _p(2, G=1, N=2, K=24, C=40, f=(1, 1), i=(6, 10), s=(2, 2)),  # Wo = 5 in 8-wide boxes
    "s2-odd-three-axes": _p(2, G=1, N=2, K=16, C=16, f=(1, 1), i=(7, 9), s=(2, 2)),
    "3d-s2": _p(3, G=1, N=2, K=16, C=24, f=(1, 1, 1), i=(4, 3, 6), s=(2, 2, 2)),
    "1d-s3": _p(1, G=1, N=2, K=16, C=16, f=(1,), i=(50,), s=(3,)),
    "G2-tile-past-group": _p(2, G=2, N=2, K=16, C=24, f=(1, 1), i=(6, 9), s=(2, 1)),
    "K-C-ragged": _p(2, G=1, N=1, K=72, C=40, f=(1, 1), i=(4, 9)),
    "wide-row": _p(2, G=1, N=1, K=16, C=16, f=(1, 1), i=(4, 70), s=(2, 2)),  # Wo = 35: two 32-wide boxes
}


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    layout = ("nhwgc", "gnhwc")[list(GEOMETRY).index(name) % 2]
    box = dict(block_k=32) if name == "wide-row" else {}
    _check(GEOMETRY[name], layout, cfg=_cfg(**box))


@pytest.mark.parametrize("reduce", pw.REDUCES)
@pytest.mark.parametrize("split", [1, 2, 5, 0])
def test_splits(split, reduce):
    # 6 tiles (K = 128 in two 64-row tiles x C = 40 in three 16-wide ones) x the splits: every tile's
    # counter counts its own splits; split 5 leaves a ragged last split, 0 is the automatic choice
    p = _p(2, G=1, N=2, K=128, C=40, f=(1, 1), i=(5, 9))
    _check(p, cfg=_cfg(split_k=split, block_k=32, reduce=reduce))


@pytest.mark.parametrize("tile", [(16, 32, 128), (32, 16, 64), (16, 16, 256)])
def test_skinny_tiles(tile):
    # few-channel 1x1 layers (MobileNetV2's 16x32 at 112x112): tiles under a warpgroup's 64 MMA rows and
    # long boxes; K and C not multiples of the tile, a ragged last split, both reduces
    m, n, k = tile
    p = _p(2, G=1, N=3, K=24, C=40, f=(1, 1), i=(9, 13))
    for reduce in pw.REDUCES:
        _check(p, cfg=_cfg(block_m=m, block_n=n, block_k=k, split_k=3, reduce=reduce))


@pytest.mark.parametrize("reduce", pw.REDUCES)
def test_repeat_launch_is_bitwise_equal(reduce):
    # the counters are back at zero after a launch (else the second would never sum its slabs) and
    # the slabs are summed in split order whichever program arrives last
    p = GEOMETRY["K-C-ragged"]
    cfg = _cfg(split_k=4, reduce=reduce)
    first, _, err, tol = igemm_tests._run("pointwise", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    for _ in range(2):
        again, _, _, _ = igemm_tests._run("pointwise", p, "nhwgc", "fp16", cfg=cfg, seed=3)
        assert torch.equal(first.view(torch.int16), again.view(torch.int16))


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w", "fp32_tf32"])
def test_dtypes_and_store_paths(dtype, split):
    out = _check(GEOMETRY["s1-one-run"], "nhwgc", dtype, cfg=_cfg(split_k=split))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


_FUSED = [("bilinear", 1, None, 1, "last"), ("add_relu", 1, None, 3, "last"), ("scale", 0, None, 2, "pass"),
          ("add", 3, None, 3, "pass"), (igemm_tests._mix, 2, igemm_tests._mix_ref, 2, "last"),
          (igemm_tests._mix, 2, igemm_tests._mix_ref, 2, "pass")]


@pytest.mark.parametrize("op,n_ds,user_ref,split,reduce", _FUSED,
                         ids=[f"{o if isinstance(o, str) else 'user'}-{s}-{r}" for o, _, _, s, r in _FUSED])
def test_fused_ops(op, n_ds, user_ref, split, reduce):
    _check(GEOMETRY["s2-even-rows"], "gnhwc", op=op, n_ds=n_ds, user_ref=user_ref, alpha=1.75, beta=-0.5,
           cfg=_cfg(split_k=split, reduce=reduce))


def test_declines():
    p = _p(2, K=16, C=16, f=(1, 1), i=(6, 20))
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    bf16 = DATA_TYPES["bf16"]
    assert ALG.decline(_cfg(), p, lt, bf16, fo) is None
    for dtype in ("fp32", "fp16_fp8"):
        why = ALG.decline(_cfg(), p, lt, DATA_TYPES[dtype], fo)
        assert why and "tensor cores" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=16, i=(6, 20)), lt, bf16, fo)  # 3x3
    assert why and "1x1 filter without padding" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=16, f=(1, 1), i=(6, 20), lp=(1, 0)), lt, bf16, fo)
    assert why and "padding" in why
    p3 = _p(3, N=2, K=16, C=16, f=(1, 1, 1), i=(5, 6, 20), s=(2, 2, 2))  # Di != 2 * Do: n, d apart
    assert "at most three position axes" in ALG.decline(_cfg(), p3, layout_for("nhwgc", 3), bf16, fo)
    for family in LAYOUT_FAMILIES:
        if family not in ("nhwgc", "gnhwc"):
            why = ALG.decline(_cfg(), p, layout_for(family, 2), bf16, fo)
            assert why and "unit channel strides" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=12, f=(1, 1), i=(6, 20)), lt, bf16, fo)
    assert why and "16 bytes" in why
    wide = _cfg(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
    assert ALG.decline(wide, _p(2, K=16, C=16, f=(1, 1), i=(8, 64)), lt, bf16, fo) is None  # one run of positions
    why = ALG.decline(wide, _p(2, K=16, C=16, f=(1, 1), i=(14, 14), s=(2, 2)), lt, bf16, fo)  # 7-wide rows
    assert why and "wrong results on Triton 3.6" in why
    big = _cfg(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=5)
    assert "shared memory" in (big.check() or ALG.decline(big, p, lt, bf16, fo) or "")


def test_boxes():
    assert pw.box_of(2 * 56 * 56, 64) == (1, 64)  # one run: 64 positions of it
    assert pw.box_of(7, 64) == (8, 8)  # 7-wide rows: 8 rows of 8 columns
    assert pw.box_of(28, 32) == (1, 32)
    assert pw.box_of(1, 16) == (16, 1)


def test_walk():
    lt = layout_for("nhwgc", 2)
    (dy_shape, _), (x_shape, x_strides) = pw.walk_of(_p(2, N=2, K=16, C=32, f=(1, 1), i=(14, 14)), lt)
    assert list(dy_shape) == [1, 1, 1, 2 * 14 * 14, 16] and list(x_shape) == [1, 1, 1, 2 * 14 * 14, 32]
    (dy_shape, _), (x_shape, x_strides) = pw.walk_of(_p(2, N=2, K=16, C=32, f=(1, 1), i=(14, 14), s=(2, 2)), lt)
    assert list(dy_shape) == [1, 1, 2 * 7, 7, 16] and list(x_strides[2:]) == [2 * 14 * 32, 2 * 32, 1]


def test_auto_split():
    # ResNet-50 1024x256 14x14 N64 in 128x128 tiles (one a SM): 16 tiles x 196 chunks -> 8 splits fill
    # 128 of 132 SMs (the H100's best split in session 23's probe)
    assert pw.choose_split(16, 196, 132) == 8
    assert pw.choose_split(600, 50, 132) == 1  # several waves of tiles: no split
    assert pw.choose_split(1, 30, 132) == 30  # never more splits than chunks
    assert pw.choose_split(1, 3, 132) == 1  # a split's fixed cost outweighs 2 of 3 chunks
    # MobileNetV2's 16x32 layer: one tile, 12,544 chunks; three 64x64 programs a SM -> one wave of 392
    # splits (32 chunks each)
    small = _cfg(block_m=64, block_n=64, block_k=64, num_stages=4)
    assert pw.programs_per_sm(small) == 3
    assert pw.choose_split(1, 12544, 132, pw.programs_per_sm(small)) == 392
    assert pw.choose_split(1, 12544, 132, 3, most=pw.LAST_MAX_SPLIT) == pw.LAST_MAX_SPLIT


def test_plan():
    lt = layout_for("nhwgc", 2)
    p = _p(2, N=64, K=1024, C=256, f=(1, 1), i=(14, 14))
    cfg = _cfg(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4, split_k=0, reduce="pass")
    assert pw.programs_per_sm(cfg) == 1
    assert pw.plan(p, cfg, lt, 132) == (16, 196, 8)
    # a fixed split is clipped so that every split has chunks: 196 chunks in 14 splits of 14 (not 15)
    assert pw.plan(p, _cfg(block_m=128, block_n=128, block_k=64, split_k=15), lt, 132)[2] == 14


def test_config_checks():
    assert _cfg().check() is None
    assert _cfg(block_m=16, block_n=32, block_k=256).check() is None  # skinny layers: tl.dot's smallest tile
    assert "block_m" in _cfg(block_m=8).check()
    assert "split_k" in _cfg(split_k=-1).check()
    assert "split_k" in _cfg(split_k=pw.MAX_SPLIT + 1).check()
    assert "accumulator" in _cfg(block_m=256, block_n=256, num_warps=8).check()
    assert "reduce" in _cfg(reduce="atomic").check()


def test_reduce_shape_spreads_one_tile_and_sums_slabs_in_blocks():
    # one 64x32 tile with 131 splits: 64 one-row programs summing 64 slabs a step, not one program
    # reading 131 slabs one after another; the tiles alone filling the GPU keep the 2048-element rows
    # and sum one slab a step
    assert pw.reduce_shape(1, 131, 64, 32, 132) == (1, 64)
    assert pw.reduce_shape(200, 4, 128, 128, 132) == (16, 1)
    rows, block_s = pw.reduce_shape(3, 5, 16, 16, 132)
    assert rows == 1 and block_s == 8


def test_reduce_pass_one_slab_a_step(monkeypatch):
    # a GPU of 2 SMs: the 2048-element rows fill it, so the reduce pass takes the one-slab-a-step loop
    monkeypatch.setattr(pw, "sm_count", lambda device: 2)
    p = _p(2, G=1, N=3, K=80, C=16, f=(1, 1), i=(5, 7))  # two 64x16 tiles
    assert pw.reduce_shape(2, 5, 64, 16, 2) == (64, 1)
    _check(p, cfg=_cfg(split_k=5, reduce="pass"))


def test_many_splits_over_one_tile():
    # 80 splits over one 32x16 tile: one-row programs sum 64 slabs, then a ragged block of 16
    p = _p(2, G=1, N=5, K=24, C=16, f=(1, 1), i=(16, 16))
    assert pw.plan(p, _cfg(block_m=32, block_n=16, block_k=16, split_k=80), layout_for("nhwgc", 2), 132)[2] == 80
    assert pw.reduce_shape(1, 80, 32, 16, 132) == (1, 64)
    _check(p, cfg=_cfg(block_m=32, block_n=16, block_k=16, split_k=80, reduce="pass"))
