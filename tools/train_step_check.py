"""One training step of torchvision models with instance_factory's backward vs the same model on cuDNN.

    python tools/train_step_check.py --out $OUT [--batch 64] [--models resnet50,resnext50_32x4d,mobilenet_v2]
    python tools/train_step_check.py --out /tmp/smoke --cpu-smoke      # tiny stand-ins, Triton interpreter

Per model (random init with a fixed seed, random input and labels, bf16 autocast (``--precision fp32``:
float32 at PyTorch's cuDNN convolution precision, TF32 by default, for both models), channels-last,
cudnn.benchmark on, train mode with dropout off so that every step sees the same network): the
converted model (``instance_factory.torch.convert``) and an identical copy on cuDNN take one forward
+ backward of cross-entropy; every parameter gradient of ours is compared with cuDNN's
(||ours - cuDNN|| / ||cuDNN||, worst parameter reported, bf16 tolerance 1e-2). Both are also
compared with an fp32 step (tf32 off) of the cuDNN model: bf16 rounding compounds over depth, so
the second verdict, "as accurate as cuDNN", asks that for every parameter ours is within 1.5x
(+2e-3) of cuDNN's own distance to fp32, and the same of all gradients taken as one vector; a
parameter where cuDNN's step is itself over 50% off fp32 (no signal) counts only in the latter.
Then the step time (forward + backward, median of --iters after --warmup) of both, the two models'
steps interleaved so that host drift lands on both alike, with the issue time beside it (host time
until backward returned: a step whose issue time is near its wall time is host-bound).
``--fuse-residual`` adds ResNet-50 / ResNeXt-50 rows whose bottlenecks feed the skip branch through
``conv1.forward_with_skip`` (the skip gradient added inside conv_bwd_data, fused op "add").
``--cuda-graph`` also captures each side's whole step in a CUDA graph (PyTorch's whole-network capture)
and times the replays, interleaved: the step without host time, as ``torch.compile(mode="reduce-overhead")``
or a hand-captured training loop runs it; ours' replayed gradients are compared with its eager step's.

Before the first step, the backward kernels of every layer are compiled in worker processes into
Triton's disk cache (the layers are recorded during a forward pass). Layers the tuning database
does not hold use the miss heuristic; their count is reported (the warnings are silenced).
Writes train_step_check.json and train_step_check.md under --out and prints the table last.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import types
import warnings
from pathlib import Path

TOLERANCE = 1e-2  # bf16
ACCURACY_FACTOR, ACCURACY_SLACK = 1.5, 2e-3  # ours vs fp32 <= 1.5 x cuDNN vs fp32 + 2e-3
# A parameter whose cuDNN gradient is this far from the fp32 step's carries no signal to rank two noisy
# steps by (TF32 steps of a freshly initialised network: a BN bias summed over cancelling terms, off by
# 2-400x); such parameters are judged only inside the whole-model error, over all parameters at once.
NO_SIGNAL = 0.5
SMOKE_CLASSES = 10


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the JSON and Markdown results")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default 64; 2 with --cpu-smoke)")
    ap.add_argument("--models", default="resnet50,resnext50_32x4d,mobilenet_v2")
    ap.add_argument("--iters", type=int, default=None, help="timed steps per model (default 10; 1 smoke)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 3; 0 smoke)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fuse-residual", action="store_true", help="add fused-residual ResNet/ResNeXt rows")
    ap.add_argument("--budget-s", type=float, default=330.0, help="skip models that would start after this")
    ap.add_argument("--workers", type=int, default=0, help="compile processes (default: cores - 1, max 15)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny stand-in models in the Triton interpreter")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16: bf16 autocast; fp32: float32 steps at PyTorch's cuDNN precision (TF32 by default)")
    ap.add_argument("--memory-format", choices=("channels_last", "contiguous"), default="channels_last",
                    help="model and input memory format (contiguous: PyTorch's default NCHW, served by the "
                         "channels-first instances)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="also capture each side's whole step in a CUDA graph and time its replays (no host in "
                         "the loop: the GPU-bound comparison); ours' replayed gradients are checked against its "
                         "eager step")
    return ap.parse_args()


NS = _parse() if __name__ == "__main__" else None
if NS is not None and NS.cpu_smoke:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import instance_factory.torch as ift  # noqa: E402
from instance_factory.reference import rel_error  # noqa: E402
from instance_factory.tuning.lookup import TuningMissWarning, explain  # noqa: E402


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------
class _SmokeBlock(nn.Module):
    """A bottleneck (1x1, grouped or depthwise 3x3 stride 2, 1x1) with a 1x1 downsample shortcut."""

    def __init__(self, cin: int, mid: int, cout: int, groups: int):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, 2, 1, groups=groups, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, 2, bias=False), nn.BatchNorm2d(cout))
        self.relu = nn.ReLU()

    def forward(self, x):  # torchvision's Bottleneck.forward, so --fuse-residual applies here too
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + self.downsample(x))


def _smoke_model(name: str) -> nn.Module:
    """Stand-ins with the layer kinds of each model: plain, 4-channel groups (ResNeXt), depthwise (MNv2)."""
    groups = {"resnet50": 1, "resnext50_32x4d": 4, "mobilenet_v2": 16}[name]
    return nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                         _SmokeBlock(8, 16, 16, groups), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, SMOKE_CLASSES))


def build_model(name: str, smoke: bool) -> nn.Module:
    if smoke:
        return _smoke_model(name)
    import torchvision

    return getattr(torchvision.models, name)(weights=None)


def _fused_bottleneck_forward(self, x):
    """torchvision's Bottleneck.forward with conv1 handing the skip branch its input (fused dL/dx)."""
    out, identity = self.conv1.forward_with_skip(x)
    out = self.relu(self.bn1(out))
    out = self.relu(self.bn2(self.conv2(out)))
    out = self.bn3(self.conv3(out))
    if self.downsample is not None:
        identity = self.downsample(identity)
    return self.relu(out + identity)


