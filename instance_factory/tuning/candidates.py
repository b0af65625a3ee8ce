"""Which instances a problem's tuning tries (name filters, spread over the algorithms) and in which
order (likely-fast first, so the pruning rule has a good best time early)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from typing import Any

from .cost_model import TAPS_IN_COLUMNS
from .options import TuneOptions
from .problem_sets import Problem

__all__ = ["FEW_CHANNELS", "candidates_for", "order_candidates"]


def _match(name: str, patterns: str | Sequence[str]) -> bool:
    pats = patterns.split(",") if isinstance(patterns, str) else list(patterns)
    for p in (q.strip() for q in pats):
        if p and (fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else p in name):
            return True
    return False


def candidates_for(problem: Problem, options: TuneOptions | None = None) -> tuple[list[Any], list[tuple[Any, str]]]:
    """(runnable instances, [(declined instance, reason)]) after the options' name filters. A
    ``max_instances`` cut spreads over the kernel families, each family's instances in the order the
    run-time cost model predicts them (:func:`lookup.predicted_order`): session 26's first H200 sweep
    took them in registry order and missed, e.g., the ResNet stem's padx config that ran 2.5x faster on
    the H100."""
    from ..registry import get_registry, spread_over_algorithms
    from .lookup import predicted_order

    opts = options or TuneOptions()
    runnable, declined = get_registry().candidates(problem.op, problem.params, problem.layout,
                                                   problem.dtype, problem.fused_op)
    if opts.instances:
        runnable = [i for i in runnable if _match(i.name, opts.instances)]
    if opts.max_instances is not None and len(runnable) > opts.max_instances:
        runnable = predicted_order(problem.op, problem.params, problem.layout, problem.dtype, problem.fused_op,
                                   runnable)
    return spread_over_algorithms(runnable, opts.max_instances), declined


#: C and K per group up to this: a few-channel problem, where the ``direct`` family is meant to win
FEW_CHANNELS = 8


def _gemm_mn(problem: Problem, inst: Any) -> tuple[int, int] | None:
    """The (M, N) a tensor-core instance tiles with (block_m, block_n); None for other algorithms."""
    cfg = inst.cfg
    if "block_m" not in cfg or "block_n" not in cfg:
        return None
    p = problem.params
    if problem.op == "conv_bwd_data":  # M = N*prod(in) per stride phase, N = C
        return max(1, p.N * math.prod(p.input) // max(1, math.prod(p.stride))), p.C
    # bwd weight: M = K, N = C per tap (C*taps with the taps folded into the columns: two_stage, padx)
    return p.K, p.C * (math.prod(p.filter) if inst.algorithm in TAPS_IN_COLUMNS else 1)


def _tile_waste(inst: Any, mn: tuple[int, int]) -> float:
    """Padded tile area / useful area (1: the tiles fit the GEMM exactly)."""
    m, n = mn
    bm, bn = inst.cfg["block_m"], inst.cfg["block_n"]
    return (-(-m // bm) * bm / m) * (-(-n // bn) * bn / n)


def order_candidates(problem: Problem, instances: Sequence[Any]) -> list[Any]:
    """``instances`` likely-fast first, so the pruning rule has a good best time early.

    Few-channel problems (C and K per group <= FEW_CHANNELS): the untiled families (``direct``,
    ``dwroll``, ``dwtaps``, ``dwtile``) first, then the tensor-core families; otherwise the tensor-core families first.
    Within a group, tiles with less padding waste on the problem's GEMM (tile area / useful area,
    in half-octave steps) first; ties keep registry order. Only the order changes, never the set.
    """
    p = problem.params
    few = p.C <= FEW_CHANNELS and p.K <= FEW_CHANNELS

    def key(item: tuple[int, Any]) -> tuple[int, int, int]:
        idx, inst = item
        mn = _gemm_mn(problem, inst)
        if mn is None:  # direct (or another non-tiled algorithm)
            return (0 if few else 2, 0, idx)
        waste = _tile_waste(inst, mn)
        return (1 if few else 0, round(2 * math.log2(waste)), idx)

    return [inst for _, inst in sorted(enumerate(instances), key=key)]

