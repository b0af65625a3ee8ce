"""Tuning: the tuner, the tuning database, run-time lookup, problem sets and sweeps.

Submodules load lazily so that ``from instance_factory.tuning.lookup import lookup`` (the ops'
``instance=None`` path) does not import pandas until a lookup first reads the database.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "lookup": "instance_factory.tuning.lookup",
    "explain": "instance_factory.tuning.lookup",
    "clear_cache": "instance_factory.tuning.lookup",
    "TuningMissError": "instance_factory.tuning.lookup",
    "TuningMissWarning": "instance_factory.tuning.lookup",
    "TuningDB": "instance_factory.tuning.database",
    "DatabaseError": "instance_factory.tuning.database",
    "merge_files": "instance_factory.tuning.database",
    "best_per_problem": "instance_factory.tuning.database",
    "Problem": "instance_factory.tuning.problem_sets",
    "load_problem_set": "instance_factory.tuning.problem_sets",
    "expand_problem_set": "instance_factory.tuning.problem_sets",
    "shard_split": "instance_factory.tuning.problem_sets",
    "tune": "instance_factory.tuning.tuner",
    "TuneOptions": "instance_factory.tuning.options",
    "sweep": "instance_factory.tuning.sweep",
    "summary_table": "instance_factory.tuning.summary",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'instance_factory.tuning' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
