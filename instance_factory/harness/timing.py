"""Timers: ``do_bench`` on a GPU, ``perf_counter`` on the CPU, and one CUDA-event-timed run."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Timing", "single_run_ms", "time_cpu", "time_gpu"]


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    method: str


def quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def time_gpu(fn: Callable[[], Any], warmup_ms: float, rep_ms: float) -> Timing:
    import triton.testing

    try:
        times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    except (AssertionError, TypeError):  # an older Triton without return_mode="all"
        med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return Timing(med, p20, p80, max(1, int(rep_ms / max(med, 1e-6))), "do_bench")
    times = [float(t) for t in times]
    return Timing(statistics.median(times), quantile(times, 0.2), quantile(times, 0.8), len(times),
                  "do_bench")


def time_cpu(fn: Callable[[], Any], reps: int) -> Timing:
    times = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(times), quantile(times, 0.2), quantile(times, 0.8), len(times),
                  "perf_counter (Triton interpreter on CPU)")


#: GPU clock cycles the stream is kept busy before a single timed run (about 1 ms), so the launch's
#: CPU overhead is queued behind it and only GPU time lands between the two events
BUSY_CYCLES = 2_000_000


def single_run_ms(fn: Callable[[], Any], device: torch.device, inst: Any, stage: str) -> float:
    """Milliseconds of one run of ``fn`` (``stage``: "warm-up" = the verification run, "single" = one
    public op call; ``inst``: the instance, for tests that replace this): CUDA events on a GPU,
    perf_counter otherwise."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    busy = getattr(torch.cuda, "_sleep", None)
    if busy is not None:
        busy(BUSY_CYCLES)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))
