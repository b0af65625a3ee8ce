"""Rank the instances that can run an untuned problem: a roofline model corrected by tuned neighbours.

The miss policy ``heuristic`` (``lookup.explain``) asks :func:`rank` for the instance to serve. For
each runnable candidate it predicts the time on the problem as

    t(c, P) = blend(work(c, P) * exp(mean_Q w_Q * log[work_measured(c, Q) / work(c, Q)]), floor(c))

over the nearest tuned problems Q that measured the same kernel (same family and tile/pipeline
parameters, in any dtype or layout: fp16 and bf16 instances are one kernel). ``work`` is an analytic
roofline (:func:`.roofline.model_parts`): the longest of tile-padded GEMM work over the dtype's tensor-core
rate and the SM waves filled, the tiles' operand reads over L2 bandwidth, and bytes over memory
bandwidth; ``blend`` joins it with the family's floor (its fastest call in the data, what a launch
costs; ``FLOOR_BLEND_POWER``), and ``work_measured`` is the part of a measured call above that floor
(:func:`.roofline.work_correction`). The neighbour term carries what the model misses (a kernel's real
efficiency) and scales the work only: a kernel running at a third of the roofline on large layers
does not take three launches' time on a tiny one. Kernels whose work is their FLOPs at the CUDA cores' rate
(:func:`.roofline.work_modelled` false) have the whole blend corrected. A new family needs no rule, only rows.

Neighbours: problems of the same pass, by a weighted distance in a normalized problem space (log2
of the pass's GEMM M, N, K, taps, stride, channels per group and groups, see :mod:`.problem_distance`),
plus a fixed penalty for a different conv class (dense / grouped / depthwise), data type (none
between fp16 and bf16), layout family or fused op. A candidate no neighbour measured borrows its
family's mean correction (on the nearest problems that measured the family, else everyone's) with an
uncertainty penalty and the distance penalty of those rows, so measured kernels win ties.

``relayout`` (copies to the channels-last twin problem, then the twin's instance) is priced as what it
runs: the twin's time (its tuned best, else the twin's own ranking) plus its copy bytes at the copy
bandwidth the evidence shows (``rank(..., twin_candidates=)``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..layouts import channels_last_twin
from .model_constants import (
    COPY_BW,
    DEFAULT_SMS,
    DEVICE_PENALTY,
    DISTANCE_PENALTY,
    EXTRA_LAUNCH,
    FAILED_FACTOR,
    HOST_COST_MS,
    LAUNCHES,
    MAX_EVIDENCE_DISTANCE,
    NEAREST_PROBLEMS,
    NEIGHBORS_PER_KERNEL,
    TAPS_IN_COLUMNS,
    UNSEEN_ALGORITHM,
    UNSEEN_KERNEL,
    WEIGHT_POWER,
)
from .problem_distance import (
    conv_class,
    feature_distance,
    features,
    neighbor_distance,
    penalties,
    problem_layout_family,
)
from .roofline import (
    block_mode,
    gemm_shape,
    model_ms,
    model_parts,
    relayout_copy_bytes,
    tf32_split,
    with_floor,
    work_correction,
    work_modelled,
)
from .row_times import disturbed_twins, kernel_ms, repair_disturbed
from .schema import problem_key

__all__ = ["TAPS_IN_COLUMNS", "Evidence", "Prediction", "Ranking", "conv_class", "disturbed_twins", "features",
           "gemm_shape", "kernel_ms", "kernel_variant", "model_ms", "neighbor_distance", "rank", "repair_disturbed",
           "signature"]

def kernel_variant(op: str, dtype: str, algorithm: str, params: Any = None,
                   cfg: Mapping[str, Any] | str | None = None) -> str:
    """The algorithm as the corrections key it: a family whose fp32 dots run as three bf16 products
    (``tf32_split``) is another kernel in fp32 than in 16-bit data; with ``params`` and ``cfg``, dwplane
    wgrad's row blocks are another kernel than its column blocks (``roofline.block_mode``)."""
    variant = algorithm + "+split" if tf32_split(op, dtype, algorithm) else algorithm
    if params is not None and cfg is not None and algorithm == "dwplane" and op == "conv_bwd_weight":
        mode = block_mode(op, params, algorithm, json.loads(cfg) if isinstance(cfg, str) else cfg)
        variant += "+" + mode if mode else ""
    return variant


