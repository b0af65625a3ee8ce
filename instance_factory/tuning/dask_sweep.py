"""Distributed sweeps on Dask: one tuning task per problem, the driver the only database writer.

``dask_sweep(problems, address=None)`` (``instance-factory tune ... --dask [ADDRESS]``):

* **cluster**: ``address`` None starts a local one: dask-cuda's ``LocalCUDACluster`` (one worker
  process per visible GPU, each seeing only its own) when GPUs are visible, else a
  ``distributed.LocalCluster`` of ``n_workers`` single-threaded processes (the Triton interpreter on
  the CPU). An address (``tcp://host:8786``) or a scheduler file (``*.json``) joins a running cluster,
  e.g. one started by ``dask scheduler`` + ``dask cuda worker`` on each machine, or by dask-jobqueue;
* **plan**: the driver asks one worker which device it tunes on, then plans against the target
  database exactly as :func:`~.sweep.sweep` does (resume: pairs already measured for that device,
  software and kernel hash are skipped unless ``force``);
* **tasks**: one per problem, ``tune_problem`` on the worker's GPU (compiling in threads), returning
  its rows; workers never touch the database. The driver appends each problem's rows as it arrives
  (checked like every write), shows a progress bar, and compacts the file once at the end;
* **failures**: a task whose worker dies (killed, out of memory, or a GPU left in an error state,
  whose task exits its worker on purpose) is rescheduled by Dask on another worker, up to the
  scheduler's ``distributed.scheduler.allowed-failures`` (3) worker deaths; a task that raises is
  retried ``retries`` times. Problems that still fail are listed in ``SweepResult.failed_problems``
  and a rerun resumes them.

Dask is an optional extra (``pip install -e ".[distributed]"``; ``dask-cuda`` for the local CUDA
cluster); without it only this module is unavailable.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from .options import TuneOptions
from .plan import plan_work, resolve_db
from .problem_sets import Problem, expand_problem_set
from .progress import Progress
from .sweep import SweepResult

__all__ = ["dask_sweep", "start_local_cluster"]

_INSTALL_HINT = 'Dask sweeps need the optional extra: pip install -e ".[distributed]"'


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(f"{_INSTALL_HINT} ({exc})") from None
    return distributed


def start_local_cluster(n_workers: int | None = None) -> Any:
    """A local cluster: LocalCUDACluster (one worker per visible GPU) when GPUs are visible and the
    interpreter is off, else a LocalCluster of ``n_workers`` (default 2) single-threaded processes."""
    distributed = _distributed()
    from .sweep import local_gpu_count

    if local_gpu_count() > 0:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as exc:
            raise ImportError(f"a local CUDA cluster needs dask-cuda ({_INSTALL_HINT}): {exc}") from None
        kw = {"n_workers": n_workers} if n_workers else {}
        return LocalCUDACluster(threads_per_worker=1, **kw)
    return distributed.LocalCluster(n_workers=n_workers or 2, threads_per_worker=1, processes=True,
                                    dashboard_address=None)


def _connect(address: str | None, n_workers: int | None) -> tuple[Any, list[Any]]:
    """(client, things to close afterwards)."""
    distributed = _distributed()
    if address and address not in ("local", "auto"):
        if address.endswith(".json"):
            client = distributed.Client(scheduler_file=address)
        else:
            client = distributed.Client(address)
        return client, [client]
    cluster = start_local_cluster(n_workers)
    client = distributed.Client(cluster)
    return client, [client, cluster]


# ----------------------------------------------------------------------------------------------
# what runs on a worker
# ----------------------------------------------------------------------------------------------
def _worker_device() -> Any:
    """The DeviceInfo this worker tunes on (its current CUDA device, or the CPU interpreter)."""
    from .database import current_device

    return current_device(None)


def _tune_task(problem: Problem, names: list[str], options: TuneOptions) -> dict:
    """Tune one problem on this worker's device; returns its rows (nothing is written here)."""
    from ..registry import get_registry
    from .options import FatalDeviceError
    from .pipeline import tune_problem

    reg = get_registry()
    insts = [reg.get(n) for n in names]
    try:
        rows = tune_problem(problem, insts, device=None, options=options, progress=None)
    except FatalDeviceError as exc:
        # this process's GPU context is unusable: end the worker so that Dask restarts it (its nanny)
        # and reschedules the problem elsewhere
        print(f"instance_factory dask worker: {exc}; exiting so that the worker restarts",
              file=sys.stderr, flush=True)
        os._exit(70)
    return {"rows": list(rows), "stopped": bool(rows.stopped), "stats": dict(rows.stats),
            "worker_pid": os.getpid()}