def fuse_residuals(model: nn.Module) -> int:
    """Rebind every bottleneck's forward (modules with conv1..conv3, bn3 and downsample) to the fused one."""
    n = 0
    for m in model.modules():
        if all(hasattr(m, a) for a in ("conv1", "conv3", "bn3", "downsample")) and isinstance(m.conv1, ift.Conv2d):
            m.forward = types.MethodType(_fused_bottleneck_forward, m)
            n += 1
    return n


# ------------------------------------------------------------------------------------------------
# one step, gradients, timing
# ------------------------------------------------------------------------------------------------
def issue_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast: bool) -> torch.Tensor:
    """One forward + backward of cross-entropy, issued: returns the loss without waiting for the GPU."""
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=autocast):
        loss = F.cross_entropy(model(x).float(), y)
    loss.backward()
    return loss


def train_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast: bool) -> float:
    return float(issue_step(model, x, y, autocast).detach())


def gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}


def compare(ours: dict, ref: dict, fp32: dict) -> list[dict]:
    """Per parameter, worst first: rel. error of ours vs cuDNN, and of each vs the fp32 step
    (a missing or non-finite gradient counts as inf)."""
    def err(a: dict, name: str, r: torch.Tensor) -> float:
        return float("inf") if name not in a else rel_error(a[name], r)

    rows = [{"param": n, "numel": r.numel(), "rel_err": err(ours, n, r), "ours_vs_fp32": err(ours, n, fp32[n]),
             "cudnn_vs_fp32": err(ref, n, fp32[n])} for n, r in ref.items()]
    return sorted(rows, key=lambda r: -r["rel_err"])


def as_accurate(row: dict) -> bool:
    """Ours is as close to the fp32 step as cuDNN's bf16 step is (bf16 noise compounds over depth,
    so two correct bf16 backward passes can differ by more than 1e-2 on some parameters). A parameter
    where cuDNN itself is NO_SIGNAL off counts only in `whole_model_errors`."""
    return row["cudnn_vs_fp32"] >= NO_SIGNAL or within_cudnn(row["ours_vs_fp32"], row["cudnn_vs_fp32"])


