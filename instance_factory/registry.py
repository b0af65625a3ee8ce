"""The instance registry: every expanded instance, keyed by name and by (op, layout, dtype, ndim, fused op)."""

from __future__ import annotations

import fnmatch
import functools
import os
from collections import Counter, defaultdict
from pathlib import Path

from .dtypes import DataType
from .factory import Culled, expand_files
from .instance import Instance
from .kernels import twin
from .layouts import LayoutTriple, parse_layout
from .problem import ConvParams

__all__ = ["Registry", "config_dir", "get_registry"]

Combination = tuple[str, str, str, int, str]  # (op, layout family, dtype, ndim, fused op)


@functools.cache
def _shipped_config_dir() -> Path:
    pkg = Path(__file__).resolve().parent
    checkout = pkg.parent / "configs"
    return checkout if checkout.is_dir() else pkg / "data" / "configs"


def config_dir() -> Path:
    """$INSTANCE_FACTORY_CONFIGS, else configs/ beside the package (a source checkout), else the
    copy a wheel carries in instance_factory/data/configs."""
    env = os.environ.get("INSTANCE_FACTORY_CONFIGS")
    return Path(env) if env else _shipped_config_dir()


def _layout_family_of(layout: str | LayoutTriple | None) -> str | None:
    """Accept a layout family name ("nhwgc") or a CK triple ("NHWGC/GKYXC/NHWGK")."""
    if layout is None:
        return None
    if isinstance(layout, LayoutTriple):
        return layout.layout_family
    if "/" in layout:
        return parse_layout(layout).layout_family
    return layout.lower()


def spread_over_algorithms(items: list[Instance], limit: int | None) -> list[Instance]:
    """At most ``limit`` instances: round-robin over the algorithms, the algorithm with the fewest
    instances first (the specialized ones, e.g. ``direct`` for depthwise), each algorithm's instances
    in registry order, so a small limit still samples every algorithm and the likeliest fits first."""
    if limit is None or len(items) <= limit:
        return list(items)
    by_alg: dict[str, list[Instance]] = {}
    for i in items:
        by_alg.setdefault(i.algorithm, []).append(i)
    groups = sorted(by_alg.values(), key=len)
    out: list[Instance] = []
    while len(out) < limit:
        for group in groups:
            if group and len(out) < limit:
                out.append(group.pop(0))
    return out


def _match(name: str, pattern: str) -> bool:
    """Comma-separated globs; a pattern without wildcards matches as a substring."""
    for p in pattern.split(","):
        p = p.strip()
        if p and (fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else p in name):
            return True
    return False


class Registry:
    def __init__(self, instances: list[Instance], declared: set[Combination], culled: list[Culled],
                 files: list[Path]) -> None:
        self._by_name = {i.name: i for i in instances}
        self._by_combo: dict[Combination, list[Instance]] = defaultdict(list)
        for inst in instances:
            self._by_combo[inst.combination].append(inst)
        self.declared = declared
        self.culled = culled
        self.files = files

    @classmethod
    def from_dir(cls, directory: Path) -> Registry:
        files = sorted(directory.glob("*.yaml"))
        if not files:
            raise FileNotFoundError(f"no config files (*.yaml) in {directory}")
        exp = expand_files(files)
        return cls(exp.instances, exp.declared, exp.culled, files)

    def __len__(self) -> int:
        return len(self._by_name)

    def instances(self, op: str | None = None, layout: str | LayoutTriple | None = None,
                  dtype: str | None = None, ndim: int | None = None, fused_op: str | None = None,
                  pattern: str | None = None, algorithm: str | None = None) -> list[Instance]:
        """All instances matching every filter given (None matches anything)."""
        layout_family = _layout_family_of(layout)
        out = []
        for (o, lf, d, n, fo), insts in self._by_combo.items():
            if (op and o != op) or (layout_family and lf != layout_family) or (dtype and d != dtype) \
                    or (ndim and n != ndim) or (fused_op and fo != fused_op):
                continue
            out.extend(i for i in insts if (not algorithm or i.algorithm == algorithm)
                       and (not pattern or _match(i.name, pattern)))
        return out

    def get(self, name: str) -> Instance:
        try:
            return self._by_name[name]
        except KeyError:
            close = [n for n in self._by_name if name in n][:3]
            hint = f"; similar: {', '.join(close)}" if close else ""
            raise KeyError(f"no instance named {name!r} in the registry{hint}") from None

    def is_declared(self, op: str, layout: str | LayoutTriple, dtype: str, ndim: int, fused_op: str) -> bool:
        return (op, _layout_family_of(layout), dtype, ndim, fused_op) in self.declared

    def candidates(self, op: str, params: ConvParams, layout: str | LayoutTriple, dtype: str | DataType,
                   fused_op: str) -> tuple[list[Instance], list[tuple[Instance, str]]]:
        """Instances of this combination that can run the problem, and the others with their reasons."""
        lt = parse_layout(layout, params.ndim)
        dname = dtype if isinstance(dtype, str) else dtype.name
        runnable: list[Instance] = []
        declined: list[tuple[Instance, str]] = []
        for inst in self._by_combo.get((op, lt.layout_family, dname, params.ndim, fused_op), []):
            reason = inst.decline(params, lt, dname)
            if reason is None:
                runnable.append(inst)
            else:
                declined.append((inst, reason))
        return runnable, declined

    def counts(self, instances: list[Instance] | None = None) -> Counter:
        """Instance count per (op, layout, dtype, ndim, fused op)."""
        return Counter(i.combination for i in (self.instances() if instances is None else instances))


@functools.lru_cache(maxsize=4)
def _load(directory: str) -> Registry:
    return Registry.from_dir(Path(directory))


def get_registry(directory: str | Path | None = None) -> Registry:
    """The registry built from configs/ (cached per directory)."""
    return _load(str(directory or config_dir()))


@functools.lru_cache(maxsize=1024)
def twin_decline(op: str, params: ConvParams, layout: LayoutTriple, dtype: str, fused_op: str) -> str | None:
    """None when an instance of the shipped registry can run the problem, else why none can (the
    first reasons, grouped by family): ``relayout`` asks it about its channels-last twin."""
    runnable, declined = get_registry().candidates(op, params, layout, dtype, fused_op)
    if runnable:
        return None
    if not declined:
        return f"no {op} instance is declared for {layout.name} {dtype} {fused_op}"
    by_family: dict[str, str] = {}
    for inst, reason in declined:
        by_family.setdefault(inst.algorithm, reason)
    return "; ".join(dict.fromkeys(by_family.values()))  # families that declined alike, once


twin.set_twin_checker(twin_decline)
