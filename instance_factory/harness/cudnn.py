"""torch's own convolution backward (cuDNN on a GPU) for a problem, timed in the same run as ours."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..dtypes import DATA_TYPES
from ..layouts import parse_layout
from .operands import ProblemCase
from .timing import time_cpu, time_gpu

__all__ = ["time_torch", "torch_conv_fn"]


def torch_conv_fn(case: ProblemCase) -> tuple[Callable[[], Any], str]:
    """torch's own conv backward for the case's problem (cuDNN with channels-last tensors for a
    channels-last layout on a GPU), with the fused op in torch; (function, implementation label)."""
    pr = case.problem
    p, lt = pr.params, parse_layout(pr.layout, pr.params.ndim)
    dt = DATA_TYPES[pr.dtype]
    dev = case.device
    dtype = dt.data
    if dev.type == "cpu":
        dtype = torch.float32 if dtype == torch.float16 else dtype
    sym = p.left_pad == p.right_pad
    in_len = p.input if sym else tuple(i + lp + rp for i, lp, rp in zip(p.input, p.left_pad, p.right_pad))
    pad = list(p.left_pad) if sym else [0] * p.ndim
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn((p.N, p.G * p.C, *in_len), generator=g, device=dev).to(dtype)
    w = torch.randn((p.G * p.K, p.C, *p.filter), generator=g, device=dev).to(dtype)
    dy = torch.randn((p.N, p.G * p.K, *p.output), generator=g, device=dev).to(dtype)
    if lt.channels_last and p.ndim in (2, 3):
        mf = torch.channels_last if p.ndim == 2 else torch.channels_last_3d
        x, w, dy = (t.contiguous(memory_format=mf) for t in (x, w, dy))
    mask = [True, False, False] if pr.op == "conv_bwd_data" else [False, True, False]
    ds = [torch.randn_like(x if pr.op == "conv_bwd_data" else w) for _ in range(case.n_ds)]
    alpha, beta, op = case.alpha, case.beta, pr.fused_op
    stride, dil, zeros, G = list(p.stride), list(p.dilation), [0] * p.ndim, p.G
    idx = 0 if pr.op == "conv_bwd_data" else 1

    def fn() -> Any:
        r = torch.ops.aten.convolution_backward(dy, x, w, None, stride, pad, dil, False, zeros, G, mask)[idx]
        if op == "scale":
            r = r * alpha
        elif op == "bilinear":
            r = alpha * r + beta * ds[0]
        elif op in ("add", "custom"):
            for t in ds:
                r = r + t
        elif op == "add_relu":
            r = torch.relu(r + ds[0])
        return r

    if dev.type == "cuda":
        impl = "cudnn" + ("" if op == "passthrough" else "+torch epilogue") + ("" if sym else " (pre-padded)")
    else:
        impl = f"torch-cpu ({str(dtype).replace('torch.', '')})"
    return fn, impl


def time_torch(case: ProblemCase, warmup_ms: float, rep_ms: float, cpu_reps: int) -> tuple[float | None, str, str]:
    """(median ms or None, implementation label, error): ``do_bench`` with ``cudnn.benchmark`` on
    (tf32 allowed only for a tf32 data type) on a GPU, a few perf_counter runs on the CPU."""
    try:
        fn, impl = torch_conv_fn(case)
        if case.device.type == "cuda":
            tf32 = DATA_TYPES[case.problem.dtype].compute == "tf32"
            with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=tf32):
                t = time_gpu(fn, warmup_ms, rep_ms)
        else:
            fn()
            t = time_cpu(fn, cpu_reps)
        return t.median_ms, impl, ""
    except Exception as exc:  # torch lacking a kernel for a dtype on this device, OOM, ...
        return None, "", f"{type(exc).__name__}: {exc}"[:200]
