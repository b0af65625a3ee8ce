"""instance_factory.torch: autograd, layouts, dtypes, autocast, convert, the residual fusion, torch.compile.

Every backward here runs the real kernels (Triton interpreter on CPU, or the GPU). Shapes are tiny:
each backward costs about a second in the interpreter.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd.gradcheck import GradcheckError  # noqa: E402

import instance_factory.ops as core_ops  # noqa: E402
import instance_factory.torch as ift  # noqa: E402
from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.dtypes import resolve_dtype  # noqa: E402
from instance_factory.reference import rel_error  # noqa: E402
from instance_factory.torch import bridge  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() and not interpreting(),
                       reason="needs a CUDA GPU or TRITON_INTERPRET=1"),
    pytest.mark.filterwarnings("ignore::instance_factory.tuning.lookup.TuningMissWarning"),
    pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel"),  # torch's own reference conv
]

DEV = "cpu" if interpreting() else "cuda"
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
FUNCTIONAL = {1: ift.conv1d, 2: ift.conv2d, 3: ift.conv3d}
TORCH_FUNCTIONAL = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}


@pytest.fixture(autouse=True)
def _ieee_fp32_on_the_gpu():
    """These tests hold float32 to IEEE accuracy: on a GPU that takes PyTorch's cuDNN precision set to
    "ieee" (its default, TF32, is covered in test_torch_precision.py)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    if DEV != "cuda" or not hasattr(conv, "fp32_precision"):
        yield
        return
    old = conv.fp32_precision
    conv.fp32_precision = "ieee"
    try:
        yield
    finally:
        conv.fp32_precision = old


def _grads(fn, x, w, b, g):
    inputs = (x, w) if b is None else (x, w, b)
    return torch.autograd.grad(fn(x, w, b), inputs, g)


def _leaf(t: torch.Tensor, **kw) -> torch.Tensor:
    return t.detach().to(**kw).requires_grad_()


