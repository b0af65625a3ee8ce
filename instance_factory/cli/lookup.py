"""``instance-factory lookup``: the instance that would run a problem, and why.

    instance-factory lookup --op data --params 2d-g1-n128-k64-c64-f3x3-i56x56-s1x1-d1x1-l1x1-r1x1 \\
        --layout nhwgc --dtype fp16 --explain                         # the instance that would run, why
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("lookup", help="print the instance that would run a problem, and why")
    p.add_argument("key", nargs="?", help="full problem key op|layout|dtype|fused_op|params")
    p.add_argument("--op", help="data / weight")
    p.add_argument("--params", help="ConvParams key, e.g. 2d-g1-n128-k64-c64-f3x3-i56x56-s1x1-d1x1-l1x1-r1x1")
    p.add_argument("--layout", default="nhwgc", help="layout family or CK triple (default nhwgc)")
    p.add_argument("--dtype", help="DataType name: fp16, bf16, bf16_fp32w, fp32, fp32_tf32, ...")
    p.add_argument("--fused-op", default="passthrough")
    p.add_argument("--policy", choices=["heuristic", "tune", "error"], help="miss policy for this lookup")
    p.add_argument("--explain", action="store_true",
                   help="also print the cost model's ranking of the runnable instances and its neighbours")
    p.add_argument("--untuned", action="store_true",
                   help="what instance=None would serve if this problem had no rows (ignores its own rows)")
    p.add_argument("--top", type=int, default=10, help="with --explain: instances shown (default 10)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    import warnings

    from ..layouts import LAYOUT_FAMILIES, layout_for
    from ..problem import ConvParams
    from ..tuning.database import split_problem_key
    from ..tuning.lookup import TuningMissError, TuningMissWarning, explain
    from ..tuning.problem_sets import normalize_pass

    if ns.key:
        op, layout, dtype, fused, pkey = split_problem_key(ns.key)
    else:
        if not (ns.op and ns.params and ns.dtype):
            print("lookup: give a full problem key, or --op, --params, --dtype (and --layout)", file=sys.stderr)
            return 2
        op, layout, dtype, fused, pkey = normalize_pass(ns.op), ns.layout, ns.dtype, ns.fused_op, ns.params
    params = ConvParams.from_key(pkey)
    if layout.lower() in LAYOUT_FAMILIES:
        layout = layout_for(layout.lower(), params.ndim).name
    try:
        with warnings.catch_warnings():  # "chosen by" below says it
            warnings.simplefilter("ignore", TuningMissWarning)
            ch = explain(op, params, layout=layout, dtype=dtype, fused_op=fused, policy=ns.policy,
                         untuned=ns.untuned)
    except TuningMissError as exc:
        print(f"lookup: {exc}", file=sys.stderr)
        return 1
    inst = ch.instance
    print(f"problem    {ch.problem_key}")
    print(f"instance   {inst.name}")
    print(f"chosen by  {ch.source}" + (f" (nearest tuned problem {ch.neighbor}, distance {ch.distance:.2f})"
                                       if ch.neighbor else "") + (f"; {ch.note}" if ch.note else ""))
    print(f"algorithm  {inst.algorithm}")
    print("params     " + ", ".join(f"{k}={v}" for k, v in inst.cfg.items()))
    if ch.row and ch.source.startswith("exact"):
        r = ch.row
        print(f"measured   {r['median_ms']:.4g} ms, {r.get('tflops', float('nan')):.3g} TFLOP/s, cuDNN "
              f"{r.get('cudnn_ms', float('nan')):.4g} ms, speedup {r.get('speedup', float('nan')):.3g}x, "
              f"rel_err {r.get('rel_err', float('nan')):.2g}, {r['timestamp']}")
    print(f"databases  {', '.join(ch.db_files) or '(none found)'}")
    if ns.explain:
        _print_explanation(ch, ns.top)
    return 0


def _print_explanation(ch: Any, top: int) -> None:
    """The cost model's ranking and the tuned neighbours behind it (``lookup --explain``)."""
    from ..tuning.summary import short_instance

    if not ch.ranking:
        print("explain    an exact hit: the fastest verified row measured for this very problem "
              "(--untuned shows what the cost model would serve)")
        return
    print(f"explain    predicted ms = the roofline's work x the correction measured for the same kernel on the "
          f"nearest tuned problems, blended with its family's floor; {len(ch.ranking)} instances can run it")
    print(f"  {'#':>3} {'predicted ms':>12} {'model ms':>9}  instance  (evidence)")
    for n, p in enumerate(ch.ranking[:top], 1):
        print(f"  {n:>3} {p.predicted_ms:12.4g} {p.model_ms:9.4g}  {short_instance(p.name)}  ({p.basis})")
    if ch.neighbors:
        print("  nearest tuned problems (distance: features + dtype / layout / class / device penalties):")
        for d, key in ch.neighbors:
            print(f"    {d:6.2f}  {key}")
