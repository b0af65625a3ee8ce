"""Timings a database holds that a disturbance inflated, as a list of runs to time again.

An fp16 row and its bf16 twin (same problem and kernel, same device) run one kernel at one speed; a
row over ``DISTURBED_SIBLING_FACTOR`` x its twin's time was disturbed while it was timed (the tuning
machine's compile pool sharing the CPU, a compile inside a run). The cost model already reads such a
row as its twin's time (:func:`.cost_model.repair_disturbed`); this module finds them so that a GPU
session re-times them at the source. An ok row over ``FAMILY_OUTLIER_FACTOR`` x the median of its kernel
family's rows on the same problem is listed too (reference: that median): a slow config, or a disturbed
run that has no twin to show it. Re-timing tells them apart::

    instance-factory db suspects --db tuning_db/nvidia-h100-80gb-hbm3.csv.gz --todo suspects.json
    instance-factory tune --todo suspects.json --db rows.csv     # on that GPU; then merge rows.csv
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from .model_constants import FAMILY_OUTLIER_FACTOR, FAMILY_OUTLIER_MIN_ROWS
from .row_times import disturbed_twins, kernel_ms

__all__ = ["read_todo", "suspect_rows", "suspects_todo", "write_todo"]


def suspect_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per suspect row: its problem key, instance, status, time, the reference time and why
    ("twin": its fp16/bf16 twin's time; "family": its family's median on the problem), the largest
    ratio first."""
    rows = list(rows)
    twins = disturbed_twins(rows)
    out = [_suspect(rows[i], kernel_ms(twin), "twin") for i, twin in twins.items()]
    out += [_suspect(rows[i], ref, "family") for i, ref in family_outliers(rows).items() if i not in twins]
    return sorted(out, key=lambda s: -s["ms"] / s["ref_ms"])


def _suspect(row: Mapping[str, Any], ref_ms: float, why: str) -> dict[str, Any]:
    return {"problem_key": row["problem_key"], "instance": row["instance"], "status": row["status"],
            "device": row.get("device"), "ms": kernel_ms(row), "ref_ms": ref_ms, "why": why}


def family_outliers(rows: list[Mapping[str, Any]]) -> dict[int, float]:
    """Index of each ok row over FAMILY_OUTLIER_FACTOR x the median of its family's ok rows on the same
    problem and device (families of at least FAMILY_OUTLIER_MIN_ROWS rows) -> that median."""
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for i, r in enumerate(rows):
        ms = kernel_ms(r) if r.get("status") == "ok" else None
        if ms:
            groups.setdefault((r["problem_key"], r.get("device"), r.get("algorithm")), []).append((i, ms))
    out = {}
    for members in groups.values():
        if len(members) < FAMILY_OUTLIER_MIN_ROWS:
            continue
        median = statistics.median(ms for _, ms in members)
        out.update({i: median for i, ms in members if ms > FAMILY_OUTLIER_FACTOR * median})
    return out


def suspects_todo(suspects: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """problem key -> the instance names to time again (``tune --todo``'s input), sorted."""
    todo: dict[str, set[str]] = {}
    for s in suspects:
        todo.setdefault(s["problem_key"], set()).add(s["instance"])
    return {k: sorted(v) for k, v in sorted(todo.items())}


def write_todo(todo: Mapping[str, list[str]], path: str | os.PathLike) -> None:
    with open(path, "w") as f:
        json.dump(dict(todo), f, indent=1, sort_keys=True)
        f.write("\n")


def read_todo(path: str | os.PathLike) -> dict[str, list[str]]:
    """A todo file (problem key -> instance names), checked: every instance must be in the registry and
    declared for its problem's op, layout, dtype and fused op."""
    from ..registry import get_registry
    from .problem_sets import Problem

    try:
        with open(path) as f:
            todo = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"todo file {path}: {exc}") from exc
    if not isinstance(todo, dict) or not all(isinstance(v, list) for v in todo.values()):
        raise ValueError(f"todo file {path}: expected an object of problem key -> list of instance names")
    reg = get_registry()
    for key, names in todo.items():
        try:
            pr = Problem.from_key(key)
        except ValueError as exc:
            raise ValueError(f"todo file {path}: {exc}") from None
        for name in names:
            try:
                inst = reg.get(name)
            except KeyError:
                raise ValueError(f"todo file {path}: {name} is not in the registry") from None
            mine = (inst.op, inst.layout.name, inst.dtype, inst.fused_op)
            if mine != (pr.op, pr.layout, pr.dtype, pr.fused_op):
                raise ValueError(f"todo file {path}: {name} does not serve {key}")
    return todo