def within_cudnn(ours_err: float, cudnn_err: float) -> bool:
    """Ours at most ACCURACY_FACTOR x cuDNN's distance to the fp32 step, + ACCURACY_SLACK."""
    return ours_err <= ACCURACY_FACTOR * cudnn_err + ACCURACY_SLACK


def whole_model_errors(ours: dict, ref: dict, fp32: dict) -> tuple[float, float]:
    """||all gradients - fp32's|| / ||fp32's||, all parameters as one vector: (ours, cuDNN's)."""
    names = sorted(fp32)
    if any(n not in ours for n in names):
        return float("inf"), 0.0
    flat = [torch.cat([d[n].reshape(-1).double() for n in names]) for d in (ours, ref, fp32)]
    return rel_error(flat[0], flat[2]), rel_error(flat[1], flat[2])


def fp32_reference(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """The cuDNN model's gradients in fp32 with tf32 off (context for the bf16 errors)."""
    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        train_step(model, x, y, autocast=False)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags
    return gradients(model)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast: bool) -> tuple[float, float]:
    """(wall ms, issue ms) of one step: issue = host time until backward() returned, before the final
    synchronisation. A step whose issue time is close to its wall time is host-bound."""
    _sync(x.device)
    t0 = time.perf_counter()
    issue_step(model, x, y, autocast)
    t1 = time.perf_counter()
    _sync(x.device)
    return (time.perf_counter() - t0) * 1e3, (t1 - t0) * 1e3


def paired_step_times_ms(ref: nn.Module, ours: nn.Module, x: torch.Tensor, y: torch.Tensor, warmup: int,
                         iters: int, autocast: bool = True) -> dict[str, list[float]]:
    """Wall and issue times of both models' steps, the two interleaved (ref, ours, ours, ref, ...) so that
    drift on a shared host (other processes, clocks) lands on both sides alike."""
    for _ in range(warmup):
        train_step(ref, x, y, autocast=autocast)
        train_step(ours, x, y, autocast=autocast)
    out: dict[str, list[float]] = {"cudnn": [], "ours": [], "cudnn_issue": [], "ours_issue": []}
    for i in range(iters):
        order = (("cudnn", ref), ("ours", ours)) if i % 2 == 0 else (("ours", ours), ("cudnn", ref))
        for side, model in order:
            wall, issue = _timed_step(model, x, y, autocast)
            out[side].append(wall)
            out[side + "_issue"].append(issue)
    return out


def capture_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast: bool) -> torch.cuda.CUDAGraph:
    """One step (forward, loss, backward) captured in a CUDA graph on the static ``x`` / ``y``, after warm-up
    steps on a side stream (PyTorch's whole-network capture recipe). Gradients are None when capture starts,
    so backward allocates them in the graph's pool and every replay rewrites them in place."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            issue_step(model, x, y, autocast)
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        issue_step(model, x, y, autocast)
    return graph


def paired_graph_times_ms(graphs: dict[str, torch.cuda.CUDAGraph], warmup: int, iters: int) -> dict[str, list]:
    """Replay times of the captured steps, interleaved like :func:`paired_step_times_ms`."""
    for _ in range(warmup):
        for g in graphs.values():
            g.replay()
    out: dict[str, list[float]] = {side: [] for side in graphs}
    sides = list(graphs)
    for i in range(iters):
        for side in (sides if i % 2 == 0 else sides[::-1]):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            graphs[side].replay()
            torch.cuda.synchronize()
            out[side].append((time.perf_counter() - t0) * 1e3)
    return out


def graph_record(ref: nn.Module, ours: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast: bool,
                 g_ours_eager: dict, ns: argparse.Namespace) -> dict:
    """CUDA-graph step times of both sides and the largest relative difference between ours' replayed
    gradients and its eager step's (same inputs: only split-K atomics' summation order may differ)."""
    graphs = {"cudnn": capture_step(ref, x, y, autocast), "ours": capture_step(ours, x, y, autocast)}
    graphs["ours"].replay()
    torch.cuda.synchronize()
    replayed = gradients(ours)
    diff = max(rel_error(replayed[n], g) for n, g in g_ours_eager.items())
    t = paired_graph_times_ms(graphs, ns.warmup, ns.iters)
    rec = {"graph_cudnn_ms": statistics.median(t["cudnn"]), "graph_ours_ms": statistics.median(t["ours"]),
           "graph_grad_diff": diff}
    rec["graph_speedup"] = rec["graph_cudnn_ms"] / rec["graph_ours_ms"]
    del graphs
    return rec


# ------------------------------------------------------------------------------------------------
# the layers' backward problems: lookup sources and compiling ahead
# ------------------------------------------------------------------------------------------------
def backward_problems(model: nn.Module, x: torch.Tensor, autocast: bool = True) -> list:
    with ift.record_backward_problems() as found, torch.autocast(x.device.type, dtype=torch.bfloat16,
                                                                 enabled=autocast):
        model(x)
    model.zero_grad(set_to_none=True)
    return found


def lookup_sources(found: list, device: torch.device) -> dict[str, int]:
    """How each problem's instance is chosen here: exact (tuned), heuristic, default."""
    counts: dict[str, int] = {}
    for p in found:
        src = explain(p.op, p.params, layout=p.layout, dtype=p.dtype, fused_op=p.fused_op, device=device).source
        key = src.split(" ")[0]
        counts[key] = counts.get(key, 0) + 1
    return counts


