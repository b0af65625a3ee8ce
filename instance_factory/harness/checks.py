"""The NaN-poisoned run and the error check (normwise and worst element) against float64."""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import DATA_TYPES
from . import timing
from .operands import ProblemCase

__all__ = ["run_poisoned", "verdict"]


def verdict(rel: float, max_rel: float, dtype: str) -> str | None:
    """None when the errors pass data type ``dtype``'s tolerances, else the reason (NaN never passes)."""
    dt = DATA_TYPES[dtype]
    if not rel <= dt.tolerance:
        return f"wrong result: rel_err {rel:.3g} > tolerance {dt.tolerance:g}"
    if not max_rel <= dt.max_tolerance:
        return (f"wrong result: worst element max_rel_err {max_rel:.3g} > {dt.max_tolerance:g} "
                f"(rel_err {rel:.3g} passes)")
    return None


def run_poisoned(case: ProblemCase, inst: Any, timed: bool = False) -> tuple[torch.Tensor, float | None]:
    """One run through ``ops.prepare`` into a NaN-poisoned result buffer: (result, launch ms if
    ``timed`` else None)."""
    from ..ops import prepare

    _, args = prepare(case.problem.op, case.a, case.b, case.problem.params, layout=case.problem.layout,
                      ds=case.ds, fused_op=case.fused_arg, alpha=case.alpha, beta=case.beta, instance=inst,
                      **case.kwargs)
    args.out.fill_(float("nan"))
    ms = None
    if timed:
        ms = timing.single_run_ms(lambda: inst.alg.launch(args), case.device, inst, "warm-up")
    else:
        inst.alg.launch(args)
    if args.out.is_cuda:
        torch.cuda.synchronize(args.out.device)
    return args.out, ms
