"""``instance-factory`` / ``python -m instance_factory``: list, verify, tune, lookup, bench, merge, report."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections import Counter

# Optional subcommand providers: each module has register(subparsers). A missing one is skipped
# so the core commands keep working while a provider is being built.
_PROVIDERS = ("instance_factory.tuning.commands", "instance_factory.report.commands")


def _choose_backend() -> None:
    """Use the Triton interpreter on a machine without a GPU (must run before triton is imported)."""
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def _on_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


def _cmd_list(ns: argparse.Namespace) -> int:
    from .registry import get_registry

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
        for (op, fam, dt, nd, fo), n in sorted(counts.items()):
            print(f"  {op:16s} {fam:11s} {dt:11s} {nd}D {fo:12s} {n}")
    return 0


def _cmd_verify(ns: argparse.Namespace) -> int:
    import torch

    from .verify import builtin_cases, format_table, verify_case

    on_gpu = _on_gpu()
    device = "cuda" if on_gpu else "cpu"
    print(f"verifying built-in problems on {torch.cuda.get_device_name() if on_gpu else 'CPU (Triton interpreter)'}",
          flush=True)
    results = []
    for case in builtin_cases(on_gpu):
        results.extend(verify_case(case, device, max_instances=ns.max_instances))
    print(format_table(results))
    failed = sum(not r.passed for r in results)
    print(f"\n{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _cmd_quickstart(ns: argparse.Namespace) -> int:
    """The main job: verify, sweep the quickstart set, look one problem up, print the summary."""
    on_gpu = _on_gpu()
    where = "GPU" if on_gpu else "CPU, Triton interpreter"
    if ns.db:  # the lookup step must read what the sweep wrote
        os.environ["INSTANCE_FACTORY_USER_DB"] = ns.db
    steps = [
        ("1/3 verify built-in problems against float64", ["verify", "--max-instances", "1"]),
        ("2/3 tune the quickstart problem set (fp16, both passes)",
         ["tune", "quickstart", "--dtype", "fp16", "--quiet",
          *([] if on_gpu else ["--max-instances", "2", "--cpu-reps", "1"])]),
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="instance-factory", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registry instances, with filters, and counts per combination")
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
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("verify", help="verify a built-in problem set against the float64 reference")
    p.add_argument("--max-instances", type=int, default=2, help="instances verified per problem")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("quickstart", help="the main job: verify, tune the quickstart set, look up, summarize")
    p.add_argument("--db", help="database the sweep writes (default: the user tier)")
    p.set_defaults(func=_cmd_quickstart)

    for mod in _PROVIDERS:
        try:
            provider = importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name and mod.startswith(exc.name):
                continue
            raise
        provider.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    _choose_backend()
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns) or 0)
    except (ValueError, TypeError, KeyError, FileNotFoundError, RuntimeError) as exc:
        if os.environ.get("INSTANCE_FACTORY_DEBUG"):
            raise
        print(f"instance-factory {ns.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
