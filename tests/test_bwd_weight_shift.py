"""conv_bwd_weight ``shift`` family (per-tap GEMM over each plane's flat positions, wrapped columns
subtracted): correctness vs the float64 reference, launched directly with test_bwd_weight_igemm's runner.

The flat index is only right away from the W borders, so the cases put taps across every border:
left and right pads of 0-3 columns (asymmetric, with dilation), planes of one row with H taps (a
wrapped read lands in the plane), planes whose size is not a multiple of the box and boxes past the
plane's end, H padding that makes Ho != Hi, 3-D taps whose input plane lies in the padding (D stride 2),
G > 1 with channel tiles that run into the next group's channels, K and C not multiples of the tile,
splits that cut planes and the column fix-ups, the stream schedule (shares that start and end inside
a tile, added atomically), every fused op, the tensor-core dtypes (16-bit and tf32) and the declines.
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
from instance_factory.kernels import bwd_weight_shift as shift  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
ALG = igemm_tests._alg("shift")


def _cfg(**kw):
    """A small tile (on a GPU too: the registered configs are checked by their own CK run)."""
    cfg = dict(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2, split_k=2, schedule="split")
    cfg.update(kw)
    return ALG.config.from_values(cfg)


def _check(p, layout="nhwgc", dtype="bf16", **kw):
    kw.setdefault("cfg", _cfg())
    return igemm_tests._check("shift", p, layout, dtype, **kw)


GEOMETRY = {
    "3x3-s1-p1": _p(2, G=1, N=2, K=24, C=16, f=(3, 3), i=(6, 9), lp=(1, 1), rp=(1, 1)),
    "7x7-plane": _p(2, G=1, N=3, K=16, C=16, f=(3, 3), i=(7, 7), lp=(1, 1), rp=(1, 1)),
    "w-pad-asym-2-0": _p(2, G=1, N=2, K=16, C=8, f=(3, 3), i=(5, 6), lp=(0, 2), rp=(2, 0)),
    "w-dil2-pad3-1": _p(2, G=1, N=1, K=16, C=8, f=(3, 3), i=(4, 5), d=(1, 2), lp=(1, 3), rp=(1, 1)),
    "5x5-p2-narrow": _p(2, G=1, N=2, K=16, C=8, f=(5, 5), i=(6, 3), lp=(2, 2), rp=(2, 2)),
    "h-pad-grows-Ho": _p(2, G=1, N=2, K=16, C=8, f=(2, 3), i=(4, 8), d=(2, 1), lp=(3, 1), rp=(2, 1)),
    "one-row-h-taps": _p(2, G=1, N=2, K=16, C=8, f=(3, 3), i=(1, 10), lp=(1, 1), rp=(1, 1)),
    "1d-k3": _p(1, G=1, N=2, K=16, C=24, f=(3,), i=(40,), lp=(1,), rp=(1,)),
    "1d-k5-p4-0": _p(1, G=1, N=2, K=16, C=8, f=(5,), i=(9,), lp=(4,), rp=(0,)),
    "3d-d-stride-pad": _p(3, G=1, N=2, K=16, C=8, f=(3, 3, 3), i=(5, 4, 6), s=(2, 1, 1), lp=(2, 1, 1),
                          rp=(1, 1, 1)),
    "3d-d-dil": _p(3, G=1, N=1, K=16, C=8, f=(2, 1, 3), i=(5, 3, 7), d=(2, 1, 1), lp=(1, 0, 1), rp=(0, 0, 1)),
    "G2-C72-box-past-group": _p(2, G=2, N=1, K=64, C=72, f=(3, 3), i=(3, 5), lp=(1, 1), rp=(1, 1)),
    "K-C-ragged": _p(2, G=1, N=1, K=24, C=24, f=(2, 2), i=(4, 9), lp=(1, 0), rp=(0, 1)),
}


# K=64 in one 64-row tile instead of four (4x fewer programs in the interpreter); C=72 keeps its 16-wide
# tiles, the last of them past the group's channels
_WIDE_K = dict(block_m=64)


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    layout = ("nhwgc", "gnhwc")[list(GEOMETRY).index(name) % 2]
    _check(GEOMETRY[name], layout, cfg=_cfg(**(_WIDE_K if name == "G2-C72-box-past-group" else {})))


@pytest.mark.parametrize("name", ["3x3-s1-p1", "w-dil2-pad3-1", "3d-d-stride-pad", "G2-C72-box-past-group",
                                  "one-row-h-taps", "1d-k5-p4-0"])
def test_stream_schedule(name):
    # equal shares of all units' steps: shares start and end inside units (pieces added atomically),
    # and the wrapped-column steps are shared the same way
    _check(GEOMETRY[name], "nhwgc",
           cfg=_cfg(split_k=0, schedule="stream", **(_WIDE_K if name == "G2-C72-box-past-group" else {})))


@pytest.mark.parametrize("block_k", [16, 32])
@pytest.mark.parametrize("split", [1, 3, 0])
def test_boxes_and_splits(block_k, split):
    # a 5x7 plane: 35 positions in boxes of 16 (3, the last past the plane's end) or 32 (2); split 3
    # leaves a ragged last split and cuts the column fix-ups, 0 is the automatic choice
    p = _p(2, G=1, N=3, K=16, C=16, f=(3, 3), i=(5, 7), lp=(1, 1), rp=(1, 1))
    _check(p, cfg=_cfg(split_k=split, block_k=block_k))


@pytest.mark.parametrize("sched", [dict(split_k=1), dict(split_k=2), dict(split_k=0, schedule="stream")])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w", "fp32_tf32"])
def test_dtypes_and_store_paths(dtype, sched):
    out = _check(GEOMETRY["3x3-s1-p1"], "nhwgc", dtype, cfg=_cfg(**sched))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


def test_multi_tile_grouped_order():
    p = _p(2, G=1, N=1, K=48, C=40, f=(1, 3), i=(3, 10), lp=(0, 1), rp=(0, 1))
    _check(p, "nhwgc", "fp16", cfg=_cfg(group_m=2, split_k=1))


@pytest.mark.parametrize("op,n_ds,sched", [("bilinear", 1, dict(split_k=1)), ("add_relu", 1, dict(split_k=2)),
                                           ("scale", 0, dict(split_k=0, schedule="stream")), ("add", 3, dict(split_k=1)),
                                           ("add_relu", 1, dict(split_k=0, schedule="stream"))])
def test_fused_ops(op, n_ds, sched):
    p = _p(2, G=1, N=1, K=16, C=8, f=(2, 2), i=(4, 9), lp=(1, 0), rp=(0, 1))
    _check(p, "gnhwc", op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, cfg=_cfg(**sched))


def test_deterministic_bitwise():
    p = GEOMETRY["w-dil2-pad3-1"]
    cfg = _cfg(split_k=3)
    first, _, err, tol = igemm_tests._run("shift", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("shift", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_declines():
    p = _p(2, K=16, C=16, i=(6, 20), lp=(1, 1), rp=(1, 1))
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    bf16 = DATA_TYPES["bf16"]
    assert ALG.decline(_cfg(), p, lt, bf16, fo) is None
    for dtype in ("fp32", "fp16_fp8"):
        why = ALG.decline(_cfg(), p, lt, DATA_TYPES[dtype], fo)
        assert why and "tensor cores" in why
    for s in ((1, 2), (2, 1)):
        why = ALG.decline(_cfg(), _p(2, K=16, C=16, i=(6, 20), s=s, lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
        assert why and "stride 1 in H and W" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=16, i=(6, 20)), lt, bf16, fo)  # no padding: W 20 -> 18
    assert why and "as wide as the input" in why and "20 -> 18" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=16, f=(3, 9), i=(6, 3), lp=(1, 4), rp=(1, 4)), lt, bf16, fo)
    assert why and "at most a row" in why
    why = ALG.decline(_cfg(block_k=64), _p(2, K=16, C=16, i=(3, 5), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "15 positions of an output plane" in why
    for family in LAYOUT_FAMILIES:
        if family not in ("nhwgc", "gnhwc"):
            why = ALG.decline(_cfg(), p, layout_for(family, 2), bf16, fo)
            assert why and "channels-last" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=12, i=(6, 20), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "16 bytes" in why
    why = ALG.decline(_cfg(), _p(2, G=5, K=24, C=24, i=(6, 20), lp=(1, 1), rp=(1, 1)), lt, bf16, fo)
    assert why and "C and K >= 64 per group" in why and "C=24" in why
    assert ALG.decline(_cfg(), _p(2, G=2, K=64, C=64, i=(6, 20), lp=(1, 1), rp=(1, 1)), lt, bf16, fo) is None


def test_config_checks():
    assert _cfg().check() is None
    assert "power of two" in _cfg(block_k=48).check()
    assert "16.." in _cfg(block_k=8).check()
    assert "4 or 8" in _cfg(num_warps=2).check()
    assert "split_k" in _cfg(split_k=-1).check()
    assert "schedule" in _cfg(schedule="persistent").check()
    assert "no meaning with schedule 'stream'" in _cfg(split_k=2, schedule="stream").check()


def test_plane_plan_is_the_decline_reason():
    p = _p(2, K=16, C=16, i=(6, 20), s=(1, 2), lp=(1, 1), rp=(1, 1))
    assert shift.plane_plan(p) in ALG.decline(_cfg(), p, layout_for("gnhwc", 2), DATA_TYPES["fp16"],
                                              FUSED_OPS["passthrough"])
