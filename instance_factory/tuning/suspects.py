"""Timings a database holds that a disturbance inflated, as a list of runs to time again.

An fp16 row and its bf16 twin (same problem and kernel, same device) run one kernel at one speed; a
row over ``DISTURBED_SIBLING_FACTOR`` x its twin's time was disturbed while it was timed (the tuning
machine's compile pool sharing the CPU, a compile inside a run). The cost model already reads such a
row as its twin's time (:func:`.cost_model.repair_disturbed`); this module finds them so that a GPU
session re-times them at the source::

    instance-factory db suspects --db tuning_db/nvidia-h100-80gb-hbm3.csv.gz --todo suspects.json
    instance-factory tune --todo suspects.json --db rows.csv     # on that GPU; then merge rows.csv
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from .cost_model import disturbed_twins, kernel_ms

__all__ = ["read_todo", "suspect_rows", "suspects_todo", "write_todo"]


def suspect_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One dict per disturbed row: its problem key, instance, status, time and its twin's time, the
    largest ratio first."""
    rows = list(rows)
    out = [{"problem_key": rows[i]["problem_key"], "instance": rows[i]["instance"], "status": rows[i]["status"],
            "device": rows[i].get("device"), "ms": kernel_ms(rows[i]), "twin_ms": kernel_ms(twin)}
           for i, twin in disturbed_twins(rows).items()]
    return sorted(out, key=lambda s: -s["ms"] / s["twin_ms"])


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
