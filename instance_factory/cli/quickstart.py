"""``instance-factory quickstart``: the main job: verify, sweep the quickstart set, look one problem
up, print the summary (each step is the program's own subcommand)."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from typing import Any

from .backend import on_gpu

__all__ = ["register"]


def register(subparsers: Any, build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """``build_parser`` builds the whole program's parser, which runs the steps."""
    p = subparsers.add_parser("quickstart", help="the main job: verify, tune the quickstart set, look up, summarize")
    p.add_argument("--db", help="database the sweep writes (default: the user tier)")
    p.set_defaults(func=functools.partial(run, build_parser=build_parser))


def run(ns: argparse.Namespace, build_parser: Callable[[], argparse.ArgumentParser]) -> int:
    gpu = on_gpu()
    where = "GPU" if gpu else "CPU, Triton interpreter"
    if ns.db:  # the lookup step must read what the sweep wrote
        os.environ["INSTANCE_FACTORY_USER_DB"] = ns.db
    steps = [
        ("1/3 verify built-in problems against float64", ["verify", "--max-instances", "1"]),
        ("2/3 tune the quickstart problem set (fp16, both passes)",
         ["tune", "quickstart", "--dtype", "fp16", "--quiet",
          *([] if gpu else ["--max-instances", "2", "--cpu-reps", "1"])]),
        ("3/3 look up the instance that now serves a depthwise problem",
         ["lookup", "--op", "weight", "--params", "2d-g16-n2-k1-c1-f3x3-i6x6-s1x1-d1x1-l1x1-r1x1",
          "--dtype", "fp16"]),
    ]
    parser = build_parser()
    for title, argv in steps:
        print(f"\n== {title} ({where}) ==", flush=True)
        sub = parser.parse_args(argv)
        rc = int(sub.func(sub) or 0)
        if rc:
            return rc
    return 0
