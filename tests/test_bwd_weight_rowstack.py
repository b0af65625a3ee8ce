"""conv_bwd_weight ``rowstack`` family (per-tap GEMM whose steps are one output row of several images,
one TMA box per operand): correctness vs the float64 reference, launched directly with
test_bwd_weight_igemm's runner.

The boxes lean on TMA's zero fill for every edge, so the cases put one there each: rows narrower than
the box (7 of 8, 5 of 8) and wider (20 = two 16-wide chunks), a batch that does not fill the last box
of images, H and D strides, W strides 2 and 3 (the input read as phase channel blocks), dilation and
asymmetric padding on every side, 1-D and 3-D, G > 1 with tiles past a group's channels, both grad_out
reads (in place, several images' rows through registers; and the packed copy), splits that cut rows,
the stream schedule (shares that start and end inside a tile, added atomically), every fused op, the
tensor-core dtypes (16-bit and tf32) and the declines.
Runs in the Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_rowstack as rowstack  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402
from instance_factory.tuning import cost_model  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
ALG = igemm_tests._alg("rowstack")


def _cfg(**kw):
    """A small tile (on a GPU too: the registered configs are checked by their own CK run)."""
    cfg = dict(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2, split_k=2,
               dy_read="inplace", schedule="split")
    cfg.update(kw)
    return ALG.config.from_values(cfg)


def _check(p, layout="nhwgc", dtype="bf16", **kw):
    kw.setdefault("cfg", _cfg())
    return igemm_tests._check("rowstack", p, layout, dtype, **kw)


GEOMETRY = {
    "7x7-s1-p1": _p(2, G=1, N=3, K=16, C=16, f=(3, 3), i=(7, 7), lp=(1, 1), rp=(1, 1)),
    "row-wider-than-box": _p(2, G=1, N=2, K=16, C=8, f=(3, 3), i=(3, 20), lp=(1, 1), rp=(1, 1)),
    "h-stride-2": _p(2, G=1, N=3, K=16, C=16, f=(3, 3), i=(8, 5), s=(2, 1), lp=(1, 1), rp=(1, 1)),
    "w-stride-2": _p(2, G=1, N=2, K=24, C=16, f=(3, 3), i=(6, 10), s=(2, 2), lp=(1, 1), rp=(1, 1)),
    "w-stride-3-asym": _p(2, G=1, N=2, K=16, C=8, f=(2, 4), i=(5, 12), s=(1, 3), lp=(0, 2), rp=(1, 0)),
    "w-dil2-pad3-1": _p(2, G=1, N=1, K=16, C=8, f=(3, 3), i=(4, 5), d=(1, 2), lp=(1, 3), rp=(1, 1)),
    "no-padding": _p(2, G=1, N=5, K=16, C=8, f=(3, 3), i=(6, 7)),
    "1d-k3": _p(1, G=1, N=3, K=16, C=24, f=(3,), i=(13,), lp=(1,), rp=(1,)),
    "3d-d-stride-pad": _p(3, G=1, N=2, K=16, C=8, f=(3, 3, 3), i=(5, 4, 6), s=(2, 1, 1), lp=(2, 1, 1),
                          rp=(1, 1, 1)),
    "G2-C72-tile-past-group": _p(2, G=2, N=1, K=64, C=72, f=(3, 3), i=(3, 5), lp=(1, 1), rp=(1, 1)),
    "K-C-ragged": _p(2, G=1, N=2, K=24, C=24, f=(2, 2), i=(4, 9), lp=(1, 0), rp=(0, 1)),
}

# K=64 in one 64-row tile instead of four (4x fewer programs in the interpreter)
_WIDE_K = dict(block_m=64)


@pytest.mark.parametrize("dy_read", ["inplace", "packed"])
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name, dy_read):
    # G = 1 runs the group-major family too (the same memory); G > 1 needs the groups packed per position
    layout = "nhwgc" if name.startswith("G2") else ("nhwgc", "gnhwc")[list(GEOMETRY).index(name) % 2]
    cfg = dict(dy_read=dy_read, **(_WIDE_K if name.startswith("G2") else {}))
    if dy_read == "packed" and rowstack.box_shape(GEOMETRY[name], 16)[0] == 1:
        # packing pays only where a box holds several images' rows: two here
        cfg["block_k"] = 2 * triton.next_power_of_2(GEOMETRY[name].output[-1])
    _check(GEOMETRY[name], layout, cfg=_cfg(**cfg))


@pytest.mark.parametrize("name", ["7x7-s1-p1", "w-stride-2", "3d-d-stride-pad", "G2-C72-tile-past-group",
                                  "row-wider-than-box"])
def test_stream_schedule(name):
    # equal shares of all units' steps: shares start and end inside units (pieces added atomically)
    _check(GEOMETRY[name], "nhwgc", cfg=_cfg(split_k=0, schedule="stream", **(_WIDE_K if name.startswith("G2") else {})))


@pytest.mark.parametrize("dy_read", ["inplace", "packed"])
@pytest.mark.parametrize("block_k", [16, 32])
@pytest.mark.parametrize("split", [1, 3, 0])
def test_boxes_and_splits(block_k, split, dy_read):
    # 5-wide rows: boxes of 16 hold 2 images (a third box half past the batch of 5) or 4 of 32;
    # split 3 leaves a ragged last split, 0 is the automatic choice
    p = _p(2, G=1, N=5, K=16, C=16, f=(3, 3), i=(4, 5), lp=(1, 1), rp=(1, 1))
    _check(p, cfg=_cfg(split_k=split, block_k=block_k, dy_read=dy_read))


@pytest.mark.parametrize("sched", [dict(split_k=1), dict(split_k=2), dict(split_k=0, schedule="stream")])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w", "fp32_tf32"])
def test_dtypes_and_store_paths(dtype, sched):
    out = _check(GEOMETRY["7x7-s1-p1"], "nhwgc", dtype, cfg=_cfg(dy_read="packed", **sched))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


def test_multi_tile_grouped_order():
    p = _p(2, G=1, N=2, K=48, C=40, f=(1, 3), i=(3, 10), lp=(0, 1), rp=(0, 1))
    _check(p, "nhwgc", "fp16", cfg=_cfg(group_m=2, split_k=1))


@pytest.mark.parametrize("op,n_ds,sched", [("bilinear", 1, dict(split_k=1)), ("add_relu", 1, dict(split_k=2)),
                                           ("scale", 0, dict(split_k=1)), ("add", 3, dict(split_k=2)),
                                           ("add_relu", 1, dict(split_k=0, schedule="stream"))])
def test_fused_ops(op, n_ds, sched):
    p = _p(2, G=1, N=2, K=16, C=8, f=(2, 2), i=(4, 7), lp=(1, 0), rp=(0, 1))
    _check(p, "gnhwc", op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, cfg=_cfg(**sched))


def test_deterministic_bitwise():
    p = GEOMETRY["w-stride-2"]
    cfg = _cfg(split_k=3, dy_read="packed", block_k=32)
    first, _, err, tol = igemm_tests._run("rowstack", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("rowstack", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_declines():
    p = _p(2, K=16, C=16, i=(6, 7), lp=(1, 1), rp=(1, 1))
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    bf16 = DATA_TYPES["bf16"]
    assert ALG.decline(_cfg(), p, lt, bf16, fo) is None
    for dtype in ("fp32", "fp16_fp8"):
        why = ALG.decline(_cfg(), p, lt, DATA_TYPES[dtype], fo)
        assert why and "tensor cores" in why
    for family in LAYOUT_FAMILIES:
        if family not in ("nhwgc", "gnhwc"):
            why = ALG.decline(_cfg(), p, layout_for(family, 2), bf16, fo)
            assert why and "channels-last" in why and "NHWGC" in why
    why = ALG.decline(_cfg(), _p(2, G=2, K=64, C=64, i=(6, 7), lp=(1, 1), rp=(1, 1)), layout_for("gnhwc", 2),
                      bf16, fo)
    assert why and "packed per position" in why  # group-major: a group's channels are a plane apart
    assert ALG.decline(_cfg(), _p(2, G=2, K=64, C=64, i=(6, 7), lp=(1, 1), rp=(1, 1)), lt, bf16, fo) is None
    why = ALG.decline(_cfg(), _p(2, K=16, C=16, i=(6, 7), s=(1, 2), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "width 7 must be a multiple" in why
    assert ALG.decline(_cfg(), _p(2, K=16, C=16, i=(6, 8), s=(2, 2), lp=(1, 1), rp=(1, 1)), lt, bf16, fo) is None
    why = ALG.decline(_cfg(), _p(2, K=16, C=12, i=(6, 7), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "16-byte aligned" in why and "C=12" in why
    why = ALG.decline(_cfg(), _p(2, G=5, K=24, C=24, i=(6, 7), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "C and K >= 64 per group" in why
    why = ALG.decline(_cfg(block_k=32, dy_read="packed"), _p(2, K=16, C=16, i=(6, 40), lp=(1, 1), rp=(1, 1)),
                      lt, bf16, fo)
    assert why and "read in place" in why  # a 40-wide row fills a 32-box alone: nothing to pack
    why = ALG.decline(_cfg(block_k=64), _p(2, N=2, K=16, C=16, i=(3, 3), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "over twice the batch of 2" in why
    wide = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
    batch8 = _p(2, N=8, K=16, C=16, i=(6, 7), lp=(1, 1), rp=(1, 1))
    why = ALG.decline(_cfg(dy_read="inplace", **wide), batch8, lt, bf16, fo)  # 7-wide rows: 8 images a box
    assert why and "wrong results under Triton 3.6" in why
    assert ALG.decline(_cfg(dy_read="packed", **wide), batch8, lt, bf16, fo) is None
    assert ALG.decline(_cfg(dy_read="inplace", **wide), _p(2, K=16, C=16, i=(6, 64), lp=(1, 1), rp=(1, 1)),
                       lt, bf16, fo) is None  # one row a box: nothing goes through registers
    huge = _p(2, N=4096, K=16, C=16, i=(512, 1024), lp=(1, 1), rp=(1, 1))  # 2^31 positions
    why = ALG.decline(_cfg(), huge, lt, bf16, fo)
    assert why and "int32" in why
    long = _p(3, N=32, K=64, C=64, i=(16, 56, 56), lp=(1, 1, 1), rp=(1, 1, 1))  # 1.6M positions (1.8M boxed)
    why = ALG.decline(_cfg(block_k=64, split_k=4), long, layout_for("nhwgc", 3), bf16, fo)
    assert why and "needs split_k >= 28" in why  # 16*56 rows x 32 images, 64-wide boxes
    assert ALG.decline(_cfg(block_k=64, split_k=28), long, layout_for("nhwgc", 3), bf16, fo) is None
    assert rowstack.choose_split(long, _cfg(block_k=64, split_k=0), 132) >= 28


def test_config_checks():
    assert _cfg().check() is None
    assert "power of two" in _cfg(block_k=48).check()
    assert "16.." in _cfg(block_n=8).check()
    assert "4 or 8" in _cfg(num_warps=2).check()
    assert "split_k" in _cfg(split_k=-1).check()
    assert "dy_read" in _cfg(dy_read="copy").check()
    assert "schedule" in _cfg(schedule="persistent").check()
    assert "no meaning with schedule 'stream'" in _cfg(split_k=2, schedule="stream").check()


def test_box_shape_and_model_positions():
    p = _p(2, N=5, K=64, C=64, i=(7, 7), lp=(1, 1), rp=(1, 1))
    assert rowstack.box_shape(p, 64) == (8, 8, 1)  # 8 images' 7-wide rows (8 positions each) a step
    assert rowstack.reduction_positions(p, 64) == 7 * 8 * 8  # the batch of 5 in one box of 8 images
    p = _p(2, N=4, K=64, C=64, i=(20, 20), lp=(1, 1), rp=(1, 1))
    assert rowstack.box_shape(p, 16) == (1, 16, 2)
    assert rowstack.reduction_positions(p, 16) == 4 * 20 * 32
    cfg = dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4, split_k=0,
               schedule="split")
    big = _p(2, N=64, K=256, C=256, i=(14, 14), lp=(1, 1), rp=(1, 1))
    inplace = cost_model.model_ms("conv_bwd_weight", big, "bf16", "rowstack", dict(cfg, dy_read="inplace"))
    packed = cost_model.model_ms("conv_bwd_weight", big, "bf16", "rowstack", dict(cfg, dy_read="packed"))
    assert 0 < inplace < packed  # the model charges the packed copy's pass over grad_out
