"""``instance-factory merge``: tuning-database shard files into one (the best row per result).

    instance-factory merge tuning_db/nvidia-h200.csv.gz shard0.csv shard1.csv
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("merge", help="merge tuning-database shard files into one (best row per result)")
    p.add_argument("output", help="the merged file (created or merged into)")
    p.add_argument("shards", nargs="+", help="shard files")
    p.add_argument("--remove", action="store_true", help="delete the shard files after merging")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..tuning.database import merge_files

    n = merge_files(ns.shards, ns.output, remove_sources=ns.remove)
    print(f"merged {len(ns.shards)} file(s) into {ns.output}: {n} rows (best row per identity)")
    return 0
