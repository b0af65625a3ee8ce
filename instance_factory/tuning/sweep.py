"""Offline sweeps: a problem set x dtypes x passes, resumable, shardable, one worker per local GPU.

``sweep("resnet50", dtypes=["bf16"], passes=["data"])`` expands the set, keeps this machine's shard
(``shard=(i, n)``: problems sorted by key, every n-th from i), drops the (problem, instance) pairs the
target database already holds for this device, software and kernel hash (unless ``force``), and
tunes the rest. With ``workers=k > 1`` the work is split again into k parts, each tuned by its own
process on its own GPU (``CUDA_VISIBLE_DEVICES=j``) writing its own shard file next to the target;
the shards are merged into the target (best row per identity) when the workers finish, and also
when some of them fail, so nothing measured is lost.

``max_minutes`` sets a deadline (from the call): no new problem, candidate or timing starts after it,
what is finished is written (after every problem, as always), and the result says
``stopped_early``; rerunning the same sweep resumes. ``SweepResult`` reports the throughput
(instances measured per minute, and how many of them were benchmarked with do_bench, pruned after
one run, or failed) and where the time went (``stats``; single process only).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .database import TuningDB, current_device, merge_files
from .options import TuneOptions
from .pipeline import torch_device
from .plan import plan_from_todo, plan_work, resolve_db
from .problem_sets import Problem, expand_problem_set, parse_shard, shard_split
from .tuner import tune

__all__ = ["SweepResult", "local_gpu_count", "sweep"]


@dataclass
class SweepResult:
    problems: list[Problem]  # this shard's problems, in the set's order
    tuned: int = 0  # (problem, instance) pairs measured now
    skipped_problems: int = 0  # problems with nothing left to measure (resume)
    rows: list[dict] = field(default_factory=list)
    db: str = ""
    seconds: float = 0.0
    failed_workers: list[int] = field(default_factory=list)
    failed_problems: list[str] = field(default_factory=list)  # Dask sweeps: "key: why" of tasks that failed
    stopped_early: bool = False  # the deadline (max_minutes) stopped it: rerun to resume
    stats: dict = field(default_factory=dict)  # seconds per phase, summed (single process only)

    def count(self, *statuses: str) -> int:
        return sum(1 for r in self.rows if r.get("status") in statuses)

    @property
    def ok(self) -> int:
        """Instances benchmarked with do_bench (interpreter: timed) and stored as ``ok``."""
        return self.count("ok")

    @property
    def pruned(self) -> int:
        return self.count("pruned")

    @property
    def failed(self) -> int:
        return self.tuned - self.ok - self.pruned

    @property
    def instances_per_minute(self) -> float:
        """Instances measured (verified, and benchmarked or pruned or failed) per minute of the sweep."""
        return self.tuned / (self.seconds / 60.0) if self.seconds > 0 else 0.0

    @property
    def benchmarked_per_minute(self) -> float:
        """Instances fully benchmarked (``ok`` rows) per minute of the sweep."""
        return self.ok / (self.seconds / 60.0) if self.seconds > 0 else 0.0

    def throughput_line(self, device: str = "") -> str:
        """One line: what was measured, how fast, and whether the deadline stopped it."""
        on = f" on {device}" if device else ""
        line = (f"measured {self.tuned} instances ({self.ok} ok, {self.pruned} pruned, {self.failed} failed) "
                f"in {self.seconds:.1f} s = {self.instances_per_minute:.1f} instances/min "
                f"({self.benchmarked_per_minute:.1f} benchmarked/min){on}")
        if self.stopped_early:
            line += "; stopped at the deadline (--max-minutes): rerun the same command to resume"
        return line

    def time_split(self) -> str:
        """Where the time went, e.g. ``compile wait 12.0 s, verify+single runs 30.1 s, ...``."""
        names = (("pool_start_s", "compile pool start"), ("setup_s", "operands+reference"),
                 ("compile_s", "compile wait"), ("load_s", "kernel load/inline compile"),
                 ("verify_s", "verify+single runs"), ("bench_s", "do_bench"),
                 ("cudnn_s", "cuDNN"), ("db_write_s", "DB writes"))
        parts = [f"{label} {self.stats[k]:.1f} s" for k, label in names if self.stats.get(k)]
        if self.stats.get("precompiled"):
            parts.append(f"{int(self.stats['precompiled'])} kernels compiled ahead "
                         f"({self.stats.get('compile_cpu_s', 0.0):.0f} worker-s)")
        return ", ".join(parts)


def local_gpu_count() -> int:
    from ..algorithms import interpreting

    try:
        import torch

        return 0 if interpreting() else torch.cuda.device_count()
    except Exception:
        return 0


def sweep(problem_set: Any, dtypes: Sequence[str] | None = None, passes: Sequence[str] | None = None,
          layout: str | Sequence[str] = "nhwgc", shard: tuple[int, int] | str | None = None,
          force: bool = False, db: Any = None, *, fused_op: str = "passthrough", workers: int | None = 1,
          device: Any = None, options: TuneOptions | None = None, progress: bool = True,
          max_minutes: float | None = None, todo: dict[str, list[str]] | None = None,
          **option_kw: Any) -> SweepResult:
    """Tune a problem set (name, YAML path, loaded dict, or list of Problems); see the module doc.

    ``workers``: processes, one per GPU (None: every local GPU; 1: this process, on ``device``).
    ``max_minutes``: stop starting new work this many minutes after the call (an earlier
    ``deadline`` option wins). ``todo`` (problem key -> instance names): time exactly those, whatever
    the database holds (e.g. :mod:`.suspects`' list of disturbed rows).
    """
    t0 = time.monotonic()
    opts = TuneOptions.make(options, **option_kw).within(max_minutes)
    problems = expand_problem_set(problem_set, dtypes=dtypes, passes=passes, layout=layout, fused_op=fused_op)
    mine = {p.key for p in shard_split(problems, parse_shard(shard))}
    problems = [p for p in problems if p.key in mine]  # this shard's, in the set's order
    tdev = torch_device(device)
    dinfo = current_device(tdev)
    target = resolve_db(db, dinfo)
    plan = plan_work(problems, target, dinfo, opts, force=force) if todo is None else plan_from_todo(
        problems, todo)
    todo = {pr.key: [i.name for i in insts] for pr, insts in plan if insts}
    res = SweepResult(problems=problems, skipped_problems=sum(1 for _, insts in plan if not insts),
                      db=str(target.path))
    if workers is None:
        workers = max(1, local_gpu_count())
    work = [pr for pr in problems if pr.key in todo]
    if workers <= 1 or len(work) <= 1:
        rows = tune(work, db=target, device=tdev, options=opts, progress=progress, todo=todo)
        res.stopped_early = bool(getattr(rows, "stopped_early", False))
        res.stats = dict(getattr(rows, "stats", {}))
    else:
        rows, res.failed_workers = _run_workers(work, todo, target, workers, opts, progress)
        done = {(r["problem_key"], r["instance"]) for r in rows}
        res.stopped_early = opts.deadline is not None and any(
            (k, n) not in done for k, names in todo.items() for n in names)
    res.rows = list(rows)
    res.tuned = len(rows)
    if rows:  # adds append; leave the file sorted, one row per identity (diff-friendly)
        target.compact()
    res.seconds = time.monotonic() - t0
    return res


def _worker_main(j: int, problems: list[Problem], todo: dict[str, list[str]], shard_db: str,
                 opts: TuneOptions, progress: bool, device: str) -> None:
    try:
        tune(problems, db=TuningDB(shard_db), device=device, options=opts, progress=progress, todo=todo)
    except Exception as exc:
        print(f"sweep worker {j}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


def _run_workers(work: list[Problem], todo: dict[str, list[str]], target: TuningDB, workers: int,
                 opts: TuneOptions, progress: bool) -> tuple[list[dict], list[int]]:
    """Split ``work`` over ``workers`` processes (GPU j for worker j), then merge their shard files."""
    from .database import read_db

    workers = min(workers, len(work))
    ctx = mp.get_context("spawn")
    procs = []
    shard_files = []
    gpus = local_gpu_count()
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = saved.split(",") if saved else [str(g) for g in range(gpus)]
    try:
        for j in range(workers):
            part = shard_split(work, (j, workers))
            shard_db = target.path.with_name(f"{target.path.stem}.worker{j}of{workers}{target.path.suffix}")
            shard_files.append(shard_db)
            if gpus:
                os.environ["CUDA_VISIBLE_DEVICES"] = visible[j % len(visible)]
            device = "cuda:0" if gpus else "cpu"
            p = ctx.Process(target=_worker_main, name=f"if-sweep-{j}",
                            args=(j, part, {pr.key: todo[pr.key] for pr in part}, str(shard_db), opts,
                                  progress, device))
            p.start()
            procs.append(p)
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved
    failed = []
    for j, p in enumerate(procs):
        p.join()
        if p.exitcode != 0:
            failed.append(j)
    existing = [f for f in shard_files if Path(f).exists()]
    rows: list[dict] = []
    for f in existing:
        rows.extend(read_db(f).to_dict("records"))
    if existing:
        merge_files(existing, target.path, remove_sources=True)
    for f in shard_files:  # the workers are gone: nobody else can hold these locks
        Path(f"{f}.lock").unlink(missing_ok=True)
    return rows, failed
