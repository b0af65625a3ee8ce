"""What a database row says its kernel takes: a disturbed run counts with its p20, or with the same kernel's
timing on the sibling dtype's problem (the cost model's evidence, the suspects report and held-out replays read
rows this way)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .model_constants import DISTURBED_SIBLING_FACTOR, NOISY_SPREAD

__all__ = ["disturbed_twins", "kernel_ms", "repair_disturbed"]


def kernel_ms(r: Mapping[str, Any]) -> float | None:
    """A timed row's estimate of its kernel's time: the median, or the p20 when the run was disturbed
    (p80 over NOISY_SPREAD x p20: host contention on the tuning machine, e.g. its compile pool, only
    ever adds time to a short kernel's events). None for a row without a finite positive time."""
    try:
        med = float(r["median_ms"])
    except (TypeError, ValueError, KeyError):
        return None
    if not (math.isfinite(med) and med > 0):
        return None
    try:
        p20, p80 = float(r.get("p20_ms")), float(r.get("p80_ms"))
    except (TypeError, ValueError):
        return med
    if math.isfinite(p20) and math.isfinite(p80) and 0 < p20 and p80 > NOISY_SPREAD * p20:
        return p20
    return med


def disturbed_twins(rows: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """Index in ``rows`` -> the twin row that stands for it: a ``pruned`` or ``ok`` row that took over
    DISTURBED_SIBLING_FACTOR x the same kernel's timed (``ok``) run on the sibling dtype's problem of the
    same device (fp16 <-> bf16: one kernel, one speed). Such a run was disturbed (a compile or host
    contention; a disturbance only ever adds time, so the faster of the two stands)."""
    rows = rows if isinstance(rows, list) else list(rows)
    ok = {(r.get("device"), r["problem_key"], r["instance"]): r for r in rows if r["status"] == "ok"}
    out = {}
    for i, r in enumerate(rows):
        if r["status"] not in ("pruned", "ok"):
            continue
        dt = r["problem_key"].split("|")[2]
        other = {"fp16": "bf16", "bf16": "fp16"}.get(dt)
        sib = other and ok.get((r.get("device"), r["problem_key"].replace(f"|{dt}|", f"|{other}|", 1),
                                r["instance"].replace(f"-{dt}-", f"-{other}-", 1)))
        mine, theirs = kernel_ms(r), sib and kernel_ms(sib)
        if mine and theirs and mine > DISTURBED_SIBLING_FACTOR * theirs:
            out[i] = sib
    return out


def repair_disturbed(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``rows``, each disturbed one (:func:`disturbed_twins`) counting with its twin's times."""
    rows = list(rows)
    twins = disturbed_twins(rows)
    return [r if i not in twins else {**r, "median_ms": twins[i]["median_ms"], "p20_ms": twins[i].get("p20_ms"),
                                      "p80_ms": twins[i].get("p80_ms")} for i, r in enumerate(rows)]