class Precompiler:
    """Worker processes compiling the chosen instances into Triton's disk cache (gpu_check's job)."""

    def __init__(self, device: torch.device, workers: int):
        self.pool = None
        if device.type != "cuda":  # the interpreter compiles nothing
            return
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        from instance_factory.tuning.compile_ahead import precompile_init

        self.device = device
        self.workers = workers or max(1, min(15, (os.cpu_count() or 2) - 1))
        self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                        initializer=precompile_init, initargs=(str(device),))

    def compile(self, found: list, timeout_s: float) -> dict:
        if self.pool is None:
            return {"compiled": 0, "failed": 0, "skipped": len(found), "s": 0.0}
        from concurrent.futures import wait

        from gpu_check import _compile_job

        from instance_factory.tuning.compile_ahead import precompile_fits
        from instance_factory.tuning.lookup import lookup
        from instance_factory.verify import Case

        t0 = time.time()
        jobs = []
        for p in found:
            if not precompile_fits(p.params, self.workers, self.device):
                continue
            inst = lookup(p.op, p.params, layout=p.layout, dtype=p.dtype, fused_op=p.fused_op, device=self.device)
            case = Case(p.op, p.params, p.layout, p.dtype, p.fused_op, 1 if p.fused_op == "add" else 0)
            jobs.append(self.pool.submit(_compile_job, case, inst.name))
        done, not_done = wait(jobs, timeout=timeout_s)
        failed = [f.result() for f in done if f.exception() is None and f.result()]
        failed += [repr(f.exception()) for f in done if f.exception() is not None]
        return {"compiled": len(done) - len(failed), "failed": len(failed), "first_failure": (failed or [None])[0],
                "not_finished": len(not_done), "skipped": len(found) - len(jobs), "s": round(time.time() - t0, 1)}

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


