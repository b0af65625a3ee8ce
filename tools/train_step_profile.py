"""Where a converted model's training step spends its time (GPU): host issue time vs GPU kernel time.

    python tools/train_step_profile.py --models resnet50 --out DIR

For the converted model (``instance_factory.torch.convert``) and the same model on cuDNN, batch 64,
bf16 autocast (or float32 with --precision fp32), channels-last (or, with --memory-format contiguous,
NCHW): the wall time of a step, the host time until ``backward`` returns (the issue time, before the final synchronisation), and the GPU time of its kernels by kind (ours: Triton
kernels; cuDNN/cuBLAS convolution kernels; everything else) from ``torch.profiler``. A step whose
issue time is close to its wall time is host-bound: kernels wait for the Python that launches them.
``--fuse-residual`` adds a third side for the ResNet-style models: the converted model whose bottlenecks
hand the skip branch its input through ``conv1.forward_with_skip`` (the skip gradient summed inside
conv_bwd_data, fused op "add"; ``train_step_check.fuse_residuals``), so autograd's separate add of the
two gradients of each block input is gone.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time

import torch
from train_step_check import Precompiler, backward_problems, fuse_residuals, issue_step  # tools/: this script's dir

import instance_factory.torch as ift

AUTOCAST = [True]  # bf16 autocast; --precision fp32: float32 steps at PyTorch's cuDNN precision (TF32)


def _step(model, x, y) -> float:
    """One step; returns the host seconds until backward() returned (work issued, not finished)."""
    t0 = time.perf_counter()
    issue_step(model, x, y, AUTOCAST[0])
    return time.perf_counter() - t0


def _kind(name: str) -> str:
    """Our Triton kernels are the ``_..._kernel`` functions of instance_factory.kernels."""
    if name.startswith("_") and name.endswith("_kernel"):
        return "triton (ours)"
    low = name.lower()
    if any(s in low for s in ("conv", "cudnn", "dgrad", "wgrad", "xmma", "cutlass")):
        return "cudnn/cutlass conv"
    return "other"


def profile(model, x, y, iters: int) -> dict:
    for _ in range(3):
        _step(model, x, y)
    torch.cuda.synchronize()
    issue, wall = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        issue.append(_step(model, x, y))
        torch.cuda.synchronize()
        wall.append(time.perf_counter() - t0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _step(model, x, y)
        torch.cuda.synchronize()
    by_kind: dict[str, float] = {}
    top: dict[str, float] = {}
    for ev in prof.key_averages():
        us = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0)
        if us <= 0:
            continue
        k = _kind(ev.key)
        by_kind[k] = by_kind.get(k, 0.0) + us / 1e3
        top[ev.key[:80]] = us / 1e3
    med = sorted(wall)[len(wall) // 2] * 1e3
    return {"wall_ms": med, "issue_ms": sorted(issue)[len(issue) // 2] * 1e3,
            "gpu_ms": {k: round(v, 3) for k, v in sorted(by_kind.items())},
            "gpu_total_ms": round(sum(by_kind.values()), 3),
            "top_kernels": sorted(top.items(), key=lambda kv: -kv[1])[:12]}


def _host_profile(model, x, y, path: str) -> None:
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        _step(model, x, y)
    torch.cuda.synchronize()
    prof.disable()
    prof.dump_stats(path.replace(".txt", ".prof"))  # the raw stats, for pstats on another machine
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    with open(path, "w") as f:
        f.write(text.getvalue())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", required=True)
    ap.add_argument("--memory-format", choices=("channels_last", "contiguous"), default="channels_last",
                    help="model and input memory format (contiguous: PyTorch's default NCHW, served by the "
                    "channels-first instances)")
    ap.add_argument("--fuse-residual", action="store_true", help="also profile the converted model with its "
                    "bottlenecks' skip gradients fused into conv1's conv_bwd_data (ResNet / ResNeXt)")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16 autocast (default) or float32 steps at PyTorch's cuDNN precision (TF32 by default)")
    ap.add_argument("--cprofile", action="store_true", help="also write the host profile of 5 steps of ours "
                    "(cProfile, by own time) to <model>_host_profile.txt, raw stats to .prof")
    ns = ap.parse_args()
    AUTOCAST[0] = ns.precision == "bf16"
    import torchvision

    torch.backends.cudnn.benchmark = True
    os.makedirs(ns.out, exist_ok=True)
    results = {}
    pre = Precompiler(torch.device("cuda", torch.cuda.current_device()), 0)
    try:
        for name in ns.models.split(","):
            torch.manual_seed(0)
            fmt = torch.channels_last if ns.memory_format == "channels_last" else torch.contiguous_format
            ref = getattr(torchvision.models, name)(weights=None).cuda().to(memory_format=fmt).train()
            ours = ift.convert(copy.deepcopy(ref))
            x = torch.randn(ns.batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
            y = torch.randint(0, 1000, (ns.batch,), device="cuda")
            # compile the layers' instances in worker processes first (train_step_check's precompiler), so
            # that the profiled warm-up steps do not compile them one after another
            print(name, "precompile", pre.compile(backward_problems(ours, x, AUTOCAST[0]), timeout_s=240), flush=True)
            results[name] = {"ours": profile(ours, x, y, ns.iters), "cudnn": profile(ref, x, y, ns.iters)}
            if ns.fuse_residual:
                fused = ift.convert(copy.deepcopy(ref))
                if fuse_residuals(fused):
                    results[name]["ours_fused"] = profile(fused, x, y, ns.iters)
            if ns.cprofile:
                _host_profile(ours, x, y, os.path.join(ns.out, f"{name}_host_profile.txt"))
            for side in results[name]:
                r = results[name][side]
                print(f"{name:16s} {side:10s} wall {r['wall_ms']:7.2f} ms  issue {r['issue_ms']:7.2f} ms  "
                      f"GPU {r['gpu_total_ms']:7.2f} ms {r['gpu_ms']}")
            for k, v in results[name]["ours"]["top_kernels"][:8]:
                print(f"    ours top: {v:7.3f} ms  {k}")
    finally:
        pre.close()
    with open(os.path.join(ns.out, f"train_step_profile_{ns.memory_format}_{ns.precision}.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
