"""The summary table: per problem, the best verified instance against torch / cuDNN, as Markdown."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from .database import _frame, best_per_problem
from .problem_sets import Problem

__all__ = ["cudnn_reference", "describe_params", "load_valid", "short_instance", "summary_frame", "summary_table",
           "sweep_tables"]


def describe_params(p: Any) -> str:
    """``G1 C64->K64 56x56 f3x3 s1`` (N omitted: it is the set's batch)."""
    def j(t: Sequence[int]) -> str:
        return "x".join(map(str, t))

    s = f"G{p.G} C{p.C}->K{p.K} {j(p.input)} f{j(p.filter)}"
    if any(v != 1 for v in p.stride):
        s += f" s{j(p.stride) if len(set(p.stride)) > 1 else p.stride[0]}"
    if any(v != 1 for v in p.dilation):
        s += f" d{j(p.dilation)}"
    return s


def load_valid(device: Any = None, extra_files: Sequence[str] = ()) -> pd.DataFrame:
    """Valid rows for ``device`` from the system tier, the user tier and ``extra_files``; a key the
    user tier (or an extra file) holds replaces the system tier's rows for that key."""
    from .database import (
        current_device,
        current_software,
        read_valid_rows,
        registry_kernel_hashes,
        system_db_path,
        user_db_path,
    )

    dev = device if hasattr(device, "kind") else current_device(device)
    hashes = registry_kernel_hashes()
    sw = current_software()
    frames = []
    seen_paths = set()
    for path in (system_db_path(dev.kind), user_db_path(dev.kind), *map(str, extra_files)):
        key = str(path)
        if key in seen_paths:
            continue
        seen_paths.add(key)
        df = read_valid_rows(path, dev, ok_only=False, software=sw, kernel_hashes=hashes)
        if len(df):
            frames.append(df)
    if not frames:
        return _frame([])
    out = frames[0]
    for df in frames[1:]:  # later tiers win per problem key
        out = pd.concat([out[~out["problem_key"].isin(set(df["problem_key"]))], df], ignore_index=True)
    return out


def cudnn_reference(df: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Per (problem key, device), the median cuDNN time over the rows' tuning runs.

    Every tuning run times cuDNN once per problem and stores it on each of its rows; a row set merged
    from several runs holds several such times. The best row's own time is one sample: on the shipped
    H100 file one run had cuDNN 3.1x slower than six others on the same layer (EfficientNet-B0's G480
    14x14 wgrad: 0.097 against 0.031 ms), and that layer's speedup came out 3.18x instead of 1.14x. The
    median over the runs keeps one such outlier from setting the class means. A run is told by its time
    (rows carry no run id): each distinct time counts once, not once per row."""
    if not len(df) or "cudnn_ms" not in df:
        return {}
    ok = df[(df["status"] == "ok") & df["cudnn_ms"].notna()].assign(
        device=df["device"].fillna("") if "device" in df else "")
    runs = ok.drop_duplicates(subset=["problem_key", "device", "cudnn_ms"])
    return runs.groupby(["problem_key", "device"])["cudnn_ms"].median().to_dict()


def summary_frame(df: pd.DataFrame, problems: Sequence[Problem] | None = None) -> pd.DataFrame:
    """One line per problem: the fastest ok row (derived), with the problem's name and weight; cuDNN's time
    is :func:`cudnn_reference` (the median over the tuning runs) and the speedup is taken against it."""
    best = best_per_problem(df) if len(df) else df
    by_key = {r["problem_key"]: r for r in best.to_dict("records")} if len(best) else {}
    cudnn_ms = cudnn_reference(df)
    lines = []
    if problems is None:
        keys = sorted(by_key)
        problems = [Problem.from_key(k) for k in keys]
    for pr in problems:
        r: Mapping[str, Any] = by_key.get(pr.key, {})
        ref = cudnn_ms.get((pr.key, r.get("device") or ""), math.nan)
        lines.append({
            "problem": f"{pr.name + ': ' if pr.name else ''}{describe_params(pr.params)}",
            "pass": "data" if pr.op == "conv_bwd_data" else "weight",
            "dtype": pr.dtype,
            "count": pr.count,
            "best instance": r.get("instance", ""),
            "ms": r.get("median_ms", math.nan),
            "TFLOP/s": r.get("tflops", math.nan),
            "GB/s": r.get("gbps", math.nan),
            "cuDNN ms": ref,
            "speedup": ref / r["median_ms"] if r else math.nan,
            "cudnn_impl": r.get("cudnn_impl", ""),
            "key": pr.key,
        })
    return pd.DataFrame(lines)


def _f(v: Any, fmt: str) -> str:
    try:
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            return "-"
        return format(float(v), fmt)
    except (TypeError, ValueError):
        return "-"


def summary_table(rows: pd.DataFrame | Iterable[Mapping[str, Any]], problems: Sequence[Problem] | None = None,
                  *, title: str | None = None, short_names: bool = True) -> str:
    """Markdown: problem | pass | dtype | best instance | ms | TFLOP/s | cuDNN ms | speedup, then totals.

    ``rows``: database rows (already filtered to one device/software, e.g. by :func:`load_valid`);
    ``problems``: the order and names to show (default: every problem in ``rows``). Speedup is
    cuDNN time / our time (> 1: faster than cuDNN). The totals weight each layer by its count.
    """
    df = rows if isinstance(rows, pd.DataFrame) else _frame(rows)
    sf = summary_frame(df, problems)
    out = []
    if title:
        out += [f"### {title}", ""]
    out.append("| problem | pass | dtype | best instance | ms | TFLOP/s | cuDNN ms | speedup |")
    out.append("|---|---|---|---|---:|---:|---:|---:|")
    for r in sf.to_dict("records"):
        inst = r["best instance"] or "(not tuned / no verified instance)"
        if short_names and r["best instance"]:
            inst = short_instance(inst)
        out.append(f"| {r['problem']} | {r['pass']} | {r['dtype']} | `{inst}` | {_f(r['ms'], '.4f')} | "
                   f"{_tf(r['TFLOP/s'])} | {_f(r['cuDNN ms'], '.4f')} | {_f(r['speedup'], '.2f')} |")
    tuned = sf[sf["ms"].notna()] if len(sf) else sf
    both = tuned[tuned["cuDNN ms"].notna()] if len(tuned) else tuned
    out.append("")
    out.append(f"{len(tuned)} of {len(sf)} problems tuned.")
    if len(both):
        sp = both["speedup"].astype(float)
        geo = math.exp(sum(math.log(v) for v in sp if v > 0) / max(1, sum(1 for v in sp if v > 0)))
        ours = float((both["ms"] * both["count"]).sum())
        theirs = float((both["cuDNN ms"] * both["count"]).sum())
        out.append(f"Speedup over cuDNN: geometric mean {geo:.2f}x; faster on {int((sp > 1).sum())} of "
                   f"{len(both)}; layer-count-weighted total {theirs:.3f} ms (cuDNN) vs {ours:.3f} ms "
                   f"(best instances) = {theirs / ours if ours else math.nan:.2f}x.")
    impls = sorted({str(v) for v in sf.get("cudnn_impl", []) if isinstance(v, str) and v}) if len(sf) else []
    if impls and any(not v.startswith("cudnn") for v in impls):
        out.append(f"The cuDNN column is torch's own kernel as measured in the same run: {', '.join(impls)}"
                   " (on the CPU the Triton interpreter's times only exercise the pipeline).")
    return "\n".join(out) + "\n"


def _tf(v: Any) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(f):
        return "-"
    return f"{f:.1f}" if f >= 1 else f"{f:.2g}"


def short_instance(name: str) -> str:
    """Drop the op / layout / dtype / fused-op parts the table already shows."""
    parts = name.split("-")
    return "-".join([parts[1], *parts[5:]]) if len(parts) >= 6 else name


def sweep_tables(device: Any, problems: Sequence[Problem], groups: Mapping[str, Sequence[Problem]],
                 extra_files: Sequence[str] = ()) -> str:
    """A sweep's summary: one table per group (a problem set, or "problems"), each showing the
    group's problems that are in ``problems`` (this shard's); valid rows as :func:`load_valid` reads
    them, ``extra_files`` included."""
    df = load_valid(device, extra_files=extra_files)
    mine = {p.key for p in problems}
    tables = []
    for name, group in groups.items():
        shown = [p for p in group if p.key in mine]
        if shown:
            tables.append(summary_table(df, shown, title=f"{name} on {device.name}"))
    return "\n".join(tables)