# ------------------------------------------------------------------------------------------------
# one model
# ------------------------------------------------------------------------------------------------
def check_model(name: str, fused: bool, ns: argparse.Namespace, device: torch.device, pre: Precompiler) -> dict:
    torch.manual_seed(ns.seed)
    fmt = torch.channels_last if ns.memory_format == "channels_last" else torch.contiguous_format
    ref = build_model(name, ns.cpu_smoke).to(device).to(memory_format=fmt).train()
    for m in ref.modules():  # dropout off (MobileNetV2's classifier): the steps must see the same masks
        if isinstance(m, nn.Dropout):
            m.eval()
    ours = ift.convert(copy.deepcopy(ref))
    n_fused = fuse_residuals(ours) if fused else 0
    gen = torch.Generator(device="cpu").manual_seed(ns.seed + 1)
    size = 32 if ns.cpu_smoke else 224
    x = torch.randn(ns.batch, 3, size, size, generator=gen).to(device).to(memory_format=fmt)
    classes = SMOKE_CLASSES if ns.cpu_smoke else 1000
    y = torch.randint(0, classes, (ns.batch,), generator=gen).to(device)
    rec: dict = {"model": name + (" (fused residual)" if fused else ""), "batch": ns.batch, "fused_blocks": n_fused}

    autocast = ns.precision == "bf16"
    found = backward_problems(ours, x, autocast)
    rec["backward_problems"] = len(found)
    rec["lookup"] = lookup_sources(found, device)
    rec["precompile"] = pre.compile(found, timeout_s=max(30.0, DEADLINE - time.time() - 60))

    t0 = time.time()
    rec["loss_ours"] = train_step(ours, x, y, autocast=autocast)  # the first step compiles what is not cached
    rec["first_step_s"] = round(time.time() - t0, 2)
    g_ours = gradients(ours)
    rec["loss_cudnn"] = train_step(ref, x, y, autocast=autocast)
    g_ref = gradients(ref)
    g_fp32 = fp32_reference(ref, x, y)
    errs = compare(g_ours, g_ref, g_fp32)
    less_accurate = [e for e in errs if not as_accurate(e)]
    whole_ours, whole_cudnn = whole_model_errors(g_ours, g_ref, g_fp32)
    whole_ok = within_cudnn(whole_ours, whole_cudnn)
    rec.update(params=len(errs), worst_param=errs[0]["param"], worst_rel_err=errs[0]["rel_err"],
               tolerance=TOLERANCE, passed=errs[0]["rel_err"] <= TOLERANCE,
               failing_params=sum(e["rel_err"] > TOLERANCE for e in errs), worst10=errs[:10],
               as_accurate_as_cudnn=not less_accurate and whole_ok, less_accurate_params=less_accurate[:10],
               whole_model_ours_vs_fp32=whole_ours, whole_model_cudnn_vs_fp32=whole_cudnn,
               no_signal_params=sum(e["cudnn_vs_fp32"] >= NO_SIGNAL for e in errs),
               worst_ours_vs_fp32=max(e["ours_vs_fp32"] for e in errs),
               worst_cudnn_vs_fp32=max(e["cudnn_vs_fp32"] for e in errs))

    t = paired_step_times_ms(ref, ours, x, y, ns.warmup, ns.iters, autocast)
    rec.update(cudnn_ms=statistics.median(t["cudnn"]), ours_ms=statistics.median(t["ours"]),
               cudnn_issue_ms=statistics.median(t["cudnn_issue"]), ours_issue_ms=statistics.median(t["ours_issue"]),
               cudnn_times_ms=t["cudnn"], ours_times_ms=t["ours"])
    rec["speedup"] = rec["cudnn_ms"] / rec["ours_ms"]
    if getattr(ns, "cuda_graph", False) and device.type == "cuda":
        try:
            rec.update(graph_record(ref, ours, x, y, autocast, g_ours, ns))
        except Exception as exc:  # a capture failure is a finding: record it, keep the eager results
            rec["graph_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    del ref, ours, g_ours, g_ref, g_fp32
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def markdown(records: list[dict], env: dict) -> str:
    mode = "bf16 autocast" if env.get("precision", "bf16") == "bf16" else "float32 (cuDNN's TF32 setting)"
    lines = [f"Training step (forward + backward), batch {env['batch']}, {mode}, {env['memory_format']}, "
             f"{env['device']}, torch {env['torch']}, Triton {env['triton']}.", "",
             "| model | params | worst grad rel. err vs cuDNN (param) | pass (<= 1e-2) | worst vs fp32: ours / cuDNN "
             "| as accurate as cuDNN | layers' lookup | cuDNN step ms (issue) | ours step ms (issue) | speedup |",
             "|---|---:|---|---|---|---|---|---:|---:|---:|"]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['model']} | | ERROR {r['error']} | | | | | | | |")
            continue
        look = ", ".join(f"{k} {v}" for k, v in sorted(r["lookup"].items()))
        verdict = "PASS" if r["passed"] else f"FAIL ({r['failing_params']} params)"
        accurate = "yes" if r["as_accurate_as_cudnn"] else f"NO ({len(r['less_accurate_params'])}+ params)"
        accurate += (f" (whole model {r['whole_model_ours_vs_fp32']:.1e} / {r['whole_model_cudnn_vs_fp32']:.1e}; "
                     f"{r['no_signal_params']} params without signal)")
        lines.append(
            f"| {r['model']} | {r['params']} | {r['worst_rel_err']:.2e} ({r['worst_param']}) | "
            f"{verdict} | "
            f"{r['worst_ours_vs_fp32']:.2e} / {r['worst_cudnn_vs_fp32']:.2e} | {accurate} | {look} | "
            f"{r['cudnn_ms']:.2f} ({r['cudnn_issue_ms']:.2f}) | {r['ours_ms']:.2f} ({r['ours_issue_ms']:.2f}) | "
            f"{r['speedup']:.2f}x |")
    graphed = [r for r in records if "graph_ours_ms" in r or "graph_error" in r]
    if graphed:
        lines += ["", "Whole step captured in a CUDA graph (replay time: no host in the loop); ours' replayed "
                  "gradients vs its eager step:", "",
                  "| model | cuDNN graph ms | ours graph ms | speedup | replay vs eager grads (max rel. diff) |",
                  "|---|---:|---:|---:|---:|"]
        for r in graphed:
            if "graph_error" in r:
                lines.append(f"| {r['model']} | | | | capture failed: {r['graph_error']} |")
            else:
                lines.append(f"| {r['model']} | {r['graph_cudnn_ms']:.2f} | {r['graph_ours_ms']:.2f} | "
                             f"{r['graph_speedup']:.2f}x | {r['graph_grad_diff']:.1e} |")
    return "\n".join(lines) + "\n"


