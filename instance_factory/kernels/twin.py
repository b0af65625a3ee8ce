"""The slots through which the layers above tell ``relayout`` how to choose a twin's instance and
whether any instance can run the twin.

``relayout`` runs a channels-first problem with the instance chosen for its channels-last twin, and
that choice (``tuning.lookup``) sits in a layer above the kernels. lookup fills the resolver slot when
it is imported; the registry fills the checker slot (its candidates decide whether a twin can run).
The slots live apart from ``relayout`` and import nothing, so filling them does not load
triton: ``python -m instance_factory`` must still choose the Triton interpreter on a machine without a
GPU before triton is first imported (``cli.backend``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["set_twin_checker", "set_twin_resolver", "twin_checker", "twin_resolver"]

_TWIN_RESOLVER: list[Callable[..., Any]] = []
_TWIN_CHECKER: list[Callable[..., Any]] = []


def set_twin_resolver(resolve: Callable[..., Any]) -> None:
    """``resolve(op, params, layout=, dtype=, fused_op=, device=)`` -> the twin problem's Instance."""
    _TWIN_RESOLVER[:] = [resolve]


def twin_resolver() -> Callable[..., Any] | None:
    """The resolver lookup registered, or None where the run-time layer was never imported."""
    return _TWIN_RESOLVER[0] if _TWIN_RESOLVER else None


def set_twin_checker(check: Callable[..., Any]) -> None:
    """``check(op, params, layout, dtype, fused_op)`` -> None when an instance can run the twin
    problem, else why none can."""
    _TWIN_CHECKER[:] = [check]


def twin_checker() -> Callable[..., Any] | None:
    """The checker the registry registered, or None where it was never imported."""
    return _TWIN_CHECKER[0] if _TWIN_CHECKER else None