# ----------------------------------------------------------------------------------------------
# the driver
# ----------------------------------------------------------------------------------------------
def dask_sweep(problem_set: Any, dtypes: Sequence[str] | None = None, passes: Sequence[str] | None = None,
               layout: str | Sequence[str] = "nhwgc", *, address: str | None = None, client: Any = None,
               n_workers: int | None = None, db: Any = None, force: bool = False,
               fused_op: str = "passthrough", retries: int = 2, options: TuneOptions | None = None,
               progress: bool = True, max_minutes: float | None = None, **option_kw: Any) -> SweepResult:
    """Tune a problem set (name, YAML path, dict, or list of Problems) on a Dask cluster; see the
    module docstring. ``client``: an existing ``distributed.Client`` (then ``address`` is unused)."""
    t0 = time.monotonic()
    opts = TuneOptions.make(options, **option_kw).within(max_minutes)
    problems = expand_problem_set(problem_set, dtypes=dtypes, passes=passes, layout=layout, fused_op=fused_op)
    owned: list[Any] = []
    if client is None:
        client, owned = _connect(address, n_workers)
    try:
        return _drive(client, problems, db, force, retries, opts, progress, t0)
    finally:
        for thing in owned:
            thing.close()


def _drive(client: Any, problems: list[Problem], db: Any, force: bool, retries: int, opts: TuneOptions,
           progress: bool, t0: float) -> SweepResult:
    distributed = _distributed()
    dinfo = client.submit(_worker_device, pure=False).result()
    target = resolve_db(db, dinfo)
    plan = plan_work(problems, target, dinfo, opts, force=force)
    res = SweepResult(problems=problems, skipped_problems=sum(1 for _, insts in plan if not insts),
                      db=str(target.path))
    futures = {}
    for i, (pr, insts) in enumerate(plan):
        if insts:
            fut = client.submit(_tune_task, pr, [x.name for x in insts], opts, retries=retries, pure=False,
                                key=f"if-tune-{i}-{os.getpid()}-{time.time_ns()}")
            futures[fut] = (pr, len(insts))
    bar = Progress(sum(n for _, n in futures.values()), desc=f"dask sweep {dinfo.kind}", enabled=progress)
    written = 0
    try:
        for fut in distributed.as_completed(list(futures)) if futures else ():
            pr, n = futures[fut]
            try:
                out = fut.result()
            except Exception as exc:  # KilledWorker after too many worker deaths, or an error retried out
                res.failed_problems.append(f"{pr.key}: {type(exc).__name__}: {exc}"[:400])
                bar.update(n, f"FAILED {pr.label}")
                continue
            target.add(out["rows"])  # the driver is the only writer
            written += len(out["rows"])
            res.rows.extend(out["rows"])
            res.stopped_early |= out["stopped"]
            for k, v in out["stats"].items():
                res.stats[k] = res.stats.get(k, 0.0) + v
            bar.update(n, f"{pr.label} {pr.op[5:]} {pr.dtype}")
    finally:
        bar.close()
        if written:
            target.compact()
    res.tuned = len(res.rows)
    res.seconds = time.monotonic() - t0
    return res
