"""conv_bwd_weight ``padvec`` family (padx's GEMM with 16-byte gathers of one tap's channels and no column
mask): correctness vs the float64 reference on padx's cases and on dense few-channel layers whose C the
gather reads as vectors (column tails, a tile wider than all the columns, dilation, asymmetric pads,
1D/2D/3D, every layout family, the 16-bit dtypes and fp32), its declines and its vector width. Runs in
the Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import test_bwd_weight_padx as padx_tests  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_padvec as padvec  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p, _cfg = igemm_tests._p, igemm_tests._cfg


def _check(p, layout="nhwgc", dtype="fp32", **kw):
    kw.setdefault("cfg", _cfg("padvec", split_k=2))
    return igemm_tests._check("padvec", p, layout, dtype, **kw)


# C a multiple of 16 bytes' worth of channels (8 in 16-bit data, 4 in fp32); the last tile's columns past
# C * taps read the last tap and are dropped at the store
VECTOR = {
    "c16-3x3-col-tail": _p(2, G=1, N=2, K=16, C=16, f=(3, 3), i=(6, 7), lp=(1, 1), rp=(1, 1)),
    "c24-s2-dil": _p(2, G=1, N=2, K=17, C=24, f=(3, 2), i=(7, 8), s=(2, 1), d=(1, 2), lp=(1, 0), rp=(0, 1)),
    "c8-3d-5x3x3-asym": _p(3, G=1, N=1, K=16, C=8, f=(5, 3, 3), i=(6, 5, 5), lp=(2, 1, 0), rp=(2, 0, 1)),
    "c32-1d-k5": _p(1, G=1, N=3, K=20, C=32, f=(5,), i=(9,), lp=(2,), rp=(2,)),
    "c16-1d-k3-narrower-than-a-tile": _p(1, G=1, N=2, K=16, C=16, f=(3,), i=(9,), lp=(1,), rp=(1,)),
}


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("name", list(VECTOR))
def test_vector_gather(name, dtype):
    p = VECTOR[name]
    size = DATA_TYPES[dtype].data.itemsize
    assert padvec.channel_align(p.C, size) * size >= 16 and padvec.vector_domain(p, DATA_TYPES[dtype])
    _check(p, "nhwgc", dtype, cfg=_cfg("padvec", block_m=16, block_n=64, block_k=32, split_k=2))
    _check(p, "ngchw", dtype, cfg=_cfg("padvec", block_m=32, block_n=32, block_k=32, split_k=1))


@pytest.mark.parametrize("name", list(padx_tests.GEOMETRY))
def test_padx_geometry(name):
    # padx's own problems (few channels, one element a run): the column mask only where a tile is wider
    # than all the columns
    _check(padx_tests.GEOMETRY[name])


@pytest.mark.parametrize("layout", list(LAYOUT_FAMILIES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_layouts(layout, ndim):
    _check(_p(ndim, G=1, N=2, K=16, C=16, **igemm_tests._GEOM[ndim]), layout, "fp16")


@pytest.mark.parametrize("dtype", ["fp32_tf32", "bf16_fp32w"])
def test_other_dtypes(dtype):
    _check(VECTOR["c16-3x3-col-tail"], "nhwgc", dtype, cfg=_cfg("padvec", split_k=1))


@pytest.mark.parametrize("op,n_ds,split", [("bilinear", 1, 1), ("add_relu", 1, 2), ("add", 2, 1)])
def test_fused_ops(op, n_ds, split):
    _check(VECTOR["c24-s2-dil"], "ngchw_kcyx", "bf16", op=op, n_ds=n_ds, alpha=1.75, beta=-0.5,
           cfg=_cfg("padvec", split_k=split))


def test_deterministic_bitwise():
    p, cfg = VECTOR["c16-3x3-col-tail"], _cfg("padvec", split_k=3)
    first, _, err, tol = igemm_tests._run("padvec", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("padvec", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_declines():
    alg = igemm_tests._alg("padvec")
    lt, fo = layout_for("nhwgc", 2), FUSED_OPS["passthrough"]
    for ok, dtype in ((_p(2, K=16, C=16), "bf16"), (_p(2, K=16, C=32), "fp16"), (_p(2, K=16, C=12), "fp32"),
                      (_p(2, K=16, C=3), "bf16")):
        assert alg.decline(_cfg("padvec"), ok, lt, DATA_TYPES[dtype], fo) is None, (ok, dtype)
    for other, dtype in ((_p(2, G=2, K=16, C=16), "bf16"), (_p(2, K=16, C=12), "bf16"), (_p(2, K=16, C=40), "bf16"),
                         (_p(2, K=16, C=16, f=(1, 1)), "bf16"), (_p(2, K=15, C=16), "bf16")):
        why = alg.decline(_cfg("padvec"), other, lt, DATA_TYPES[dtype], fo)
        assert why and "multiple of 16 bytes" in why and f"G={other.G}" in why and f"C={other.C}" in why, (other, why)
    why = alg.decline(_cfg("padvec", spec="1x1s1p0"), _p(2, K=16, C=16), lt, DATA_TYPES["fp16"], fo)
    assert why and "padvec has only the default spec" in why
    why = alg.decline(_cfg("padvec"), _p(2, K=16, C=16), lt, DATA_TYPES["fp16_fp8"], fo)
    assert why and "padvec has no fp8 path" in why


def test_channel_align():
    assert [padvec.channel_align(c, 2) for c in (3, 8, 12, 16, 24, 32, 48)] == [1, 8, 4, 8, 8, 8, 8]
    assert [padvec.channel_align(c, 4) for c in (2, 4, 6, 8)] == [2, 4, 2, 4]
