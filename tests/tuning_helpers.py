"""Test helpers (tests/test_tuning_*.py): isolated database tiers and synthetic rows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import instance_factory.tuning.lookup as lookup
import instance_factory.tuning.tune_on_miss as tune_on_miss
from instance_factory.tuning.database import (
    current_device,
    current_software,
    instance_params_json,
    now_utc,
    problem_fields,
)

__all__ = ["isolated_tiers", "synthetic_row"]


@contextmanager
def isolated_tiers(root: str | os.PathLike) -> Iterator[tuple[Path, Path]]:
    """Point the user tier at ``root/user`` and the system tier at ``root/system`` (both empty), unset
    the miss-policy variable, and reset the lookup cache and warn-once memory; restore afterwards."""
    root = Path(root)
    user, system = root / "user", root / "system"
    user.mkdir(parents=True, exist_ok=True)
    system.mkdir(parents=True, exist_ok=True)
    names = ("INSTANCE_FACTORY_USER_DB", "INSTANCE_FACTORY_SYSTEM_DB", "INSTANCE_FACTORY_MISS_POLICY")
    saved = {k: os.environ.get(k) for k in names}
    os.environ["INSTANCE_FACTORY_USER_DB"] = str(user)
    os.environ["INSTANCE_FACTORY_SYSTEM_DB"] = str(system)
    os.environ.pop("INSTANCE_FACTORY_MISS_POLICY", None)
    lookup.clear_cache()
    lookup._WARNED.clear()
    saved_tune = dict(tune_on_miss.TUNE_OPTIONS)
    try:
        yield user, system
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tune_on_miss.TUNE_OPTIONS.clear()
        tune_on_miss.TUNE_OPTIONS.update(saved_tune)
        lookup.clear_cache()
        lookup._WARNED.clear()


def synthetic_row(problem: Any, inst: Any, median_ms: float | None, *, status: str = "ok",
                  device: Any = None, **overrides: Any) -> dict:
    """A database row for ``inst`` on ``problem`` as the tuner would write it, with made-up timings
    (valid for this device and software unless ``overrides`` say otherwise)."""
    from instance_factory.dtypes import DATA_TYPES

    dev = current_device(device if device is not None else "cpu")
    tol = DATA_TYPES[problem.dtype].tolerance
    row = {
        **problem_fields(problem.op, problem.params, problem.layout, problem.dtype, problem.fused_op),
        "instance": inst.name, "algorithm": inst.algorithm, "instance_params": instance_params_json(inst.cfg),
        "kernel_hash": inst.kernel_hash, **dev.as_columns(), **current_software().as_columns(),
        "status": status, "reason": "" if status == "ok" else "synthetic failure",
        "median_ms": median_ms, "p20_ms": median_ms, "p80_ms": median_ms, "reps": 10,
        "rel_err": tol / 20, "max_rel_err": tol / 10, "tolerance": tol, "timing": "synthetic",
        "timestamp": now_utc(),
    }
    row.update(overrides)
    return row
