"""conv_bwd_weight ``cfirst`` (1x1 layers in channels-first layouts as one GEMM over position runs):
correctness vs the float64 reference on both channels-first families (GKYXC and GKCYX weights),
1-D/2-D/3-D, groups, ragged tiles and chunks, one split (fused epilogue) and several (fp32 slices +
fixed-order reduce), every dtype, fused ops; the declines (channels-last, fp8, shared memory, filters
other than an unpadded stride-1 1x1). Runs in the Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_cfirst as cfirst  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
ALG = igemm_tests._alg("cfirst")


def _cfg(**kw):
    values = dict(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=4, num_stages=2, split_k=1)
    values.update(kw)
    return ALG.config.from_values(values)


def _check(p, family="ngchw", dtype="fp32", cfg=None, **kw):
    return igemm_tests._check("cfirst", p, family, dtype, cfg=cfg or _cfg(), **kw)


CASES = {
    "2d": _p(2, G=1, N=3, K=17, C=33, f=(1, 1), i=(5, 6)),
    "2d-grouped": _p(2, G=3, N=2, K=8, C=12, f=(1, 1), i=(4, 4)),
    "2d-long": _p(2, G=1, N=4, K=40, C=36, f=(1, 1), i=(9, 10)),
    "1d": _p(1, G=2, N=2, K=8, C=8, f=(1,), i=(37,)),
    "3d": _p(3, G=2, N=1, K=8, C=8, f=(1, 1, 1), i=(3, 4, 5)),
    "depthwise": _p(2, G=8, N=2, K=1, C=1, f=(1, 1), i=(5, 5)),
}


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx"])
@pytest.mark.parametrize("name", list(CASES))
def test_geometry(name, family):
    p = CASES[name]
    assert cfirst.is_pointwise_run(p, layout_for(family, p.ndim))
    _check(p, family)


@pytest.mark.parametrize("split_k", [2, 5])
def test_splits_reduce_in_fixed_order(split_k):
    p = CASES["2d-long"]
    a = _check(p, cfg=_cfg(split_k=split_k))
    b = _check(p, cfg=_cfg(split_k=split_k))
    assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16", "bf16_fp32w"])
def test_dtypes(dtype):
    out = _check(CASES["2d-long"], "ngchw", dtype, cfg=_cfg(block_k=32, split_k=2))
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx"])
@pytest.mark.parametrize("op,n_ds,split_k", [("bilinear", 1, 1), ("add_relu", 1, 3), ("scale", 0, 2)])
def test_fused_ops(op, n_ds, split_k, family):
    _check(CASES["2d-grouped"], family, op=op, n_ds=n_ds, alpha=1.5, beta=-0.75, cfg=_cfg(split_k=split_k))


def test_long_reduction_blocks_and_tiles():
    # several K and C tiles, several chunks per image and images per split
    _check(CASES["2d-long"], "ngchw", "fp16", cfg=_cfg(block_m=32, block_n=16, block_k=32, split_k=3))


def test_declines():
    p = CASES["2d"]
    fo = FUSED_OPS["passthrough"]
    why = ALG.decline(_cfg(), p, layout_for("nhwgc", 2), DATA_TYPES["fp16"], fo)
    assert why and "channels-last" in why
    why = ALG.decline(_cfg(), p, layout_for("ngchw", 2), DATA_TYPES["fp16_fp8"], fo)
    assert why and "fp8" in why
    big = _cfg(block_m=256, block_n=256, block_k=64, num_warps=8, num_stages=4)
    why = ALG.decline(big, p, layout_for("ngchw", 2), DATA_TYPES["fp32"], fo)
    assert why and "shared memory" in why
    assert ALG.decline(_cfg(), p, layout_for("ngchw_kcyx", 2), DATA_TYPES["bf16"], fo) is None
    for other in (_p(2, f=(3, 3), i=(6, 6), lp=(1, 1), rp=(1, 1)), _p(2, f=(1, 1), i=(6, 6), s=(2, 2)),
                  _p(2, f=(1, 1), i=(6, 6), lp=(1, 0), rp=(0, 0))):
        why = ALG.decline(_cfg(), other, layout_for("ngchw", 2), DATA_TYPES["bf16"], fo)
        assert why and "1x1 filters with stride 1 and no padding" in why
