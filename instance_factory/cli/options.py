"""Options shared by several subcommands: the tuning options (``tune``, ``bench``) and comma lists."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_tune_options", "csv_list", "tune_options"]


def csv_list(s: str | None) -> list[str] | None:
    if s is None:
        return None
    return [v.strip() for v in s.split(",") if v.strip()]


def add_tune_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tuning options")
    g.add_argument("--instances", help="only instances whose name matches (comma-separated globs/substrings)")
    g.add_argument("--max-instances", type=int, help="at most this many candidates per problem")
    g.add_argument("--rep-ms", type=float, help="do_bench repetition time of the full timing (default 60)")
    g.add_argument("--quick-rep-ms", type=float, help="do_bench time of the first, short timing (default 8)")
    g.add_argument("--refine-top", type=int, help="re-time this many fastest at full length (default 6; 0: all)")
    g.add_argument("--cpu-reps", type=int, help="timed runs per instance in the interpreter (default 3)")
    g.add_argument("--compile-workers", type=int,
                   help="processes (or threads) compiling candidates ahead (default min(16, cores - 1))")
    g.add_argument("--compile-mode", choices=["auto", "process", "thread"],
                   help="compile ahead in worker processes (auto on a GPU: whole sweep, overlapping the "
                        "measuring) or in a thread pool per problem")
    g.add_argument("--no-prune", action="store_true",
                   help="benchmark every verified candidate (default: skip do_bench of those whose single "
                        "run is > max(5x the best, best + 0.05 ms); they are stored as 'pruned')")
    g.add_argument("--max-minutes", type=float,
                   help="start no new measurement after this many minutes; finished problems (and the "
                        "finished part of the current one) are written, a rerun resumes. Finishing the "
                        "candidate in progress, cuDNN and the DB write take seconds more: leave a margin")
    g.add_argument("--no-cudnn", action="store_true", help="do not time torch / cuDNN")


def tune_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~instance_factory.tuning.options.TuneOptions` fields the options set, as keywords."""
    kw: dict[str, Any] = {}
    for name in ("instances", "max_instances", "rep_ms", "quick_rep_ms", "refine_top", "cpu_reps",
                 "compile_workers", "compile_mode"):
        v = getattr(ns, name, None)
        if v is not None:
            kw[name] = v
    if getattr(ns, "no_cudnn", False):
        kw["cudnn"] = False
    if getattr(ns, "no_prune", False):
        kw["prune"] = False
    if getattr(ns, "max_minutes", None) is not None:
        import time

        kw["deadline"] = time.time() + 60.0 * ns.max_minutes
    return kw
