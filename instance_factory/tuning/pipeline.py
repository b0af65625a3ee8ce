"""One problem's tuning, step by step (see :mod:`instance_factory.tuning.tuner` for the whole story):
operands and reference, compile ahead (GPU), verify each candidate by its first (poisoned) run,
prune by single runs, time the rest, time torch / cuDNN, and fill in the rows."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from ..dtypes import DATA_TYPES
from ..fast_launch import compile_only, compile_only_supported
from ..harness import checks, cudnn, timing
from ..harness.operands import ProblemCase, make_case, op_call, ref_norms
from ..reference import result_errors
from .candidates import order_candidates
from .compile_ahead import Precompiler, compile_all
from .database import current_device, current_software, instance_params_json, now_utc, problem_fields
from .errors import classify_error, fatal_error, finished_rows
from .options import PRUNED_TIMING, FatalDeviceError, ProblemRows, TuneOptions, past
from .problem_sets import Problem
from .progress import Progress

__all__ = ["gpu_pipeline", "resolved_compile_mode", "torch_device", "tune_problem"]


def torch_device(device: Any) -> torch.device:
    """``None``: the current GPU (unless interpreting), else the CPU; an int: that GPU."""
    from ..algorithms import interpreting

    if device is None:
        if torch.cuda.is_available() and not interpreting():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if isinstance(device, int):
        return torch.device("cuda", device)
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


#: tests only: run the GPU pipeline (compile ahead, single runs, pruning, short then refined timing)
#: on CPU tensors
SIMULATE_GPU_PIPELINE = False


def gpu_pipeline(tdev: torch.device) -> bool:
    return tdev.type == "cuda" or SIMULATE_GPU_PIPELINE


def resolved_compile_mode(tdev: torch.device, opts: TuneOptions) -> str:
    """"process" or "thread". Worker processes must never run kernels next to the measuring (their
    operands are uninitialized), so on a GPU they need this Triton's compile-only launch."""
    mode = opts.compile_mode
    if mode == "auto":
        mode = "process" if tdev.type == "cuda" else "thread"
    if mode == "process" and tdev.type == "cuda" and not compile_only_supported():
        mode = "thread"
    return mode


def tune_problem(problem: Problem, instances: Sequence[Any], *, device: Any = None,
                 options: TuneOptions | None = None, progress: Progress | None = None,
                 prior_best_ms: float | None = None, _precompiler: Precompiler | None = None) -> ProblemRows:
    """Verify and time ``instances`` on ``problem``; returns one row per finished instance (not
    stored), as a :class:`ProblemRows` (``stopped``: the deadline cut it short; ``stats``).
    ``prior_best_ms``: the problem's best time already in the database (a resumed sweep), the
    starting point of the pruning rule.

    Raises :class:`FatalDeviceError` (after recording the rows so far in ``.rows``) when the GPU is
    left in an error state.
    """
    opts = options or TuneOptions()
    tdev = torch_device(device)
    if not instances:
        return ProblemRows()
    prior = prior_best_ms if prior_best_ms is not None and prior_best_ms > 0 else math.inf
    run = _ProblemRun(problem, tdev, opts, progress, prior)
    if tdev.type == "cuda":
        with torch.cuda.device(tdev):
            return run.run(instances, _precompiler)
    return run.run(instances, _precompiler)


def soft_cap(best: float, opts: TuneOptions) -> float:
    """Verified candidates whose single run exceeds this are pruned (never benchmarked)."""
    return max(opts.prune_factor * best, best + opts.prune_margin_ms)


def hard_cap(best: float, opts: TuneOptions) -> float:
    """Candidates whose first run exceeds this are pruned without being verified."""
    return max(opts.hard_cap_factor * best, best + opts.hard_cap_margin_ms)


