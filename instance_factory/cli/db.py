"""``instance-factory db``: show, summarize, compact, prune or evaluate the tuning databases.

    instance-factory db summary | instance-factory db show --problem 56x56
    instance-factory db prune --db tuning_db/nvidia-h100-80gb-hbm3.csv.gz  # drop rows of changed kernels
    instance-factory db evaluate                                      # leave-one-out score of the miss policy
    instance-factory db evaluate --hide layer                         # ... hiding each layer at every batch size
    instance-factory db evaluate --hide layer --json new.json --compare old.json  # what a model change moved
    instance-factory db suspects --db FILE --todo suspects.json       # rows a disturbance slowed: time again
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register"]

_SHOWN_COLUMNS = ["problem_key", "instance", "status", "median_ms", "tflops", "cudnn_ms", "speedup", "rel_err"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("db", help="show or summarize the tuning databases")
    p.add_argument("action", choices=["summary", "show", "path", "compact", "prune", "evaluate", "suspects"],
                   nargs="?", default="summary",
                   help="compact: rewrite the user tier (or --db) with one row per result, sorted; prune: drop "
                        "the rows of the user tier (or --db) whose kernel changed or is gone; evaluate: "
                        "leave-one-out score of the miss policy on the shipped rows (or --db); suspects: the "
                        "fp16/bf16 rows over 2x their twin's time (same kernel), to time again")
    p.add_argument("--db", help="one database file (default: this device's system and user tiers)")
    p.add_argument("--problem", help="only problem keys containing this text")
    p.add_argument("--best", action="store_true", help="show only the best row per problem")
    p.add_argument("--all", action="store_true", help="show rows of other devices/software and stale rows too")
    p.add_argument("--hide", choices=["problem", "layer"], default="problem",
                   help="evaluate: hide each problem's own rows (default), or every problem of its layer (any "
                        "batch size, dtype, layout, fused op), as for a layer nobody tuned")
    p.add_argument("--todo", help="suspects: write them here as `tune --todo` input (JSON)")
    p.add_argument("--json", dest="json_out", help="evaluate: also write each problem's result here (JSON)")
    p.add_argument("--compare", help="evaluate: list the problems whose untuned / tuned-best ratio moved against "
                                     "an earlier --json file")
    p.add_argument("--no-foreign", action="store_true",
                   help="evaluate: without the other GPU kinds' shipped rows as evidence (run-time lookups use them)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..tuning.database import current_device, system_db_dir, system_db_path, user_db_path

    dev = current_device()
    if ns.action == "evaluate":
        import json

        from ..tuning.miss_eval import compare_results, evaluate_databases

        results: list = []
        for table in evaluate_databases(ns.db, stale_rows=ns.all, hide=ns.hide, foreign=not ns.no_foreign,
                                        collect=results):
            print(table)
        if ns.json_out:
            Path(ns.json_out).write_text(json.dumps(results, default=str))
        if ns.compare:
            print(compare_results(json.loads(Path(ns.compare).read_text()), results))
        return 0
    if ns.db:
        from ..tuning.plan import resolve_db

        paths = [resolve_db(ns.db, dev).path]
    else:
        paths = [system_db_path(dev.kind), user_db_path(dev.kind)]
    if ns.action in ("compact", "prune"):  # rewrites: the user tier, or the file --db names
        from ..tuning.database import TuningDB

        for path in paths:
            if not path.exists() or (not ns.db and path == system_db_path(dev.kind)):
                continue
            if ns.action == "compact":
                print(f"{path}: compacted to {TuningDB(path).compact()} rows (one per identity, sorted)")
            else:
                kept, dropped = TuningDB(path).prune_stale()
                print(f"{path}: dropped {dropped} rows of changed or removed kernels, kept {kept}")
        return 0
    if ns.action == "suspects":
        return _suspects(ns, paths)
    if ns.action == "path":
        print(f"system tier  {system_db_dir()}  (this device: {system_db_path(dev.kind)})")
        print(f"user tier    {user_db_path(dev.kind)}")
        return 0
    _show(ns, dev, paths)
    return 0


def _show(ns: argparse.Namespace, dev: Any, paths: list[Any]) -> None:
    """``db summary`` (rows per device, software and status) or ``db show`` (the rows themselves)."""
    import pandas as pd

    from ..tuning.database import current_software, read_db, registry_kernel_hashes, valid_rows

    hashes = registry_kernel_hashes()
    sw = current_software()
    for path in paths:
        if not path.exists():
            print(f"{path}: (no file)")
            continue
        df = read_db(path)
        valid = valid_rows(df, device=dev, software=sw, kernel_hashes=hashes, ok_only=False)
        if ns.action == "summary":
            print(f"{path}: {len(df)} rows, {df['problem_key'].nunique()} problems; "
                  f"{len(valid)} rows valid for {dev.name} with triton {sw.triton}, torch {sw.torch}, "
                  f"instance_factory {sw.package} ({len(df) - len(valid)} for other devices/software or stale)")
            if len(df):
                g = df.groupby(["device", "package_version", "status"]).size().rename("rows").reset_index()
                print(g.to_string(index=False))
            print()
        else:
            show = df if ns.all else valid
            if ns.problem:
                show = show[show["problem_key"].str.contains(ns.problem, regex=False)]
            if ns.best:
                from ..tuning.database import best_per_problem

                show = best_per_problem(show)
            with pd.option_context("display.max_colwidth", 90, "display.width", 250):
                print(f"{path}: {len(show)} rows")
                if len(show):
                    print(show[_SHOWN_COLUMNS].to_string(index=False))


def _suspects(ns: argparse.Namespace, paths: list[Any]) -> int:
    """``db suspects``: the current rows (any device) that a disturbance slowed, and a todo file."""
    from ..tuning.database import read_db, registry_kernel_hashes, valid_rows
    from ..tuning.model_constants import DISTURBED_SIBLING_FACTOR, FAMILY_OUTLIER_FACTOR
    from ..tuning.suspects import suspect_rows, suspects_todo, write_todo

    hashes = registry_kernel_hashes()
    found = []
    if not any(path.exists() for path in paths):
        print(f"db suspects: no database file at {', '.join(str(p) for p in paths)}")
    for path in paths:
        if not path.exists():
            continue
        rows = valid_rows(read_db(path), kernel_hashes=hashes, ok_only=False)
        sus = suspect_rows(rows.to_dict("records"))
        twins = sum(s["why"] == "twin" for s in sus)
        print(f"{path}: {twins} of {len(rows)} current rows over {DISTURBED_SIBLING_FACTOR:g}x their fp16/bf16 "
              f"twin's time, {len(sus) - twins} over {FAMILY_OUTLIER_FACTOR:g}x their kernel family's median on "
              "the problem")
        for s in sus[:10]:  # the worst ten
            print(f"  {s['ms']:.4f} ms vs {s['ref_ms']:.4f} ({s['why']})  {s['status']:6s} {s['instance']}  "
                  f"{s['problem_key']}")
        found += sus
    if ns.todo:
        todo = suspects_todo(found)
        write_todo(todo, ns.todo)
        print(f"wrote {sum(len(v) for v in todo.values())} runs over {len(todo)} problems to {ns.todo} "
              "(time them on that GPU: instance-factory tune --todo FILE --db rows.csv, then merge)")
    return 0
