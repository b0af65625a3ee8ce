"""instance_factory: YAML-declared Triton kernel instances for grouped convolution backward passes.

Public contract (see README.md): ``ConvParams``, ``conv_bwd_data``, ``conv_bwd_weight``, ``lookup``.
Attributes load lazily so that ``python -m instance_factory`` can choose the Triton interpreter on a
machine without a GPU before triton is first imported.
"""

from __future__ import annotations

import importlib
from typing import Any

from .tuning.lookup import set_tune_on_miss
from .version import __version__

_EXPORTS = {
    "ConvParams": "instance_factory.problem",
    "conv_bwd_data": "instance_factory.ops",
    "conv_bwd_weight": "instance_factory.ops",
    "lookup": "instance_factory.tuning.lookup",
    "get_registry": "instance_factory.registry",
    "Instance": "instance_factory.instance",
    "LayoutTriple": "instance_factory.layouts",
    "parse_layout": "instance_factory.layouts",
    "all_layouts": "instance_factory.layouts",
    "ConfigError": "instance_factory.factory",
}

__all__ = [*_EXPORTS, "__version__"]


def _tune_on_miss(*args: Any) -> None:
    # the lookup's "tune" miss policy, injected here so that lookup (run time) never imports the tuner
    from .tuning.tune_on_miss import tune_on_miss

    tune_on_miss(*args)


set_tune_on_miss(_tune_on_miss)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'instance_factory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
