"""``instance-factory tune`` (alias ``sweep``): verify and time problem sets or single problems.

    instance-factory tune resnet50 --dtype bf16 --pass data          # sweep (resumes; --force redoes)
    instance-factory tune resnet50 --dtype bf16 --pass data --max-minutes 8.5 --summary s.md
                                                                      # stop cleanly before a deadline
    instance-factory tune quickstart --shard 0/2 --workers 2          # shard i of n, a worker per GPU
    instance-factory tune --problem 'conv_bwd_data|NHWGC/GKYXC/NHWGK|fp16|passthrough|2d-g1-...'
    instance-factory tune --todo suspects.json --db rows.csv         # time exactly these (db suspects --todo)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .options import add_tune_options, csv_list, tune_options

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("tune", aliases=["sweep"],
                              help="tune problem sets or problems (resumable, shardable sweeps; --dask: on a cluster)",
                              description="Verify every runnable instance against float64, time the correct "
                                          "ones and cuDNN, store the rows (user tier unless --db).")
    p.add_argument("sets", nargs="*", help="problem set names (configs/problem_sets) or YAML paths")
    p.add_argument("--problem", action="append", help="a problem key (op|layout|dtype|fused|params) or a "
                   "ConvParams key expanded over --dtype/--pass/--layout; repeatable")
    p.add_argument("--todo", help="a JSON file of problem key -> instance names: time exactly those, whatever "
                   "the database holds (`instance-factory db suspects --todo FILE` writes one)")
    p.add_argument("--dtype", help="comma-separated DataType names (default: the set's, bf16,fp16)")
    p.add_argument("--pass", dest="passes", help="data, weight or data,weight (default: both)")
    p.add_argument("--layout", help="layout family or CK triple, comma-separated (default nhwgc)")
    p.add_argument("--fused-op", default="passthrough", help="fused op tuned (default passthrough)")
    p.add_argument("--shard", default=None, help="i/n: this machine's share of the problems")
    p.add_argument("--force", action="store_true", help="re-measure what the database already holds")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes, one per GPU (0: every local GPU; default 1)")
    p.add_argument("--dask", nargs="?", const="local", metavar="ADDRESS",
                   help="one task per problem on a Dask cluster: a scheduler address (tcp://host:8786) or "
                        "scheduler file (*.json); without one a local cluster (LocalCUDACluster: one worker per "
                        "GPU). Needs the 'distributed' extra")
    p.add_argument("--dask-workers", type=int, help="workers of the local Dask cluster (default: one per GPU; "
                   "2 in the interpreter)")
    p.add_argument("--db", help="database file, or 'user' (default) / 'system' (tuning_db/<device>.csv.gz)")
    p.add_argument("--summary", help="also write the Markdown summary table to this file")
    p.add_argument("--no-summary", action="store_true", help="do not print the summary table")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_tune_options(p)
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..tuning.database import current_device
    from ..tuning.options import FatalDeviceError
    from ..tuning.problem_sets import gather_problems
    from ..tuning.sweep import sweep

    workers = None if ns.workers == 0 else ns.workers  # 0: every local GPU
    groups: dict[str, list[Any]] = {}
    todo = None
    if ns.todo:
        if ns.sets or ns.problem:
            print("tune: --todo names its own problems (leave out sets and --problem)", file=sys.stderr)
            return 2
        from ..tuning.suspects import read_todo

        try:
            todo = read_todo(ns.todo)
        except ValueError as exc:
            print(f"tune: {exc}", file=sys.stderr)
            return 2
    probs = gather_problems(ns.sets or [], [*(ns.problem or []), *(todo or {})], dtypes=csv_list(ns.dtype),
                            passes=csv_list(ns.passes), layouts=csv_list(ns.layout), fused_op=ns.fused_op,
                            groups=groups)
    if not probs:
        print("tune: name a problem set (e.g. quickstart, resnet50) or give --problem", file=sys.stderr)
        return 2
    dev = current_device()
    try:
        if ns.dask is not None:
            if ns.shard or todo:
                print("tune: --dask takes neither --shard (the cluster spreads the problems) nor --todo",
                      file=sys.stderr)
                return 2
            from ..tuning.dask_sweep import dask_sweep

            res = dask_sweep(probs, address=ns.dask, n_workers=ns.dask_workers, db=ns.db, force=ns.force,
                             progress=not ns.quiet, **tune_options(ns))
        else:
            res = sweep(probs, shard=ns.shard, force=ns.force, db=ns.db, workers=workers,
                        progress=not ns.quiet, todo=todo, **tune_options(ns))
    except FatalDeviceError as exc:
        print(f"tune: {exc}", file=sys.stderr)
        return 3
    except ImportError as exc:
        print(f"tune: {exc}", file=sys.stderr)
        return 2
    head = (f"{len(res.problems)} problems in this shard, {res.skipped_problems} already tuned (skipped); "
            f"{res.throughput_line(dev.name)}; database {res.db}")
    split = res.time_split()
    print(f"\n{head}" + (f"\ntime: {split}" if split else ""))
    if res.failed_workers:
        print(f"workers {res.failed_workers} failed (their finished rows were merged); rerun to resume",
              file=sys.stderr)
    for why in res.failed_problems:
        print(f"failed on the cluster (rerun to resume): {why}", file=sys.stderr)
    sweep_md = f"### Sweep on {dev.name}\n\n{head}.\n" + (f"\nTime: {split}.\n" if split else "")
    if ns.no_summary and ns.summary:
        with open(ns.summary, "w") as f:
            f.write(sweep_md)
    if not ns.no_summary:
        from ..tuning.summary import sweep_tables

        text = sweep_tables(dev, res.problems, groups, extra_files=[res.db])
        print()
        print(text)
        if ns.summary:
            with open(ns.summary, "w") as f:
                f.write(sweep_md + "\n" + text)
    return 1 if res.failed_workers or res.failed_problems else 0
