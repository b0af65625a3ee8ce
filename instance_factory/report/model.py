"""The report's data: per (op, layout family, dtype, ndim, fused op) what is declared and what is known.

Evidence levels, weakest first:

* declared   -- the configs declare the combination (the registry has instances for it);
* interpreter -- an instance passed against float64 in the Triton interpreter;
* gpu        -- an instance passed on a GPU (device, date, max relative error recorded);
* tuned      -- tuning_db/ holds ``ok`` rows for problems of this combination on a GPU;
* speed      -- those rows carry cuDNN timings: geometric-mean speedup vs cuDNN (best instance per
  problem).

Evidence is *current* when the instance it names is still in the registry and, where the row
records a kernel hash, that hash still matches; otherwise it is *stale* and shown as such.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..dtypes import DATA_TYPES, DataType
from ..factory import OPS
from ..layouts import LAYOUT_FAMILIES, parse_layout
from ..tuning.database import best_per_problem
from .evidence import EvidenceSet, VerifyRecord, load_evidence

__all__ = ["CPU_DEVICES", "ComboEvidence", "LevelEvidence", "Report", "TuneEvidence", "build_report"]

Combination = tuple[str, str, str, int, str]
CPU_DEVICES = ("cpu",)  # tuning rows from the interpreter: pipeline checks, not GPU evidence
#: CK's column order first, then any other layout_family of the contract.
_CK_LAYOUT_FAMILY_ORDER = ("nhwgc", "ngchw", "ngchw_kcyx", "gnhwc")


@dataclass
class LevelEvidence:
    """Verification runs at one level (interpreter or GPU) for one combination."""

    current: list[VerifyRecord] = field(default_factory=list)
    stale: list[VerifyRecord] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(r.passed for r in self.current)

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.current)

    @property
    def no_instance(self) -> int:
        return sum(r.status == "NO INSTANCE" for r in self.current)

    @property
    def max_error(self) -> float:
        errs = [r.error for r in self.current if (r.passed or r.failed) and math.isfinite(r.error)]
        return max(errs) if errs else math.nan

    @property
    def devices(self) -> list[str]:
        return sorted({r.device for r in self.current})

    @property
    def dates(self) -> list[str]:
        return sorted({r.date for r in self.current})

    @property
    def state(self) -> str:
        """"fail", "pass", "stale" or "none"."""
        if self.failed:
            return "fail"
        if self.passed:
            return "pass"
        if any(r.passed or r.failed for r in self.stale):
            return "stale"
        return "none"


@dataclass
class TuneEvidence:
    """Tuning results of one combination on one device (best ``ok`` row per problem)."""

    device: str
    problems: int = 0  # problems with a current ok row
    stale_problems: int = 0  # problems with ok rows only for changed or removed instances
    speedups: list[float] = field(default_factory=list)  # best instance per problem vs cuDNN

    @property
    def geomean(self) -> float:
        s = [v for v in self.speedups if v > 0 and math.isfinite(v)]
        return math.exp(sum(math.log(v) for v in s) / len(s)) if s else math.nan


@dataclass
class ComboEvidence:
    key: Combination
    declared: bool
    instances: int
    interpreter: LevelEvidence = field(default_factory=LevelEvidence)
    gpu: LevelEvidence = field(default_factory=LevelEvidence)
    tuned: dict[str, TuneEvidence] = field(default_factory=dict)

    @property
    def tuned_state(self) -> str:
        if any(t.problems for t in self.tuned.values()):
            return "pass"
        if any(t.stale_problems for t in self.tuned.values()):
            return "stale"
        return "none"

    @property
    def best_tuned(self) -> TuneEvidence | None:
        """The device with the most tuned problems (ties: the first by name)."""
        cands = [t for t in self.tuned.values() if t.problems]
        return max(sorted(cands, key=lambda t: t.device), key=lambda t: t.problems) if cands else None

    @property
    def has_evidence(self) -> bool:
        return bool(self.interpreter.current or self.interpreter.stale or self.gpu.current or self.gpu.stale
                    or self.tuned)


@dataclass
class Report:
    ops: list[str]
    dtypes: list[DataType]  # table rows
    layout_families: list[str]  # table columns
    combos: dict[Combination, ComboEvidence]
    evidence: EvidenceSet
    tuning: pd.DataFrame  # ok rows on GPUs, with columns current, speedup_vs_cudnn, tflops_eff, combo cols
    tuning_files: list[str]
    notes: list[str]
    sources: dict[str, Any]

    def combo(self, op: str, layout_family: str, dtype: str, ndim: int, fused_op: str = "passthrough") -> ComboEvidence:
        key = (op, layout_family, dtype, ndim, fused_op)
        return self.combos.get(key) or ComboEvidence(key, False, 0)

    def declared(self, op: str, layout_family: str, dtype: str, ndim: int, fused_op: str = "passthrough") -> bool:
        c = self.combos.get((op, layout_family, dtype, ndim, fused_op))
        return bool(c and c.declared)

    def fused_ops(self, op: str) -> list[str]:
        names = {k[4] for k, c in self.combos.items() if k[0] == op and c.declared}
        from ..epilogue import FUSED_OPS

        return [f for f in FUSED_OPS if f in names and f != "passthrough"]


def _ordered_layout_families() -> list[str]:
    first = [f for f in _CK_LAYOUT_FAMILY_ORDER if f in LAYOUT_FAMILIES]
    return first + [f for f in LAYOUT_FAMILIES if f not in _CK_LAYOUT_FAMILY_ORDER]


def _instance_hashes(registry) -> dict[str, str]:
    out = {}
    for inst in registry.instances():
        try:
            out[inst.name] = inst.kernel_hash
        except Exception:  # a kernel module that cannot be inspected: hash unknown, evidence kept current
            out[inst.name] = ""
    return out


def _is_current(rec: VerifyRecord, hashes: dict[str, str]) -> bool:
    if rec.instance not in hashes:
        return rec.status == "NO INSTANCE" and rec.instance in ("", "-")
    return rec.kernel_hash is None or not hashes[rec.instance] or rec.kernel_hash == hashes[rec.instance]


def _read_tuning(tuning_db_dir: str | Path | None, notes: list[str]) -> tuple[pd.DataFrame, list[str]]:
    from ..tuning.database import empty_frame, read_db, system_db_files

    if tuning_db_dir is None:
        return empty_frame(), []
    d = Path(tuning_db_dir)
    if not d.is_dir():
        from .evidence import EvidenceError

        raise EvidenceError(f"tuning database folder {d} does not exist")
    files = system_db_files(d)
    frames = [read_db(p) for p in files]  # DatabaseError names the file and line
    frames = [f for f in frames if len(f)]
    if not frames:
        notes.append(f"no tuning data yet: {d.name}/ holds no tuning rows")
        return empty_frame(), [f"{d.name}/{p.name}" for p in files]
    return pd.concat(frames, ignore_index=True), [f"{d.name}/{p.name}" for p in files]


def _tuning_frame(df: pd.DataFrame, hashes: dict[str, str], notes: list[str]) -> pd.DataFrame:
    """ok rows measured on GPUs, with the columns the report needs."""
    if len(df) == 0:
        return df.assign(current=pd.Series(dtype=bool), speedup_vs_cudnn=pd.Series(dtype=float),
                         tflops_eff=pd.Series(dtype=float), layout_family=pd.Series(dtype=object))
    cpu = df["device"].isin(CPU_DEVICES)
    if cpu.any():
        notes.append(f"{int(cpu.sum())} tuning rows measured in the CPU interpreter are not counted as tuning "
                     "evidence (interpreter timings only exercise the pipeline)")
    ok = df[(df["status"] == "ok") & ~cpu].copy()
    ok["current"] = ok["instance"].map(hashes).fillna("__removed__") == ok["kernel_hash"]
    sp = ok["speedup"].astype(float)
    derived = ok["cudnn_ms"].astype(float) / ok["median_ms"].astype(float)
    ok["speedup_vs_cudnn"] = sp.where(sp.notna(), derived)
    from ..problem import ConvParams

    flops = ok["problem_key"].map(lambda k: ConvParams.from_key(k.split("|")[4]).flops())
    tf = ok["tflops"].astype(float)
    ok["tflops_eff"] = tf.where(tf.notna(), flops / (ok["median_ms"].astype(float) * 1e-3) / 1e12)
    ok["layout_family"] = ok["layout"].map(lambda s: parse_layout(s).layout_family)
    return ok.reset_index(drop=True)


def best_per_device(ok: pd.DataFrame) -> pd.DataFrame:
    """The fastest ok row per (problem, device), over the software versions of the current rows."""
    return best_per_problem(ok, group=("problem_key", "device"))


def build_report(registry, evidence_dir: str | Path | None = "evidence",
                 tuning_db_dir: str | Path | None = "tuning_db", *, require_interpreter: bool = True) -> Report:
    """Everything the tables and plots show, from the registry, the evidence folder and the tuning DB.

    ``registry``: an :class:`instance_factory.registry.Registry` (``get_registry()`` for configs/).
    ``evidence_dir``: see :mod:`instance_factory.report.evidence` (None: no evidence).
    ``tuning_db_dir``: a folder of tuning CSV files (None: no tuning data).
    Missing or malformed inputs raise EvidenceError / DatabaseError naming the file and line.
    """
    notes: list[str] = []
    evidence = load_evidence(evidence_dir, require_interpreter=require_interpreter)
    notes.extend(evidence.notes)
    raw_db, db_files = _read_tuning(tuning_db_dir, notes)

    hashes = _instance_hashes(registry)
    counts = registry.counts()
    combos: dict[Combination, ComboEvidence] = {}
    for key in registry.declared:
        combos[key] = ComboEvidence(key, True, counts.get(key, 0))

    def entry(key: Combination) -> ComboEvidence:
        if key not in combos:
            combos[key] = ComboEvidence(key, False, 0)
        return combos[key]

    for rec in evidence.records:
        level = entry(rec.combination).interpreter if rec.backend == "interpreter" else entry(rec.combination).gpu
        (level.current if _is_current(rec, hashes) else level.stale).append(rec)

    tuning = _tuning_frame(raw_db, hashes, notes)
    if len(tuning):
        key_cols = ["op", "layout_family", "dtype", "ndim", "fused_op", "device"]
        for (op, fam, dt, nd, fo, dev), grp in tuning.groupby(key_cols, sort=True):
            te = entry((op, fam, dt, int(nd), fo)).tuned.setdefault(dev, TuneEvidence(dev))
            cur = grp[grp["current"]]
            te.problems = int(cur["problem_key"].nunique())
            te.stale_problems = int(grp.loc[~grp["problem_key"].isin(set(cur["problem_key"])), "problem_key"].nunique())
            best = best_per_device(cur)
            te.speedups = [float(v) for v in best["speedup_vs_cudnn"] if v == v]
        stale = int((~tuning["current"]).sum())
        if stale:
            notes.append(f"{stale} ok tuning rows name instances that changed (kernel hash) or left the registry; "
                         "they count as stale")
    elif len(raw_db) and tuning_db_dir is not None:
        notes.append("no tuning data yet: the tuning database has no ok rows measured on a GPU")

    undeclared = sorted(k for k, c in combos.items() if not c.declared and c.has_evidence)
    if undeclared:
        shown = ", ".join(f"{o}/{f}/{d}/{n}D/{fo}" for o, f, d, n, fo in undeclared[:6])
        more = f" and {len(undeclared) - 6} more" if len(undeclared) > 6 else ""
        notes.append(f"evidence for {len(undeclared)} combinations the configs no longer declare ({shown}{more}); "
                     "not shown in the tables")
    n_stale = sum(len(c.interpreter.stale) + len(c.gpu.stale) for c in combos.values())
    if n_stale:
        notes.append(f"{n_stale} verification results are stale (their instance changed or left the registry); "
                     "re-run tools/collect_interpreter_evidence.py / tools/gpu_check.py")

    for backend in ("interpreter", "gpu"):
        none = [r for r in evidence.records if r.status == "NO INSTANCE" and r.backend == backend]
        if none:
            n = len({r.combination for r in none})
            notes.append(f"{backend}: {n} declared combinations had no instance able to run their evidence problem "
                         f"and stay unverified there (e.g. {none[0].layout} {none[0].dtype}: {none[0].note[:150]})")
    ops = list(OPS) + sorted({k[0] for k in registry.declared} - set(OPS))
    sources = {
        "configs": [str(p) for p in getattr(registry, "files", [])],
        "evidence_dir": str(evidence_dir) if evidence_dir is not None else None,
        "tuning_db_dir": str(tuning_db_dir) if tuning_db_dir is not None else None,
        "tuning_files": db_files,
        "instances": len(registry),
    }
    return Report(ops, list(DATA_TYPES.values()), _ordered_layout_families(), combos, evidence, tuning, db_files, notes,
                  sources)


def group_problem_sets(keys: list[str]) -> dict[str, list[str]]:
    """ConvParams key -> names of the shipped problem sets that contain it (empty if none)."""
    from ..tuning.problem_sets import list_problem_sets, load_problem_set

    out: dict[str, list[str]] = defaultdict(list)
    for name in list_problem_sets():
        try:
            ps = load_problem_set(name)
        except (ValueError, FileNotFoundError):
            continue
        for e in ps["problems"]:
            k = e["params"].key()
            if name not in out[k]:
                out[k].append(name)
    return {k: out.get(k, []) for k in keys}
