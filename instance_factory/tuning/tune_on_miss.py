"""The ``"tune"`` miss policy: tune one untuned problem now and store its rows in the user tier.

It lives with the tuner, not in :mod:`~instance_factory.tuning.lookup`: the run-time lookup never
imports the tuner. ``instance_factory/__init__.py`` (the composition root) registers
:func:`tune_on_miss` with :func:`~instance_factory.tuning.lookup.set_tune_on_miss`, loading this
module only when the policy first fires.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TUNE_OPTIONS", "tune_on_miss"]

#: keyword arguments the "tune" policy passes to ``tuner.tune`` (tests narrow the instances here)
TUNE_OPTIONS: dict[str, Any] = {}


def tune_on_miss(op: str, params: Any, layout: str, dtype: str, fused_op: str, device: Any) -> None:
    """Tune every runnable instance of one problem (verified, then timed) into the user tier."""
    from .problem_sets import Problem
    from .tuner import tune

    # compile in threads: worker processes would re-import the caller's __main__ (spawn)
    tune([Problem(op, params, layout, dtype, fused_op)], device=device, progress=False,
         **{"compile_mode": "thread", **TUNE_OPTIONS})
