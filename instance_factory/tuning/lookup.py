"""Run-time lookup: which instance runs a problem on this device.

``lookup(op, params, layout=..., dtype=...)`` is what ``conv_bwd_data`` / ``conv_bwd_weight`` call
with ``instance=None``. Its answer is cached in-process on a plain tuple of the arguments, so a
repeated call is one dict hit (about 1 microsecond; see tests/test_tuning_lookup.py).

Where the answer comes from, in order:

1. **Exact hit**: the problem key (op, layout, dtype, fused op, ConvParams) has valid rows in the
   user tier (``$INSTANCE_FACTORY_USER_DB``) or else in the shipped system tier (``tuning_db/``):
   the fastest ``ok`` row measured on this device (name, compute capability, SM count) with this
   software (Triton, torch, instance_factory versions) whose kernel hash still matches the registry.
   If that instance now declines the problem, the next fastest valid one is used.
2. **Miss**: the policy from ``policy=`` or ``$INSTANCE_FACTORY_MISS_POLICY`` (default
   ``heuristic``); a warning is issued once per problem key:

   * ``"heuristic"``: the cost model ranks every instance that can run the problem
     (:mod:`instance_factory.tuning.cost_model`): an analytic roofline corrected by what the nearest
     tuned problems measured for the same kernel, in a normalized problem space (the pass's GEMM M,
     N, K, taps, stride, channels per group), per conv class (dense / grouped / depthwise), with
     fp16 and bf16 rows serving each other (same kernels). With nothing tuned for the pass the
     model alone ranks (source ``"model"``). ``instance-factory lookup --explain`` prints the
     ranking and the neighbours behind it.
   * ``"tune"``: tune this problem now (every runnable instance, verified, then timed), store the
     rows in the user tier and return the winner.
   * ``"error"``: raise :class:`TuningMissError` naming the problem key.
   * ``"background"``: serve what ``"heuristic"`` serves, without waiting, and tune the problem in a
     child process into the user tier (:mod:`instance_factory.tuning.background`); once its rows land,
     the next call serves the tuned winner.

   The previous rule (nearest tuned problem's winner) survives only as ``miss_eval``'s baseline.

Call :func:`clear_cache` after changing the environment variables; writes through
:class:`~instance_factory.tuning.database.TuningDB` in this process clear it at once, and a change of
either tier's file by another process (its size, mtime or inode) is seen within ``RECHECK_S``
seconds. A tier that cannot be read is skipped with a ``DamagedTierWarning``.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tier_index import INDEXES, clear_indexes, get_index

__all__ = [
    "MISS_POLICIES",
    "Choice",
    "TuningMissError",
    "TuningMissWarning",
    "clear_cache",
    "explain",
    "lookup",
    "set_tune_on_miss",
]

MISS_POLICIES = ("heuristic", "tune", "error", "background")
POLICY_ENV = "INSTANCE_FACTORY_MISS_POLICY"

#: the "tune" policy's worker, ``fn(op, params, layout_name, dtype_name, fused_op, device)``: tunes one
#: problem into the user tier. The tuning layer provides it and the composition root registers it
#: (``set_tune_on_miss``), so that run-time lookup never imports the tuner.
_TUNE_ON_MISS: list[Callable[..., None]] = []


def set_tune_on_miss(fn: Callable[..., None] | None) -> None:
    """Register the function the ``"tune"`` miss policy calls (None: the policy raises TuningMissError)."""
    _TUNE_ON_MISS[:] = [fn] if fn is not None else []


class TuningMissError(LookupError):
    """No tuned result for the problem and the miss policy is ``"error"``."""


class TuningMissWarning(UserWarning):
    """A lookup missed the tuning database and fell back on its miss policy (warned once per key)."""


@dataclass
class Choice:
    """What lookup chose and why (``instance-factory lookup --explain`` prints it)."""

    instance: Any  # Instance
    source: str  # "exact (user tier)", "exact (system tier)", "heuristic", "model", "tuned now"
    problem_key: str
    row: dict | None = None  # the DB row behind an exact hit
    neighbor: str | None = None  # heuristic: the nearest tuned problem behind the ranking
    distance: float | None = None
    db_files: tuple[str, ...] = ()
    note: str = ""
    ranking: list = field(default_factory=list)  # heuristic / model: cost_model.Prediction, best first
    neighbors: list = field(default_factory=list)  # heuristic: (distance, problem key), nearest first


# ----------------------------------------------------------------------------------------------
# in-process state
# ----------------------------------------------------------------------------------------------
_CACHE: dict[tuple, Any] = {}
_WARNED: set[str] = set()
_LOCK = threading.RLock()


#: seconds between checks whether another process changed a tier's file (a stat per tier)
RECHECK_S = 1.0
_NEXT_CHECK = [0.0]


def recheck_files() -> None:
    """Drop the cache when a loaded tier's file changed on disk (throttled to one check per RECHECK_S)."""
    now = time.monotonic()
    if now < _NEXT_CHECK[0] or not INDEXES:
        return
    _NEXT_CHECK[0] = now + RECHECK_S
    from .database import file_signature

    if any(file_signature(p) != sig for idx in list(INDEXES.values()) for p, sig in idx.signatures):
        clear_cache()


