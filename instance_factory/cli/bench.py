"""``instance-factory bench``: the best instance against cuDNN per problem of a set (Markdown table).

    instance-factory bench resnet50 --dtype bf16 --pass weight        # best vs cuDNN (from the DB)
    instance-factory bench heldout --untuned                          # untuned default vs tuned vs cuDNN
"""

from __future__ import annotations

import argparse
from typing import Any

from .options import add_tune_options, csv_list, tune_options

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="best instance vs cuDNN per problem of a set (Markdown table)")
    p.add_argument("sets", nargs="+", help="problem set names or YAML paths")
    p.add_argument("--dtype", help="comma-separated DataType names (default: the set's)")
    p.add_argument("--pass", dest="passes", help="data, weight or data,weight")
    p.add_argument("--layout", help="layout family or CK triple (default nhwgc)")
    p.add_argument("--measure", action="store_true", help="tune what the database lacks first")
    p.add_argument("--force", action="store_true", help="with --measure: re-measure everything")
    p.add_argument("--db", help="also read (with --measure: write) this database file")
    p.add_argument("-o", "--output", help="write the table to this Markdown file")
    p.add_argument("--summary-csv", help="write the per-class summary (e.g. docs/bench/summary.csv)")
    p.add_argument("--copy-gbps", type=float, help="copy bandwidth to compare with (default: measured now)")
    p.add_argument("--matmul-tflops", type=float, help="matmul ceiling to compare with (with --copy-gbps)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--untuned", action="store_true",
                   help="the untuned default (instance=None without this problem's rows) vs the tuned best "
                        "vs cuDNN, side by side; a default the database did not time is timed now")
    p.add_argument("--no-measure-default", action="store_true",
                   help="with --untuned: only use times the database holds")
    add_tune_options(p)
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..tuning.database import current_device
    from ..tuning.problem_sets import gather_problems
    from ..tuning.summary import load_valid
    from ..tuning.sweep import sweep

    dev = current_device()
    probs = gather_problems(ns.sets, dtypes=csv_list(ns.dtype), passes=csv_list(ns.passes),
                            layouts=csv_list(ns.layout))
    extra = []
    if ns.measure:
        res = sweep(probs, db=ns.db, force=ns.force, progress=not ns.quiet, **tune_options(ns))
        extra.append(res.db)
    elif ns.db:
        from ..tuning.plan import resolve_db

        extra.append(str(resolve_db(ns.db, dev).path))
    rows = load_valid(dev, extra_files=extra)
    summary = None
    title = f"{', '.join(ns.sets)} on {dev.name}"
    if ns.untuned:
        import warnings

        from ..tuning.untuned import compare, untuned_table

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recs = compare(probs, rows, measure_missing=not ns.no_measure_default)
        table = untuned_table(recs, title=f"untuned default vs tuned vs cuDNN: {title}")
    else:
        from ..tuning.classes import class_summary, class_table, measure_ceilings, with_ceilings
        from ..tuning.summary import summary_frame

        copy_gbps, matmul_tflops = (measure_ceilings() if ns.copy_gbps is None
                                    else (ns.copy_gbps, ns.matmul_tflops))
        sf = with_ceilings(summary_frame(rows, probs), copy_gbps, matmul_tflops)
        summary = class_summary(sf, device=dev.name)
        table = f"### {title}\n\n" + class_table(sf, summary, copy_gbps, matmul_tflops,
                                                   ceilings_given=ns.copy_gbps is not None)
    print(table)
    if ns.summary_csv and summary is not None:
        from ..tuning.classes import write_summary_csv

        write_summary_csv(summary, ns.summary_csv)
    if ns.output:
        with open(ns.output, "w") as f:
            f.write(table)
    return 0