DEADLINE = float("inf")


def main(ns: argparse.Namespace) -> int:
    global DEADLINE
    DEADLINE = time.time() + ns.budget_s
    warnings.filterwarnings("ignore", category=TuningMissWarning)
    if ns.cpu_smoke:
        device = torch.device("cpu")
        defaults = dict(batch=2, iters=1, warmup=0)
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU visible: run with --cpu-smoke for the interpreter check", file=sys.stderr)
            return 2
        device = torch.device("cuda", torch.cuda.current_device())
        torch.backends.cudnn.benchmark = True
        defaults = dict(batch=64, iters=10, warmup=3)
    for k, v in defaults.items():
        if getattr(ns, k) is None:
            setattr(ns, k, v)
    import triton

    env = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (Triton interpreter)",
           "torch": torch.__version__, "triton": triton.__version__, "batch": ns.batch, "iters": ns.iters,
           "warmup": ns.warmup, "seed": ns.seed, "memory_format": ns.memory_format, "precision": ns.precision}
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [(m, False) for m in ns.models.split(",") if m]
    if ns.fuse_residual:
        runs += [(m, True) for m, _ in runs if m in ("resnet50", "resnext50_32x4d")]
    pre = Precompiler(device, ns.workers)
    records = []
    try:
        for name, fused in runs:
            if time.time() > DEADLINE:
                records.append({"model": name + (" (fused residual)" if fused else ""), "error": "skipped: budget"})
                continue
            t0 = time.time()
            try:
                rec = check_model(name, fused, ns, device, pre)
            except Exception as exc:  # record and go on with the next model
                rec = {"model": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            rec["wall_s"] = round(time.time() - t0, 1)
            records.append(rec)
            print(json.dumps({k: v for k, v in rec.items() if not k.endswith("times_ms") and k != "worst10"}),
                  flush=True)
            (out / "train_step_check.json").write_text(json.dumps({"env": env, "models": records}, indent=1))
    finally:
        pre.close()
    table = markdown(records, env)
    (out / "train_step_check.md").write_text(table)
    print(table)
    return 0 if all(r.get("passed") or r.get("as_accurate_as_cudnn") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main(NS))
