"""Tuning options, the row containers :func:`tune` returns, and the deadline clock."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COMPILE_MODES", "PRUNED_TIMING", "FatalDeviceError", "ProblemRows", "TuneOptions", "TuneResult"]

PRUNED_TIMING = "single-run (pruned)"
COMPILE_MODES = ("auto", "process", "thread")


class FatalDeviceError(RuntimeError):
    """The GPU is in an error state (e.g. an illegal memory access): the process must restart."""


@dataclass
class TuneOptions:
    """How a problem is tuned. The GPU defaults keep a ResNet-50 pass in minutes on one H100/H200."""

    instances: str | Sequence[str] | None = None  # name globs / substrings to keep (None: all)
    max_instances: int | None = None  # keep at most this many candidates per problem (spread out)
    warmup_ms: float = 10.0  # do_bench warm-up of the full-length timing
    rep_ms: float = 60.0  # do_bench repetition time of the full-length timing
    quick_rep_ms: float = 8.0  # first, short timing of every verified candidate
    refine_top: int = 6  # this many fastest get the full-length timing (0: everyone)
    cpu_reps: int = 3  # interpreter: timed runs after the verification run
    cudnn: bool = True  # also time torch / cuDNN
    compile_workers: int | None = None  # compiling processes/threads (GPU); None: min(16, cores - 1)
    compile_mode: str = "auto"  # "process", "thread", or "auto" (process on a GPU, thread simulated)
    compile_timeout_s: float = 900.0  # stop waiting for a problem's compiles after this (then inline)
    prune: bool = True  # GPU: skip do_bench of candidates far slower than the best single run
    prune_factor: float = 5.0  # pruned when single run > max(prune_factor x best, best + margin)
    prune_margin_ms: float = 0.05
    hard_cap_factor: float = 50.0  # not even verified when the first run > max(factor x best, ...)
    hard_cap_margin_ms: float = 5.0  # absolute slack: the first run includes a module load and plan
    # building, ~1-1.3 ms on an H100 (at 1.0, fast kernels of small layers were pruned unverified)
    deadline: float | None = None  # time.time() after which no new measurement starts (None: none)
    seed: int = 0
    alpha: float = 1.25  # for scale / bilinear (non-trivial on purpose)
    beta: float = -0.75

    @classmethod
    def make(cls, options: TuneOptions | None = None, **kw: Any) -> TuneOptions:
        base = options or cls()
        if kw:
            unknown = set(kw) - set(cls.__dataclass_fields__)
            if unknown:
                raise TypeError(f"unknown tuning options {sorted(unknown)}")
            base = cls(**{**base.__dict__, **kw})
        if base.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, not {base.compile_mode!r}")
        return base

    def within(self, max_minutes: float | None) -> TuneOptions:
        """These options with the deadline ``max_minutes`` from now (an earlier ``deadline`` wins)."""
        if max_minutes is None:
            return self
        deadline = now() + 60.0 * max_minutes
        if self.deadline is not None and self.deadline <= deadline:
            return self
        return dataclasses.replace(self, deadline=deadline)


def now() -> float:
    """Wall-clock seconds (a test seam: deadline tests replace it)."""
    return time.time()


def past(deadline: float | None) -> bool:
    return deadline is not None and now() >= deadline


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - now())


class ProblemRows(list):
    """The rows of one problem (a list), with ``stopped`` (the deadline cut it short) and ``stats``
    (seconds per phase, instance counts)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stopped = False
        self.stats: dict = {}


class TuneResult(list):
    """The rows :func:`tune` wrote (a list), with ``stopped_early`` (the deadline stopped it before the
    plan was done) and ``stats`` (seconds per phase summed over the problems, rows per status)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stopped_early = False
        self.stats: dict = {}


def add_stats(total: dict, part: dict) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v

