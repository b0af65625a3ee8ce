"""Leave-one-out check of the miss policy on measured rows: how close to the tuned best would the
untuned default have been on each tuned problem, had that problem not been tuned?

For every problem in the rows, the problem's own rows are hidden, :func:`cost_model.rank` ranks the
instances that were measured on it (using only the other problems), and the choice is scored by the
problem's measured times: ratio = best ms / chosen ms (1.0: the tuned best; a chosen instance that
failed there scores 1 / FAILED_FACTOR). The previous policy (the winner of the nearest tuned problem
by ``lookup.problem_distance``) is scored alongside. ``instance-factory db evaluate`` prints it.

``hide="layer"`` hides more: every problem of the same layer (the same geometry at any batch size,
dtype, layout or fused op), as for a layer of a network nobody tuned. Hiding only the problem lets
the same layer at the other batch size or the sibling dtype vouch for it, which a held-out layer
never has.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..layouts import channels_last_twin
from .cost_model import FAILED_FACTOR, Evidence, conv_class, rank
from .row_times import kernel_ms, repair_disturbed
from .schema import problem_key

__all__ = ["HIDE_MODES", "evaluate_databases", "layer_signature", "leave_one_out", "summarize", "summary_markdown"]


def _measured(r: Mapping[str, Any]) -> float | None:
    """The row's kernel time (``cost_model.kernel_ms``: a disturbed run counts with its p20)."""
    return kernel_ms(r) if r["status"] in ("ok", "pruned") else None


_FEATURE_WEIGHTS = {"G": 1.0, "N": 1.0, "K": 1.0, "C": 1.0, "out": 1.0, "filter": 4.0, "stride": 4.0,
                    "dilation": 1.0, "pad": 0.25}


def _features(p: Any) -> list[tuple[float, float]]:
    """(weight, log2 value) pairs of a ConvParams for :func:`problem_distance`."""
    w = _FEATURE_WEIGHTS
    f = [(w["G"], math.log2(p.G)), (w["N"], math.log2(p.N)), (w["K"], math.log2(p.K)),
         (w["C"], math.log2(p.C))]
    f += [(w["out"], math.log2(v)) for v in p.output]
    f += [(w["filter"], math.log2(v)) for v in p.filter]
    f += [(w["stride"], math.log2(v)) for v in p.stride]
    f += [(w["dilation"], math.log2(v)) for v in p.dilation]
    f += [(w["pad"], math.log2(1 + v)) for v in p.left_pad + p.right_pad]
    return f


def problem_distance(p: Any, q: Any) -> float:
    """The previous miss rule's distance between two ConvParams of the same ndim (the baseline):
    ``sqrt(sum_f w_f * (log2 p_f - log2 q_f)^2)`` over G, N, K, C and output lengths (w=1), filter
    and stride lengths (w=4), dilations (w=1) and log2(1 + pad) (w=0.25)."""
    if p.ndim != q.ndim:
        return math.inf
    return math.sqrt(sum(w * (a - b) ** 2 for (w, a), (_, b) in zip(_features(p), _features(q))))


HIDE_MODES = ("problem", "layer")


def layer_signature(p: Any) -> tuple:
    """A problem's layer: its geometry without the batch size."""
    return (p.ndim, p.G, p.K, p.C, tuple(p.filter), tuple(p.input), tuple(p.stride), tuple(p.dilation),
            tuple(p.left_pad), tuple(p.right_pad))