class _ProblemRun:
    """The state of one problem's tuning: its rows (one per instance, by name), the fastest single
    run so far, the deadline flag and the seconds per phase."""

    def __init__(self, problem: Problem, tdev: torch.device, opts: TuneOptions, progress: Progress | None,
                 prior: float) -> None:
        self.problem, self.tdev, self.opts, self.progress = problem, tdev, opts, progress
        self.dt = DATA_TYPES[problem.dtype]
        self.base = {**problem_fields(problem.op, problem.params, problem.layout, problem.dtype, problem.fused_op),
                     **current_device(tdev).as_columns(), **current_software().as_columns(),
                     "tolerance": self.dt.tolerance}
        self.rows: dict[str, dict] = {}
        self.best = prior  # the fastest single run so far (or the best time a resumed sweep already has)
        self.single: dict[str, float] = {}
        self.pruned_ms: dict[str, float] = {}  # pruned instance -> the single run its row reports
        self.stopped = False
        self.stats: dict[str, float] = {}
        self.on_gpu = gpu_pipeline(tdev)
        self.prune = self.on_gpu and opts.prune
        self.case: ProblemCase | None = None

    # --- rows ----------------------------------------------------------------------------------
    def row(self, inst: Any, status: str, reason: str = "", **kw: Any) -> dict:
        r = {**self.base, "instance": inst.name, "algorithm": inst.algorithm,
             "instance_params": instance_params_json(inst.cfg), "kernel_hash": inst.kernel_hash,
             "status": status, "reason": reason, "timestamp": now_utc(), **kw}
        self.rows[inst.name] = r
        return r

    def tick(self, inst: Any) -> None:
        if self.progress is not None:
            pr = self.problem
            self.progress.update(1, f"{pr.label} {pr.op[5:]} {pr.dtype}")

    def failed(self, name: str, exc: BaseException, *, while_: str = "", new_row: Any = None) -> bool:
        """Record ``exc`` for instance ``name`` (a new row for ``new_row``, else the existing row's
        status); returns whether the GPU is left unusable."""
        status, reason, fatal = classify_error(exc)
        reason = f"while {while_}: {reason}" if while_ else reason
        if new_row is not None:
            self.row(new_row, status, reason)
        else:
            self.rows[name].update(status=status, reason=reason)
        return fatal

    def deadline_hit(self) -> bool:
        if self.stopped or past(self.opts.deadline):
            self.stopped = True
        return self.stopped

    # --- the steps -----------------------------------------------------------------------------
    def run(self, instances: Sequence[Any], precompiler: Precompiler | None) -> ProblemRows:
        t0 = time.monotonic()
        self.case = make_case(self.problem, self.tdev, seed=self.opts.seed, alpha=self.opts.alpha,
                              beta=self.opts.beta)
        t1 = time.monotonic()
        self.stats["setup_s"] = t1 - t0
        pending = self.compile_ahead(instances, precompiler)
        t2 = time.monotonic()
        self.stats["compile_s"] = t2 - t1
        verified = self.verify_all(pending)
        t3 = time.monotonic()
        self.stats["verify_s"] = t3 - t2 - self.stats["load_s"]
        times = self.bench(self.prune_slow(verified))
        t4 = time.monotonic()
        self.stats["bench_s"] = t4 - t3
        cudnn_ms, impl = self.time_baseline(bool(times or self.pruned_ms))
        self.stats["cudnn_s"] = time.monotonic() - t4
        return self.finish(times, cudnn_ms, impl)

    def compile_ahead(self, instances: Sequence[Any], precompiler: Precompiler | None) -> list[Any]:
        """GPU: compile every candidate ahead (failures become rows); the candidates, ordered."""
        if not self.on_gpu:
            return list(instances)
        pending = order_candidates(self.problem, instances)
        try:
            pending, self.stopped = compile_all(self.case, pending, self.opts, self.row, self.tick, precompiler,
                                                self.stats)
        except FatalDeviceError as exc:
            exc.rows = finished_rows(self.rows)  # type: ignore[attr-defined]
            raise
        return pending

    def verify_all(self, pending: list[Any]) -> list[Any]:
        """The first run verifies (and on a GPU is timed against the hard cap); then one timed run.
        On a GPU the kernel is first loaded (or compiled, if compiling ahead did not get to it)
        without running, so that no compile or load lands inside the timed first run."""
        preload = self.tdev.type == "cuda" and compile_only_supported()
        verified: list[Any] = []
        self.stats["load_s"] = 0.0
        for inst in pending:
            if self.deadline_hit():
                break
            if self.verify_one(inst, preload):
                verified.append(inst)
        return verified

    def verify_one(self, inst: Any, preload: bool) -> bool:
        """Verify one candidate (and on a GPU time one public call); False when it got a final row."""
        case, opts, best = self.case, self.opts, self.best
        try:
            if preload:
                tl = time.monotonic()
                with compile_only():
                    op_call(case, inst)()
                self.stats["load_s"] += time.monotonic() - tl
            out, warm_ms = checks.run_poisoned(case, inst, timed=self.prune)
            if self.prune and warm_ms is not None and math.isfinite(best) and warm_ms > hard_cap(best, opts):
                del out  # the first run may have compiled the kernel (~0.3 s): judge a second one
                out, warm_ms = checks.run_poisoned(case, inst, timed=True)
        except Exception as exc:
            self._final(inst, exc, new_row=True)
            return False
        if self.prune and warm_ms is not None and math.isfinite(best) and warm_ms > hard_cap(best, opts):
            del out
            self.row(inst, "pruned", f"not verified: its first run took {warm_ms:.4g} ms > hard cap "
                     f"{hard_cap(best, opts):.4g} ms = max({opts.hard_cap_factor:g} x best so far "
                     f"{best:.4g} ms, best + {opts.hard_cap_margin_ms:g} ms)")
            self.pruned_ms[inst.name] = warm_ms
            self.tick(inst)
            return False
        try:
            rel, mrel = result_errors(out, case.ref, ref_norms(case))
        except Exception as exc:
            self._final(inst, exc, new_row=True, while_="verifying")
            return False
        finally:
            del out
        wrong = checks.verdict(rel, mrel, self.problem.dtype)  # normwise and worst element; NaN-safe
        if wrong:
            self.row(inst, "failed", wrong, rel_err=rel, max_rel_err=mrel)
            self.tick(inst)
            return False
        self.row(inst, "ok", rel_err=rel, max_rel_err=mrel)
        if self.prune:
            try:
                call = op_call(case, inst)
                # untimed first: the first public call builds its plan (~1 ms of host work), which
                # outlasts the busy wait and was timed as GPU time, pruning fast kernels of small layers
                call()
                ms = timing.single_run_ms(call, case.device, inst, "single")
            except Exception as exc:
                self._final(inst, exc, while_="timing")
                return False
            self.single[inst.name] = ms
            self.best = min(self.best, ms)
        return True

    def _final(self, inst: Any, exc: BaseException, *, new_row: bool = False, while_: str = "") -> None:
        """A candidate that raised: its row, a progress tick, and FatalDeviceError if the GPU broke."""
        fatal = self.failed(inst.name, exc, while_=while_, new_row=inst if new_row else None)
        self.tick(inst)
        if fatal:
            raise fatal_error(exc, self.rows, culprit=inst.name) from exc

    def prune_slow(self, verified: list[Any]) -> list[Any]:
        """Prune by the single runs; the rest fastest single run first."""
        if not self.prune:
            return verified
        if math.isfinite(self.best):
            cap, opts, best = soft_cap(self.best, self.opts), self.opts, self.best
            keep = []
            for inst in verified:
                ms = self.single[inst.name]
                if ms > cap:  # one run may have caught a host stall: judge by the faster of two
                    ms = self.recheck(inst, ms)
                    if ms is None:
                        continue
                if ms > cap:
                    self.pruned_ms[inst.name] = ms
                    self.rows[inst.name].update(
                        status="pruned",
                        reason=f"verified; single run {ms:.4g} ms > {cap:.4g} ms = max({opts.prune_factor:g} x "
                               f"best so far {best:.4g} ms, best + {opts.prune_margin_ms:g} ms): not benchmarked")
                    self.tick(inst)
                else:
                    keep.append(inst)
            verified = keep
        return sorted(verified, key=lambda i: self.single[i.name])

    def recheck(self, inst: Any, ms: float) -> float | None:
        """The faster of ``ms`` and a second single run of a candidate about to be pruned (None when
        the second run raised: the candidate got its final row). A single run is one sample: on the
        H100 a stall once left a cfirst config at 0.73 ms whose neighbour with one more pipeline stage
        ran 0.026 ms, and the prune kept that row."""
        try:
            call = op_call(self.case, inst)
            call()  # untimed, as before the first single run: no plan building inside the timed run
            again = timing.single_run_ms(call, self.case.device, inst, "recheck")
        except Exception as exc:
            self._final(inst, exc, while_="timing")
            return None
        self.single[inst.name] = min(ms, again)
        return self.single[inst.name]

    def bench(self, verified: list[Any]) -> dict[str, timing.Timing]:
        """Time every verified candidate (briefly on a GPU), then the ``refine_top`` fastest at length."""
        opts, case = self.opts, self.case
        times: dict[str, timing.Timing] = {}
        for inst in verified:
            if self.deadline_hit():
                break
            try:
                fn = op_call(case, inst)
                times[inst.name] = (timing.time_gpu(fn, min(opts.warmup_ms, 5.0), opts.quick_rep_ms) if self.on_gpu
                                    else timing.time_cpu(fn, opts.cpu_reps))
            except Exception as exc:
                if self.failed(inst.name, exc, while_="timing"):
                    self.tick(inst)
                    raise fatal_error(exc, self.rows, culprit=inst.name) from exc
            self.tick(inst)
        if self.on_gpu and times and not self.stopped:
            order = sorted(times, key=lambda n: times[n].median_ms)
            top = order if opts.refine_top <= 0 else order[: opts.refine_top]
            by_name = {i.name: i for i in verified}
            for name in top:
                if past(opts.deadline):
                    self.stopped = True
                    break
                try:
                    times[name] = timing.time_gpu(op_call(case, by_name[name]), opts.warmup_ms, opts.rep_ms)
                except Exception as exc:
                    fatal = self.failed(name, exc, while_="timing")
                    times.pop(name)
                    if fatal:
                        raise fatal_error(exc, self.rows, culprit=name) from exc
        return times

    def time_baseline(self, wanted: bool) -> tuple[float | None, str]:
        """torch / cuDNN in the same run: (median ms or None, implementation or why unavailable)."""
        if not (self.opts.cudnn and wanted):
            return None, ""
        cudnn_ms, impl, err = cudnn.time_torch(self.case, self.opts.warmup_ms, self.opts.rep_ms, self.opts.cpu_reps)
        if cudnn_ms is None:
            impl = f"unavailable: {err}"[:200]
        return cudnn_ms, impl

    def finish(self, times: dict[str, timing.Timing], cudnn_ms: float | None, impl: str) -> ProblemRows:
        """Times, rates and the cuDNN ratio into the rows; drop verified rows the deadline left untimed."""
        p, dt, rows = self.problem.params, self.dt, self.rows
        flops = p.flops()
        res_bytes = (dt.result or dt.data).itemsize
        nbytes = p.bytes_moved(self.problem.op, dt.data.itemsize, self.case.n_ds, res_bytes)
        for name, t in times.items():
            r = rows[name]
            if r["status"] != "ok":
                continue
            r.update(median_ms=t.median_ms, p20_ms=t.p20_ms, p80_ms=t.p80_ms, reps=t.reps, timing=t.method,
                     tflops=flops / (t.median_ms * 1e9), gbps=nbytes / (t.median_ms * 1e6),
                     cudnn_ms=cudnn_ms, cudnn_impl=impl,
                     speedup=(cudnn_ms / t.median_ms) if cudnn_ms else None)
        for name, ms in self.pruned_ms.items():  # the single run, marked: a pruned row never wins
            r = rows[name]
            if r["status"] == "pruned" and ms > 0:
                r.update(median_ms=ms, p20_ms=ms, p80_ms=ms, reps=1, timing=PRUNED_TIMING,
                         tflops=flops / (ms * 1e9), gbps=nbytes / (ms * 1e6), cudnn_ms=cudnn_ms, cudnn_impl=impl)
        out = ProblemRows()
        for r in rows.values():
            if r["status"] == "ok" and r.get("median_ms") is None:
                if self.stopped:  # verified, but the deadline came before its timing: no row, a rerun redoes it
                    continue
                r.update(status="failed", reason=r.get("reason") or "not timed")  # a timing that failed
            out.append(r)
        out.stopped = self.stopped
        stats = self.stats
        stats.update(instances=len(out), ok=sum(r["status"] == "ok" for r in out),
                     pruned=sum(r["status"] == "pruned" for r in out))
        stats["failed"] = stats["instances"] - stats["ok"] - stats["pruned"]
        out.stats = stats
        return out
