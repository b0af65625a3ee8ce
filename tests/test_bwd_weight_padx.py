"""conv_bwd_weight ``padx`` family (two_stage's GEMM over a zero-padded channels-last input copy):
correctness vs the float64 reference, launched directly with test_bwd_weight_igemm's runner.

The cases put taps across every border (pads wider than the filter, asymmetric pads, right pads the
output never reaches), strides larger than the filter, dilation, 1D/2D/3D, G > 1 (the copy keeps
groups apart), every layout family (the copy turns channels-first inputs channels-last), the
fused-store path (one split) and the reduce path, fused ops, dtypes and the declines. Runs in the
Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_padx as padx  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.tuning import cost_model  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p, _cfg = igemm_tests._p, igemm_tests._cfg


def _check(p, layout="nhwgc", dtype="fp32", **kw):
    kw.setdefault("cfg", _cfg("padx", split_k=2))
    return igemm_tests._check("padx", p, layout, dtype, **kw)


GEOMETRY = {
    "stem-7x7-s2-p3": _p(2, G=1, N=2, K=16, C=3, f=(7, 7), i=(12, 11), s=(2, 2), lp=(3, 3), rp=(3, 3)),
    "3x3-s1-p1": _p(2, G=1, N=2, K=21, C=6, f=(3, 3), i=(6, 7), lp=(1, 1), rp=(1, 1)),
    "asym-pad-dil": _p(2, G=2, N=2, K=17, C=5, f=(3, 3), i=(7, 6), s=(3, 2), d=(2, 1), lp=(0, 2), rp=(3, 0)),
    "pad>filter": _p(1, G=1, N=2, K=16, C=4, f=(2,), i=(6,), lp=(3,), rp=(2,)),
    "stride>filter-unreached-right": _p(2, G=1, N=1, K=16, C=3, f=(2, 1), i=(9, 9), s=(3, 4), lp=(0, 0),
                                        rp=(1, 2)),
    "1d-G4": _p(1, G=4, N=2, K=18, C=3, f=(4,), i=(7,), s=(2,), d=(2,), lp=(3,), rp=(0,)),
    "3d": _p(3, G=3, N=1, K=16, C=3, f=(3, 2, 3), i=(5, 4, 7), s=(2, 1, 3), d=(1, 2, 2), lp=(2, 0, 3),
             rp=(0, 1, 1)),
    "3d-stem": _p(3, G=1, N=1, K=16, C=3, f=(3, 7, 7), i=(4, 9, 9), s=(1, 2, 2), lp=(1, 3, 3), rp=(1, 3, 3)),
    "no-pad": _p(2, G=2, N=2, K=16, C=5, f=(3, 3), i=(5, 6)),
}


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    _check(GEOMETRY[name])


@pytest.mark.parametrize("layout", list(LAYOUT_FAMILIES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_layouts(layout, ndim):
    p = _p(ndim, G=2, N=2, K=16, C=5, **igemm_tests._GEOM[ndim])
    _check(p, layout)


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("dtype", ["fp32", "fp32_tf32", "fp16", "bf16", "bf16_fp32w"])
def test_dtypes_and_store_paths(dtype, split):
    # one split: the epilogue and the final dtype straight from the accumulator; three: the reduce
    p = GEOMETRY["stem-7x7-s2-p3"]
    out = _check(p, "nhwgc", dtype, cfg=_cfg("padx", split_k=split))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


def test_multi_tile_and_auto_split():
    # K and C*taps span several tiles with a ragged edge; split_k=0 resolves in the launch
    p = _p(2, G=1, N=2, K=40, C=3, f=(3, 3), i=(7, 8), s=(2, 1), lp=(1, 1), rp=(1, 1))
    _check(p, "gnhwc", cfg=_cfg("padx", group_m=2, split_k=0))
    _check(p, "nhwgc", "fp16", cfg=_cfg("padx", block_m=32, block_n=64, block_k=32, split_k=1))


@pytest.mark.parametrize("op,n_ds,split", [("bilinear", 1, 1), ("add_relu", 1, 2), ("scale", 0, 2),
                                           ("add", 3, 1)])
def test_fused_ops(op, n_ds, split):
    p = _p(2, G=2, N=1, K=16, C=4, f=(2, 2), i=(4, 5), lp=(1, 0), rp=(0, 1))
    _check(p, "ngchw_kcyx", op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, cfg=_cfg("padx", split_k=split))


def test_deterministic_bitwise():
    p = GEOMETRY["asym-pad-dil"]
    cfg = _cfg("padx", split_k=3)
    first, _, err, tol = igemm_tests._run("padx", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("padx", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_declines():
    alg = igemm_tests._alg("padx")
    p = _p(2, K=16)
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    why = alg.decline(_cfg("padx", spec="1x1s1p0"), p, lt, DATA_TYPES["fp16"], fo)
    assert why and "default spec" in why
    why = alg.decline(_cfg("padx"), p, lt, DATA_TYPES["fp16_fp8"], fo)
    assert why and "fp8" in why
    why = alg.decline(_cfg("padx"), p, layout_for("nhwgc", 3), DATA_TYPES["fp16"], fo)
    assert why and "3D" in why
    assert alg.decline(_cfg("padx"), p, lt, DATA_TYPES["bf16"], fo) is None
    # its domain: few input channels, enough output channels for a tensor-core tile
    for other in (_p(2, K=16, C=9), _p(2, K=15, C=3), _p(2, G=4, K=1, C=1)):
        why = alg.decline(_cfg("padx"), other, lt, DATA_TYPES["bf16"], fo)
        assert why and "few input channels" in why and f"C={other.C}" in why


def test_padded_extent_and_cost_model():
    # 7x7 stride-2 stem over 224: outputs 112, last tap reaches 111*2 + 6 = 228 -> 229 positions
    assert padx.padded_extent(112, 2, 7, 1) == 229
    stem = ConvParams(2, 1, 64, 64, 3, (7, 7), (224, 224), (2, 2), (1, 1), (3, 3), (3, 3))
    assert cost_model.gemm_shape("conv_bwd_weight", stem, "padx") == (1, 64, 147, 64 * 112 * 112)
    cfg = dict(block_m=64, block_n=64, block_k=64, group_m=8, num_warps=4, num_stages=3, split_k=0,
               spec="default")
    padded = cost_model.model_ms("conv_bwd_weight", stem, "bf16", "padx", cfg)
    plain = cost_model.model_ms("conv_bwd_weight", stem, "bf16", "two_stage", cfg)
    assert padded > plain  # the copy's extra pass counts
