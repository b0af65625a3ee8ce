"""Tuning problems and problem sets (``configs/problem_sets/*.yaml``), their expansion and sharding.

A problem set file::

    name: resnet50
    description: every distinct conv layer of torchvision's resnet50, batch 128, 224x224
    dtypes: [bf16, fp16]                      # default dtypes of a sweep
    passes: [conv_bwd_data, conv_bwd_weight]  # default passes ("data"/"weight" work too)
    problems:
      - {name: conv1, count: 1, passes: [conv_bwd_weight], ndim: 2, G: 1, N: 128, K: 64, C: 3,
         filter: [7, 7], input: [224, 224], stride: [2, 2], dilation: [1, 1],
         left_pad: [3, 3], right_pad: [3, 3]}

An entry's ``passes`` narrows the sweep's passes for that layer (a network's first conv needs no
data gradient); ``count`` is how often the layer occurs (for weighting summaries).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..problem import ConvParams
from .schema import OPS

__all__ = [
    "Problem",
    "expand_problem_set",
    "gather_problems",
    "list_problem_sets",
    "load_problem_set",
    "normalize_pass",
    "parse_shard",
    "problem_sets_dir",
    "shard_split",
]

_PASS_ALIASES = {
    "data": "conv_bwd_data", "bwd_data": "conv_bwd_data", "conv_bwd_data": "conv_bwd_data",
    "weight": "conv_bwd_weight", "bwd_weight": "conv_bwd_weight", "conv_bwd_weight": "conv_bwd_weight",
}
_PARAM_FIELDS = ("ndim", "G", "N", "K", "C", "filter", "input", "stride", "dilation", "left_pad",
                 "right_pad")


def normalize_pass(p: str) -> str:
    try:
        return _PASS_ALIASES[str(p).strip().lower()]
    except KeyError:
        raise ValueError(f"unknown pass {p!r}: use data / weight (or conv_bwd_data / conv_bwd_weight)") \
            from None


@dataclass(frozen=True)
class Problem:
    """One tuning problem: op, conv params, layout triple name, DataType name, fused op."""

    op: str
    params: ConvParams
    layout: str
    dtype: str
    fused_op: str = "passthrough"
    name: str = field(default="", compare=False)
    count: int = field(default=1, compare=False)

    def __post_init__(self) -> None:
        if self.op not in OPS:
            object.__setattr__(self, "op", normalize_pass(self.op))
        if not isinstance(self.layout, str):
            object.__setattr__(self, "layout", self.layout.name)

    @property
    def key(self) -> str:
        from .database import problem_key

        return problem_key(self.op, self.params, self.layout, self.dtype, self.fused_op)

    @classmethod
    def from_key(cls, key: str, name: str = "") -> Problem:
        from .database import split_problem_key

        op, layout, dtype, fused, pkey = split_problem_key(key)
        return cls(op, ConvParams.from_key(pkey), layout, dtype, fused, name=name)

    @property
    def label(self) -> str:
        return self.name or self.params.key()

    def __str__(self) -> str:
        return self.key


def problem_sets_dir() -> Path:
    """``$INSTANCE_FACTORY_PROBLEM_SETS`` or the repo's ``configs/problem_sets``."""
    env = os.environ.get("INSTANCE_FACTORY_PROBLEM_SETS")
    if env:
        return Path(env).expanduser()
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg.parent / "configs" / "problem_sets", pkg / "data" / "problem_sets"):
        if cand.is_dir():
            return cand
    return pkg.parent / "configs" / "problem_sets"


def list_problem_sets() -> list[str]:
    d = problem_sets_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def _resolve_set_path(name_or_path: str | os.PathLike) -> Path:
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise FileNotFoundError(f"problem set file {p} does not exist")
        return p
    cand = problem_sets_dir() / f"{name_or_path}.yaml"
    if not cand.exists():
        known = ", ".join(list_problem_sets()) or "(none)"
        raise FileNotFoundError(f"no problem set named {name_or_path!r} in {problem_sets_dir()}; known: {known}")
    return cand


def load_problem_set(name_or_path: str | os.PathLike) -> dict:
    """Parse and check a problem-set YAML; entries get a ``params`` ConvParams."""
    import yaml

    path = _resolve_set_path(name_or_path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"problem set {path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("problems"), list):
        raise ValueError(f"problem set {path} needs a mapping with a 'problems' list")
    out = dict(doc)
    out.setdefault("name", path.stem)
    out["path"] = str(path)
    entries = []
    for i, e in enumerate(doc["problems"]):
        if not isinstance(e, dict):
            raise ValueError(f"problem set {path}: entry {i} is not a mapping")
        missing = [f for f in _PARAM_FIELDS if f not in e]
        if missing:
            raise ValueError(f"problem set {path}: entry {i} ({e.get('name', '?')}) lacks {missing}")
        try:
            params = ConvParams(*(e[f] for f in _PARAM_FIELDS))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"problem set {path}: entry {i} ({e.get('name', '?')}): {exc}") from exc
        ent = dict(e)
        ent["params"] = params
        ent.setdefault("name", f"{out['name']}_{i}")
        if "passes" in ent:
            ent["passes"] = [normalize_pass(p) for p in ent["passes"]]
        entries.append(ent)
    out["problems"] = entries
    return out


