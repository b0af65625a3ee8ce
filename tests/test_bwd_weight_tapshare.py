"""conv_bwd_weight ``tapshare`` family (a block of taps sharing each grad_out TMA box): correctness vs the
float64 reference, launched directly with test_bwd_weight_igemm's runner.

TMA's zero fill stands for the padding halo, row and plane ends, taps of a block past the filter's edge
and steps past a split's end, so the cases put taps across every border (asymmetric pads, pads wider
than the filter), filters that leave the last tap block partial (5 x 7 in blocks of 3 x 3), several-row boxes past the plane's last row, H strides and dilations with one-row boxes,
3-D planes in the padding, groups with channel tiles past the group's channels (17+ channels per
group in 16-wide tiles), the fused-store path
(one split) and the reduce path with a ragged last split, every fused op, the tensor-core dtypes and the
declines. Runs in the Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_tapshare  # noqa: E402, F401  (registers the family)
from instance_factory.layouts import layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
ALG = igemm_tests._alg("tapshare")


def _cfg(**kw):
    cfg = dict(block_m=16, block_n=16, block_h=2, block_w=8, taps_y=3, taps_x=3, num_warps=4, num_stages=2,
               split_k=2)
    cfg.update(kw)
    return ALG.config.from_values(cfg)


def _check(p, layout="nhwgc", dtype="bf16", **kw):
    kw.setdefault("cfg", _cfg())
    return igemm_tests._check("tapshare", p, layout, dtype, **kw)


GEOMETRY = {
    "3x3-s1-p1": (_p(2, G=2, N=2, K=24, C=40, f=(3, 3), i=(5, 9), lp=(1, 1), rp=(1, 1)), {}),
    "G3-C24-tiles-past-group": (_p(2, G=3, N=1, K=24, C=24, f=(3, 3), i=(4, 7), lp=(1, 1), rp=(1, 1)), {}),
    "5x7-partial-blocks": (_p(2, G=2, N=1, K=24, C=24, f=(5, 7), i=(6, 11), lp=(2, 3), rp=(2, 3)), {}),
    "2x1-one-column": (_p(2, G=2, N=2, K=24, C=24, f=(2, 1), i=(5, 6), lp=(1, 0), rp=(0, 0)),
                       dict(taps_y=2, taps_x=1)),
    "h-stride-dil-asym-rows": (_p(2, G=2, N=2, K=24, C=24, f=(3, 2), i=(9, 12), s=(2, 1), d=(2, 3), lp=(2, 0),
                                  rp=(0, 3)), dict(block_h=1, block_w=16, taps_x=2)),
    "pad>filter": (_p(1, G=2, N=2, K=24, C=24, f=(2,), i=(12,), lp=(3,), rp=(2,)),
                   dict(block_h=1, block_w=16, taps_y=1, taps_x=2)),
    "1d-k5": (_p(1, G=2, N=2, K=24, C=24, f=(5,), i=(21,), lp=(2,), rp=(2,)), dict(block_h=1, block_w=16, taps_y=1)),
    "3d-d-pad": (_p(3, G=2, N=2, K=24, C=24, f=(3, 3, 3), i=(3, 4, 9), s=(2, 1, 1), lp=(2, 1, 1), rp=(1, 1, 1)),
                 {}),
    "1x1": (_p(2, G=2, N=2, K=24, C=24, f=(1, 1), i=(3, 10)), dict(taps_y=1, taps_x=1)),
}


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    p, kw = GEOMETRY[name]
    layout = ("nhwgc", "gnhwc")[list(GEOMETRY).index(name) % 2]
    _check(p, layout, cfg=_cfg(**kw))


@pytest.mark.parametrize("split", [1, 3, 0])
@pytest.mark.parametrize("box", [dict(block_h=1, block_w=16), dict(block_h=4, block_w=4)])
def test_boxes_and_splits(box, split):
    # 3 x 3 output plane blocks of 4 x 4 (Ho 9, Wo 9): ragged boxes at both ends; split 3 leaves a
    # ragged last split, 0 is the automatic choice
    p = _p(2, G=2, N=2, K=24, C=24, f=(3, 3), i=(9, 9), lp=(1, 1), rp=(1, 1))
    _check(p, cfg=_cfg(split_k=split, **box))


@pytest.mark.parametrize("split", [1, 2])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w", "fp32_tf32"])
def test_dtypes_and_store_paths(dtype, split):
    out = _check(GEOMETRY["3x3-s1-p1"][0], "nhwgc", dtype, cfg=_cfg(split_k=split))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


@pytest.mark.parametrize("op,n_ds,split", [("bilinear", 1, 1), ("add_relu", 1, 2), ("scale", 0, 2),
                                           ("add", 3, 1)])
def test_fused_ops(op, n_ds, split):
    p = _p(2, G=2, N=1, K=24, C=24, f=(3, 3), i=(4, 6), lp=(1, 1), rp=(1, 1))
    _check(p, "gnhwc", op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, cfg=_cfg(split_k=split))


def test_deterministic_bitwise():
    p = GEOMETRY["3x3-s1-p1"][0]
    cfg = _cfg(split_k=3)
    first, _, err, tol = igemm_tests._run("tapshare", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("tapshare", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_declines():
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    p = _p(2, G=2, K=24, C=24, f=(3, 3), i=(6, 20), lp=(1, 1), rp=(1, 1))
    assert ALG.decline(_cfg(), p, lt, DATA_TYPES["bf16"], fo) is None
    for dtype in ("fp32", "fp16_fp8"):
        why = ALG.decline(_cfg(), p, lt, DATA_TYPES[dtype], fo)
        assert why and "tensor cores" in why
    why = ALG.decline(_cfg(), _p(2, G=1, K=24, C=24, f=(3, 3), i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "grouped layers" in why
    why = ALG.decline(_cfg(), _p(2, G=2, K=24, C=24, f=(3, 3), i=(6, 20), s=(1, 2)), lt, DATA_TYPES["bf16"], fo)
    assert why and "W stride of 1" in why
    why = ALG.decline(_cfg(), _p(2, G=2, K=24, C=24, f=(3, 3), i=(6, 20), s=(2, 1)), lt, DATA_TYPES["bf16"], fo)
    assert why and "H stride of 1" in why
    assert ALG.decline(_cfg(block_h=1), _p(2, G=2, K=24, C=24, f=(3, 3), i=(6, 20), s=(2, 1)), lt,
                       DATA_TYPES["bf16"], fo) is None
    why = ALG.decline(_cfg(), _p(2, G=2, K=24, C=24, f=(1, 3), i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "more than the filter" in why
    why = ALG.decline(_cfg(block_w=64), _p(2, G=2, K=24, C=24, f=(3, 3), i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "over twice" in why
    why = ALG.decline(_cfg(), _p(2, G=4, K=16, C=32, f=(3, 3), i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "more than 16 channels" in why
    why = ALG.decline(_cfg(), _p(2, G=4, K=72, C=40, f=(3, 3), i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "at most 64 channels" in why
    why = ALG.decline(_cfg(), _p(2, G=4, K=32, C=64, f=(3, 3), i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "fill 32-wide tiles" in why
    why = ALG.decline(_cfg(), p, layout_for("ngchw", 2), DATA_TYPES["bf16"], fo)
    assert why and "channels-last" in why


def test_config_checks():
    assert ALG.check_config(_cfg()) is None
    assert "taps_x" in ALG.check_config(_cfg(taps_x=4))
    assert "power of two" in ALG.check_config(_cfg(block_w=12))
    assert ">= 16" in ALG.check_config(_cfg(block_h=1, block_w=8))
    assert "registers" in ALG.check_config(_cfg(block_m=128, block_n=128))
    assert "shared memory" in ALG.check_config(_cfg(block_h=8, block_w=16, block_m=64, block_n=64, num_warps=8,
                                                    num_stages=4, taps_y=2))
