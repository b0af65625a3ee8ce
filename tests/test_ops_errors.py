"""Bad input gets a clear error naming the problem, before any launch."""

import pytest
import torch
import triton
import triton.language as tl

import instance_factory as inf
from instance_factory.registry import get_registry

P = inf.ConvParams(2, 2, 2, 4, 3, (3, 3), (6, 5), (2, 1), (1, 1), (1, 0), (0, 1))
LAY = "NHWGC/GKYXC/NHWGK"


def _data(dtype=torch.float32):
    lt = inf.parse_layout(LAY)
    dy = torch.randn(lt.shape("output", P), dtype=dtype)
    w = torch.randn(lt.shape("weight", P), dtype=dtype)
    x = torch.randn(lt.shape("input", P), dtype=dtype)
    return x, w, dy


def _inst(op, spec="default", dtype="fp32", fused="passthrough"):
    pat = f"{op}-igemm-NHWGC_GKYXC_NHWGK-{dtype}-{fused}-*_{spec}"
    return get_registry().instances(pattern=pat)[0]


@triton.jit
def _twice(acc):
    return 2.0 * tl.maximum(acc, acc)


def test_wrong_shape_names_tensor_and_expected_layout_shape():
    x, w, dy = _data()
    with pytest.raises(ValueError, match=r"grad_out has shape .* layout NHWGK .* \(N, H, W, G, K\) = \(2, 3, 4, 2, 4\)"):
        inf.conv_bwd_data(dy.reshape(2, 3, 4, 4, 2), w, P, layout=LAY, instance=_inst("conv_bwd_data"))
    with pytest.raises(ValueError, match="layout GKYXC"):
        inf.conv_bwd_weight(x, dy, P, layout="NHWGC/GKYXC/NHWGK", ds=(torch.randn(1),), op="bilinear",
                            instance=_inst("conv_bwd_weight"))


def test_dtype_mismatch_and_undeclared_mixed_types():
    x, w, dy = _data()
    with pytest.raises(TypeError, match="grad_out is torch.float32 but weight is torch.float16"):
        inf.conv_bwd_data(dy, w.half(), P, layout=LAY)
    with pytest.raises(TypeError, match="wei_dtype=torch.float32 with torch.float16 data is not a declared"):
        inf.conv_bwd_weight(x.half(), dy.half(), P, layout=LAY, wei_dtype=torch.float32)
    with pytest.raises(ValueError, match="not declared for layout .* fp16_fp8"):
        inf.conv_bwd_data(dy.half(), w.half(), P, layout=LAY, compute_dtype="fp8")
    with pytest.raises(TypeError, match="compute_dtype='tf32' is not available for torch.float16"):
        inf.conv_bwd_data(dy.half(), w.half(), P, layout=LAY, compute_dtype="tf32")
    with pytest.raises(TypeError, match="unsupported tensor dtype torch.float64"):
        inf.conv_bwd_data(dy.double(), w.double(), P, layout=LAY)


def test_non_contiguous_and_layout_mismatch():
    x, w, dy = _data()
    bad = dy.transpose(0, 1).contiguous().transpose(0, 1)
    with pytest.raises(ValueError, match="grad_out must be contiguous"):
        inf.conv_bwd_data(bad, w, P, layout=LAY)
    with pytest.raises(ValueError, match="3D layout but the problem has ndim=2"):
        inf.conv_bwd_data(dy, w, P, layout="NDHWGC/GKZYXC/NDHWGK")


def test_d_tensors_checked():
    x, w, dy = _data()
    with pytest.raises(ValueError, match=r"ds\[0\] has shape"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, ds=(torch.randn(3, 3),), op="add")
    with pytest.raises(ValueError, match="'bilinear' .* takes 1 D tensors, got 0"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, op="bilinear")
    with pytest.raises(ValueError, match="unknown fused op 'mul'"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, op="mul")
    with pytest.raises(TypeError, match=r"ds\[0\] is torch.float16"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, ds=(torch.randn_like(x).half(),), op="add")


@pytest.mark.parametrize("alpha", ["2", None, [1.0], torch.ones(())])
def test_alpha_and_beta_must_be_real_numbers(alpha):
    """A string (which float() would take), None, a list or a tensor is a TypeError naming the argument, also on the
    cached path of a repeat call; ints, floats and NumPy scalars are scale factors (tools/fuzz_verify.py --errors
    found "2" accepted as 2.0)."""
    import numpy as np

    x, w, dy = _data()
    d = torch.randn_like(x)
    ok = inf.conv_bwd_data(dy, w, P, layout=LAY, ds=(d,), op="bilinear", alpha=np.float32(1.5), beta=2)
    for _ in range(2):  # the first call binds, the second takes the cached runner
        with pytest.raises(TypeError, match="alpha must be a real number"):
            inf.conv_bwd_data(dy, w, P, layout=LAY, ds=(d,), op="bilinear", alpha=alpha)
        with pytest.raises(TypeError, match="beta must be a real number"):
            inf.conv_bwd_weight(x, dy, P, layout=LAY, beta=alpha)
        inf.conv_bwd_weight(x, dy, P, layout=LAY)
    assert torch.isfinite(ok).all()


def test_device_rules(monkeypatch):
    x, w, dy = _data()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="CPU tensors run only in the Triton interpreter"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, instance=_inst("conv_bwd_data"))


def test_forced_instance_that_cannot_run_says_why():
    x, w, dy = _data()
    with pytest.raises(ValueError, match="cannot run conv_bwd_data .*: "):
        inf.conv_bwd_data(dy, w, P, layout=LAY, instance=_inst("conv_bwd_data", spec="1x1s1p0"))
    with pytest.raises(ValueError, match="is a conv_bwd_weight instance and cannot run conv_bwd_data"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, instance=_inst("conv_bwd_weight"))
    fp16 = _inst("conv_bwd_data", dtype="fp16")
    with pytest.raises(ValueError, match="instance is for data type fp16, the problem is fp32"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, instance=fp16.name)
    with pytest.raises(KeyError, match="no instance named 'bogus'"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, instance="bogus")
    with pytest.raises(TypeError, match="params must be an instance_factory.ConvParams"):
        inf.conv_bwd_data(dy, w, (1, 2), layout=LAY)


def test_user_function_runs_through_public_api():
    x, w, dy = _data()
    with pytest.raises(ValueError, match="instance fuses 'passthrough', the call asks for 'custom'"):
        inf.conv_bwd_data(dy, w, P, layout=LAY, op=_twice, instance=_inst("conv_bwd_data"))
    out = inf.conv_bwd_data(dy, w, P, layout=LAY, op=_twice, instance=_inst("conv_bwd_data", fused="custom"))
    plain = inf.conv_bwd_data(dy, w, P, layout=LAY, instance=_inst("conv_bwd_data"))
    assert torch.allclose(out, 2 * plain, rtol=1e-5, atol=1e-5)