def leave_one_out(rows: Iterable[Mapping[str, Any]], *, sms: int = 132, hide: str = "problem",
                  foreign_rows: Iterable[Mapping[str, Any]] = ()) -> list[dict]:
    """One result per problem with an ok row: key, op, class, dtype, chosen, ratio, baseline_ratio.
    ``hide``: "problem" (its own rows) or "layer" (every problem of its layer, see the module doc);
    ``foreign_rows``: other GPU kinds' rows, evidence as at run time (hidden with the problem too)."""
    from .database import split_problem_key

    if hide not in HIDE_MODES:
        raise ValueError(f"hide={hide!r}: choose one of {', '.join(HIDE_MODES)}")
    rows = repair_disturbed(rows)  # the measured times too: a disturbed row counts as its sibling's time
    ev = Evidence.from_rows(rows, sms=sms, foreign_rows=foreign_rows)
    layers: dict[tuple, set[str]] = {}  # layer -> its problem keys (hide="layer" only)
    for q in ev.problems if hide == "layer" else ():
        layers.setdefault(layer_signature(q.params), set()).add(q.key)
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_key.setdefault(r["problem_key"], []).append(r)
    out = []
    for t in ev.problems:
        if t.foreign:
            continue
        group = by_key[t.key]
        times = {r["instance"]: _measured(r) for r in group}
        cands = [(r["instance"], r["algorithm"], r["instance_params"]) for r in group]
        hidden = layers[layer_signature(t.params)] if hide == "layer" else {t.key}
        ranking = rank(t.op, t.params, t.layout, t.dtype, t.fused, _parsed(cands), ev, exclude=hidden,
                       twin_candidates=_twin_candidates(t, by_key))
        chosen = ranking.best.name
        base = _baseline(t, ev, times, problem_distance, hidden)
        op, layout, dtype, fused, _ = split_problem_key(t.key)
        out.append({"problem_key": t.key, "op": op, "class": conv_class(t.params), "dtype": dtype,
                    "best": t.winner, "best_ms": t.best_ms, "chosen": chosen,
                    "chosen_ms": times.get(chosen), "ratio": _ratio(t.best_ms, times.get(chosen)),
                    "predicted_ms": ranking.best.predicted_ms,
                    "baseline": base, "baseline_ratio": _ratio(t.best_ms, times.get(base)) if base else None})
    return out


def _twin_candidates(t: Any, by_key: Mapping[str, Sequence[Mapping[str, Any]]]) -> list | None:
    """The instances measured on relayout's channels-last twin (the candidates there, as this problem's
    rows are here); None when the twin has no rows."""
    rows = by_key.get(problem_key(t.op, t.params, channels_last_twin(t.params.ndim), t.dtype, t.fused), ())
    return _parsed([(r["instance"], r["algorithm"], r["instance_params"]) for r in rows]) if rows else None


def _parsed(cands: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, dict]]:
    return [(n, a, json.loads(p) if isinstance(p, str) else p) for n, a, p in cands]


def _ratio(best: float, chosen: float | None) -> float:
    return best / chosen if chosen else 1.0 / FAILED_FACTOR