#: run by clear_cache: caches elsewhere that hold lookup answers (the public ops' hot-path cache)
CLEAR_HOOKS: list[Any] = []


def clear_cache() -> None:
    """Forget cached answers and the loaded database index (the next lookup re-reads the files)."""
    with _LOCK:
        _CACHE.clear()
        clear_indexes()
        for hook in list(CLEAR_HOOKS):
            hook()


def _register_listener() -> None:
    from . import database

    if _on_db_write not in database._LISTENERS:
        database._LISTENERS.append(_on_db_write)


def _on_db_write(path: Any) -> None:
    """A database write in this process: forget the cached answers when it changed a tier file that
    an index was read from. Writes elsewhere (a tuning sweep's own --db file) keep the index: each
    re-read of the tiers costs seconds, and ``relayout`` looks its twin up on every bind."""
    written = Path(path).resolve()
    if any(Path(tier).resolve() == written for idx in list(INDEXES.values()) for tier, _ in idx.signatures):
        clear_cache()


# ----------------------------------------------------------------------------------------------
# the hot path
# ----------------------------------------------------------------------------------------------
def lookup(op: str, params: Any, *, layout: Any, dtype: Any, fused_op: str = "passthrough",
           compute_dtype: str | None = None, wei_dtype: Any = None, device: Any = None,
           policy: str | None = None) -> Any:
    """The instance that runs this problem on ``device`` (see the module docstring for the rule).

    ``op``: ``"conv_bwd_data"`` or ``"conv_bwd_weight"``; ``params``: ConvParams; ``layout``: CK triple
    string or LayoutTriple; ``dtype``: the tensors' torch dtype (or a DataType name such as
    ``"bf16_fp32w"``); ``compute_dtype``/``wei_dtype``: as in the ops; ``device``: torch device,
    ``"cuda:1"``, an index, or None for the current one; ``policy``: miss policy override.
    """
    key = (op, params, layout, dtype, fused_op, compute_dtype, wei_dtype, device, policy)
    recheck_files()
    try:
        return _CACHE[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable argument (e.g. a list layout): resolve without caching
        return explain(op, params, layout=layout, dtype=dtype, fused_op=fused_op,
                       compute_dtype=compute_dtype, wei_dtype=wei_dtype, device=device,
                       policy=policy).instance
    choice = explain(op, params, layout=layout, dtype=dtype, fused_op=fused_op, compute_dtype=compute_dtype,
                     wei_dtype=wei_dtype, device=device, policy=policy)
    _CACHE[key] = choice.instance
    return choice.instance


# ----------------------------------------------------------------------------------------------
# the slow path
# ----------------------------------------------------------------------------------------------
def _dtype_name(dtype: Any, compute_dtype: str | None, wei_dtype: Any) -> str:
    from ..dtypes import DATA_TYPES, DataType, resolve_dtype

    if isinstance(dtype, DataType):
        return dtype.name
    if isinstance(dtype, str):
        if dtype not in DATA_TYPES:
            raise ValueError(f"unknown data type {dtype!r}; known: {', '.join(DATA_TYPES)}")
        return dtype
    return resolve_dtype(dtype, compute_dtype=compute_dtype, wei_dtype=wei_dtype).name


def _policy(policy: str | None) -> str:
    pol = (policy or os.environ.get(POLICY_ENV) or "heuristic").strip().lower()
    if pol not in MISS_POLICIES:
        src = "policy=" if policy else f"${POLICY_ENV}"
        raise ValueError(f"unknown miss policy {pol!r} (from {src}); use one of {', '.join(MISS_POLICIES)}")
    return pol


def _warn_once(key: str, message: str) -> None:
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(message, TuningMissWarning, stacklevel=4)


def explain(op: str, params: Any, *, layout: Any, dtype: Any, fused_op: str = "passthrough",
            compute_dtype: str | None = None, wei_dtype: Any = None, device: Any = None,
            policy: str | None = None, untuned: bool = False) -> Choice:
    """Like :func:`lookup`, uncached, returning the :class:`Choice` with its source and evidence.

    ``untuned=True``: what the ``heuristic`` policy would serve if the problem had no rows (its own
    rows are ignored as evidence too): ``instance-factory bench --untuned`` compares that default
    with the tuned best."""
    from ..layouts import parse_layout
    from ..registry import get_registry
    from .database import current_device, problem_key

    _register_listener()
    recheck_files()
    lt = parse_layout(layout, params.ndim)
    dname = _dtype_name(dtype, compute_dtype, wei_dtype)
    fused = fused_op if isinstance(fused_op, str) else "custom"
    dev = current_device(device)
    key = problem_key(op, params, lt, dname, fused)
    reg = get_registry()
    index = get_index(dev)

    for tier, name, row in () if untuned else index.ranked(key):
        inst = _get_instance(reg, name)
        if inst is not None and inst.decline(params, lt, dname, fused) is None:
            return Choice(inst, f"exact ({tier} tier)", key, row=row, db_files=index.files)

    pol = "heuristic" if untuned else _policy(policy)
    if pol == "error":
        raise TuningMissError(
            f"no tuned result for problem {key} on {dev.name} (miss policy 'error'); tune it with "
            f"`instance-factory tune --problem '{key}'` or choose policy 'heuristic' or 'tune' "
            f"(${POLICY_ENV})")
    if pol == "tune":
        _warn_once(key, f"instance_factory: problem {key} is not tuned on {dev.name}; tuning it now "
                        f"(miss policy 'tune')")
        if not _TUNE_ON_MISS:
            raise TuningMissError(f"miss policy 'tune' for problem {key}: no tuner is registered "
                                  f"(instance_factory.tuning.lookup.set_tune_on_miss)")
        _TUNE_ON_MISS[0](op, params, lt.name, dname, fused, device)
        index = get_index(dev)
        for _tier, name, row in index.ranked(key):
            inst = _get_instance(reg, name)
            if inst is not None and inst.decline(params, lt, dname, fused) is None:
                return Choice(inst, "tuned now", key, row=row, db_files=index.files)
        raise TuningMissError(f"tuning problem {key} on {dev.name} found no instance that ran correctly; "
                              f"see the failed rows in {index.files[-1] if index.files else 'the user DB'}")

    # heuristic: the cost model ranks what can run the problem
    from .cost_model import rank

    runnable, declined = reg.candidates(op, params, lt, dname, fused)
    if not runnable:
        reasons = "; ".join(sorted({r for _, r in declined}))[:500] or "no instance is declared for it"
        raise ValueError(f"no instance can run {key}: {reasons}")
    # algorithms that have not yet run on a GPU serve only where no proven algorithm can
    proven = [i for i in runnable if i.algorithm not in UNPROVEN_ALGORITHMS] or runnable
    ranking = rank(op, params, lt.name, dname, fused, [(i.name, i.algorithm, i.cfg) for i in proven],
                   index.evidence(dev), exclude=key if untuned else None,
                   twin_candidates=_relayout_twin_candidates(reg, op, params, dname, fused, proven))
    inst = reg.get(ranking.best.name)
    nearest = ranking.neighbors[0] if ranking.neighbors else (None, None)
    source = "heuristic" if ranking.neighbors else "model"
    basis = (f"the nearest tuned problem {nearest[1]} at distance {nearest[0]:.2f}" if ranking.neighbors
             else "no tuned problem of this pass: the analytic model alone")
    if not untuned:
        later = "tune it for the best instance"
        if pol == "background":
            from . import background
            from .database import user_db_path

            if background.submit(key, user_db_path(dev.kind), device):
                later = "tuning it in the background (miss policy 'background')"
        _warn_once(key, f"instance_factory: problem {key} is not tuned on {dev.name}; using {inst.name}, "
                        f"ranked fastest of {len(proven)} by the cost model ({basis}); {later}")
    return Choice(inst, source, key, neighbor=nearest[1], distance=nearest[0], db_files=index.files,
                  note=f"predicted {ranking.best.predicted_ms:.4g} ms ({ranking.best.basis})",
                  ranking=ranking.predictions, neighbors=ranking.neighbors)


def predicted_order(op: str, params: Any, layout: str, dtype_name: str, fused: str, instances: Sequence[Any],
                    device: Any = None) -> list[Any]:
    """``instances`` fastest-predicted first: the heuristic policy's cost model with all the evidence this
    device's lookup sees (its own rows, and other GPU kinds' shipped rows, this problem's included: on a GPU
    nobody tuned yet, the problem's best instance on another one comes first). The tuner's candidate cut
    (``--max-instances``) takes each kernel family's instances in this order."""
    from .cost_model import rank
    from .database import current_device

    if not instances:
        return []
    dev = current_device(device)
    ranking = rank(op, params, layout, dtype_name, fused, [(i.name, i.algorithm, i.cfg) for i in instances],
                   get_index(dev).evidence(dev))
    order = {p.name: k for k, p in enumerate(ranking.predictions)}
    return sorted(instances, key=lambda i: order.get(i.name, len(order)))


#: algorithms (kernel families) not yet verified on a GPU. The tuner still verifies and times them; an untuned
#: lookup never picks them where another algorithm can run. Empty: ``blockdiag`` passed CK's problem
#: lists and its tests on an H100 (session 5).
UNPROVEN_ALGORITHMS: frozenset[str] = frozenset()


def _relayout_twin_candidates(reg: Any, op: str, params: Any, dtype_name: str, fused: str,
                              instances: Sequence[Any]) -> list[tuple[str, str, Any]] | None:
    """What the channels-last twin's own lookup would rank, for a ``relayout`` candidate among
    ``instances`` (None when none of them is relayout)."""
    from ..layouts import channels_last_twin

    if not any(i.algorithm == "relayout" for i in instances):
        return None
    runnable, _ = reg.candidates(op, params, channels_last_twin(params.ndim), dtype_name, fused)
    proven = [i for i in runnable if i.algorithm not in UNPROVEN_ALGORITHMS] or runnable
    return [(i.name, i.algorithm, i.cfg) for i in proven]


def _get_instance(reg: Any, name: str) -> Any:
    try:
        return reg.get(name)
    except KeyError:
        return None


def _register_relayout_resolver() -> None:
    """``relayout`` (kernels layer, both passes) serves channels-first problems with the instance this
    module chooses for their channels-last twin. Through ``kernels.twin``, which imports nothing:
    importing lookup (the package does) must not load triton before the CLI picks the backend."""
    from ..kernels import twin

    twin.set_twin_resolver(lookup)


_register_relayout_resolver()
