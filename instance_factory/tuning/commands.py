"""Command-line subcommands of the tuning system; ``instance_factory.cli`` calls :func:`register`.

    instance-factory tune resnet50 --dtype bf16 --pass data          # sweep (resumes; --force redoes)
    instance-factory tune resnet50 --dtype bf16 --pass data --max-minutes 8.5 --summary s.md
                                                                      # stop cleanly before a deadline
    instance-factory tune quickstart --shard 0/2 --workers 2          # shard i of n, a worker per GPU
    instance-factory tune --problem 'conv_bwd_data|NHWGC/GKYXC/NHWGK|fp16|passthrough|2d-g1-...'
    instance-factory lookup --op data --params 2d-g1-n128-k64-c64-f3x3-i56x56-s1x1-d1x1-l1x1-r1x1 \\
        --layout nhwgc --dtype fp16 --explain                         # the instance that would run, why
    instance-factory bench heldout --untuned                          # untuned default vs tuned vs cuDNN
    instance-factory db evaluate                                      # leave-one-out score of the miss policy
    instance-factory merge tuning_db/nvidia-h200.csv shard0.csv shard1.csv
    instance-factory bench resnet50 --dtype bf16 --pass weight        # best vs cuDNN (from the DB)
    instance-factory db summary | instance-factory db show --problem 56x56
    instance-factory extract resnet50 --batch 128 -o configs/problem_sets/resnet50.yaml
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def _csv_list(s: str | None) -> list[str] | None:
    if s is None:
        return None
    return [v.strip() for v in s.split(",") if v.strip()]


def _add_tune_options(p: argparse.ArgumentParser) -> None:
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


def _tune_options(ns: argparse.Namespace) -> dict[str, Any]:
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


def _problems_from_ns(ns: argparse.Namespace, groups: dict[str, list[Any]] | None = None) -> list[Any]:
    """Every problem the namespace names; ``groups`` gets them per set name (and "problems")."""
    from .problem_sets import Problem, expand_problem_set

    probs: list[Problem] = []
    for s in ns.sets or []:
        got = expand_problem_set(s, dtypes=_csv_list(ns.dtype), passes=_csv_list(getattr(ns, "passes", None)),
                                 layout=_csv_list(ns.layout) or ["nhwgc"], fused_op=ns.fused_op)
        probs += got
        if groups is not None:
            groups.setdefault(str(s), []).extend(got)
    n_sets = len(probs)
    for key in getattr(ns, "problem", None) or []:
        if "|" in key:
            probs.append(Problem.from_key(key))
        else:  # a bare ConvParams key: expand over --dtype/--pass/--layout
            from ..problem import ConvParams

            params = ConvParams.from_key(key)
            entry = {"problems": [{"name": "", "params": params}]}
            probs += expand_problem_set(entry, dtypes=_csv_list(ns.dtype) or ["bf16", "fp16"],
                                        passes=_csv_list(getattr(ns, "passes", None)),
                                        layout=_csv_list(ns.layout) or ["nhwgc"], fused_op=ns.fused_op)
    if groups is not None and len(probs) > n_sets:
        groups["problems"] = probs[n_sets:]
    return probs


def _cmd_tune(ns: argparse.Namespace) -> int:
    from .database import current_device
    from .options import FatalDeviceError
    from .summary import summary_table
    from .sweep import sweep

    groups: dict[str, list[Any]] = {}
    probs = _problems_from_ns(ns, groups)
    if not probs:
        print("tune: name a problem set (e.g. quickstart, resnet50) or give --problem", file=sys.stderr)
        return 2
    dev = current_device()
    try:
        if ns.dask is not None:
            if ns.shard:
                print("tune: --shard and --dask do not combine (the cluster spreads the problems)", file=sys.stderr)
                return 2
            from .dask_sweep import dask_sweep

            res = dask_sweep(probs, address=ns.dask, n_workers=ns.dask_workers, db=ns.db, force=ns.force,
                             progress=not ns.quiet, **_tune_options(ns))
        else:
            res = sweep(probs, shard=ns.shard, force=ns.force, db=ns.db, workers=ns.workers,
                        progress=not ns.quiet, **_tune_options(ns))
    except FatalDeviceError as exc:
        print(f"tune: {exc}", file=sys.stderr)
        return 3
    except ImportError as exc:
        print(f"tune: {exc}", file=sys.stderr)
        return 2
    head = (f"{len(res.problems)} problems in this shard, {res.skipped_problems} already tuned (skipped); "
            f"{res.throughput_line(dev.name)}; database {res.db}")
    split = res.time_split()
    print(f"\n{head}" + (f"\ntime: {split}" if split else ""))
    if res.failed_workers:
        print(f"workers {res.failed_workers} failed (their finished rows were merged); rerun to resume",
              file=sys.stderr)
    for why in res.failed_problems:
        print(f"failed on the cluster (rerun to resume): {why}", file=sys.stderr)
    sweep_md = f"### Sweep on {dev.name}\n\n{head}.\n" + (f"\nTime: {split}.\n" if split else "")
    if ns.no_summary and ns.summary:
        with open(ns.summary, "w") as f:
            f.write(sweep_md)
    if not ns.no_summary:
        from .summary import load_valid

        df = load_valid(dev, extra_files=[res.db])
        mine = {p.key for p in res.problems}
        tables = []
        for name, group in groups.items():
            shown = [p for p in group if p.key in mine]
            if shown:
                tables.append(summary_table(df, shown, title=f"{name} on {dev.name}"))
        text = "\n".join(tables)
        print()
        print(text)
        if ns.summary:
            with open(ns.summary, "w") as f:
                f.write(sweep_md + "\n" + text)
    return 1 if res.failed_workers or res.failed_problems else 0


def _cmd_lookup(ns: argparse.Namespace) -> int:
    from ..problem import ConvParams
    from .database import split_problem_key
    from .lookup import TuningMissError, explain
    from .problem_sets import normalize_pass

    if ns.key:
        op, layout, dtype, fused, pkey = split_problem_key(ns.key)
    else:
        if not (ns.op and ns.params and ns.dtype):
            print("lookup: give a full problem key, or --op, --params, --dtype (and --layout)", file=sys.stderr)
            return 2
        op, layout, dtype, fused, pkey = normalize_pass(ns.op), ns.layout, ns.dtype, ns.fused_op, ns.params
    params = ConvParams.from_key(pkey)
    from ..layouts import LAYOUT_FAMILIES, layout_for

    if layout.lower() in LAYOUT_FAMILIES:
        layout = layout_for(layout.lower(), params.ndim).name
    import warnings

    from .lookup import TuningMissWarning

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
    from .summary import _short_instance

    if not ch.ranking:
        print("explain    an exact hit: the fastest verified row measured for this very problem "
              "(--untuned shows what the cost model would serve)")
        return
    print(f"explain    predicted ms = roofline model x correction measured for the same kernel on the "
          f"nearest tuned problems; {len(ch.ranking)} instances can run it")
    print(f"  {'#':>3} {'predicted ms':>12} {'model ms':>9}  instance  (evidence)")
    for n, p in enumerate(ch.ranking[:top], 1):
        print(f"  {n:>3} {p.predicted_ms:12.4g} {p.model_ms:9.4g}  {_short_instance(p.name)}  ({p.basis})")
    if ch.neighbors:
        print("  nearest tuned problems (distance: features + dtype / layout / class / device penalties):")
        for d, key in ch.neighbors:
            print(f"    {d:6.2f}  {key}")


def _cmd_merge(ns: argparse.Namespace) -> int:
    from .database import merge_files

    n = merge_files(ns.shards, ns.output, remove_sources=ns.remove)
    print(f"merged {len(ns.shards)} file(s) into {ns.output}: {n} rows (best row per identity)")
    return 0


def _cmd_bench(ns: argparse.Namespace) -> int:
    from .database import current_device
    from .problem_sets import expand_problem_set
    from .summary import load_valid
    from .sweep import sweep

    dev = current_device()
    probs = []
    for s in ns.sets:
        probs += expand_problem_set(s, dtypes=_csv_list(ns.dtype), passes=_csv_list(ns.passes),
                                    layout=_csv_list(ns.layout) or ["nhwgc"])
    extra = []
    if ns.measure:
        res = sweep(probs, db=ns.db, force=ns.force, progress=not ns.quiet, **_tune_options(ns))
        extra.append(res.db)
    elif ns.db:
        from .plan import resolve_db

        extra.append(str(resolve_db(ns.db, dev).path))
    rows = load_valid(dev, extra_files=extra)
    summary = None
    if ns.untuned:
        import warnings

        from .untuned import compare, untuned_table

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recs = compare(probs, rows, measure_missing=not ns.no_measure_default)
        table = untuned_table(recs, title=f"untuned default vs tuned vs cuDNN: {', '.join(ns.sets)} on "
                                          f"{dev.name}")
    else:
        from .classes import class_summary, class_table, measure_ceilings, with_ceilings
        from .summary import summary_frame

        copy_gbps, matmul_tflops = (measure_ceilings() if ns.copy_gbps is None
                                    else (ns.copy_gbps, ns.matmul_tflops))
        sf = with_ceilings(summary_frame(rows, probs), copy_gbps, matmul_tflops)
        summary = class_summary(sf, device=dev.name)
        table = f"### {', '.join(ns.sets)} on {dev.name}\n\n" + class_table(sf, summary, copy_gbps, matmul_tflops)
    print(table)
    if ns.summary_csv and summary is not None:
        from .classes import write_summary_csv

        write_summary_csv(summary, ns.summary_csv)
    if ns.output:
        with open(ns.output, "w") as f:
            f.write(table)
    return 0


def _cmd_db(ns: argparse.Namespace) -> int:
    import pandas as pd

    from .database import (
        current_device,
        current_software,
        read_db,
        system_db_dir,
        system_db_path,
        user_db_path,
        valid_rows,
    )

    dev = current_device()
    if ns.action == "evaluate":
        return _evaluate(ns)
    if ns.db:
        from .plan import resolve_db

        paths = [resolve_db(ns.db, dev).path]
    else:
        paths = [system_db_path(dev.kind), user_db_path(dev.kind)]
    if ns.action == "compact":
        from .database import TuningDB

        for path in paths:
            if path.exists() and (ns.db or path != system_db_path(dev.kind)):
                print(f"{path}: compacted to {TuningDB(path).compact()} rows (one per identity, sorted)")
        return 0
    if ns.action == "path":
        print(f"system tier  {system_db_dir()}  (this device: {system_db_path(dev.kind)})")
        print(f"user tier    {user_db_path(dev.kind)}")
        return 0
    from .database import registry_kernel_hashes

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
                from .database import best_per_problem

                show = best_per_problem(show)
            cols = ["problem_key", "instance", "status", "median_ms", "tflops", "cudnn_ms", "speedup", "rel_err"]
            with pd.option_context("display.max_colwidth", 90, "display.width", 250):
                print(f"{path}: {len(show)} rows")
                if len(show):
                    print(show[cols].to_string(index=False))
    return 0


def _evaluate(ns: argparse.Namespace) -> int:
    """Leave-one-out score of the miss policy on each device's rows (current kernels, any software)."""
    from .database import read_db, registry_kernel_hashes, system_db_dir, valid_rows
    from .miss_eval import leave_one_out, summary_markdown

    paths = [ns.db] if ns.db else sorted(str(p) for p in system_db_dir().glob("*.csv"))
    hashes = registry_kernel_hashes()
    for path in paths:
        df = read_db(path)
        df = valid_rows(df, kernel_hashes=hashes, ok_only=False) if not ns.all else df
        for (device, sms), part in df.groupby(["device", "device_sms"]):
            res = leave_one_out(part.to_dict("records"), sms=int(sms) or 132)
            print(summary_markdown(res, title=f"{path}: {device} ({len(res)} problems, each hidden in turn)"))
    return 0