def signature(algorithm: str, cfg: Mapping[str, Any] | str) -> str:
    """A kernel's identity across dtypes and layouts: its algorithm and tile/pipeline parameters."""
    if isinstance(cfg, str):  # the database's instance_params JSON
        return _signature_of_json(algorithm, cfg)
    return algorithm + ":" + ",".join(f"{k}={cfg[k]}" for k in sorted(cfg))


@functools.lru_cache(maxsize=4096)
def _signature_of_json(algorithm: str, params_json: str) -> str:
    return signature(algorithm, json.loads(params_json))


# ----------------------------------------------------------------------------------------------
# evidence: tuned problems and their measured kernels
# ----------------------------------------------------------------------------------------------
@dataclass
class _Tuned:
    key: str
    op: str
    layout: str
    dtype: str
    fused: str
    params: Any
    feats: list[tuple[float, float]]
    best_ms: float
    corrections: dict[str, float] = field(default_factory=dict)  # signature -> log(measured / model)
    algorithms: dict[str, str] = field(default_factory=dict)  # signature -> algorithm
    winner: str = ""  # the fastest ok instance's name
    foreign: bool = False  # measured on another device kind
    relayout_residual: float | None = None  # log(relayout's ms / (its twin's best + copies)), :func:`_fit_copy_bw`

    @functools.cached_property
    def by_family(self) -> dict[str, list[float]]:
        """The corrections per signature head (layout family | kernel variant), once the evidence is built:
        :func:`_family_farther` asks every problem it walks past."""
        out: dict[str, list[float]] = {}
        for sig, c in self.corrections.items():
            out.setdefault(sig.split(":", 1)[0], []).append(c)
        return out


@dataclass
class Evidence:
    """Tuned problems of one device (the rows lookup trusts), indexed for :func:`rank`."""

    problems: list[_Tuned]
    host_floor_ms: dict[tuple[str, str], float]  # (op, algorithm) -> the fastest measured call
    sms: int = DEFAULT_SMS
    copy_bw: float = COPY_BW  # bytes/s of relayout's copies (:func:`_fit_copy_bw`)

    @functools.cached_property
    def tuned(self) -> dict[str, _Tuned]:
        """This device's tuned problems by key (other device kinds' rows left out)."""
        return {t.key: t for t in self.problems if not t.foreign}

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]], sms: int = DEFAULT_SMS,
                  foreign_rows: Iterable[Mapping[str, Any]] = ()) -> Evidence:
        """From database rows (any status: ``pruned`` rows count with their one timed run, see
        :func:`repair_disturbed` for a disturbed one,
        ``failed``/``oom``/``compile_error`` as :data:`FAILED_FACTOR` times the problem's best).
        ``foreign_rows``: rows of other device kinds, at :data:`DEVICE_PENALTY` extra distance."""
        floors: dict[tuple[str, str], list[float]] = {}
        problems = _tuned_problems(repair_disturbed(rows), False, floors)
        foreign_floors: dict[tuple[str, str], list[float]] = {}
        problems += _tuned_problems(repair_disturbed(foreign_rows), True, foreign_floors)
        for k, v in foreign_floors.items():
            if not any(op == k[0] for op, _ in floors):
                floors[k] = v
        floor = {k: _quantile(v, 0.02) for k, v in floors.items()}
        one = [v for k, v in floor.items() if LAUNCHES.get(k) == 1]
        if one:  # a family's floor never above what its launches cost
            for k, n in LAUNCHES.items():
                if k in floor:
                    floor[k] = min(floor[k], min(one) * (1 + EXTRA_LAUNCH * (n - 1)))
        ev = cls(problems, floor, sms)
        ev.copy_bw = _fit_copy_bw(ev)  # from the measured times, before they become corrections
        for t in problems:  # log measured -> the correction: measured work over modelled work (roofline)
            for sig, log_ms in t.corrections.items():
                alg = t.algorithms[sig]
                work, floor = _roofline_parts(t.op, t.params, t.dtype, alg, sig, sms, ev.floor(t.op, alg))
                if work_modelled(t.op, alg, _cfg_of(sig)):
                    t.corrections[sig] = work_correction(log_ms, work, floor)
                else:  # priced by FLOPs alone: the whole call (their time above the floor does not follow them)
                    t.corrections[sig] = log_ms - math.log(max(work, floor))
        return ev

    def floor(self, op: str, algorithm: str) -> float:
        """The algorithm's host floor; one never measured gets the pass's lowest (one launch at least).
        Never below its per-call host cost (HOST_COST_MS): timings are GPU time only."""
        got = self.host_floor_ms.get((op, algorithm))
        if got is None:
            known = [v for (o, _), v in self.host_floor_ms.items() if o == op]
            got = min(known) if known else 0.0
        return max(got, HOST_COST_MS.get((op, algorithm), 0.0))


