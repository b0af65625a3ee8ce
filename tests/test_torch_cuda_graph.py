"""A converted model's training step captured in a CUDA graph (GPU only).

The backward ops launch Triton kernels on the current stream, allocate through torch and never wait for
the GPU, so a whole step (forward, loss, backward) can be captured with ``torch.cuda.graph`` (PyTorch's
whole-network recipe, and what ``torch.compile(mode="reduce-overhead")`` does): replays need no host work
per layer. Each replay must rewrite the same gradients the eager step computes, for new input data.
"""

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import instance_factory.torch as ift
from instance_factory.reference import rel_error

# the capture recipe and the step are train_step_check's (tools/), the tool that times graphed steps
_spec = importlib.util.spec_from_file_location(
    "train_step_check", Path(__file__).resolve().parent.parent / "tools" / "train_step_check.py")
train_step_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train_step_check)
_step, capture_step = train_step_check.issue_step, train_step_check.capture_step

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore::instance_factory.tuning.lookup.TuningMissWarning"),
]

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _model() -> nn.Module:
    """1x1, grouped 3x3 stride 2, depthwise 3x3 and dense 3x3 layers with BatchNorm: several kernel families
    (split-K finalize passes, tap tables, weight copies) in one graph."""
    return nn.Sequential(
        nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=4, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 16, 3, padding=1, bias=True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_a_captured_step_replays_the_eager_gradients(autocast):
    torch.manual_seed(0)
    conv = getattr(torch.backends.cudnn, "conv", None)
    old = getattr(conv, "fp32_precision", None)
    if old is not None:
        conv.fp32_precision = "ieee"  # fp32 gradients held to IEEE accuracy
    try:
        model = ift.convert(_model()).cuda().to(memory_format=torch.channels_last)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.track_running_stats = False  # replays must not drift the statistics the eager step sees
                m.running_mean = m.running_var = None
        x = torch.randn(16, 8, 20, 20, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (16,), device="cuda")
        graph = capture_step(model, x, y, autocast)
        graph_grads = {n: p.grad for n, p in model.named_parameters()}  # the tensors every replay rewrites
        assert all(g is not None for g in graph_grads.values())
        for _ in range(2):  # new data in the static input: the replay's gradients are those of the new data
            x.copy_(torch.randn_like(x))
            y.copy_(torch.randint(0, 10, (16,), device="cuda"))
            graph.replay()
            torch.cuda.synchronize()
            replayed = {n: g.detach().clone() for n, g in graph_grads.items()}
            _step(model, x, y, autocast)  # eager, on the same data (new gradient tensors)
            tol = TOL[torch.bfloat16 if autocast else torch.float32]
            for n, p in model.named_parameters():
                assert torch.isfinite(replayed[n]).all(), n
                err = rel_error(replayed[n].double(), p.grad.double())
                assert err <= tol, f"{n}: replay vs eager {err:.2e}"
    finally:
        if old is not None:
            conv.fp32_precision = old


def test_torch_compile_reduce_overhead_runs_the_converted_backward_in_cuda_graphs():
    """``torch.compile(mode="reduce-overhead")`` traces the custom ops (no graph break) and replays the step
    from CUDA graphs: its gradients equal those of the same compiled graph run without CUDA graphs, on fresh
    data each step, and its convolution weights' gradients match the eager converted model's (inductor's own
    BatchNorm reorders sums, so the BatchNorm parameters are compared only between the two compiled runs)."""
    import copy

    torch.manual_seed(1)
    conv = getattr(torch.backends.cudnn, "conv", None)
    old = getattr(conv, "fp32_precision", None)
    if old is not None:
        conv.fp32_precision = "ieee"
    try:
        eager = ift.convert(_model()).cuda().to(memory_format=torch.channels_last)
        plain, graphed = copy.deepcopy(eager), copy.deepcopy(eager)
        runs = ((eager, eager), (plain, torch.compile(plain, fullgraph=True)),
                (graphed, torch.compile(graphed, mode="reduce-overhead", fullgraph=True)))
        for _ in range(4):  # the first calls record, later ones replay
            x = torch.randn(16, 8, 20, 20, device="cuda").to(memory_format=torch.channels_last)
            y = torch.randint(0, 10, (16,), device="cuda")
            for model, fn in runs:
                model.zero_grad(set_to_none=True)
                F.cross_entropy(fn(x), y).backward()
            for (n, p), q, r in zip(eager.named_parameters(), plain.parameters(), graphed.parameters()):
                assert r.grad is not None and torch.isfinite(r.grad).all(), n
                err = rel_error(r.grad.double(), q.grad.double())
                assert err <= 1e-5, f"{n}: CUDA-graph replay vs the same compiled graph {err:.2e}"
                if p.dim() == 4:  # a convolution weight: our wgrad kernel's output
                    err = rel_error(r.grad.double(), p.grad.double())
                    assert err <= 1e-4, f"{n}: compiled vs eager {err:.2e}"
    finally:
        if old is not None:
            conv.fp32_precision = old