def _layout_name(layout: str, ndim: int) -> str | None:
    """A layout family name ("nhwgc") or a CK triple -> the triple for ``ndim`` (None if it does not fit)."""
    from ..layouts import LAYOUT_FAMILIES, layout_for, parse_layout

    if layout.lower() in LAYOUT_FAMILIES:
        return layout_for(layout.lower(), ndim).name
    lt = parse_layout(layout)
    return lt.name if lt.ndim == ndim else None


def expand_problem_set(problem_set: Any, *, dtypes: Sequence[str] | None = None,
                       passes: Sequence[str] | None = None, layout: str | Sequence[str] = "nhwgc",
                       fused_op: str = "passthrough") -> list[Problem]:
    """Passes x dtypes x layouts x entries -> de-duplicated Problems, in that order (per pass and
    dtype, the set's own layer order: what summary tables show; shards sort by key anyway).

    ``problem_set``: a set name, a YAML path, a loaded set (dict), or an iterable of Problems
    (returned in their order, de-duplicated). ``layout`` is a layout family ("nhwgc", "gnhwc",
    "ngchw", "ngchw_kcyx") or a CK triple (entries of another ndim are skipped), or a list of them.
    """
    if isinstance(problem_set, (str, os.PathLike)):
        problem_set = load_problem_set(problem_set)
    if isinstance(problem_set, dict):
        set_dtypes = list(dtypes or problem_set.get("dtypes") or ["bf16", "fp16"])
        set_passes = [normalize_pass(p) for p in (passes or problem_set.get("passes") or OPS)]
        layouts = [layout] if isinstance(layout, str) else list(layout)
        out: dict[str, Problem] = {}
        for op in set_passes:
            for dt in set_dtypes:
                for lay in layouts:
                    for e in problem_set["problems"]:
                        params: ConvParams = e["params"]
                        if op not in e.get("passes", set_passes):
                            continue
                        lname = _layout_name(lay, params.ndim)
                        if lname is None:
                            continue
                        pr = Problem(op, params, lname, dt, e.get("fused_op", fused_op),
                                     name=str(e.get("name", "")), count=int(e.get("count", 1)))
                        out.setdefault(pr.key, pr)
        return list(out.values())
    probs: dict[str, Problem] = {}
    for pr in problem_set:
        if not isinstance(pr, Problem):
            raise TypeError(f"expected Problem objects, got {type(pr).__name__}")
        probs.setdefault(pr.key, pr)
    return list(probs.values())


def gather_problems(sets: Sequence[str | os.PathLike], keys: Sequence[str] = (), *,
                    dtypes: Sequence[str] | None = None, passes: Sequence[str] | None = None,
                    layouts: Sequence[str] | None = None, fused_op: str = "passthrough",
                    groups: dict[str, list[Problem]] | None = None) -> list[Problem]:
    """The problems of ``sets`` (names or YAML paths), then those of ``keys``: a full problem key
    (op|layout|dtype|fused_op|params) or a bare ConvParams key, expanded over ``dtypes`` (default
    bf16, fp16), ``passes`` and ``layouts`` (default nhwgc). ``groups`` gets them per set name, and
    those of the keys as "problems"."""
    lays = list(layouts) if layouts else ["nhwgc"]
    probs: list[Problem] = []
    for s in sets:
        got = expand_problem_set(s, dtypes=dtypes, passes=passes, layout=lays, fused_op=fused_op)
        probs += got
        if groups is not None:
            groups.setdefault(str(s), []).extend(got)
    n_sets = len(probs)
    for key in keys:
        if "|" in key:
            probs.append(Problem.from_key(key))
        else:
            entry = {"problems": [{"name": "", "params": ConvParams.from_key(key)}]}
            probs += expand_problem_set(entry, dtypes=dtypes or ["bf16", "fp16"], passes=passes, layout=lays,
                                        fused_op=fused_op)
    if groups is not None and len(probs) > n_sets:
        groups["problems"] = probs[n_sets:]
    return probs


def parse_shard(text: str | tuple[int, int] | None) -> tuple[int, int]:
    """``"i/n"`` (0 <= i < n) -> (i, n)."""
    if text is None:
        return (0, 1)
    if isinstance(text, tuple):
        i, n = text
    else:
        try:
            a, b = str(text).split("/")
            i, n = int(a), int(b)
        except ValueError:
            raise ValueError(f"--shard takes i/n with 0 <= i < n, got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {i}/{n}: need 0 <= i < n")
    return (i, n)


def shard_split(problems: Iterable[Problem], shard: tuple[int, int] | str | None) -> list[Problem]:
    """The problems of shard i of n: sort by key, then every n-th starting at i.

    Deterministic (depends only on the set of keys), disjoint, and together the shards cover all.
    """
    i, n = parse_shard(shard)
    ordered = sorted({p.key: p for p in problems}.items())
    return [p for j, (_, p) in enumerate(ordered) if j % n == i]