def _tuned_problems(rows: Iterable[Mapping[str, Any]], foreign: bool,
                    floors: dict[tuple[str, str], list[float]]) -> list[_Tuned]:
    """One entry per (device, problem) with an ok row, holding log(ms) per kernel signature; adds the
    ok times to ``floors`` per (op, algorithm)."""
    from ..problem import ConvParams
    from .database import split_problem_key

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r.get("device", "")), r["problem_key"]), []).append(r)
    out = []
    for (_, key), group in groups.items():
        op, layout, dtype, fused, pkey = split_problem_key(key)
        ok = [r for r in group if r["status"] == "ok" and kernel_ms(r) is not None]
        if not ok:
            continue
        params = ConvParams.from_key(pkey)
        best = min(ok, key=lambda r: (kernel_ms(r), r["instance"]))
        t = _Tuned(key, op, layout, dtype, fused, params, features(op, params), kernel_ms(best),
                   winner=best["instance"], foreign=foreign)
        fam = problem_layout_family(layout, params)
        for r in group:
            alg = r["algorithm"]
            sig = fam + "|" + signature(kernel_variant(op, dtype, alg, params, r["instance_params"]),
                                        r["instance_params"])
            timed = r["status"] in ("ok", "pruned") and kernel_ms(r) is not None
            ms = kernel_ms(r) if timed else FAILED_FACTOR * t.best_ms
            if timed and r["status"] == "ok":
                floors.setdefault((op, alg), []).append(ms)
            t.algorithms[sig] = alg
            t.corrections[sig] = max(t.corrections.get(sig, -math.inf), math.log(ms))
        out.append(t)
    return out


def _fit_copy_bw(ev: Evidence) -> float:
    """relayout's copy bandwidth on this device: the median over its tuned problems whose twin is tuned
    too of copy bytes / (relayout's time - the twin's best); COPY_BW where no such pair exists. Then
    each such problem's ``relayout_residual`` against that bandwidth. Reads ``corrections`` while they
    still hold log(ms)."""
    pairs = []
    for t in ev.tuned.values():
        rel = [c for sig, c in t.corrections.items() if t.algorithms[sig] == "relayout"]
        twin = rel and ev.tuned.get(problem_key(t.op, t.params, channels_last_twin(t.params.ndim), t.dtype, t.fused))
        if twin:
            pairs.append((t, math.exp(min(rel)), twin.best_ms, relayout_copy_bytes(t.params, t.layout, t.dtype)))
    rates = [nbytes / ((ms - twin_ms) * 1e-3) for _, ms, twin_ms, nbytes in pairs if ms > twin_ms]
    bw = _quantile(rates, 0.5) if rates else COPY_BW
    for t, ms, twin_ms, nbytes in pairs:
        t.relayout_residual = math.log(ms / (twin_ms + 1e3 * nbytes / bw))
    return bw


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


@functools.lru_cache(maxsize=1 << 18)  # each rebuild of the evidence (a tier file changed) asks again
def _roofline_parts(op: str, params: Any, dtype: str, algorithm: str, sig: str, sms: int,
                    floor_ms: float) -> tuple[float, float]:
    return model_parts(op, params, dtype, algorithm, _cfg_of(sig), sms, floor_ms, group_major=sig.startswith("gm|"),
                       channels_first=sig.startswith("cf|"))


@functools.lru_cache(maxsize=4096)
def _cfg_of(sig: str) -> dict[str, Any]:
    """The tile/pipeline parameters back from a :func:`signature` (ints where they were ints)."""
    out: dict[str, Any] = {}
    body = sig.split(":", 1)[1]
    for part in body.split(",") if body else []:
        k, v = part.split("=", 1)
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    return out


# ----------------------------------------------------------------------------------------------
# ranking
# ----------------------------------------------------------------------------------------------
@dataclass
class Prediction:
    name: str
    algorithm: str
    predicted_ms: float
    model_ms: float
    basis: str  # which evidence the correction came from


@dataclass
class Ranking:
    predictions: list[Prediction]  # fastest predicted first
    neighbors: list[tuple[float, str]]  # (distance, problem key) of the nearest tuned problems

    @property
    def best(self) -> Prediction:
        return self.predictions[0]


