"""Layer classes and their benchmark summary: the per-class numbers the performance issues are judged by.

A problem's class decides which algorithm can win it: ``depthwise`` (C = K = 1 per group, G > 1),
``grouped`` (G > 1, at most 16 channels per group: memory bound, tensor-core tiles mostly padding),
``grouped_wide`` (G > 1, 17-64 channels per group) and ``dense`` (G = 1, or more than 64 per group).
For each (class, pass, dtype) the summary gives the geometric mean and the minimum of the best
instance's speedup over cuDNN, and how close the memory-bound classes come to the copy bandwidth
(bytes of each tensor read or written once, over the time) and the dense class to the matmul ceiling,
both measured on the same device (:func:`measure_ceilings`). Each summary row is also per layout
family (``nhwgc``, ``gnhwc``, ``ngchw``, ``ngchw_kcyx``: the issues' targets hold for all four), written
as the last column of the CSV, so readers of the older columns read them unchanged.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from datetime import date
from typing import Any

import pandas as pd

__all__ = ["CLASSES", "SUMMARY_COLUMNS", "class_summary", "class_table", "measure_ceilings", "problem_class",
           "write_summary_csv"]

CLASSES = ("depthwise", "grouped", "grouped_wide", "dense")
SUMMARY_COLUMNS = ("class", "pass", "dtype", "problems", "geomean_speedup", "min_speedup", "mean_pct_copy_bw",
                   "mean_pct_matmul", "device", "date", "layout")
_FEW = 16
_WIDE = 64


def problem_class(p: Any) -> str:
    """The class of a ConvParams (see the module docstring)."""
    if p.G == 1 or max(p.C, p.K) > _WIDE:
        return "dense"
    if p.C == 1 and p.K == 1:
        return "depthwise"
    return "grouped" if max(p.C, p.K) <= _FEW else "grouped_wide"


def _geomean(values: Sequence[float]) -> float:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else math.nan


def with_ceilings(sf: pd.DataFrame, copy_gbps: float | None, matmul_tflops: float | None) -> pd.DataFrame:
    """``sf`` (a summary frame) plus class, layout family, % of copy bandwidth and % of the matmul
    ceiling columns."""
    from ..layouts import parse_layout
    from .problem_sets import Problem

    out = sf.copy()
    problems = [Problem.from_key(k) for k in out["key"]]
    out["class"] = [problem_class(pr.params) for pr in problems]
    out["layout"] = [parse_layout(pr.layout, pr.params.ndim).layout_family for pr in problems]
    out["% copy BW"] = out["GB/s"].astype(float) / copy_gbps * 100 if copy_gbps else math.nan
    out["% matmul"] = out["TFLOP/s"].astype(float) / matmul_tflops * 100 if matmul_tflops else math.nan
    return out


def class_summary(sf: pd.DataFrame, device: str = "", day: str | None = None) -> pd.DataFrame:
    """One row per (class, pass, dtype, layout family) over the problems with both our time and cuDNN's."""
    from ..layouts import LAYOUT_FAMILIES

    rows = []
    both = sf[sf["ms"].notna() & sf["cuDNN ms"].notna()] if len(sf) else sf
    for (cls, pss, dt, fam), grp in both.groupby(["class", "pass", "dtype", "layout"], sort=False) if len(both) else []:
        sp = grp["speedup"].astype(float)
        rows.append({
            "class": cls, "pass": pss, "dtype": dt, "problems": len(grp),
            "geomean_speedup": round(_geomean(list(sp)), 4), "min_speedup": round(float(sp.min()), 4),
            "mean_pct_copy_bw": round(float(grp["% copy BW"].astype(float).mean()), 1),
            "mean_pct_matmul": round(float(grp["% matmul"].astype(float).mean()), 1),
            "device": device, "date": day or date.today().isoformat(), "layout": fam,
        })
    order = {c: i for i, c in enumerate(CLASSES)}
    fams = {f: i for i, f in enumerate(LAYOUT_FAMILIES)}
    rows.sort(key=lambda r: (fams.get(r["layout"], 99), order.get(r["class"], 99), r["pass"], r["dtype"]))
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def _cell(v: Any, fmt: str) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    return "-" if math.isnan(f) else format(f, fmt)


def class_table(sf: pd.DataFrame, summary: pd.DataFrame, copy_gbps: float | None,
                matmul_tflops: float | None, ceilings_given: bool = False) -> str:
    """Markdown: per problem (class, ms, GB/s, % copy BW, TFLOP/s, % matmul, cuDNN, speedup), then
    the per-class geometric means. ``ceilings_given``: the ceilings came from the command line."""
    how = "given on the command line (not measured in this run)" if ceilings_given else "measured in this run"
    out = [f"Ceilings {how}: copy {_cell(copy_gbps, '.0f')} GB/s (read + write), bf16 matmul "
           f"{_cell(matmul_tflops, '.0f')} TFLOP/s.", "",
           "| problem | class | pass | dtype | best instance | ms | GB/s | % copy BW | TFLOP/s | % matmul "
           "| cuDNN ms | speedup |",
           "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in sf.to_dict("records"):
        inst = r["best instance"] or "(not tuned)"
        out.append(f"| {r['problem']} | {r['class']} | {r['pass']} | {r['dtype']} | `{inst}` | {_cell(r['ms'], '.4f')} "
                   f"| {_cell(r['GB/s'], '.0f')} | {_cell(r['% copy BW'], '.0f')} | {_cell(r['TFLOP/s'], '.1f')} "
                   f"| {_cell(r['% matmul'], '.0f')} | {_cell(r['cuDNN ms'], '.4f')} | {_cell(r['speedup'], '.2f')} |")
    tuned = int(sf["ms"].notna().sum()) if len(sf) else 0
    out += ["", f"{tuned} of {len(sf)} problems tuned.", "",
            "| layout | class | pass | dtype | problems | geomean speedup | min speedup | mean % copy BW "
            "| mean % matmul |",
            "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in summary.to_dict("records"):
        out.append(f"| {r['layout']} | {r['class']} | {r['pass']} | {r['dtype']} | {r['problems']} | "
                   f"{_cell(r['geomean_speedup'], '.2f')}x | {_cell(r['min_speedup'], '.2f')}x | "
                   f"{_cell(r['mean_pct_copy_bw'], '.0f')} | {_cell(r['mean_pct_matmul'], '.0f')} |")
    return "\n".join(out) + "\n"


def write_summary_csv(summary: pd.DataFrame, path: str) -> None:
    """Write (replace) the per-class summary, e.g. docs/bench/summary.csv."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(SUMMARY_COLUMNS))
        w.writeheader()
        for r in summary.to_dict("records"):
            w.writerow(r)


def measure_ceilings(device: Any = None) -> tuple[float | None, float | None]:
    """(copy GB/s counting read + write, bf16 matmul TFLOP/s) on a CUDA device, measured now with
    do_bench on random data several times the L2; (None, None) without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None, None
    import triton

    dev = torch.device(device) if device is not None else torch.device("cuda")
    return _copy_gbps(torch, triton, dev), _matmul_tflops(torch, triton, dev)


def _copy_gbps(torch: Any, triton: Any, dev: Any) -> float:
    src = torch.randint(0, 255, (2**30,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200)
    return 2 * src.numel() / (ms * 1e6)


def _matmul_tflops(torch: Any, triton: Any, dev: Any, n: int = 8192) -> float:
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    ms = triton.testing.do_bench(lambda: a @ b, warmup=25, rep=200)
    return 2 * n**3 / (ms * 1e9)
