"""configs/*.yaml -> validated, expanded, frozen Instances (the manifest step).

A config file declares, per op, the supported combinations (layout family x ndim x dtype x fused
op) and, under ``families``, one or more algorithms (kernel families) with tile/pipeline parameter
lists. Expansion is the filtered product of each algorithm's parameter lists; ``constraints`` (small
arithmetic expressions over the parameter names) and the checks of the algorithm's config class
(``KernelConfig.check``) cull configs, and every culled config is logged with its reason. A constraint
may also name ``elem_bytes``, the element size of a combination's data type (4 for fp32 / fp32_tf32,
2 for fp16 / bf16): it culls a config for those data types only (a tile shape that suits one width).
Mistakes in a file are ``ConfigError``s naming the file, entry and problem.
"""

from __future__ import annotations

import ast
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .algorithms import ALGORITHMS
from .dtypes import DATA_TYPES
from .epilogue import FUSED_OPS
from .instance import Instance
from .layouts import LAYOUT_FAMILIES

__all__ = ["ConfigError", "Culled", "Expansion", "expand_file", "expand_files"]

log = logging.getLogger(__name__)

OPS = ("conv_bwd_data", "conv_bwd_weight")
_TOP_KEYS = {"op", "description", "support", "families"}
_SUPPORT_KEYS = {"layouts", "ndims", "dtypes", "fused_ops", "algorithms"}
_ALGORITHM_ENTRY_KEYS = {"algorithm", "description", "params", "constraints", "configs"}
_EXPR_NODES = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Name, ast.Load,
               ast.Constant, ast.And, ast.Or, ast.Not, ast.Add, ast.Sub, ast.Mult, ast.Div,
               ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt,
               ast.GtE, ast.In, ast.NotIn, ast.Tuple, ast.List, ast.IfExp)


class ConfigError(ValueError):
    """A config file that cannot be expanded; the message names the file, entry and problem."""

    def __init__(self, path: Path | str, entry: str, problem: str) -> None:
        super().__init__(f"{path}: {entry}: {problem}")
        self.path, self.entry, self.problem = str(path), entry, problem


@dataclass(frozen=True)
class Culled:
    path: str
    algorithm: str
    config: tuple[tuple[str, Any], ...]
    reason: str
    dtype: str = ""  # set when an elem_bytes constraint culled the config for this data type only


@dataclass
class Expansion:
    instances: list[Instance] = field(default_factory=list)
    culled: list[Culled] = field(default_factory=list)
    # (op, layout family, dtype, ndim, fused op)
    declared: set[tuple[str, str, str, int, str]] = field(default_factory=set)


def _want(cond: bool, path: Path, entry: str, problem: str) -> None:
    if not cond:
        raise ConfigError(path, entry, problem)


def _list_of(value: Any, kind: type | tuple[type, ...], path: Path, entry: str, allowed=None) -> list:
    _want(isinstance(value, list) and len(value) > 0, path, entry,
          f"must be a non-empty list, got {value!r}")
    for v in value:
        _want(isinstance(v, kind) and not isinstance(v, bool), path, entry,
              f"entry {v!r} has type {type(v).__name__}, expected {getattr(kind, '__name__', kind)}")
        if allowed is not None:
            _want(v in allowed, path, entry, f"unknown value {v!r}; known: {', '.join(map(str, allowed))}")
    return value


# Per-combination names a constraint may use beside the parameters.
_DTYPE_NAMES = ("elem_bytes",)


