"""The slot through which the run-time layer tells ``relayout`` how to choose a twin's instance.

``relayout`` runs a channels-first problem with the instance chosen for its channels-last twin, and
that choice (``tuning.lookup``) sits in a layer above the kernels. lookup fills this slot when it is
imported. The slot lives apart from ``relayout`` and imports nothing, so filling it does not load
triton: ``python -m instance_factory`` must still choose the Triton interpreter on a machine without a
GPU before triton is first imported (``cli.backend``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["set_twin_resolver", "twin_resolver"]

_TWIN_RESOLVER: list[Callable[..., Any]] = []


def set_twin_resolver(resolve: Callable[..., Any]) -> None:
    """``resolve(op, params, layout=, dtype=, fused_op=, device=)`` -> the twin problem's Instance."""
    _TWIN_RESOLVER[:] = [resolve]


def twin_resolver() -> Callable[..., Any] | None:
    """The resolver lookup registered, or None where the run-time layer was never imported."""
    return _TWIN_RESOLVER[0] if _TWIN_RESOLVER else None
