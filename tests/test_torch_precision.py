"""instance_factory.torch runs float32 at the precision PyTorch gives its cuDNN convolutions (TF32 by default).

The setting's reading runs anywhere; the converted layer's backward runs its kernels (Triton interpreter
on CPU, where TF32 is forced through the precision hook, or the GPU, where PyTorch's own setting decides).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import contextlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import instance_factory.ops as core_ops  # noqa: E402
import instance_factory.torch as ift  # noqa: E402
from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.reference import rel_error  # noqa: E402
from instance_factory.torch import custom_ops, precision  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::instance_factory.tuning.lookup.TuningMissWarning")
DEV = "cpu" if interpreting() else "cuda"
needs_kernels = pytest.mark.skipif(not torch.cuda.is_available() and not interpreting(),
                                   reason="needs a CUDA GPU or TRITON_INTERPRET=1")
HAS_LEVELS = hasattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision")


@contextlib.contextmanager
def conv_precision(level: str):
    """PyTorch's cuDNN convolution fp32 precision set to ``level`` ("tf32", "ieee", "none"), restored after."""
    conv = torch.backends.cudnn.conv
    old = conv.fp32_precision
    conv.fp32_precision = level
    try:
        yield
    finally:
        conv.fp32_precision = old


@pytest.mark.skipif(not HAS_LEVELS, reason="torch without the fp32_precision settings")
def test_the_cudnn_conv_setting_decides_and_none_inherits(monkeypatch):
    cuda = torch.device("cuda")  # a device object needs no GPU
    with conv_precision("tf32"):
        assert precision.cudnn_conv_tf32()
        assert precision.compute_dtype_for(torch.float32, cuda) == "tf32"
        assert precision.compute_dtype_for(torch.float32, torch.device("cpu")) is None  # CPU convs stay IEEE
        assert precision.compute_dtype_for(torch.float16, cuda) is None
        assert precision.compute_dtype_for(torch.float64, cuda) is None  # gradcheck's dtype: IEEE fp32 kernels
    with conv_precision("ieee"):
        assert not precision.cudnn_conv_tf32()
        assert precision.compute_dtype_for(torch.float32, cuda) is None
    with conv_precision("none"):  # inherits cuDNN's, then the global setting; all "none" is IEEE
        monkeypatch.setattr(torch.backends.cudnn, "fp32_precision", "tf32", raising=False)
        assert precision.cudnn_conv_tf32()
        monkeypatch.setattr(torch.backends.cudnn, "fp32_precision", "none", raising=False)
        monkeypatch.setattr(torch.backends, "fp32_precision", "none", raising=False)
        assert not precision.cudnn_conv_tf32()


def test_a_torch_without_the_new_settings_reads_allow_tf32(monkeypatch):
    class LegacyCudnn:
        allow_tf32 = False

    monkeypatch.setattr(torch.backends, "cudnn", LegacyCudnn())
    assert not precision.cudnn_conv_tf32()
    LegacyCudnn.allow_tf32 = True
    assert precision.cudnn_conv_tf32()


def _model() -> nn.Module:
    return ift.convert(nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, 1, groups=2)))


def _float64_grads(model: nn.Module, x: torch.Tensor, g: torch.Tensor) -> dict:
    """float64 gradients of the step's own forward: the ReLU mask and conv2's input come from the model's
    forward at the current precision (TF32 on a GPU), so a pre-activation that TF32 rounds across zero
    counts the same on both sides and only the backward's precision is measured."""
    from torch.nn.grad import conv2d_input, conv2d_weight

    conv1, conv2 = model[0], model[2]
    with torch.no_grad():
        h = conv1(x).double()
    a, xd, gd = h.clamp_min(0), x.detach().double(), g.double()
    w1, w2 = conv1.weight.detach().double(), conv2.weight.detach().double()
    dh = conv2d_input(a.shape, w2, gd, groups=2) * (h > 0)
    return {"x": conv2d_input(xd.shape, w1, dh, padding=1),
            "0.weight": conv2d_weight(xd, w1.shape, dh, padding=1), "0.bias": dh.sum((0, 2, 3)),
            "2.weight": conv2d_weight(a, w2.shape, gd, groups=2), "2.bias": gd.sum((0, 2, 3))}


@needs_kernels
def test_float32_backward_runs_the_tf32_kernels_while_the_setting_says_tf32(monkeypatch):
    """Every backward call gets compute_dtype="tf32", the gradients meet the tf32 tolerance, and a repeat
    step takes the cached runner of the tf32 instance (on CPU the hook stands for a CUDA device)."""
    if DEV == "cpu":
        monkeypatch.setattr(custom_ops, "compute_dtype_for",
                            lambda dtype, device: "tf32" if dtype == torch.float32 else None)
    seen = []
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        real = getattr(core_ops, op)

        def spy(*a, _real=real, **kw):
            seen.append(kw.get("compute_dtype"))
            return _real(*a, **kw)

        monkeypatch.setattr(core_ops, op, spy)
    torch.manual_seed(0)
    model = _model().to(DEV).to(memory_format=torch.channels_last)
    x = torch.randn(2, 4, 6, 5, device=DEV).to(memory_format=torch.channels_last).requires_grad_()
    g = torch.randn(2, 8, 6, 5, device=DEV)
    ctx = conv_precision("tf32") if DEV == "cuda" and HAS_LEVELS else contextlib.nullcontext()
    with ctx:
        for step in range(2):
            x.grad = None
            model.zero_grad()
            model(x).backward(g)
            if step == 0:
                assert seen and set(seen) == {"tf32"}, seen
    ref = _float64_grads(model, x, g)
    got = {"x": x.grad, **{n: p.grad for n, p in model.named_parameters()}}
    for name, r in ref.items():
        err = rel_error(got[name].double(), r)
        assert err <= 2e-3, f"{name}: {err:.2e}"
    assert any(k[-1] == "tf32" for k in custom_ops._REPEAT), "the repeat step should take the cached tf32 runner"


@needs_kernels
@pytest.mark.skipif(DEV != "cuda" or not HAS_LEVELS, reason="PyTorch's own setting reaches only CUDA tensors")
def test_recorded_problems_follow_the_setting_on_the_gpu():
    model = _model().to(DEV)
    x = torch.randn(2, 4, 6, 5, device=DEV, requires_grad=True)
    for level, name in (("tf32", "fp32_tf32"), ("ieee", "fp32")):
        with conv_precision(level), ift.record_backward_problems() as found:
            model(x)
        assert {p.dtype for p in found} == {name}