def _compile_constraint(expr: str, names: set[str], path: Path, entry: str) -> tuple[Any, set[str]]:
    """The constraint's code object and the names it reads."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ConfigError(path, entry, f"constraint {expr!r} is not an expression: {exc.msg}") from exc
    used = set()
    for node in ast.walk(tree):
        _want(isinstance(node, _EXPR_NODES), path, entry,
              f"constraint {expr!r} uses {type(node).__name__}; only arithmetic and comparisons are allowed")
        if isinstance(node, ast.Name):
            _want(node.id in names, path, entry,
                  f"constraint {expr!r} names {node.id!r}, which is not a parameter ({', '.join(sorted(names))})")
            used.add(node.id)
    return compile(tree, f"<{path}:{entry}>", "eval"), used


@dataclass(frozen=True)
class _DtypeConstraint:
    text: str
    code: Any

    def reason(self, cfg: dict, dtype: str) -> str | None:
        """Why ``cfg`` does not suit ``dtype`` (the constraint is false), or None."""
        env = {**cfg, "elem_bytes": DATA_TYPES[dtype].data.itemsize}
        if eval(self.code, {"__builtins__": {}}, env):  # noqa: S307 (AST-checked)
            return None
        return f"constraint {self.text!r} is false for {dtype} (elem_bytes={env['elem_bytes']})"


def _expand_algorithm(path: Path, op: str, idx: int,
                      spec: dict) -> tuple[list[dict], list[Culled], list[_DtypeConstraint]]:
    """One entry of the file's ``families`` list (an algorithm with its parameter lists) -> the
    configs kept, those culled, and the constraints that depend on the data type (applied per
    combination by :func:`expand_file`)."""
    entry = f"families[{idx}]"
    _want(isinstance(spec, dict), path, entry, "must be a mapping")
    unknown = set(spec) - _ALGORITHM_ENTRY_KEYS
    _want(not unknown, path, entry, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_ALGORITHM_ENTRY_KEYS)}")
    alg_name = spec.get("algorithm")
    known = sorted(a for (o, a) in ALGORITHMS if o == op)
    _want(isinstance(alg_name, str) and (op, alg_name) in ALGORITHMS, path, entry,
          f"algorithm {alg_name!r} is not a kernel family of {op}; known: {', '.join(known)}")
    alg = ALGORITHMS[(op, alg_name)]
    entry = f"families[{idx}] ({alg_name})"
    params = spec.get("params", {})
    _want(isinstance(params, dict), path, entry, "params must be a mapping of parameter -> list of values")
    unknown = set(params) - set(alg.param_names)
    _want(not unknown, path, entry,
          f"unknown parameter(s) {sorted(unknown)}; {alg_name} takes {', '.join(alg.param_names)}")
    explicit = spec.get("configs", [])
    _want(isinstance(explicit, list), path, entry, "configs must be a list of mappings")
    _want(bool(params) or bool(explicit), path, entry, "needs params (lists to expand) or configs")
    if params:
        missing = [p for p in alg.param_names if p not in params]
        _want(not missing, path, entry, f"missing parameter(s) {missing}")
    for p, vals in params.items():
        _list_of(vals, (int, str), path, f"{entry}.params.{p}")
        kinds = {type(v).__name__ for v in vals}
        _want(len(kinds) == 1, path, f"{entry}.params.{p}",
              f"mixes value types ({', '.join(sorted(kinds))}) in {vals!r}: entry {vals[-1]!r} has type "
              f"{type(vals[-1]).__name__}")
    constraints = spec.get("constraints", [])
    _want(isinstance(constraints, list) and all(isinstance(c, str) for c in constraints), path, entry,
          "constraints must be a list of expression strings")
    names = set(alg.param_names) | set(_DTYPE_NAMES)
    compiled, per_dtype = [], []
    for c in constraints:
        code, used = _compile_constraint(c, names, path, f"{entry}.constraints")
        if used & set(_DTYPE_NAMES):
            per_dtype.append(_DtypeConstraint(c, code))
        else:
            compiled.append((c, code))

    candidates: list[tuple[dict, bool]] = []  # (config, came from the explicit list)
    if params:
        keys = list(alg.param_names)
        for combo in itertools.product(*(params[k] for k in keys)):
            candidates.append((dict(zip(keys, combo)), False))
    for j, cfg in enumerate(explicit):
        _want(isinstance(cfg, dict) and set(cfg) == set(alg.param_names), path, f"{entry}.configs[{j}]",
              f"must set exactly {', '.join(alg.param_names)}; got {cfg!r}")
        candidates.append((dict(cfg), True))

    kept: list[dict] = []
    culled: list[Culled] = []
    for cfg, is_explicit in candidates:
        ordered = {k: cfg[k] for k in alg.param_names}
        try:
            reason = alg.config.from_values(ordered).check()  # the one place YAML values become a config
        except (TypeError, ValueError, KeyError) as exc:
            raise ConfigError(path, f"{entry}", f"config {ordered} has a value of the wrong type: {exc}") from exc
        if reason is None:
            for text, code in compiled:
                if not eval(code, {"__builtins__": {}}, dict(ordered)):  # noqa: S307 (AST-checked)
                    reason = f"constraint {text!r} is false"
                    break
        if reason is None:
            kept.append(ordered)
            continue
        if is_explicit:
            raise ConfigError(path, f"{entry}.configs", f"config {ordered} is impossible: {reason}")
        culled.append(Culled(str(path), alg_name, tuple(ordered.items()), reason))
        log.debug("culled %s %s: %s", alg_name, ordered, reason)

    _want(bool(kept), path, entry, "expansion is empty: every config was culled")
    # a value whose every combination was culled is an impossible tile, not a silent drop
    for p, vals in params.items():
        for v in vals:
            if not any(c[p] == v for c in kept):
                why = next((c.reason for c in culled if dict(c.config)[p] == v), "no config kept")
                raise ConfigError(path, f"{entry}.params.{p}",
                                  f"value {v!r} survives in no config (impossible tile): {why}")
    return kept, culled, per_dtype


def load_kernel_modules() -> None:
    """Import every kernel module: each registers its algorithms in ``ALGORITHMS`` when imported (kept
    explicit, no plugin magic; here, not in algorithms.py, so the table's layer never imports kernels)."""
    from .kernels import import_kernel_modules

    import_kernel_modules()
    from .kernels import relayout  # noqa: F401  (last: it delegates to the kernels above)


def expand_file(path: Path | str) -> Expansion:
    """Validate and expand one config file."""
    load_kernel_modules()
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(path, "file", f"not valid YAML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(path, "file", f"cannot be read: {exc}") from exc
    _want(isinstance(doc, dict), path, "file", "top level must be a mapping with op, support, families")
    unknown = set(doc) - _TOP_KEYS
    _want(not unknown, path, "file", f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    op = doc.get("op")
    _want(op in OPS, path, "op", f"must be one of {', '.join(OPS)}, got {op!r}")
    for key in ("support", "families"):
        _want(isinstance(doc.get(key), list) and doc[key], path, key, "must be a non-empty list")

    configs_of: dict[str, list[dict]] = {}  # algorithm -> its configs kept
    dtype_constraints: dict[str, list[_DtypeConstraint]] = {}
    exp = Expansion()
    for i, spec in enumerate(doc["families"]):
        kept, culled, per_dtype = _expand_algorithm(path, op, i, spec)
        name = spec["algorithm"]
        _want(name not in configs_of, path, f"families[{i}]", f"algorithm {name!r} is declared twice")
        configs_of[name] = kept
        dtype_constraints[name] = per_dtype
        exp.culled.extend(culled)

    configs_for: dict[tuple[str, str], list[dict]] = {}  # (algorithm, dtype) -> the configs that suit it

    def suited(alg: str, dt: str) -> list[dict]:
        """``alg``'s configs minus those its elem_bytes constraints cull for ``dt`` (logged once)."""
        if (alg, dt) not in configs_for:
            keep = []
            for cfg in configs_of[alg]:
                why = next((w for con in dtype_constraints[alg] if (w := con.reason(cfg, dt)) is not None), None)
                if why is None:
                    keep.append(cfg)
                else:
                    exp.culled.append(Culled(str(path), alg, tuple(cfg.items()), why, dt))
            configs_for[(alg, dt)] = keep
        return configs_for[(alg, dt)]

    seen: set[str] = set()
    for i, sup in enumerate(doc["support"]):
        entry = f"support[{i}]"
        _want(isinstance(sup, dict), path, entry, "must be a mapping")
        unknown = set(sup) - _SUPPORT_KEYS
        _want(not unknown, path, entry, f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_SUPPORT_KEYS)}")
        for key in ("layouts", "ndims", "dtypes", "fused_ops"):
            _want(key in sup, path, entry, f"missing key {key!r}")
        lays = _list_of(sup["layouts"], str, path, f"{entry}.layouts", list(LAYOUT_FAMILIES))
        ndims = _list_of(sup["ndims"], int, path, f"{entry}.ndims", [1, 2, 3])
        dts = _list_of(sup["dtypes"], str, path, f"{entry}.dtypes", list(DATA_TYPES))
        fops = _list_of(sup["fused_ops"], str, path, f"{entry}.fused_ops", list(FUSED_OPS))
        algs = _list_of(sup.get("algorithms", list(configs_of)), str, path, f"{entry}.algorithms", list(configs_of))
        for lay, nd, dt, fo, alg in itertools.product(lays, ndims, dts, fops, algs):
            exp.declared.add((op, lay, dt, nd, fo))
            for cfg in suited(alg, dt):
                inst = Instance(op, alg, lay, nd, dt, fo, tuple(cfg.items()), source=f"{path.name}:{entry}")
                if inst.name not in seen:
                    seen.add(inst.name)
                    exp.instances.append(inst)
    return exp


def expand_files(paths: list[Path]) -> Expansion:
    """Expand several files; an instance declared by two files is an error."""
    total = Expansion()
    owner: dict[str, str] = {}
    for path in paths:
        exp = expand_file(path)
        for inst in exp.instances:
            if inst.name in owner:
                raise ConfigError(path, inst.source, f"instance {inst.name} is also declared in {owner[inst.name]}")
            owner[inst.name] = str(path)
        total.instances.extend(exp.instances)
        total.culled.extend(exp.culled)
        total.declared |= exp.declared
    return total
