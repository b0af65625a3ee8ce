"""``instance-factory verify``: a built-in problem set against the float64 reference."""

from __future__ import annotations

import argparse
from typing import Any

from .backend import on_gpu

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("verify", help="verify a built-in problem set against the float64 reference")
    p.add_argument("--max-instances", type=int, default=2, help="instances verified per problem")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    import torch

    from ..verify import builtin_cases, format_table, verify_case

    gpu = on_gpu()
    device = "cuda" if gpu else "cpu"
    print(f"verifying built-in problems on {torch.cuda.get_device_name() if gpu else 'CPU (Triton interpreter)'}",
          flush=True)
    results = []
    for case in builtin_cases(gpu):
        results.extend(verify_case(case, device, max_instances=ns.max_instances))
    print(format_table(results))
    failed = sum(not r.passed for r in results)
    print(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0