def _cmd_extract(ns: argparse.Namespace) -> int:
    from .extract import extract_model, extract_torchvision, wav2vec2_conv_layers, write_problem_set

    shape = tuple(int(v) for v in ns.input.split("x")) if ns.input else None
    if ns.model in ("wav2vec2", "wav2vec2_base", "wav2vec2_large"):
        variant = "large" if ns.model.endswith("large") else "base"
        entries = extract_model(lambda: wav2vec2_conv_layers(variant), shape or (1, 250000), ns.batch)
    else:
        entries = extract_torchvision(ns.model, ns.batch, shape)
    name = ns.name or ns.model
    desc = ns.description or f"{ns.model}: every distinct conv layer, batch {ns.batch}"
    src = " ".join(["instance-factory extract", ns.model, "--batch", str(ns.batch)] +
                   (["--input", ns.input] if ns.input else []))
    if ns.output:
        write_problem_set(ns.output, name, desc, entries, source=src)
        print(f"wrote {len(entries)} distinct conv layers ({sum(e['count'] for e in entries)} in the model) "
              f"to {ns.output}")
    else:
        from .extract import problem_set_yaml

        sys.stdout.write(problem_set_yaml(name, desc, entries, source=src))
    return 0


def register(subparsers: Any) -> None:
    """Add tune / lookup / merge / bench / db / extract to the ``instance-factory`` parser."""
    p = subparsers.add_parser("tune", aliases=["sweep"],
                              help="tune problem sets or problems (resumable, shardable sweeps; --dask: on a cluster)",
                              description="Verify every runnable instance against float64, time the correct "
                                          "ones and cuDNN, store the rows (user tier unless --db).")
    p.add_argument("sets", nargs="*", help="problem set names (configs/problem_sets) or YAML paths")
    p.add_argument("--problem", action="append", help="a problem key (op|layout|dtype|fused|params) or a "
                   "ConvParams key expanded over --dtype/--pass/--layout; repeatable")
    p.add_argument("--dtype", help="comma-separated DataType names (default: the set's, bf16,fp16)")
    p.add_argument("--pass", dest="passes", help="data, weight or data,weight (default: both)")
    p.add_argument("--layout", help="layout family or CK triple, comma-separated (default nhwgc)")
    p.add_argument("--fused-op", default="passthrough", help="fused op tuned (default passthrough)")
    p.add_argument("--shard", default=None, help="i/n: this machine's share of the problems")
    p.add_argument("--force", action="store_true", help="re-measure what the database already holds")
    p.add_argument("--workers", type=int, default=1,
                   help="worker processes, one per GPU (0: every local GPU; default 1)")
    p.add_argument("--dask", nargs="?", const="local", metavar="ADDRESS",
                   help="one task per problem on a Dask cluster: a scheduler address (tcp://host:8786) or "
                        "scheduler file (*.json); without one a local cluster (LocalCUDACluster: one worker per "
                        "GPU). Needs the 'distributed' extra")
    p.add_argument("--dask-workers", type=int, help="workers of the local Dask cluster (default: one per GPU; "
                   "2 in the interpreter)")
    p.add_argument("--db", help="database file, or 'user' (default) / 'system' (tuning_db/<device>.csv)")
    p.add_argument("--summary", help="also write the Markdown summary table to this file")
    p.add_argument("--no-summary", action="store_true", help="do not print the summary table")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_tune_options(p)
    p.set_defaults(func=_cmd_tune_entry)

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
    p.set_defaults(func=_cmd_lookup)

    p = subparsers.add_parser("merge", help="merge tuning-database shard files into one (best row per result)")
    p.add_argument("output", help="the merged file (created or merged into)")
    p.add_argument("shards", nargs="+", help="shard files")
    p.add_argument("--remove", action="store_true", help="delete the shard files after merging")
    p.set_defaults(func=_cmd_merge)

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
    _add_tune_options(p)
    p.set_defaults(func=_cmd_bench)

    p = subparsers.add_parser("db", help="show or summarize the tuning databases")
    p.add_argument("action", choices=["summary", "show", "path", "compact", "evaluate"], nargs="?",
                   default="summary",
                   help="compact: rewrite the user tier (or --db) with one row per result, sorted; evaluate: "
                        "leave-one-out score of the miss policy on the shipped rows (or --db)")
    p.add_argument("--db", help="one database file (default: this device's system and user tiers)")
    p.add_argument("--problem", help="only problem keys containing this text")
    p.add_argument("--best", action="store_true", help="show only the best row per problem")
    p.add_argument("--all", action="store_true", help="show rows of other devices/software and stale rows too")
    p.set_defaults(func=_cmd_db)

    p = subparsers.add_parser("extract", help="write a problem set from a torchvision model (or wav2vec2)")
    p.add_argument("model", help="torchvision model name (resnet50, mobilenet_v2, r3d_18, ...) or wav2vec2")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--input", help="input shape without batch, e.g. 3x224x224 (default by model)")
    p.add_argument("--name", help="problem set name (default: the model)")
    p.add_argument("--description")
    p.add_argument("-o", "--output", help="YAML file to write (default: stdout)")
    p.set_defaults(func=_cmd_extract)


def _cmd_tune_entry(ns: argparse.Namespace) -> int:
    if ns.workers == 0:
        ns.workers = None  # every local GPU
    return _cmd_tune(ns)