def rank(op: str, params: Any, layout: str, dtype: str, fused: str,
         candidates: Sequence[tuple[str, str, Mapping[str, Any]]], evidence: Evidence,
         exclude: str | Collection[str] | None = None,
         twin_candidates: Sequence[tuple[str, str, Mapping[str, Any]]] | None = None) -> Ranking:
    """Predicted time of each candidate ``(name, algorithm, cfg)`` on the problem, fastest first
    (ties: candidate order). ``exclude``: a problem key, or a set of them, whose evidence is ignored
    (leave-one-out). ``twin_candidates``: the candidates of the channels-last twin problem that a
    ``relayout`` candidate runs (the registry's at run time, the measured rows in leave-one-out), to
    price relayout as the twin's time plus its copies (without them, relayout is corrected by its
    neighbours like any kernel)."""
    feats = features(op, params)
    hidden = {exclude} if isinstance(exclude, str) else set(exclude or ())
    near: list[tuple[float, _Tuned]] = []
    for t in evidence.problems:
        if t.op != op or t.key in hidden:
            continue
        d = feature_distance(feats, t.feats) + penalties(params, t.params, dtype, t.dtype, layout, t.layout,
                                                             fused, t.fused)
        near.append((d + (DEVICE_PENALTY if t.foreign else 0.0), t))
    near.sort(key=lambda x: (x[0], x[1].key))
    closest = near[:NEAREST_PROBLEMS]
    alg_corr: dict[str, list[tuple[float, float]]] = {}
    alg_nearest: dict[str, float] = {}  # distance of the nearest neighbour that measured the family
    all_corr: list[tuple[float, float]] = []
    for d, t in closest:
        w = _neighbor_weight(d)
        for sig, c in t.corrections.items():  # by the signature's head: layout family | kernel_variant
            head = sig.split(":", 1)[0]
            alg_corr.setdefault(head, []).append((w, c))
            alg_nearest.setdefault(head, d)
            all_corr.append((w, c))

    fam = problem_layout_family(layout, params)
    through_twin = (_twin_prediction(op, params, layout, dtype, fused, twin_candidates, evidence, hidden, near)
                    if twin_candidates is not None and any(alg == "relayout" for _, alg, _ in candidates) else None)
    preds = []
    farther: dict[str, tuple[float, list[tuple[float, float]]] | None] = {}  # per family, see _family_farther
    for name, alg, cfg in candidates:
        if alg == "relayout" and through_twin is not None:
            preds.append(Prediction(name, alg, through_twin[0], through_twin[0], through_twin[1]))
            continue
        variant = kernel_variant(op, dtype, alg, params, cfg)
        head = fam + "|" + variant
        sig = fam + "|" + signature(variant, cfg)
        work, floor = model_parts(op, params, dtype, alg, cfg, evidence.sms, evidence.floor(op, alg),
                                  group_major=fam == "gm", channels_first=fam == "cf")
        m = with_floor(work, floor)
        seen = [(d, t) for d, t in near if sig in t.corrections and d <= MAX_EVIDENCE_DISTANCE][:NEIGHBORS_PER_KERNEL]
        if seen:
            ws = [(_neighbor_weight(d), t.corrections[sig]) for d, t in seen]
            corr = _wmean(ws) + DISTANCE_PENALTY * seen[0][0]
            basis = f"measured on {len(seen)} neighbour(s), nearest at {seen[0][0]:.2f}"
        elif (family_rows := alg_corr.get(head)):
            # the family's rows are as far away as a measured kernel's: the same distance penalty, so a
            # kernel nobody measured never outranks one measured on the same neighbours (model_constants);
            # likewise the two fallbacks below
            corr = _wmean(family_rows) + UNSEEN_KERNEL + DISTANCE_PENALTY * alg_nearest[head]
            basis = f"model + its family's correction ({len(family_rows)} neighbour rows)"
        elif (far := _family_farther(head, params.ndim, near, farther)):
            corr = _wmean(far[1]) + UNSEEN_KERNEL + DISTANCE_PENALTY * far[0]
            basis = f"model + its family's correction on farther problems (nearest at {far[0]:.2f})"
        elif all_corr:
            # none of the closest problems measured the family: other families' work corrections say little about
            # its own (a CUDA-core kernel's work is modelled far lower than its time), so the whole call is scaled
            # by their mean, at the distance of the last of them (its own evidence is at least that far)
            corr = _wmean(all_corr) + UNSEEN_ALGORITHM + DISTANCE_PENALTY * closest[-1][0]
            preds.append(Prediction(name, alg, m * math.exp(corr), m,
                                    "model + the neighbours' mean correction (family not measured nearby)"))
            continue
        else:
            corr, basis = 0.0, "model only (no tuned problem of this pass)"
        # the correction scales the modelled work; the floor (what a launch costs) stays (work_correction)
        pred = with_floor(work * math.exp(corr), floor) if work_modelled(op, alg, cfg) else m * math.exp(corr)
        preds.append(Prediction(name, alg, pred, m, basis))
    order = sorted(range(len(preds)), key=lambda i: (preds[i].predicted_ms, i))
    return Ranking([preds[i] for i in order], [(d, t.key) for d, t in closest])