def _baseline(t: Any, ev: Evidence, times: Mapping[str, float | None], distance: Any,
              hidden: Collection[str]) -> str | None:
    """The old rule: the winner of the nearest other (not hidden) problem of the same kind that ran here."""
    same = [q for q in ev.problems if q.key not in hidden and (q.op, q.layout, q.dtype, q.fused) ==
            (t.op, t.layout, t.dtype, t.fused)]
    same.sort(key=lambda q: (distance(t.params, q.params), q.key))
    for q in same:
        # the same kernel under this problem's instance name (same dtype and layout: same name)
        if q.winner in times:
            return q.winner
    return None


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summarize(results: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Per (pass, class): problems, geomean and worst ratio of the policy and of the old one."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["op"], r["class"]), []).append(r)
    groups[("all", "all")] = list(results)
    out = []
    for (op, cls), rs in sorted(groups.items()):
        ratios = [r["ratio"] for r in rs]
        base = [r["baseline_ratio"] for r in rs if r["baseline_ratio"] is not None]
        out.append({"op": op, "class": cls, "problems": len(rs), "geomean": _geomean(ratios),
                    "worst": min(ratios), "below_0.5": sum(x < 0.5 for x in ratios),
                    "baseline_geomean": _geomean(base), "baseline_worst": min(base) if base else float("nan")})
    return out


def summary_markdown(results: Sequence[Mapping[str, Any]], title: str = "") -> str:
    lines = [f"### {title}\n" if title else "",
             "| pass | class | problems | untuned / tuned best (geomean) | worst | < 0.5x | old rule geomean "
             "| old rule worst |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in summarize(results):
        lines.append(f"| {s['op'].replace('conv_bwd_', '')} | {s['class']} | {s['problems']} | "
                     f"{s['geomean']:.3f} | {s['worst']:.3f} | {s['below_0.5']} | {s['baseline_geomean']:.3f} | "
                     f"{s['baseline_worst']:.3f} |")
    return "\n".join(x for x in lines if x) + "\n"


def compare_results(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], *,
                    moved: float = 0.1, top: int = 20) -> str:
    """Markdown: the problems (per device) whose untuned / tuned-best ratio moved by more than ``moved`` (as a
    fraction) between two leave-one-out runs, the ``top`` losses and gains, and the counts below 0.5x."""
    # a run written before the results named their device pairs by problem key alone
    by_device = all("device" in r for r in (*before, *after))

    def key(r: Mapping[str, Any]) -> tuple[str, str]:
        return (r["device"] if by_device else "", r["problem_key"])

    old = {key(r): r for r in before}
    pairs = [(old[k], r) for r in after if (k := key(r)) in old]
    changes = sorted(((math.log(b["ratio"] / a["ratio"]), a, b) for a, b in pairs
                      if abs(math.log(b["ratio"] / a["ratio"])) > math.log1p(moved)), key=lambda x: x[0])
    lines = [f"{len(pairs)} problems in both runs; {len(changes)} moved by more than {moved:.0%}; below 0.5x "
             f"{sum(a['ratio'] < 0.5 for a, _ in pairs)} -> {sum(b['ratio'] < 0.5 for _, b in pairs)}", "",
             "| before | after | problem | pick before -> after |", "|---:|---:|---|---|"]
    shown = changes if len(changes) <= 2 * top else changes[:top] + changes[-top:]  # the worst losses and gains
    for _, a, b in shown:
        lines.append(f"| {a['ratio']:.3f} | {b['ratio']:.3f} | {b['problem_key']} | {a['chosen']} -> {b['chosen']} |")
    return "\n".join(lines) + "\n"


def evaluate_databases(db: str | None = None, *, stale_rows: bool = False, hide: str = "problem",
                       foreign: bool = True, collect: list | None = None) -> Iterator[str]:
    """Leave-one-out score of the miss policy on each device's rows of ``db`` (default: every file of
    the system tier), one Markdown table per (file, device); rows of the current kernels (any
    software) unless ``stale_rows``; ``hide``: what is hidden per problem (:data:`HIDE_MODES`).
    ``foreign``: the other GPU kinds' shipped rows are evidence too, as at run time (hidden with the
    problem or layer). ``collect``: each problem's result (:func:`leave_one_out`, plus its device) is
    appended to it."""
    from .database import read_db, registry_kernel_hashes, system_db_files, valid_rows

    paths = [db] if db else [str(p) for p in system_db_files()]
    hashes = registry_kernel_hashes()
    frames: dict[str, Any] = {}  # each file read once: the scored file is one of the shipped ones too

    def rows_of(path: Any) -> Any:
        key = str(Path(path).resolve())
        if key not in frames:
            df = read_db(path)
            frames[key] = df if stale_rows else valid_rows(df, kernel_hashes=hashes, ok_only=False)
        return frames[key]

    shipped = [rows_of(p) for p in system_db_files()] if foreign else []
    for path in paths:
        df = rows_of(path)
        for (device, sms), part in df.groupby(["device", "device_sms"]):
            others = [r for f in shipped if len(f) for r in f[f["device"] != device].to_dict("records")]
            res = leave_one_out(part.to_dict("records"), sms=int(sms) or 132, hide=hide, foreign_rows=others)
            if collect is not None:
                collect.extend({**r, "device": device} for r in res)
            what = "each hidden in turn" if hide == "problem" else "each hidden with every problem of its layer"
            if others:
                what += f", other GPU kinds' rows ({len(others)}) as evidence"
            yield summary_markdown(res, title=f"{path}: {device} ({len(res)} problems, {what})")
