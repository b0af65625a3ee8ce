"""Evidence files: verification results recorded in the interpreter and on GPUs, read strictly.

Layout of an evidence folder (``evidence/`` at the repo root by default)::

    evidence/interpreter.jsonl   written by tools/collect_interpreter_evidence.py (required)
    evidence/gpu/*.jsonl         written by tools/gpu_check.py --matrix/--ck (optional, one per run)

Both are JSON lines. The first line is the run's metadata, an object with at least ``device`` and
``date`` (gpu_check also writes torch, triton, sm_count; the collection tool writes backend,
git_commit). Every further line is one verification of one instance on one problem::

    {"case": ..., "op": "conv_bwd_data", "problem": "2d-g1-n2-...", "layout": "NHWGC/GKYXC/NHWGK",
     "dtype": "fp16", "fused_op": "passthrough", "instance": "<registry name>", "error": 1.2e-4,
     "tol": 2e-3, "status": "PASS" | "FAIL" | "ERROR <msg>" | "NO INSTANCE"}

optionally with ``backend``, ``date`` (overrides the metadata's), ``kernel_hash`` (the instance's
kernel hash when it ran: evidence for a since-changed kernel is shown as stale) and ``note``.
gpu_check's benchmark rows (a ``bench`` key) and its rows without an ``op`` (skipped cases) are
counted and otherwise ignored. Anything else that does not fit is an :class:`EvidenceError` naming
the file and the line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dtypes import DATA_TYPES
from ..epilogue import FUSED_OPS
from ..factory import OPS
from ..layouts import parse_layout
from ..problem import ConvParams

__all__ = ["EvidenceError", "EvidenceFile", "EvidenceSet", "VerifyRecord", "load_evidence", "read_evidence_file"]

INTERPRETER_FILE = "interpreter.jsonl"
GPU_DIR = "gpu"
_ROW_KEYS = ("op", "problem", "layout", "dtype", "fused_op", "instance", "status")


class EvidenceError(ValueError):
    """An evidence file or folder that is missing or cannot be read; the message names file and line."""


@dataclass(frozen=True)
class VerifyRecord:
    """One verification run of one instance on one problem."""

    backend: str  # "interpreter" or "gpu"
    file: str  # as shown in the report, e.g. "evidence/gpu/h200.jsonl"
    line: int
    device: str
    date: str
    op: str
    layout_family: str
    layout: str
    dtype: str
    ndim: int
    fused_op: str
    problem: str
    instance: str
    error: float
    tol: float | None
    status: str
    kernel_hash: str | None = None
    note: str = ""

    @property
    def combination(self) -> tuple[str, str, str, int, str]:
        return (self.op, self.layout_family, self.dtype, self.ndim, self.fused_op)

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    @property
    def failed(self) -> bool:
        return self.status == "FAIL" or self.status.startswith("ERROR")


@dataclass
class EvidenceFile:
    path: Path
    shown: str  # the name the report prints
    backend: str
    meta: dict[str, Any]
    records: list[VerifyRecord] = field(default_factory=list)
    ignored: int = 0  # benchmark rows and rows that name no op (skipped cases)

    @property
    def device(self) -> str:
        return str(self.meta.get("device", "?"))

    @property
    def date(self) -> str:
        return str(self.meta.get("date", "?"))


@dataclass
class EvidenceSet:
    directory: Path | None
    interpreter: EvidenceFile | None
    gpu: list[EvidenceFile]
    notes: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[VerifyRecord]:
        out: list[VerifyRecord] = []
        for f in ([self.interpreter] if self.interpreter else []) + self.gpu:
            out.extend(f.records)
        return out


def _bad(shown: str, line: int, problem: str) -> EvidenceError:
    return EvidenceError(f"evidence file {shown} line {line}: {problem}")


def _number(v: Any, name: str, shown: str, line: int, allow_none: bool) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(shown, line, f"{name}={v!r} is not a number")
    return float(v)


def _record(row: dict, backend: str, shown: str, line: int, meta: dict) -> VerifyRecord:
    missing = [k for k in _ROW_KEYS if k not in row]
    if missing:
        raise _bad(shown, line, f"the row lacks {missing} (a verification row has {list(_ROW_KEYS)} and error)")
    for k in _ROW_KEYS:
        if not isinstance(row[k], str) or not row[k]:
            raise _bad(shown, line, f"{k}={row[k]!r} is not a non-empty string")
    op, status = row["op"], row["status"]
    if op not in OPS:
        raise _bad(shown, line, f"unknown op {op!r}; known: {', '.join(OPS)}")
    if row["dtype"] not in DATA_TYPES:
        raise _bad(shown, line, f"unknown dtype {row['dtype']!r}; known: {', '.join(DATA_TYPES)}")
    if row["fused_op"] not in FUSED_OPS:
        raise _bad(shown, line, f"unknown fused_op {row['fused_op']!r}; known: {', '.join(FUSED_OPS)}")
    try:
        lt = parse_layout(row["layout"])
    except ValueError as exc:
        raise _bad(shown, line, str(exc)) from None
    try:
        params = ConvParams.from_key(row["problem"])
    except ValueError as exc:
        raise _bad(shown, line, f"problem: {exc}") from None
    if params.ndim != lt.ndim:
        raise _bad(shown, line, f"problem {row['problem']} is {params.ndim}D but layout {lt.name} is {lt.ndim}D")
    if not (status in ("PASS", "FAIL", "NO INSTANCE") or status.startswith("ERROR")):
        raise _bad(shown, line, f"unknown status {status!r}; use PASS, FAIL, ERROR <message> or NO INSTANCE")
    if "error" not in row and status in ("PASS", "FAIL"):
        raise _bad(shown, line, f"a {status} row needs an error value")
    err = _number(row.get("error"), "error", shown, line, allow_none=True)
    err = math.nan if err is None else err
    if status == "PASS" and not math.isfinite(err):
        raise _bad(shown, line, f"status PASS with error={err}")
    tol = _number(row.get("tol"), "tol", shown, line, allow_none=True)
    date = row.get("date") or meta.get("date") or "?"
    kh = row.get("kernel_hash")
    return VerifyRecord(backend, shown, line, str(meta.get("device", "?")), str(date), op, lt.layout_family, lt.name,
                        row["dtype"], lt.ndim, row["fused_op"], row["problem"], row["instance"], err, tol, status,
                        str(kh) if kh else None, str(row.get("note", "")))


def read_evidence_file(path: str | Path, backend: str, shown: str | None = None) -> EvidenceFile:
    """Parse one JSON-lines evidence file (metadata line first); raises EvidenceError naming file and line."""
    path = Path(path)
    shown = shown or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvidenceError(f"evidence file {shown} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"evidence file {shown} cannot be read: {exc}") from None
    out: EvidenceFile | None = None
    lines = text.split("\n")
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as exc:
            cut = " (the file ends mid-line: was the run cut short?)" if lineno == len(lines) else ""
            raise _bad(shown, lineno, f"not valid JSON ({exc.msg} at column {exc.colno}){cut}") from None
        if not isinstance(row, dict):
            raise _bad(shown, lineno, f"expected a JSON object, got {type(row).__name__}")
        if out is None:
            if "case" in row or "device" not in row or "date" not in row:
                raise _bad(shown, lineno, "the first line must be the run's metadata, an object with 'device' and "
                                          f"'date' (got keys {sorted(row)[:8]})")
            out = EvidenceFile(path, shown, backend, row)
            continue
        if "bench" in row or "op" not in row:
            if "status" not in row and "bench" not in row:
                raise _bad(shown, lineno, f"neither a verification row nor a benchmark row (keys {sorted(row)[:8]})")
            out.ignored += 1
            continue
        out.records.append(_record(row, backend, shown, lineno, out.meta))
    if out is None:
        raise EvidenceError(f"evidence file {shown} is empty (expected a metadata line, then result lines)")
    return out


def load_evidence(evidence_dir: str | Path | None, *, require_interpreter: bool = True) -> EvidenceSet:
    """Read ``<dir>/interpreter.jsonl`` and ``<dir>/gpu/*.jsonl``.

    ``None`` reads nothing (every cell is "declared" only). A folder that does not exist, or (with
    ``require_interpreter``) one without interpreter.jsonl, is an EvidenceError saying how to make it.
    """
    if evidence_dir is None:
        return EvidenceSet(None, None, [], ["no evidence folder given: every cell shows its declaration only"])
    d = Path(evidence_dir)
    if not d.is_dir():
        raise EvidenceError(f"evidence folder {d} does not exist (create it with "
                            f"`python tools/collect_interpreter_evidence.py --out {d}`)")
    notes: list[str] = []
    interp_path = d / INTERPRETER_FILE
    interp = None
    if interp_path.exists():
        interp = read_evidence_file(interp_path, "interpreter", f"{d.name}/{INTERPRETER_FILE}")
    elif require_interpreter:
        raise EvidenceError(f"evidence file {d.name}/{INTERPRETER_FILE} does not exist (looked for {interp_path}); "
                            f"make it with `python tools/collect_interpreter_evidence.py --out {d}`")
    else:
        notes.append(f"no interpreter evidence ({d.name}/{INTERPRETER_FILE} is missing)")
    gpu: list[EvidenceFile] = []
    gdir = d / GPU_DIR
    if gdir.is_dir():
        for p in sorted(gdir.glob("*.jsonl")):
            gpu.append(read_evidence_file(p, "gpu", f"{d.name}/{GPU_DIR}/{p.name}"))
    if not gpu:
        notes.append(f"no GPU evidence yet: no {d.name}/{GPU_DIR}/*.jsonl (copy gpu_check.jsonl files from "
                     "`tools/gpu_check.py --matrix` runs there, one file per run)")
    return EvidenceSet(d, interp, gpu, notes)
