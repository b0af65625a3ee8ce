"""The tuner: verify every runnable instance of a problem against float64, time the correct ones and
cuDNN in the same run, and store one row per (problem, instance) in the tuning database.

Per problem:

1. candidates = ``registry.candidates(op, params, layout, dtype, fused_op)`` (optionally narrowed by
   name patterns), minus those already in the database for this device/software/kernel hash
   (resume), unless ``force``; on a GPU they are ordered likely-fast first
   (:func:`order_candidates`: the ``direct`` family first when C and K per group are <= 8, else the
   tensor-core tiles that fit the problem's GEMM best);
2. random operands (seeded, never all zero) and the float64 reference
   (:mod:`instance_factory.reference`, computed once per problem on the operands' device and shared
   by every candidate);
3. GPU only: compile every candidate ahead, without running it. ``compile_mode="process"`` (the
   default on a GPU): a pool of worker processes, started once per :func:`tune` call, compiles the
   whole plan in order into Triton's on-disk cache while this process measures (so compiling
   problem i+1 overlaps measuring problem i, and the GIL, which Triton holds for about half of a
   compile, is not shared); ``"thread"``: a thread pool per problem. A kernel a worker could not
   build becomes a ``compile_error`` row; anything else a worker could not do is simply compiled
   again by the first real run here;
4. the first real run of each candidate is its verification: the result buffer is poisoned with
   NaN, the instance runs through the public checks (``ops.prepare``) and ``||out - ref|| /
   ||ref||`` must be within ``DATA_TYPES[dtype].tolerance``; a wrong or crashing instance is stored
   as ``failed`` and never chosen. On a GPU the kernel is loaded first (from the cache the workers
   filled; compiled here if they did not get to it) without running, and then that first run is
   timed with CUDA events: when it and a second run (the first may still include a compile or a
   module load) exceed the hard cap ``max(hard_cap_factor x best, best +
   hard_cap_margin_ms)`` (best: the fastest single run of the problem so far) the candidate is
   stored as ``pruned`` without being verified (an igemm tile of 128 channels on a depthwise layer
   runs for 40-580 ms where ``direct`` needs 0.2 ms);
5. GPU: each verified candidate is timed once more through the public op call, after one untimed
   call that builds its plan (CUDA events, the GPU kept busy while the launch is queued, so only GPU
   time counts);
6. GPU: candidates whose single run exceeds ``max(prune_factor x best, best + prune_margin_ms)``
   (best: the fastest single run of the problem, or the best time the database already holds for
   it when a sweep resumes) are
   stored as ``pruned`` (median_ms = that single run, timing ``single-run (pruned)``) and never
   reach ``do_bench``; a pruned row never wins a lookup, a merge or the report (they read ``ok``
   rows only), and a resumed sweep skips it like any measured row (``--force`` redoes it);
7. time the rest through the public op call (result allocation, workspace zeroing and the split-K
   reduce included): on a GPU ``triton.testing.do_bench`` (warm-up, L2 flushed between runs), first
   briefly for all (fastest single run first), then again at full length for the ``refine_top``
   fastest; on the CPU interpreter the median of a few ``time.perf_counter`` runs (the numbers only
   exercise the pipeline; no pruning there);
8. time torch's own convolution backward in the same run (cuDNN with ``cudnn.benchmark`` on and
   channels-last tensors for a channels-last layout; on the CPU, torch's CPU kernel, marked so);
9. write the rows (merge-on-write under the file lock) after each problem, so a killed sweep
   resumes where it stopped.

``TuneOptions.deadline`` (``tune --max-minutes``): no new candidate, problem or ``do_bench`` starts
after it; the problem in progress keeps the rows it finished (a candidate verified but not yet timed

The modules: :mod:`.options` (TuneOptions, row containers, deadline clock), :mod:`.candidates`
(which instances, in which order), :mod:`.plan` (target database, resume, the plan),
:mod:`.compile_ahead` (worker processes / threads, compile-only launches), :mod:`.pipeline` (one
problem, step by step), :mod:`.errors` (classifying failures), :mod:`.progress`; operands,
reference, the poisoned run, the error check and the timers are the shared harness
(:mod:`instance_factory.harness`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from .compile_ahead import Precompiler
from .database import current_device
from .options import FatalDeviceError, TuneOptions, TuneResult, add_stats, past
from .pipeline import gpu_pipeline, resolved_compile_mode, torch_device, tune_problem
from .plan import plan_from_todo, plan_work, prior_best, resolve_db
from .problem_sets import Problem
from .progress import Progress

__all__ = ["TuneOptions", "tune", "tune_problem"]


def tune(problems: Iterable[Problem] | Problem, *, db: Any = None, device: Any = None, force: bool = False,
         options: TuneOptions | None = None, progress: bool = True,
         todo: dict[str, list[str]] | None = None, **option_kw: Any) -> TuneResult:
    """Tune each problem and store its rows in ``db`` (default: the user tier); returns the new rows
    as a :class:`TuneResult` (a list with ``stopped_early`` and ``stats``).

    Without ``force``, instances that already have a row for this device, software and kernel hash
    are skipped (a problem with none left is skipped whole). ``todo`` (problem key -> instance names)
    replaces that computation (sweep workers get it from the parent). The rows of each problem are
    written as soon as it is done; with ``deadline`` set nothing new starts after it.
    """
    opts = TuneOptions.make(options, **option_kw)
    if isinstance(problems, Problem):
        problems = [problems]
    problems = list(problems)
    tdev = torch_device(device)
    dinfo = current_device(tdev)
    target = resolve_db(db, dinfo)
    plan = plan_work(problems, target, dinfo, opts, force=force) if todo is None else plan_from_todo(
        problems, todo)
    total = sum(len(v) for _, v in plan)
    result = TuneResult()
    if total == 0:
        return result
    bar = Progress(total, desc=f"tune {dinfo.kind}", enabled=progress)
    precompiler = None
    try:
        if gpu_pipeline(tdev) and resolved_compile_mode(tdev, opts) == "process" and not past(opts.deadline):
            t0 = time.monotonic()
            precompiler = Precompiler(tdev, plan, opts)
            result.stats["pool_start_s"] = time.monotonic() - t0
        prior = prior_best(target, dinfo) if gpu_pipeline(tdev) and opts.prune else {}
        for problem, insts in plan:
            if not insts:
                continue
            if past(opts.deadline):
                result.stopped_early = True
                break
            try:
                rows = tune_problem(problem, insts, device=tdev, options=opts, progress=bar,
                                    prior_best_ms=prior.get(problem.key), _precompiler=precompiler)
            except FatalDeviceError as exc:
                target.add(getattr(exc, "rows", []))
                raise
            t0 = time.monotonic()
            target.add(rows)
            result.stats["db_write_s"] = result.stats.get("db_write_s", 0.0) + time.monotonic() - t0
            add_stats(result.stats, rows.stats)
            result.extend(rows)
            if rows.stopped:
                result.stopped_early = True
                break
    finally:
        if precompiler is not None:
            precompiler.close()
        bar.close()
    return result

