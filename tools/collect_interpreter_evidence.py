"""Interpreter evidence for the support matrix: one tiny problem per declared cell, verified against float64.

    python tools/collect_interpreter_evidence.py [--out evidence] [--jobs 2] [--per-case 1] [--only GLOB]

Runs, in the Triton interpreter on the CPU, one tiny problem per declared (op, layout family, dtype,
ndim) with the passthrough epilogue, and per op one problem per declared fused op (rotating through
layouts, dtypes and ndims), each through ``instance_factory.verify.verify_case(case, "cpu",
max_instances=--per-case)``. Writes ``<out>/interpreter.jsonl``: a metadata line, then one row per
verified instance in the shape of tools/gpu_check.py's rows plus ``backend``, ``date`` and
``kernel_hash`` (so the report can tell evidence for a since-changed kernel). ``--only`` (globs over
``op/family/dtype/ndim/fused_op``, e.g. ``conv_bwd_data/*``) re-runs those cells and keeps the
file's other rows. Exit status 1 when any run failed (the file is written anyway).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported anywhere

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from instance_factory.problem import ConvParams  # noqa: E402

N_DS = {"passthrough": 0, "scale": 0, "bilinear": 1, "add": 2, "add_relu": 1, "custom": 1}


@triton.jit
def custom_epilogue(acc, d0):
    return tl.where(acc > 0, acc, 0.5 * acc) + d0  # leaky relu plus a residual


def custom_epilogue_ref(acc, d0):
    import torch

    return torch.where(acc > 0, acc, 0.5 * acc) + d0


def tiny_problem(ndim: int, variant: int = 0) -> ConvParams:
    """Small enough for the interpreter, with stride, padding, groups and (for 1D) dilation."""
    if ndim == 1:
        return ConvParams(1, 2, 2, 8, 8, (3,), (11,), (2,), (2,), (2,), (1,))
    if ndim == 2:
        if variant % 2:
            return ConvParams(2, 2, 2, 8, 8, (3, 3), (7, 6), (2, 2), (1, 1), (1, 0), (0, 1))
        return ConvParams(2, 2, 2, 8, 8, (3, 3), (6, 5), (1, 1), (1, 1), (1, 1), (1, 1))
    return ConvParams(3, 1, 1, 8, 8, (3, 3, 3), (4, 4, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1))


def cell_name(op: str, fam: str, dt: str, nd: int, fo: str) -> str:
    return f"{op}/{fam}/{dt}/{nd}/{fo}"


def plan(declared: set, only: list[str] | None) -> list[tuple]:
    """(op, family, dtype, ndim, fused_op) cells to verify, in a fixed order."""
    from instance_factory.layouts import LAYOUT_FAMILIES

    fam_order = list(LAYOUT_FAMILIES)
    cells = sorted((k for k in declared if k[4] == "passthrough"),
                   key=lambda k: (k[0], fam_order.index(k[1]) if k[1] in fam_order else 99, k[2], k[3]))
    from instance_factory.dtypes import DATA_TYPES

    for op in sorted({k[0] for k in declared}):
        fused = sorted({k[4] for k in declared if k[0] == op and k[4] != "passthrough"})
        for i, fo in enumerate(fused):
            combos = sorted(k for k in declared if k[0] == op and k[4] == fo)
            # the interpreter has no fp8 tensor cores: fused-op evidence goes to a dtype it can run
            runnable = [k for k in combos if DATA_TYPES[k[2]].compute != "fp8"] or combos
            cells.append(runnable[(i * 7 + 3) % len(runnable)])  # spread over layouts / dtypes / ndims
    if only:
        cells = [c for c in cells if any(fnmatch.fnmatchcase(cell_name(*c), g) for g in only)]
    return cells


def run_cell(cell: tuple, per_case: int, variant: int) -> list[dict]:
    """Verify one cell (runs in a worker process)."""
    from instance_factory.layouts import layout_for
    from instance_factory.registry import get_registry
    from instance_factory.verify import Case, verify_case

    op, fam, dt, nd, fo = cell
    p = tiny_problem(nd, variant)
    layout = layout_for(fam, nd).name
    case = Case(op, p, layout, dt, fo, N_DS.get(fo, 0), label=f"{op[5:]} {layout} {dt} {fo} {p.key()}")
    kw = {"user_fn": custom_epilogue, "user_ref": custom_epilogue_ref} if fo == "custom" else {}
    reg = get_registry()
    rows = []
    for r in verify_case(case, "cpu", max_instances=per_case, **kw):
        row = {"case": case.title, "op": op, "problem": p.key(), "layout": layout, "dtype": dt, "fused_op": fo,
               "instance": r.instance, "error": r.error, "tol": r.tolerance}
        if r.instance == "-":
            row["status"] = "NO INSTANCE"
        elif r.note:
            row["status"] = f"ERROR {r.note}"[:300]
        else:
            row["status"] = "PASS" if r.passed else "FAIL"
        if r.instance != "-":
            row["kernel_hash"] = reg.get(r.instance).kernel_hash
        row.update(backend="interpreter", date=time.strftime("%F %T"), seconds=round(r.seconds, 3))
        if r.note:
            row["note"] = r.note[:300]
        rows.append(row)
    return rows


def _git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "instance_factory", "configs"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _key(row: dict) -> tuple:
    return (row["op"], row["layout"], row["dtype"], row["fused_op"], row["problem"], row["instance"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "evidence"), help="evidence folder (default: <repo>/evidence)")
    ap.add_argument("--jobs", type=int, default=max(1, min(8, os.cpu_count() or 1)), help="worker processes")
    ap.add_argument("--per-case", type=int, default=1, help="instances verified per cell (verify_case max_instances)")
    ap.add_argument("--only", action="append", help="glob over op/family/dtype/ndim/fused_op; repeatable")
    ap.add_argument("--budget-s", type=float, default=540, help="stop starting new cells after this many seconds")
    ap.add_argument("--list", action="store_true", help="print the cells and exit")
    ns = ap.parse_args(argv)

    import torch

    from instance_factory.registry import get_registry

    cells = plan(get_registry().declared, ns.only)
    if ns.list:
        for c in cells:
            print(cell_name(*c))
        print(f"{len(cells)} cells")
        return 0
    out_dir = Path(ns.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "interpreter.jsonl"
    t0 = time.time()
    deadline = t0 + ns.budget_s
    rows: list[dict] = []
    skipped = 0
    print(f"verifying {len(cells)} cells in the Triton interpreter with {ns.jobs} workers", flush=True)
    import multiprocessing as mp

    with ProcessPoolExecutor(max_workers=ns.jobs, mp_context=mp.get_context("spawn")) as pool:
        futs = {pool.submit(run_cell, c, ns.per_case, i): c for i, c in enumerate(cells)}
        done = 0
        for fut in as_completed(futs):
            c = futs[fut]
            done += 1
            try:
                got = fut.result()
            except Exception as exc:  # a worker crash is a result to record
                op, fam, dt, nd, fo = c
                from instance_factory.layouts import layout_for

                p = tiny_problem(nd)
                got = [{"case": cell_name(*c), "op": op, "problem": p.key(), "layout": layout_for(fam, nd).name,
                        "dtype": dt, "fused_op": fo, "instance": "-", "error": float("nan"), "tol": None,
                        "status": f"ERROR {type(exc).__name__}: {exc}"[:300], "backend": "interpreter",
                        "date": time.strftime("%F %T")}]
            rows.extend(got)
            bad = [r for r in got if r["status"] != "PASS"]
            mark = "ok " if not bad else "BAD"
            print(f"[{done:3d}/{len(cells)} {time.time() - t0:5.0f}s] {mark} {cell_name(*c)}"
                  + (f"  {bad[0]['status']} {bad[0]['instance']} err={bad[0]['error']:.2e}" if bad else ""),
                  flush=True)
            if time.time() > deadline:
                for f in futs:
                    if f.cancel():
                        skipped += 1
    seconds = time.time() - t0
    if ns.only and path.exists():  # keep the rows of the cells not re-run
        from instance_factory.layouts import parse_layout
        from instance_factory.report.evidence import read_evidence_file

        read_evidence_file(path, "interpreter")  # a damaged file stops here, naming the line
        rerun = set(cells)
        kept = []
        for line in path.read_text().splitlines()[1:]:
            r = json.loads(line) if line.strip() else {}
            if "op" in r:
                lt = parse_layout(r["layout"])
                if (r["op"], lt.layout_family, r["dtype"], lt.ndim, r["fused_op"]) not in rerun:
                    kept.append(r)
        rows = kept + rows
    rows.sort(key=_key)
    meta = {"device": "cpu (Triton interpreter)", "backend": "interpreter", "torch": torch.__version__,
            "triton": triton.__version__, "python": sys.version.split()[0], "git_commit": _git_commit(),
            "date": time.strftime("%F %T"), "cells": len(cells) - skipped, "seconds": round(seconds, 1)}
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(meta) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)
    n_pass = sum(r["status"] == "PASS" for r in rows)
    n_bad = sum(r["status"] == "FAIL" or r["status"].startswith("ERROR") for r in rows)
    n_none = sum(r["status"] == "NO INSTANCE" for r in rows)
    print(f"wrote {path}: {len(rows)} runs, {n_pass} pass, {n_bad} fail, {n_none} without a runnable instance, "
          f"{skipped} cells skipped (time budget), {seconds:.0f}s")
    return 1 if n_bad or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
