"""conv_bwd_weight ``tma`` family (per-tap GEMM over one-row TMA boxes): correctness vs the float64
reference, launched directly with test_bwd_weight_igemm's runner.

TMA's zero fill stands for the padding halo and the row ends, so the cases put taps across every
border (pads wider than the filter, asymmetric pads, right pads the output never reaches), rows
wider and narrower than a box, H and D strides and dilations, 3-D rows whose input plane lies in
the padding, G > 1 (groups of >= 64 channels) with channel tiles that run into the next group's channels, K and C not
multiples of the tile, the fused-store path (one split) and the reduce path with a ragged last split,
every fused op, the tensor-core dtypes (16-bit and tf32) and the declines. Runs in the Triton interpreter on CPU tensors
(TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_tma as tma  # noqa: E402
from instance_factory.kernels.common import dot_operands, dot_tn  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402
from instance_factory.problem import ConvParams  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
ALG = igemm_tests._alg("tma")


def _cfg(**kw):
    """A small tile (on a GPU too: the registered configs are checked by their own CK run)."""
    cfg = dict(block_m=16, block_n=16, block_k=16, rows=1, group_m=2, num_warps=4, num_stages=2, split_k=2)
    cfg.update(kw)
    return ALG.config.from_values(cfg)


def _check(p, layout="nhwgc", dtype="bf16", **kw):
    kw.setdefault("cfg", _cfg())
    return igemm_tests._check("tma", p, layout, dtype, **kw)


GEOMETRY = {
    "3x3-s1-p1": _p(2, G=1, N=2, K=24, C=16, f=(3, 3), i=(6, 9), lp=(1, 1), rp=(1, 1)),
    "rows-wider-than-box": _p(2, G=1, N=1, K=16, C=8, f=(3, 3), i=(3, 37), lp=(1, 1), rp=(1, 1)),
    "h-stride-dil-asym": _p(2, G=1, N=2, K=16, C=8, f=(3, 2), i=(9, 12), s=(2, 1), d=(2, 3), lp=(2, 0),
                            rp=(0, 3)),
    "pad>filter": _p(1, G=1, N=2, K=16, C=8, f=(2,), i=(12,), lp=(3,), rp=(2,)),
    "h-stride>filter-unreached": _p(2, G=1, N=1, K=16, C=8, f=(2, 1), i=(10, 9), s=(3, 1), rp=(2, 0)),
    "1x1": _p(2, G=1, N=3, K=32, C=16, f=(1, 1), i=(5, 17)),
    "1d-k3": _p(1, G=1, N=2, K=16, C=24, f=(3,), i=(40,), lp=(1,), rp=(1,)),
    "3d-d-pad": _p(3, G=1, N=2, K=16, C=8, f=(3, 3, 3), i=(3, 4, 18), s=(2, 1, 1), lp=(2, 1, 1), rp=(1, 1, 1)),
    "3d-d-dil": _p(3, G=1, N=1, K=16, C=8, f=(2, 1, 3), i=(5, 3, 16), d=(2, 1, 1), lp=(1, 0, 1), rp=(0, 0, 1)),
    "G2-C72-box-past-group": _p(2, G=2, N=1, K=64, C=72, f=(3, 3), i=(3, 16), lp=(1, 1), rp=(1, 1)),
    "K-C-ragged": _p(2, G=1, N=1, K=24, C=24, f=(2, 2), i=(4, 18), lp=(1, 0), rp=(0, 1)),
}


# K=64 in one 64-row tile instead of four (4x fewer programs in the interpreter); C=72 keeps its 16-wide
# tiles, the last of them past the group's channels
_WIDE_K = dict(block_m=64)


@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name):
    layout = ("nhwgc", "gnhwc")[list(GEOMETRY).index(name) % 2]
    _check(GEOMETRY[name], layout, cfg=_cfg(**(_WIDE_K if name == "G2-C72-box-past-group" else {})))


@pytest.mark.parametrize("box", [dict(block_k=16, rows=1), dict(block_k=16, rows=4), dict(block_k=32, rows=2)])
@pytest.mark.parametrize("split", [1, 3, 0])
def test_boxes_and_splits(box, split):
    # 3 chunks per row at block_k 16 (Wo = 37): steps of several chunks cross row and image ends;
    # split 3 leaves a ragged last split, 0 is the automatic choice
    p = _p(2, G=1, N=2, K=16, C=16, f=(3, 3), i=(4, 37), s=(2, 1), lp=(1, 1), rp=(1, 1))
    _check(p, cfg=_cfg(split_k=split, **box))


@pytest.mark.parametrize("split", [1, 2])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w", "fp32_tf32"])
def test_dtypes_and_store_paths(dtype, split):
    out = _check(GEOMETRY["3x3-s1-p1"], "nhwgc", dtype, cfg=_cfg(split_k=split))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


def test_multi_tile_grouped_order():
    p = _p(2, G=1, N=1, K=48, C=40, f=(1, 3), i=(3, 20), lp=(0, 1), rp=(0, 1))
    _check(p, "nhwgc", "fp16", cfg=_cfg(group_m=2, split_k=1))


@pytest.mark.parametrize("op,n_ds,split", [("bilinear", 1, 1), ("add_relu", 1, 2), ("scale", 0, 2),
                                           ("add", 3, 1)])
def test_fused_ops(op, n_ds, split):
    p = _p(2, G=1, N=1, K=16, C=8, f=(2, 2), i=(4, 17), lp=(1, 0), rp=(0, 1))
    _check(p, "gnhwc", op=op, n_ds=n_ds, alpha=1.75, beta=-0.5, cfg=_cfg(split_k=split))


def test_deterministic_bitwise():
    p = GEOMETRY["h-stride-dil-asym"]
    cfg = _cfg(split_k=3)
    first, _, err, tol = igemm_tests._run("tma", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("tma", p, "nhwgc", "fp16", cfg=cfg, seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_declines():
    p = _p(2, K=16, C=16, i=(6, 20))
    lt = layout_for("nhwgc", 2)
    fo = FUSED_OPS["passthrough"]
    assert ALG.decline(_cfg(), p, lt, DATA_TYPES["bf16"], fo) is None
    for dtype in ("fp32", "fp16_fp8"):
        why = ALG.decline(_cfg(), p, lt, DATA_TYPES[dtype], fo)
        assert why and "tensor cores" in why
    # tf32: the fp32 boxes of every stage plus one K-major copy must fit (16-bit: the config's own check)
    big = dict(block_m=128, block_n=128, block_k=64, rows=1, num_warps=8, num_stages=4)
    assert ALG.decline(_cfg(**big), _p(2, K=16, C=16, i=(6, 80)), lt, DATA_TYPES["bf16"], fo) is None
    why = ALG.decline(_cfg(**big), _p(2, K=16, C=16, i=(6, 80)), lt, DATA_TYPES["fp32_tf32"], fo)
    assert why and "KiB of shared memory for fp32 tiles" in why
    assert ALG.decline(_cfg(**{**big, "num_stages": 3}), _p(2, K=16, C=16, i=(6, 80)), lt,
                       DATA_TYPES["fp32_tf32"], fo) is None
    why = ALG.decline(_cfg(), _p(2, K=16, C=16, i=(6, 20), s=(1, 2)), lt, DATA_TYPES["bf16"], fo)
    assert why and "W stride of 1" in why
    why = ALG.decline(_cfg(block_k=64), p, lt, DATA_TYPES["bf16"], fo)  # Wo = 18
    assert why and "walked row's 18 positions" in why
    # a strided 1x1 walks its own rows (Wo = 10); one padded, or a 3-D one whose positions stay in
    # four axes, declines like any W stride 2
    one = dict(K=16, C=16, f=(1, 1), i=(6, 20), s=(2, 2))
    assert ALG.decline(_cfg(block_k=16), _p(2, **one), lt, DATA_TYPES["bf16"], fo) is None
    why = ALG.decline(_cfg(block_k=32), _p(2, **one), lt, DATA_TYPES["bf16"], fo)
    assert why and "walked row's 10 positions" in why
    why = ALG.decline(_cfg(), _p(2, **one, lp=(0, 1), rp=(0, 1)), lt, DATA_TYPES["bf16"], fo)
    assert why and "W stride of 1" in why
    p3 = _p(3, N=2, K=16, C=16, f=(1, 1, 1), i=(5, 6, 20), s=(2, 2, 2))  # Di != 2 * Do: n, d apart
    assert "W stride of 1" in ALG.decline(_cfg(), p3, layout_for("nhwgc", 3), DATA_TYPES["bf16"], fo)
    for family in LAYOUT_FAMILIES:
        if family not in ("nhwgc", "gnhwc"):
            why = ALG.decline(_cfg(), p, layout_for(family, 2), DATA_TYPES["bf16"], fo)
            assert why and "channels-last" in why
    why = ALG.decline(_cfg(), _p(2, K=16, C=12, i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "16 bytes" in why
    # grouped: only groups of at least 64 channels (small groups waste its tiles: bdrow's domain)
    why = ALG.decline(_cfg(), _p(2, G=5, K=24, C=24, i=(6, 20)), lt, DATA_TYPES["bf16"], fo)
    assert why and "C and K >= 64 per group" in why and "C=24" in why
    assert ALG.decline(_cfg(), _p(2, G=2, K=64, C=64, i=(6, 20)), lt, DATA_TYPES["bf16"], fo) is None


# Pointwise filters: the positions merge into as few rows as the strides allow (stride 1: one row of
# N*D*H*W positions, so a 64-wide box is full on a 7x7 plane); strided ones read the input through a
# strided view of their own positions.
POINTWISE = {
    "1x1-s1-flat": (_p(2, G=1, N=3, K=32, C=16, f=(1, 1), i=(5, 7)), dict(block_k=64, rows=1)),
    "1x1-s1-flat-steps": (_p(2, G=1, N=2, K=16, C=24, f=(1, 1), i=(7, 9)), dict(block_k=32, rows=2)),
    "1x1-s2-even": (_p(2, G=1, N=2, K=16, C=16, f=(1, 1), i=(4, 30), s=(2, 2)), dict(block_k=16, rows=2)),
    "1x1-s2-odd": (_p(2, G=1, N=2, K=24, C=16, f=(1, 1), i=(5, 31), s=(2, 2)), dict(block_k=16, rows=1)),
    "1x1x1-s211": (_p(3, G=1, N=2, K=16, C=16, f=(1, 1, 1), i=(4, 3, 5), s=(2, 1, 1)), dict(block_k=16, rows=1)),
    "1-s3": (_p(1, G=1, N=2, K=16, C=16, f=(1,), i=(50,), s=(3,)), dict(block_k=16, rows=1)),
    "G2-1x1-s1": (_p(2, G=2, N=2, K=64, C=64, f=(1, 1), i=(3, 5)), dict(block_k=32, rows=1)),
}


@pytest.mark.parametrize("name", list(POINTWISE))
def test_pointwise(name):
    p, box = POINTWISE[name]
    layout = ("nhwgc", "gnhwc")[list(POINTWISE).index(name) % 2]
    _check(p, layout, cfg=_cfg(split_k=0, **box))


def test_walk_width():
    assert tma.walk_width(_p(2, N=2, K=16, C=16, f=(1, 1), i=(56, 56))) == 2 * 56 * 56
    assert tma.walk_width(_p(2, N=2, K=16, C=16, f=(1, 1), i=(56, 56), s=(2, 2))) == 28
    assert tma.walk_width(_p(2, N=2, K=16, C=16, f=(3, 3), i=(56, 56), lp=(1, 1), rp=(1, 1))) == 56
    # stride 2 in D only: H and W merge, and N with D when Di = 2 * Do
    assert tma.walk_width(_p(3, N=2, K=16, C=16, f=(1, 1, 1), i=(4, 3, 5), s=(2, 1, 1))) == 15


def test_config_checks():
    assert _cfg().check() is None
    assert "rows*block_k" in _cfg(block_k=64, rows=4).check()
    assert "power of two" in _cfg(rows=3).check()
    assert "16.." in _cfg(block_k=8).check()


def test_auto_split():
    # a ResNet-50 3x3 layer at batch 64: 9 taps x 1 tile -> enough splits for ~3 waves of 132 SMs
    p = ConvParams(2, 1, 64, 64, 64, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    cfg = _cfg(block_m=64, block_n=64, block_k=64)
    assert tma.choose_split(p, cfg, 132) == 44
    big = ConvParams(2, 1, 64, 512, 512, (3, 3), (7, 7), (1, 1), (1, 1), (1, 1), (1, 1))
    assert tma.choose_split(big, _cfg(block_m=64, block_n=64, block_k=16), 132) == 1  # 576 tiles


def test_tf32_operands_are_split_into_three_bf16_products():
    """dot_tn's fp32 mode: hi = bf16(x), lo = bf16(x - hi), three products; ~16 mantissa bits, far
    closer to float64 than one bf16 product (what a missing lo term would give)."""
    @triton.jit
    def _probe(a_ptr, b_ptr, c_ptr, BK: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, OPERANDS: tl.constexpr):
        rk = tl.arange(0, BK)
        a = tl.load(a_ptr + rk[:, None] * BM + tl.arange(0, BM)[None, :])
        b = tl.load(b_ptr + rk[:, None] * BN + tl.arange(0, BN)[None, :])
        acc = dot_tn(a, b, tl.zeros((BM, BN), tl.float32), OPERANDS)
        tl.store(c_ptr + tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :], acc)

    assert dot_operands(DATA_TYPES["fp16"]) == 0
    mode = dot_operands(DATA_TYPES["fp32_tf32"])
    assert mode == (3 if interpreting() else 2)
    dev = "cpu" if interpreting() else "cuda"
    g = torch.Generator().manual_seed(5)
    a = torch.randn(32, 16, generator=g).to(dev)
    b = torch.randn(32, 16, generator=g).to(dev)
    c = torch.full((16, 16), float("nan"), device=dev)
    _probe[(1,)](a, b, c, BK=32, BM=16, BN=16, OPERANDS=mode)
    ref = a.double().t() @ b.double()
    err = ((c.double() - ref).norm() / ref.norm()).item()
    one_product = a.bfloat16().double().t() @ b.bfloat16().double()
    assert err < 1e-4 < ((one_product - ref).norm() / ref.norm()).item()
