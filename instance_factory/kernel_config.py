"""An algorithm's tile/pipeline parameters: a frozen, typed dataclass that checks itself.

Each kernel module declares one :class:`KernelConfig` subclass per algorithm (or one per group of
algorithms that share parameters). Its fields, in order, are the parameters an instance name encodes
(``instance.config_tag``), with their types; :meth:`~KernelConfig.check` says why a config is an
impossible tile whatever the problem (the expansion-time cull of ``factory.py``; the messages are the
ones users see in ``instance-factory list --culled``); ``bind`` and ``decline`` read its attributes
(``cfg.block_m``). A config is built from a YAML entry's values in one place,
:meth:`KernelConfig.from_values`.

A config also reads like a read-only mapping of its parameters (``cfg["block_n"]``, ``cfg.get(...)``,
``"split" in cfg``, ``dict(cfg)``) for code that handles the configs of every algorithm alike
(:meth:`KernelConfig.validate` of a mapping or a config); kernel code reads attributes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import ItemsView, Mapping
from typing import Any, TypeVar

__all__ = ["KernelConfig"]

C = TypeVar("C", bound="KernelConfig")


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """Base of the per-algorithm configs; a subclass is a frozen dataclass of the parameters."""

    @classmethod
    def param_names(cls) -> tuple[str, ...]:
        """The parameters, in the order instance names encode them."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_values(cls: type[C], values: Mapping[str, Any]) -> C:
        """The config of ``values`` (one YAML entry's parameters; other keys are ignored), not yet
        checked: :meth:`check` says whether it is a possible tile. A missing parameter is a KeyError."""
        return cls(**{name: values[name] for name in cls.param_names()})

    @classmethod
    def validate(cls, values: Mapping[str, Any]) -> str | None:
        """None when ``values`` (a mapping or a config) set every parameter and make a possible tile,
        else why not: ``Algorithm.check_config``."""
        missing = [name for name in cls.param_names() if name not in values]
        if missing:
            return cls.missing_reason(missing)
        return (values if isinstance(values, cls) else cls.from_values(values)).check()

    @classmethod
    def missing_reason(cls, missing: list[str]) -> str:
        return f"config lacks {', '.join(missing)}"

    def check(self) -> str | None:
        """None for a possible tile, else why not (independent of the problem); subclasses add rules."""
        return None

    def replace(self: C, **changes: Any) -> C:
        """A copy with some parameters changed (not checked)."""
        return dataclasses.replace(self, **changes)

    # --- read-only mapping access, for code that treats every algorithm's parameters alike -------
    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.param_names()}

    def __getitem__(self, name: str) -> Any:
        if name not in self.param_names():
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return name in self.param_names()

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name) if name in self.param_names() else default

    def keys(self) -> tuple[str, ...]:
        return self.param_names()

    def items(self) -> ItemsView[str, Any]:
        return self.as_dict().items()