# ------------------------------------------------------------------------------------------------
# gradcheck in float64 (float64 runs the true-fp32 kernels)
# ------------------------------------------------------------------------------------------------
GRADCHECK_CASES = {  # name: ndim, input shape, weight shape, conv keywords, bias, channels-last (2D)
    "1d-g2-s2-d2-bias": (1, (2, 4, 9), (6, 2, 3), dict(stride=2, padding=1, dilation=2, groups=2), True, False),
    "2d-g2-asym-same": (2, (2, 4, 5, 6), (4, 2, 2, 3), dict(padding="same", dilation=(2, 1), groups=2), True, False),
    "2d-g2-asym-same-cl": (2, (2, 4, 5, 6), (4, 2, 2, 3), dict(padding="same", dilation=(2, 1), groups=2), True,
                           True),
    "2d-s2x1-d1x2-nobias": (2, (1, 3, 7, 6), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
                            False, False),
    "2d-s2x1-d1x2-nobias-cl": (2, (1, 3, 7, 6), (4, 3, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
                               False, True),
    "3d-depthwise-s1x2x1": (3, (1, 3, 3, 5, 3), (3, 1, 2, 3, 2), dict(stride=(1, 2, 1), padding=1, groups=3), True,
                            False),
}


@pytest.mark.parametrize("case", list(GRADCHECK_CASES))
def test_gradcheck_float64(case):
    ndim, xs, ws, kw, bias, channels_last = GRADCHECK_CASES[case]
    gen = torch.Generator().manual_seed(1)
    fmt = dict(memory_format=torch.channels_last) if channels_last else {}
    x = _leaf(torch.randn(xs, generator=gen, dtype=torch.float64), device=DEV, **fmt)
    w = _leaf(torch.randn(ws, generator=gen, dtype=torch.float64), device=DEV, **fmt)
    b = _leaf(torch.randn(ws[0], generator=gen, dtype=torch.float64), device=DEV) if bias else None
    fn = FUNCTIONAL[ndim]
    assert torch.autograd.gradcheck(lambda x, w, b: fn(x, w, b, **kw), (x, w, b), fast_mode=True,
                                    check_batched_grad=False)


def test_gradcheck_catches_a_wrong_backward(monkeypatch):
    """The gradcheck above can fail: a backward that is off by a pad gives a wrong gradient."""
    real = ift.custom_ops.conv_bwd_data_impl

    def off_by_one(grad_out, weight, input_size, stride, pl, pr, *rest):
        return real(grad_out, weight, input_size, stride, [p + 1 for p in pl], [max(p - 1, 0) for p in pr], *rest)

    monkeypatch.setattr(ift.custom_ops, "conv_bwd_data_impl", off_by_one)
    gen = torch.Generator().manual_seed(3)
    x = _leaf(torch.randn(1, 2, 6, dtype=torch.float64, generator=gen), device=DEV)
    w = torch.randn(2, 2, 3, dtype=torch.float64, generator=gen).to(DEV)
    # the full Jacobian (12 x 12): fast mode compares one random projection, which a wrong backward
    # can match by chance (a fresh-clone CI run once saw it not raise)
    with pytest.raises(GradcheckError):
        torch.autograd.gradcheck(lambda x: ift.conv1d(x, w, padding=1), (x,), fast_mode=False)


# ------------------------------------------------------------------------------------------------
# data types and layouts vs torch's backward in float64
# ------------------------------------------------------------------------------------------------
def _check_against_float64(ndim, x, w, b, kw, tol):
    """Our grads vs torch's float64 autograd on the same (rounded) values; NaN-free and in the input's format."""
    out = FUNCTIONAL[ndim](x, w, b, **kw)
    g = torch.randn(out.shape, dtype=torch.float32, device=DEV).to(x.dtype)
    ours = torch.autograd.grad(out, (x, w) if b is None else (x, w, b), g)
    x64, w64 = _leaf(x, dtype=torch.float64), _leaf(w, dtype=torch.float64)
    b64 = None if b is None else _leaf(b, dtype=torch.float64)
    ref = _grads(lambda x, w, b: TORCH_FUNCTIONAL[ndim](x, w, b, **kw), x64, w64, b64, g.double())
    for name, o, r in zip(("input", "weight", "bias"), ours, ref):
        assert o.dtype == x.dtype, name
        err = rel_error(o, r)
        assert err <= tol, f"grad {name}: rel error {err:.3e} > {tol}"
    return ours


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_dtypes_channels_last_2d(dtype):
    x = _leaf(torch.randn(2, 8, 6, 5, device=DEV).to(dtype), memory_format=torch.channels_last)
    w = _leaf(torch.randn(6, 4, 3, 3, device=DEV).to(dtype), memory_format=torch.channels_last)
    b = _leaf(torch.randn(6, device=DEV).to(dtype))
    gx, gw, _ = _check_against_float64(2, x, w, b, dict(stride=2, padding=1, groups=2), TOL[dtype])
    assert bridge.is_channels_last(gx) and gx.stride() == x.stride()
    assert gw.stride() == w.stride()


@pytest.mark.parametrize("ndim", [1, 3])
def test_layout_bridge_every_ndim(ndim):
    """1D/3D channels-last activations (NWGC, NDHWGC) with a contiguous weight (one weight copy)."""
    spatial = (7,) if ndim == 1 else (3, 4, 5)
    filt = (3,) if ndim == 1 else (2, 3, 2)
    x = torch.randn(2, 4, *spatial, device=DEV).movedim(1, -1).contiguous().movedim(-1, 1).requires_grad_()
    w = _leaf(torch.randn(6, 2, *filt, device=DEV))
    assert bridge.is_channels_last(x) and not x.is_contiguous()
    gx, gw = _check_against_float64(ndim, x, w, None, dict(padding=1, groups=2, dilation=2 if ndim == 1 else 1),
                                    TOL[torch.float32])
    assert gx.stride() == x.stride() and gw.stride() == w.stride()



def test_is_channels_last_matches_its_definition():
    """The 4D/5D fast path (torch's memory-format flag) answers as the definition does: channel axis
    innermost, the rest dense, size-1 dims ignored; empty and 3D tensors take the definition itself."""
    gen = torch.Generator().manual_seed(0)
    store = torch.empty(4096)
    cases = [torch.empty(0, 4, 3, 3), torch.empty(2, 0, 3, 3).to(memory_format=torch.channels_last),
             torch.empty(2, 4, 5).movedim(1, -1).contiguous().movedim(-1, 1), torch.empty(2, 4, 5)]
    for _ in range(400):
        dim = 4 + int(torch.randint(0, 2, (1,), generator=gen))
        shape = [int(s) for s in torch.randint(1, 4, (dim,), generator=gen)]
        strides = [int(s) for s in torch.tensor([1, 2, 3, 4, 6, 8, 12, 24])[torch.randint(0, 8, (dim,), generator=gen)]]
        cases.append(store.as_strided(shape, strides))
        perm = [int(p) for p in torch.randperm(dim, generator=gen)]
        cases.append(torch.empty(shape).permute(perm))
    for t in cases:
        assert bridge.is_channels_last(t) == t.movedim(1, -1).is_contiguous(), (tuple(t.shape), t.stride())

def test_contiguous_input_with_channels_last_weight_and_odd_strides():
    """NGCHW with a GKYXC weight, and a grad_out with neither format (copied once)."""
    x = _leaf(torch.randn(1, 4, 5, 5, device=DEV))
    w = _leaf(torch.randn(4, 4, 3, 3, device=DEV), memory_format=torch.channels_last)
    assert bridge.layout_name(2, bridge.prefers_channels_last(x, w), True) == "NGCHW/GKYXC/NGKHW"
    out = ift.conv2d(x, w, padding=1)
    g = torch.randn(5, 5, 1, 4, device=DEV).permute(2, 3, 0, 1)  # neither contiguous nor channels-last
    gx, gw = torch.autograd.grad(out, (x, w), g)
    rx, rw = torch.autograd.grad(torch.nn.functional.conv2d(x.double(), w.double(), padding=1), (x, w), g.double())
    assert rel_error(gx, rx) <= 1e-5 and rel_error(gw, rw) <= 1e-5
    assert gx.is_contiguous() and gw.stride() == w.stride()


def test_repeat_calls_take_the_cached_runner_and_stay_exact():
    """The eager backward caches, per problem, the runner of a call that needed no copy or cast, and
    hands it the PyTorch tensors on the next call with the same shapes and strides; a call whose grad_out
    has other strides (a copy is needed) takes the full path. Both give the float64 answer."""
    from instance_factory.torch import custom_ops

    custom_ops._REPEAT.clear()
    x = _leaf(torch.randn(2, 8, 6, 5, device=DEV), memory_format=torch.channels_last)
    w = _leaf(torch.randn(6, 4, 3, 3, device=DEV), memory_format=torch.channels_last)
    rx = rw = None
    for i, g in enumerate([torch.randn(2, 6, 6, 5, device=DEV).to(memory_format=torch.channels_last)] * 2
                          + [torch.randn(2, 6, 6, 5, device=DEV)]):  # the last one: contiguous, not channels-last
        out = ift.conv2d(x, w, padding=1, groups=2)
        gx, gw = torch.autograd.grad(out, (x, w), g)
        rx, rw = torch.autograd.grad(torch.nn.functional.conv2d(x.double(), w.double(), padding=1, groups=2),
                                     (x, w), g.double())
        assert rel_error(gx, rx) <= 1e-5 and rel_error(gw, rw) <= 1e-5, i
        assert gx.stride() == x.stride() and gw.stride() == w.stride()
        assert len(custom_ops._REPEAT) == 2  # data and weight, from the first call on
    launched = []
    real = core_ops._launch
    core_ops._launch = lambda run, *a: launched.append(run) or real(run, *a)
    try:
        g = torch.randn(2, 6, 6, 5, device=DEV).to(memory_format=torch.channels_last)
        torch.autograd.grad(ift.conv2d(x, w, padding=1, groups=2), (x, w), g)
    finally:
        core_ops._launch = real
    assert set(launched) == {r.run for r in custom_ops._REPEAT.values()}


def test_unbatched_input_and_valid_padding():
    x = _leaf(torch.randn(3, 9, device=DEV))
    w = _leaf(torch.randn(2, 3, 4, device=DEV))
    out = ift.conv1d(x, w, padding="valid")
    assert out.shape == (2, 6)
    gx, gw = torch.autograd.grad(out.sum(), (x, w))
    rx, rw = torch.autograd.grad(torch.nn.functional.conv1d(x.double(), w.double()).sum(), (x, w))
    assert rel_error(gx, rx) <= 1e-5 and rel_error(gw, rw) <= 1e-5


def test_bad_arguments_are_named():
    x, w = torch.randn(1, 2, 5, 5, device=DEV), torch.randn(2, 2, 3, 3, device=DEV)
    with pytest.raises(ValueError, match="strided"):
        ift.conv2d(x, w, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding must be"):
        ift.conv2d(x, w, padding="full")
    with pytest.raises(ValueError, match="weight of 4 dims"):
        ift.conv2d(x, w[0])
    with pytest.raises(ValueError, match="stride must be"):
        ift.conv2d(x, w, stride=(1, 1, 1))
    with pytest.raises(ValueError, match="groups=3"):
        bridge.conv_params((1, 4, 5, 5), (6, 2, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 3)
    with pytest.raises(TypeError, match="float32, float16, bfloat16"):
        ift.custom_ops.conv_bwd_data_impl(torch.ones(1, 2, 3, 3, dtype=torch.int32, device=DEV),
                                          torch.ones(2, 2, 3, 3, dtype=torch.int32, device=DEV), [1, 2, 5, 5],
                                          [1, 1], [0, 0], [0, 0], [1, 1], 1, False)


# ------------------------------------------------------------------------------------------------
# modules, convert, autocast
# ------------------------------------------------------------------------------------------------
class _Small(nn.Module):
    """Conv1d -> Conv2d (grouped, strided, reflect padding) -> Conv3d, with BN and ReLU between."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=2, padding_mode="reflect", bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.c3 = nn.Conv3d(1, 2, (1, 2, 2), padding="same")

    def forward(self, x):  # x: (N, 2, 16)
        h = torch.relu(self.c1(x)).view(x.shape[0], 4, 4, 4)
        h = torch.relu(self.bn(self.c2(h)))
        return self.c3(h.unsqueeze(1)).square().mean()


def _param_grads(model, x, run=None):
    """Gradients of every parameter of ``model`` and of ``x``, running ``run`` (default: the model)."""
    model.zero_grad(set_to_none=True)
    x = _leaf(x)
    out = (run or model)(x)
    (out if out.dim() == 0 else out.sum()).backward()  # sum: grad_out is an expanded (stride-0) tensor
    return {**{n: p.grad.clone() for n, p in model.named_parameters()}, "input": x.grad}


def test_convert_small_model_matches_torch():
    torch.manual_seed(0)
    ref = _Small().to(DEV)
    model = _Small().to(DEV)
    model.load_state_dict(ref.state_dict())
    weight = model.c2.weight
    assert ift.convert(model) is model
    assert type(model.c1) is ift.Conv1d and type(model.c2) is ift.Conv2d and type(model.c3) is ift.Conv3d
    assert model.c2.weight is weight and model.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(3, 2, 16, device=DEV)
    ours, theirs = _param_grads(model, x), _param_grads(ref.double(), x.double())
    for name, r in theirs.items():
        assert rel_error(ours[name], r) <= 1e-5, name


def test_convert_leaves_subclasses_and_transposed_alone():
    class MyConv(nn.Conv2d):
        pass

    m = nn.Sequential(MyConv(2, 2, 1), nn.ConvTranspose2d(2, 2, 1), nn.Conv2d(2, 2, 1))
    ift.convert(m)
    assert [type(c) for c in m] == [MyConv, nn.ConvTranspose2d, ift.Conv2d]
    root = nn.Conv3d(1, 1, 1)
    assert type(ift.convert(root)) is ift.Conv3d
    with pytest.raises(TypeError, match="nn.Module"):
        ift.convert("resnet")


def test_module_constructor_and_state_dict_are_torch():
    conv = ift.Conv2d(4, 8, (3, 1), stride=(2, 1), padding=(1, 0), dilation=(1, 1), groups=2, bias=True)
    ref = nn.Conv2d(4, 8, (3, 1), stride=(2, 1), padding=(1, 0), groups=2)
    ref.load_state_dict(conv.state_dict())
    assert isinstance(conv, nn.Conv2d) and conv.weight.shape == ref.weight.shape
    x = torch.randn(1, 4, 5, 3, device=DEV)
    torch.testing.assert_close(conv.to(DEV)(x), ref.to(DEV)(x))


def test_autocast_bf16_gives_fp32_grads_like_torch():
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).to(DEV)
    ref = ref.to(memory_format=torch.channels_last)
    model = ift.convert(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).to(DEV))
    model = model.to(memory_format=torch.channels_last)
    model.load_state_dict(ref.state_dict())
    x = torch.randn(2, 4, 6, 6, device=DEV).to(memory_format=torch.channels_last)
    grads = []
    for m in (model, ref):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = m(x).float().square().mean()
        loss.backward()
        grads.append([p.grad for p in m.parameters()])
    for ours, theirs in zip(*grads):
        assert ours.dtype == torch.float32
        assert rel_error(ours, theirs) <= TOL[torch.bfloat16]


# ------------------------------------------------------------------------------------------------
# the residual fusion (conv_bwd_data with op="add")
# ------------------------------------------------------------------------------------------------
def test_residual_conv_fuses_the_skip_gradient(monkeypatch):
    calls = []
    real = core_ops.conv_bwd_data

    def spy(*args, **kwargs):
        calls.append(kwargs.get("op", "passthrough"))
        return real(*args, **kwargs)

    monkeypatch.setattr(core_ops, "conv_bwd_data", spy)
    torch.manual_seed(0)
    conv, body, short = nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 1, bias=False)
    block = ift.ResidualConv(conv, body, short).to(DEV).to(memory_format=torch.channels_last)
    assert type(block.conv) is ift.Conv2d and type(block.shortcut) is nn.Conv2d
    x = torch.randn(2, 4, 5, 5, device=DEV).to(memory_format=torch.channels_last)
    with ift.record_backward_problems() as found:
        ours = _param_grads(block, x)
    assert calls == ["add"]
    assert [(p.op, p.fused_op) for p in found] == [("conv_bwd_data", "add"), ("conv_bwd_weight", "passthrough")]
    block64 = block.double()
    x64 = _leaf(x, dtype=torch.float64)
    loss = (body(torch.nn.functional.conv2d(x64, block64.conv.weight, block64.conv.bias, padding=1))
            + short(x64)).sum()
    ref = dict(zip(["conv.weight", "conv.bias", "shortcut.weight", "input"],
                   torch.autograd.grad(loss, [*block64.parameters(), x64])))
    for name, r in ref.items():
        assert rel_error(ours[name], r) <= 1e-5, name


def test_residual_conv_identity_shortcut_without_input_grad_path():
    conv = ift.Conv1d(3, 3, 3, padding=1).to(DEV)
    x = _leaf(torch.randn(2, 3, 8, device=DEV))
    h, skip = conv.forward_with_skip(x)
    gx = torch.autograd.grad((h * 2 + skip * 3).sum(), x)[0]
    rx = torch.autograd.grad((torch.nn.functional.conv1d(x.double(), conv.weight.double(), conv.bias.double(),
                                                         padding=1) * 2 + x * 3).sum(), x)[0]
    assert rel_error(gx, rx) <= 1e-5


# ------------------------------------------------------------------------------------------------
# torch.library ops and torch.compile
# ------------------------------------------------------------------------------------------------
def test_custom_ops_fake_kernels_match_real():
    x = torch.randn(2, 4, 5, 6, device=DEV).to(memory_format=torch.channels_last)
    w = torch.randn(6, 2, 3, 1, device=DEV)
    dy = torch.randn(2, 6, 3, 6, device=DEV)
    geometry = ([2, 1], [1, 0], [1, 0], [1, 1], 2)
    torch.library.opcheck(torch.ops.instance_factory.conv_bwd_data.default,
                          (dy, w, list(x.shape), *geometry, True, None), test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.instance_factory.conv_bwd_weight.default,
                          (x, dy, list(w.shape), *geometry, True, False),
                          test_utils=("test_schema", "test_faketensor"))


def test_compile_fullgraph_uses_the_custom_ops():
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm.code)
        return gm

    torch._dynamo.reset()
    torch.manual_seed(0)
    # ReLU before BatchNorm: a conv bias right before BatchNorm has a gradient of ~0 (rounding noise)
    model = ift.convert(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(4),
                                      nn.Conv2d(4, 4, 2, padding="same", groups=2, bias=False))).to(DEV)
    compiled = torch.compile(model, fullgraph=True, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep))
    x = torch.randn(2, 3, 6, 6, device=DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = _param_grads(model, x)
        compiled_grads = _param_grads(model, x, run=compiled)
    backward = graphs[-1]
    assert "instance_factory.conv_bwd_data" in backward and "instance_factory.conv_bwd_weight" in backward
    for name, r in eager.items():
        assert rel_error(compiled_grads[name], r) <= 1e-5, name  # fp32: compiled BatchNorm sums reorder


def test_record_backward_problems_follows_the_backward(monkeypatch):
    """The recorded problems are exactly the calls the backward then makes (op, params, layout, dtype)."""
    calls = []
    for op in ("conv_bwd_data", "conv_bwd_weight"):
        real = getattr(core_ops, op)

        def spy(a, b, params, *, layout, _op=op, _real=real, **kw):
            dtype = resolve_dtype(a.dtype, compute_dtype=kw.get("compute_dtype")).name
            calls.append(ift.BackwardProblem(_op, params, layout, dtype))
            return _real(a, b, params, layout=layout, **kw)

        monkeypatch.setattr(core_ops, op, spy)
    model = ift.convert(nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.Conv2d(4, 6, 1, groups=2)))
    model = model.to(DEV).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 7, 7, device=DEV)  # contiguous input, channels-last weights
    with ift.record_backward_problems() as found:
        loss = model(x).sum()
    loss.backward()
    assert [p.op for p in found] == ["conv_bwd_weight", "conv_bwd_data", "conv_bwd_weight"]  # no dx for x
    assert found[0].layout == "NGCHW/GKYXC/NGKHW" and found[1].layout == "NHWGC/GKYXC/NHWGK"
    assert sorted(calls, key=repr) == sorted(found, key=repr)
