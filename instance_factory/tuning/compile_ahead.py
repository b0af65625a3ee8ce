"""Compiling ahead without running (GPU): each candidate's public call runs once inside
:func:`~instance_factory.fast_launch.compile_only`, so its kernels compile through Triton's
``warmup`` and launch nothing.

``compile_mode="process"``: a pool of worker processes, started once per sweep, compiles the whole
plan in order into Triton's on-disk cache while the parent measures; ``"thread"``: a thread pool per
problem. A kernel that could not be built becomes a ``compile_error`` row; anything else a worker
could not do is simply compiled again by the first real run in the parent.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from typing import Any

import torch

from ..fast_launch import compile_only, compile_only_supported
from ..harness.operands import ProblemCase, make_case, op_call
from .candidates import order_candidates
from .errors import classify_error, fatal_error
from .options import TuneOptions, past, remaining
from .problem_sets import Problem

__all__ = ["Precompiler", "compile_all", "precompile_fits", "precompile_init"]

def _compile_workers(opts: TuneOptions) -> int:
    """``compile_workers``, else min(16, usable cores - 1): one core stays with the measuring."""
    if opts.compile_workers:
        return max(1, opts.compile_workers)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return max(1, min(16, cores - 1))


# --- worker processes ---------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def precompile_fits(params: Any, workers: int, device: torch.device) -> bool:
    """Whether ``workers`` compile processes may each hold one problem's operands (they build real
    tensors to launch) in a quarter of the device's memory; larger problems compile in the measuring
    process on their first run instead (a 2^31-element problem times 15 workers would not fit)."""
    if getattr(device, "type", "") != "cuda":
        return True
    # every operand at 4 bytes (fp32 weight gradients), doubled for Ds and workspaces
    per_problem = 8 * (params.numel("input") + params.numel("weight") + params.numel("output"))
    return per_problem * workers <= torch.cuda.get_device_properties(device).total_memory // 4


def precompile_init(device: str) -> None:
    """Worker process start: lower priority (the parent measures), pick the device, and whether this
    Triton can compile without running (a worker never runs kernels beside the measuring)."""
    try:
        os.nice(10)
    except (AttributeError, OSError):
        pass
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    _WORKER["device"] = dev
    _WORKER["compile_only"] = compile_only_supported()


def _precompile_one(problem: Problem, name: str, seed: int, alpha: float, beta: float) -> dict | None:
    """Compile one instance for one problem (launch in compile-only mode); returns {"error": (status,
    reason) or None, "s": seconds}, or None when it cannot compile without running. The case
    (uninitialized operands) is kept per problem."""
    from ..registry import get_registry

    t0 = time.monotonic()
    dev = _WORKER.get("device", torch.device("cpu"))
    if dev.type == "cuda" and not _WORKER.get("compile_only"):
        return None  # never run kernels beside the measuring: the parent compiles it on its first run
    if _WORKER.get("key") != problem.key:
        _WORKER.pop("case", None)
        _WORKER["case"] = make_case(problem, dev, seed=seed, alpha=alpha, beta=beta, reference=False)
        _WORKER["key"] = problem.key
    inst = get_registry().get(name)
    try:
        with compile_only(_WORKER.get("compile_only", False)):
            op_call(_WORKER["case"], inst)()
        err = None
    except Exception as exc:  # recorded by the parent (compile errors) or redone there (the rest)
        status, reason, _ = classify_error(exc)
        err = (status, reason)
    return {"error": err, "s": time.monotonic() - t0}


class Precompiler:
    """Worker processes compiling a whole plan ahead, in plan order, into Triton's on-disk cache
    (shared with this process, which then loads each kernel instead of compiling it)."""

    def __init__(self, device: torch.device, plan: Sequence[tuple[Problem, list[Any]]], opts: TuneOptions):
        self.workers = _compile_workers(opts)
        self.broken = ""
        self.jobs: dict[str, list[tuple[Any, Future]]] = {}
        ctx = mp.get_context("spawn")
        self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=precompile_init,
                                        initargs=(str(device),))
        for problem, insts in plan:
            if insts and precompile_fits(problem.params, self.workers, device):
                self.jobs[problem.key] = [
                    (inst, self.pool.submit(_precompile_one, problem, inst.name, opts.seed, opts.alpha, opts.beta))
                    for inst in order_candidates(problem, insts)]

    def results(self, problem: Problem, timeout: float | None) -> tuple[dict[str, dict | None], bool]:
        """{instance name: the worker's answer, or None (not compiled ahead: the first run compiles)}
        and whether waiting was cut short by ``timeout``."""
        jobs = self.jobs.pop(problem.key, [])
        if not jobs:
            return {}, False
        done, not_done = wait([f for _, f in jobs], timeout=timeout)
        out: dict[str, dict | None] = {}
        for inst, fut in jobs:
            if fut not in done:
                fut.cancel()
                out[inst.name] = None
                continue
            try:
                out[inst.name] = fut.result()
            except Exception as exc:  # BrokenProcessPool (a worker died), pickling, ...
                if not self.broken:
                    self.broken = f"{type(exc).__name__}: {exc}"[:300]
                    warnings.warn(f"instance_factory tuner: compile workers failed ({self.broken}); "
                                  "compiling in the measuring process instead", RuntimeWarning, stacklevel=2)
                out[inst.name] = None
        return out, bool(not_done)

    def close(self) -> None:
        for jobs in self.jobs.values():
            for _, fut in jobs:
                fut.cancel()
        self.jobs.clear()
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # nothing they still do is needed; Triton's cache writes are atomic
            try:
                p.terminate()
            except Exception:
                pass



def compile_all(case: ProblemCase, insts: list[Any], opts: TuneOptions, row: Callable, tick: Callable,
                 precompiler: Precompiler | None, stats: dict) -> tuple[list[Any], bool]:
    """Compile every instance ahead; failures become rows. Returns (the instances to measure, in
    order; whether the deadline stopped the wait).

    With worker processes (``precompiler``) this waits for this problem's compiles (started when
    the sweep began) until the deadline or ``compile_timeout_s``; an instance not compiled by then is
    compiled by its first run here. Otherwise a thread pool compiles them now: in compile-only mode
    when this Triton allows it (no kernel runs), else by running each once (old behaviour).
    """
    timeout = opts.compile_timeout_s
    left = remaining(opts.deadline)
    if left is not None:
        timeout = min(timeout, left)
    if precompiler is not None:
        answers, cut = precompiler.results(case.problem, timeout)
        ok: list[Any] = []
        for inst in insts:
            ans = answers.get(inst.name)
            if ans is not None:
                stats["compile_cpu_s"] = stats.get("compile_cpu_s", 0.0) + ans["s"]
                stats["precompiled"] = stats.get("precompiled", 0) + 1
            if ans is not None and ans["error"] is not None and ans["error"][0] == "compile_error":
                row(inst, "compile_error", f"while compiling: {ans['error'][1]}")
                tick(inst)
                continue
            ok.append(inst)
        return ok, cut and past(opts.deadline)
    return _compile_threads(case, insts, opts, row, tick, timeout)


def _compile_threads(case: ProblemCase, insts: list[Any], opts: TuneOptions, row: Callable, tick: Callable,
                     timeout: float | None) -> tuple[list[Any], bool]:
    """Compile in a thread pool (Triton releases the GIL for part of a compile).

    Compile-only (the kernels do not run): a thread that has not finished by ``timeout`` is left
    behind (it only compiles) and its instance compiles on its first run. Running mode (a Triton
    without compile-only, or the CPU simulation): the pool is always waited for, and a fatal device
    error raises FatalDeviceError: with one worker the culprit is the first instance that hit it and
    gets a ``failed`` row (a resumed sweep skips it); with several threads the culprit is ambiguous,
    so no fatal row is written and the message says to rerun with ``--compile-workers 1``.
    """
    workers = _compile_workers(opts)
    dev = case.device
    only_compile = dev.type == "cuda" and compile_only_supported()

    def build(inst: Any) -> tuple[Any, BaseException | None]:
        try:
            with torch.cuda.device(dev), compile_only(only_compile):  # pool threads start on device 0
                op_call(case, inst)()
            return inst, None
        except BaseException as exc:  # noqa: BLE001 - recorded as the instance's row
            return inst, exc

    ok: list[Any] = []
    if workers <= 1:
        for inst in insts:
            if past(opts.deadline):
                return ok, True
            _, exc = build(inst)
            if exc is None and not only_compile:
                try:
                    torch.cuda.synchronize(dev)
                except Exception as sync_exc:  # the launch itself broke the context
                    exc = sync_exc
            if exc is None:
                ok.append(inst)
                continue
            status, reason, fatal = classify_error(exc)
            row(inst, status, f"while compiling: {reason}")
            tick(inst)
            if fatal:
                raise fatal_error(exc, {}, culprit=inst.name)
        return ok, False
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="if-compile")
    futures = [pool.submit(build, inst) for inst in insts]
    try:
        if only_compile:
            done, _ = wait(futures, timeout=timeout)
        else:  # kernels may be running: never leave them behind
            done, _ = wait(futures)
    finally:
        pool.shutdown(wait=not only_compile, cancel_futures=True)
    fatal_exc: BaseException | None = None
    for inst, fut in zip(insts, futures):
        if fut not in done or fut.cancelled():
            ok.append(inst)  # compiles on its first run
            continue
        _, exc = fut.result()
        if exc is None:
            ok.append(inst)
            continue
        status, reason, fatal = classify_error(exc)
        if fatal:
            fatal_exc = fatal_exc or exc
            continue
        row(inst, status, f"while compiling: {reason}")
        tick(inst)
    if not only_compile:
        try:
            torch.cuda.synchronize(dev)
        except Exception as exc:  # a kernel launched by the pool broke the context
            fatal_exc = fatal_exc or exc
    if fatal_exc is not None:
        raise fatal_error(fatal_exc, {}, culprit=None)
    return ok, False

