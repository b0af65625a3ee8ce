"""``instance-factory`` / ``python -m instance_factory``: list, verify, tune, lookup, bench, merge, report."""

from __future__ import annotations

import argparse
import os
import sys

from . import bench, db, extract, listing, lookup, merge, quickstart, report, tune, verify
from .backend import choose_backend

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The whole program: one module per subcommand adds its own (in this order, the order of --help).
    The modules import only argparse at the top: nothing may load triton before :func:`main` has
    chosen the backend."""
    parser = argparse.ArgumentParser(prog="instance-factory", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    listing.register(sub)
    verify.register(sub)
    quickstart.register(sub, build_parser)  # runs verify, tune and lookup through a parser of its own
    tune.register(sub)
    lookup.register(sub)
    merge.register(sub)
    bench.register(sub)
    db.register(sub)
    extract.register(sub)
    report.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    choose_backend()
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns) or 0)
    except (ValueError, TypeError, KeyError, FileNotFoundError, RuntimeError) as exc:
        if os.environ.get("INSTANCE_FACTORY_DEBUG"):
            raise
        print(f"instance-factory {ns.command}: error: {exc}", file=sys.stderr)
        return 2