def _twin_prediction(op: str, params: Any, layout: str, dtype: str, fused: str,
                     twin_candidates: Sequence[tuple[str, str, Mapping[str, Any]]], evidence: Evidence,
                     hidden: Collection[str], near: Sequence[tuple[float, _Tuned]]) -> tuple[float, str] | None:
    """(ms, basis) of ``relayout`` on the problem: its copies plus the twin's tuned best (what lookup
    serves the twin), else the twin's best predicted time, times the nearest relayout rows' residual
    against the same sum (small planes and fp32 copy slower); None when no twin time is known. The H100
    file's relayout rows sit within a median 3-17% of the sum per pass and layout family (session 36),
    where neighbour corrections of relayout rows borrowed other layers' twin speeds."""
    copy_bytes = relayout_copy_bytes(params, layout, dtype)
    copy_ms = 1e3 * copy_bytes / evidence.copy_bw
    twin_layout = channels_last_twin(params.ndim)
    key = problem_key(op, params, twin_layout, dtype, fused)
    tuned = evidence.tuned.get(key)
    if tuned is not None and key not in hidden:
        twin_ms, what = tuned.best_ms, f"the twin's tuned best {tuned.best_ms:.4g} ms"
    elif twin_candidates:
        best = rank(op, params, twin_layout.name, dtype, fused, twin_candidates, evidence, exclude=hidden).best
        twin_ms, what = best.predicted_ms, f"the twin's predicted best {best.predicted_ms:.4g} ms ({best.name})"
    else:
        return None
    seen = [(d, t.relayout_residual) for d, t in near if t.relayout_residual is not None][:NEIGHBORS_PER_KERNEL]
    residual = _wmean([(_neighbor_weight(d), r) for d, r in seen]) if seen else 0.0
    return (twin_ms + copy_ms) * math.exp(residual), (
        f"{what} + copies {copy_ms:.4g} ms ({copy_bytes / 1e6:.0f} MB at {evidence.copy_bw / 1e9:.0f} GB/s)"
        + (f", x{math.exp(residual):.2f} as on {len(seen)} neighbour(s)" if seen else ""))


def _family_farther(head: str, ndim: int, near: Sequence[tuple[float, _Tuned]],
                    cache: dict[str, tuple[float, list[tuple[float, float]]] | None],
                    ) -> tuple[float, list[tuple[float, float]]] | None:
    """(distance of the nearest, weighted corrections) of kernel family ``head`` (layout family | variant) on
    the nearest problems of the same dimensionality that measured it, up to NEAREST_PROBLEMS of them within
    MAX_EVIDENCE_DISTANCE; None without such rows. For a family none of the closest problems measured: its
    own record on farther layers says more than the other families' mean. Session 42, held-out group-major
    depthwise wgrad (H200): direct, measured on no group-major depthwise layer near, was priced by the
    neighbours' mean and served at 0.28-0.57 of the best; priced by its own farther rows it loses to
    relayout / dwplane (0.73 -> 0.93). Other dimensionalities left out: 2-D dwplane rows priced a 1-D
    group-major k31 wgrad at 0.16 (leave-one-out)."""
    if head in cache:
        return cache[head]
    rows: list[tuple[float, float]] = []
    first, problems = None, 0
    for d, t in near:
        if d > MAX_EVIDENCE_DISTANCE or problems >= NEAREST_PROBLEMS:
            break
        if t.params.ndim != ndim:
            continue
        got = t.by_family.get(head)
        if got:
            first = d if first is None else first
            problems += 1
            rows += [(_neighbor_weight(d), c) for c in got]
    cache[head] = (first, rows) if rows else None
    return cache[head]


def _neighbor_weight(d: float) -> float:
    """A neighbour's weight in the mean corrections: 1 / (0.25 + d)^WEIGHT_POWER."""
    return (0.25 + d) ** -WEIGHT_POWER


def _wmean(pairs: Sequence[tuple[float, float]]) -> float:
    tw = sum(w for w, _ in pairs)
    return sum(w * c for w, c in pairs) / tw
