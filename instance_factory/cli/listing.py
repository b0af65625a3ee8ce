"""``instance-factory list``: the registry's instances, with filters, and counts per combination."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("list", help="list registry instances, with filters, and counts per combination")
    p.add_argument("--op", choices=["conv_bwd_data", "conv_bwd_weight"])
    p.add_argument("--layout", help="layout family (nhwgc, gnhwc, ngchw, ngchw_kcyx) or CK triple")
    p.add_argument("--dtype", help="data type name: fp32, fp32_tf32, fp16, bf16, bf16_fp32w, fp16_fp8")
    p.add_argument("--ndim", type=int, choices=[1, 2, 3])
    p.add_argument("--fused-op", help="passthrough, scale, bilinear, add, add_relu, custom")
    p.add_argument("--algorithm", help="kernel family, e.g. igemm, direct, splitk_atomic")
    p.add_argument("--pattern", help="comma-separated name globs (a plain word matches as a substring)")
    p.add_argument("--counts-only", action="store_true", help="print only the counts per combination")
    p.add_argument("--culled", action="store_true", help="print the configs expansion culled, with reasons")
    p.add_argument("--configs", help="config directory (default: configs/ or $INSTANCE_FACTORY_CONFIGS)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..registry import get_registry

    reg = get_registry(ns.configs)
    insts = reg.instances(op=ns.op, layout=ns.layout, dtype=ns.dtype, ndim=ns.ndim, fused_op=ns.fused_op,
                          pattern=ns.pattern, algorithm=ns.algorithm)
    if ns.culled:
        for c in reg.culled:
            if not ns.algorithm or c.algorithm == ns.algorithm:
                print(f"culled {c.algorithm} {dict(c.config)}: {c.reason}  [{c.path}]")
        print(f"{len(reg.culled)} configs culled")
        return 0
    if not ns.counts_only:
        for inst in insts:
            print(inst.name)
    counts = Counter(i.combination for i in insts)
    print(f"\n{len(insts)} instances in {len(counts)} combinations (op, layout, dtype, ndim, fused op)")
    if ns.counts_only or len(counts) <= 40:
        for (op, layout_family, dt, nd, fo), n in sorted(counts.items()):
            print(f"  {op:16s} {layout_family:11s} {dt:11s} {nd}D {fo:12s} {n}")
    return 0
