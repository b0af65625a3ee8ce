"""What a sweep still has to measure: the target database, the (problem, instance) pairs it already
holds, the plan per problem and the best times a resumed sweep prunes against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .candidates import candidates_for
from .database import (
    DeviceInfo,
    TuningDB,
    current_device,
    current_software,
    registry_kernel_hashes,
    system_db_path,
    user_db_path,
    valid_rows,
)
from .options import TuneOptions
from .problem_sets import Problem

__all__ = ["done_pairs", "plan_from_todo", "plan_work", "prior_best", "resolve_db"]


def resolve_db(db: Any = None, device: DeviceInfo | None = None) -> TuningDB:
    """``None``/``"user"``: the user tier for the device; ``"system"``: the shipped tier's file for the
    device (what a maintainer regenerates); a path or a TuningDB: that file."""
    dev = device or current_device()
    if isinstance(db, TuningDB):
        return db
    if db is None or db == "user":
        return TuningDB(user_db_path(dev.kind))
    if db == "system":
        return TuningDB(system_db_path(dev.kind))
    return TuningDB(db)


def _current_rows(db: TuningDB, device: DeviceInfo, ok_only: bool) -> Any:
    """``db``'s rows valid for this device, software and kernel hashes (None when there are none)."""
    df = db.read()
    if len(df) == 0:
        return None
    df = valid_rows(df, device=device, software=current_software(), kernel_hashes=registry_kernel_hashes(),
                    ok_only=ok_only)
    return df if len(df) else None


def done_pairs(db: TuningDB, device: DeviceInfo) -> set[tuple[str, str]]:
    """(problem key, instance) pairs with a row of any status for this device, software and kernel."""
    df = _current_rows(db, device, ok_only=False)
    return set() if df is None else set(zip(df["problem_key"], df["instance"]))


def prior_best(db: TuningDB, device: DeviceInfo) -> dict[str, float]:
    """problem key -> the fastest valid ``ok`` time ``db`` already holds (resumed sweeps prune against it)."""
    df = _current_rows(db, device, ok_only=True)
    if df is None:
        return {}
    return {k: float(v) for k, v in df.groupby("problem_key")["median_ms"].min().items() if v == v and v > 0}


def plan_work(problems: Sequence[Problem], db: TuningDB, device: DeviceInfo, opts: TuneOptions, *,
              force: bool = False) -> list[tuple[Problem, list[Any]]]:
    """(problem, instances still to measure) for each problem, in order."""
    done = set() if force else done_pairs(db, device)
    plan = []
    for pr in problems:
        runnable, _ = candidates_for(pr, opts)
        key = pr.key
        plan.append((pr, [i for i in runnable if (key, i.name) not in done]))
    return plan


def plan_from_todo(problems: Sequence[Problem], todo: dict[str, list[str]]) -> list[tuple[Problem, list[Any]]]:
    from ..registry import get_registry

    reg = get_registry()
    return [(pr, [reg.get(n) for n in todo.get(pr.key, [])]) for pr in problems]
