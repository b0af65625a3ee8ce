"""The tuning database: one row per (device, software, problem, instance) measurement.

Storage
    A plain CSV file with a header row, one row per result, columns in :data:`COLUMNS` order, rows
    sorted by the identity columns (problem key first), floats written with 6 significant digits and
    missing values as empty fields: a re-tune shows up in ``git diff`` as the changed rows only.

Tiers
    * system tier: ``tuning_db/<device-kind>.csv`` shipped with the package, read-only at run time
      (``INSTANCE_FACTORY_SYSTEM_DB`` overrides the folder);
    * user tier: ``$INSTANCE_FACTORY_USER_DB`` (a folder, or one ``.csv`` file), default
      ``$XDG_CACHE_HOME/instance_factory`` or ``~/.cache/instance_factory``, one
      ``<device-kind>.csv`` per device kind. Tuning writes only here. Lookups read it first.

Validity
    A row counts only for the device it was measured on (name, compute capability, SM count), the
    software it was measured with (Triton, torch and instance_factory versions) and the kernel it
    measured (the instance's ``kernel_hash`` must equal the registry's today). Other rows stay in the
    file (they may be right for another machine) but are ignored by lookups and resumes.

Safety
    Every writer takes ``<file>.lock`` (filelock), re-reads the file under the lock, merges its rows
    in (so two writers never lose each other's rows), writes a temporary file in the same folder,
    fsyncs it and ``os.replace``-s it over the old one: a writer killed at any point leaves either the
    old or the new file, never half of one. A file that does not parse raises :class:`DatabaseError`
    naming the file and the line; nothing is ever dropped silently, and a damaged file is never
    overwritten.

The best instance per problem is derived (:func:`best_per_problem`), never stored.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = [
    "COLUMNS",
    "IDENTITY",
    "STATUSES",
    "DatabaseError",
    "DeviceInfo",
    "Software",
    "TuningDB",
    "best_per_problem",
    "current_device",
    "current_software",
    "empty_frame",
    "merge_files",
    "problem_fields",
    "problem_key",
    "read_db",
    "system_db_dir",
    "system_db_path",
    "user_db_path",
    "valid_rows",
    "write_db",
]

# --------------------------------------------------------------------------------------------
# schema
# --------------------------------------------------------------------------------------------
_STR, _INT, _FLOAT = "str", "int", "float"

#: (column, kind, required-non-empty) in file order.
SCHEMA: tuple[tuple[str, str, bool], ...] = (
    # the problem: the fixed-order key, then every field on its own
    ("problem_key", _STR, True),
    ("op", _STR, True),
    ("layout", _STR, True),
    ("dtype", _STR, True),
    ("fused_op", _STR, True),
    ("ndim", _INT, True),
    ("G", _INT, True),
    ("N", _INT, True),
    ("K", _INT, True),
    ("C", _INT, True),
    ("filter", _STR, True),
    ("input", _STR, True),
    ("stride", _STR, True),
    ("dilation", _STR, True),
    ("left_pad", _STR, True),
    ("right_pad", _STR, True),
    # the instance
    ("instance", _STR, True),
    ("algorithm", _STR, True),
    ("instance_params", _STR, True),
    ("kernel_hash", _STR, True),
    # the device
    ("device", _STR, True),
    ("device_cc", _STR, False),
    ("device_sms", _INT, True),
    # the software
    ("triton_version", _STR, True),
    ("torch_version", _STR, True),
    ("package_version", _STR, True),
    # the result
    ("status", _STR, True),
    ("reason", _STR, False),
    ("median_ms", _FLOAT, False),
    ("p20_ms", _FLOAT, False),
    ("p80_ms", _FLOAT, False),
    ("reps", _INT, False),
    ("tflops", _FLOAT, False),
    ("gbps", _FLOAT, False),
    ("cudnn_ms", _FLOAT, False),
    ("cudnn_impl", _STR, False),
    ("speedup", _FLOAT, False),
    ("rel_err", _FLOAT, False),
    ("max_rel_err", _FLOAT, False),
    ("tolerance", _FLOAT, False),
    ("timing", _STR, False),
    ("timestamp", _STR, True),
)
COLUMNS: tuple[str, ...] = tuple(c for c, _, _ in SCHEMA)
_KIND = {c: k for c, k, _ in SCHEMA}
_REQUIRED = tuple(c for c, _, r in SCHEMA if r)

#: Columns that identify one result: a newer row with the same identity replaces an older one.
IDENTITY: tuple[str, ...] = (
    "problem_key", "device", "device_cc", "device_sms", "triton_version", "torch_version",
    "package_version", "instance", "kernel_hash",
)
DEVICE_COLS = ("device", "device_cc", "device_sms")
SOFTWARE_COLS = ("triton_version", "torch_version", "package_version")
PROBLEM_FIELDS = ("ndim", "G", "N", "K", "C", "filter", "input", "stride", "dilation", "left_pad",
                  "right_pad")

#: ok: verified and timed. pruned: ran, but one run of it was so much slower than the problem's
#: best single run that it was not benchmarked (``median_ms`` holds that one run, ``timing`` says
#: ``single-run (pruned)``; verified unless the reason says otherwise); never chosen: lookups, the
#: derived best, the summary and the report read ``ok`` rows only, and a merge prefers an ``ok`` row
#: of the same identity. failed: wrong result, or an error while running. compile_error: the kernel
#: did not build. oom: out of GPU memory or of a kernel resource (shared memory, registers).
STATUSES = ("ok", "pruned", "failed", "compile_error", "oom")
_STATUS_RANK = {"ok": 0, "pruned": 1, "failed": 2, "oom": 3, "compile_error": 4}


class DatabaseError(ValueError):
    """A tuning-database file that cannot be read as one; the message names the file and line."""


# --------------------------------------------------------------------------------------------
# problem keys
# --------------------------------------------------------------------------------------------
def _j(t: Sequence[int]) -> str:
    return "x".join(str(int(v)) for v in t)


def problem_key(op: str, params: Any, layout: Any, dtype: str, fused_op: str = "passthrough") -> str:
    """The fixed-order problem key ``op|layout|dtype|fused_op|<ConvParams.key()>``.

    ``layout`` is a CK triple string or a LayoutTriple, ``dtype`` a DataType name. New fields may
    only ever be appended (to ConvParams.key() or here), so old keys stay valid.
    """
    lname = layout if isinstance(layout, str) else layout.name
    return f"{op}|{lname}|{dtype}|{fused_op}|{params.key()}"


def split_problem_key(key: str) -> tuple[str, str, str, str, str]:
    """``problem_key`` -> (op, layout, dtype, fused_op, params_key)."""
    parts = key.split("|")
    if len(parts) != 5:
        raise ValueError(f"not a problem key (op|layout|dtype|fused_op|params): {key!r}")
    return parts[0], parts[1], parts[2], parts[3], parts[4]


def problem_fields(op: str, params: Any, layout: Any, dtype: str, fused_op: str = "passthrough") -> dict:
    """The problem columns of a row: the key and each field on its own."""
    lname = layout if isinstance(layout, str) else layout.name
    return {
        "problem_key": problem_key(op, params, lname, dtype, fused_op),
        "op": op, "layout": lname, "dtype": dtype, "fused_op": fused_op,
        "ndim": params.ndim, "G": params.G, "N": params.N, "K": params.K, "C": params.C,
        "filter": _j(params.filter), "input": _j(params.input), "stride": _j(params.stride),
        "dilation": _j(params.dilation), "left_pad": _j(params.left_pad),
        "right_pad": _j(params.right_pad),
    }


def params_from_row(row: Mapping[str, Any]) -> Any:
    """The ConvParams of a row (from its field columns)."""
    from ..problem import ConvParams

    def t(s: Any) -> tuple[int, ...]:
        return tuple(int(v) for v in str(s).split("x"))

    return ConvParams(int(row["ndim"]), int(row["G"]), int(row["N"]), int(row["K"]), int(row["C"]),
                      t(row["filter"]), t(row["input"]), t(row["stride"]), t(row["dilation"]),
                      t(row["left_pad"]), t(row["right_pad"]))


# --------------------------------------------------------------------------------------------
# device and software identity
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceInfo:
    """What a result is only valid for: the device's name, compute capability and SM count."""

    name: str
    cc: str  # "9.0"; "" on the CPU
    sms: int  # streaming multiprocessors; 0 on the CPU

    @property
    def kind(self) -> str:
        """File-name slug of the device kind, e.g. ``nvidia-h200`` or ``cpu``."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-") or "unknown"

    @property
    def is_cuda(self) -> bool:
        return self.name != CPU_DEVICE.name

    def as_columns(self) -> dict:
        return {"device": self.name, "device_cc": self.cc, "device_sms": self.sms}


#: Results measured with the Triton interpreter on the CPU (timings exercise the pipeline only).
CPU_DEVICE = DeviceInfo("cpu", "", 0)

_DEVICE_CACHE: dict[Any, DeviceInfo] = {}


def current_device(device: Any = None) -> DeviceInfo:
    """DeviceInfo for ``device`` (None: the current CUDA device, or the CPU without one)."""
    hit = _DEVICE_CACHE.get(device)
    if hit is not None:
        return hit
    import torch

    from ..algorithms import interpreting

    if device is None:
        dev = torch.device("cuda", torch.cuda.current_device()) if (
            torch.cuda.is_available() and not interpreting()) else torch.device("cpu")
    elif isinstance(device, int):
        dev = torch.device("cuda", device)
    else:
        dev = torch.device(device)
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        info = DeviceInfo(str(p.name), f"{p.major}.{p.minor}", int(p.multi_processor_count))
    elif dev.type == "cpu":
        info = CPU_DEVICE
    else:
        raise ValueError(f"tuning supports CUDA devices and the CPU interpreter, not {dev}")
    _DEVICE_CACHE[device] = info
    return info


@dataclass(frozen=True)
class Software:
    triton: str
    torch: str
    package: str

    def as_columns(self) -> dict:
        return {"triton_version": self.triton, "torch_version": self.torch,
                "package_version": self.package}


_SOFTWARE: list[Software] = []


def current_software() -> Software:
    """The Triton, torch and instance_factory versions of this process."""
    if not _SOFTWARE:
        import torch
        import triton

        from .. import __version__

        _SOFTWARE.append(Software(str(triton.__version__), str(torch.__version__), str(__version__)))
    return _SOFTWARE[0]


# --------------------------------------------------------------------------------------------
# tier paths
# --------------------------------------------------------------------------------------------
def system_db_dir() -> Path:
    """The shipped, read-only tier: ``$INSTANCE_FACTORY_SYSTEM_DB`` or the repo's ``tuning_db/``."""
    env = os.environ.get("INSTANCE_FACTORY_SYSTEM_DB")
    if env:
        return Path(env).expanduser()
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg.parent / "tuning_db", pkg / "data" / "tuning_db"):
        if cand.is_dir():
            return cand
    return pkg.parent / "tuning_db"


def system_db_path(device_kind: str) -> Path:
    return system_db_dir() / f"{device_kind}.csv"


def user_db_path(device_kind: str) -> Path:
    """``$INSTANCE_FACTORY_USER_DB`` (a ``.csv`` file, or a folder holding ``<kind>.csv``)."""
    env = os.environ.get("INSTANCE_FACTORY_USER_DB")
    if env:
        p = Path(env).expanduser()
        if p.suffix.lower() == ".csv":
            return p
        return p / f"{device_kind}.csv"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "instance_factory" / f"{device_kind}.csv"


# --------------------------------------------------------------------------------------------
# frames
# --------------------------------------------------------------------------------------------
def empty_frame() -> pd.DataFrame:
    return _typed(pd.DataFrame({c: [] for c in COLUMNS}))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """Give every schema column its dtype (str, Int64, float64; extra columns str), in file order."""
    df = df.copy(deep=False)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = None
    for c in df.columns:
        kind = _KIND.get(c, _STR)
        col = df[c]
        if kind == _INT:
            if str(col.dtype) != "Int64":
                df[c] = pd.to_numeric(col, errors="raise").astype("Int64")
        elif kind == _FLOAT:
            if col.dtype != "float64":
                df[c] = pd.to_numeric(col, errors="raise").astype("float64")
        else:
            df[c] = col.where(col.notna(), "").astype(str)
    extra = sorted(c for c in df.columns if c not in _KIND)
    return df[list(COLUMNS) + extra].reset_index(drop=True)


def _frame(rows: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    if isinstance(rows, pd.DataFrame):
        df = rows
    else:
        rows = list(rows)
        if not rows:
            return empty_frame()
        df = pd.DataFrame(rows)
    unknown_status = set(df["status"].astype(str)) - set(STATUSES) if "status" in df else set()
    if unknown_status:
        raise ValueError(f"unknown status {sorted(unknown_status)}; use one of {STATUSES}")
    return _typed(df)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(IDENTITY), kind="stable").reset_index(drop=True)


def upsert(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``old`` and ``new``; a ``new`` row replaces an ``old`` one with the same identity."""
    if len(old) == 0:
        both = new
    elif len(new) == 0:
        both = old
    else:
        both = pd.concat([_typed(old), _typed(new)], ignore_index=True)
    both = both.drop_duplicates(subset=list(IDENTITY), keep="last")
    return _sorted(_typed(both))


def keep_best(df: pd.DataFrame) -> pd.DataFrame:
    """One row per identity: an ``ok`` row before a failed one, then the fastest, then the newest."""
    if len(df) == 0:
        return _typed(df)
    df = _typed(df)
    order = df.assign(
        _rank=df["status"].map(_STATUS_RANK).fillna(9),
        _ms=df["median_ms"].fillna(math.inf),
        _neg_ts=df["timestamp"],
    ).sort_values(["_rank", "_ms", "_neg_ts"], ascending=[True, True, False], kind="stable")
    out = order.drop_duplicates(subset=list(IDENTITY), keep="first")
    return _sorted(out.drop(columns=["_rank", "_ms", "_neg_ts"]))


# --------------------------------------------------------------------------------------------
# file format
# --------------------------------------------------------------------------------------------
def _column_text(col: pd.Series, kind: str) -> list[str]:
    if kind == _FLOAT:
        out = []
        for v in col.to_numpy(dtype="float64", na_value=math.nan).tolist():
            out.append("" if v != v else format(v, ".6g"))  # NaN -> empty; inf -> "inf"
        return out
    if kind == _INT:
        return ["" if v is pd.NA else str(v) for v in col.astype(object).tolist()]
    return col.tolist()


def to_csv_text(df: pd.DataFrame) -> str:
    """The file's text: header, rows sorted by identity, floats as %.6g, missing values empty."""
    df = _sorted(_typed(df))
    cols = [_column_text(df[c], _KIND.get(c, _STR)) for c in df.columns]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(df.columns)
    w.writerows(zip(*cols))
    return buf.getvalue()


def _damaged(path: Path, problems: list[str]) -> DatabaseError:
    shown = "; ".join(problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return DatabaseError(
        f"damaged tuning database {path}: {shown}{more}. Nothing was read from it or written to it; "
        f"repair the file (it is CSV; `git diff` or a backup shows what changed) or move it away."
    )


def read_db(path: str | os.PathLike) -> pd.DataFrame:
    """Read one database file; a missing file is an empty database, a damaged one a DatabaseError."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return empty_frame()
    except OSError as exc:
        raise DatabaseError(f"cannot read tuning database {path}: {exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _damaged(path, [f"byte {exc.start} is not UTF-8 text"]) from None
    if not text.strip():
        raise _damaged(path, ["the file is empty (no header row)"])
    problems: list[str] = []
    if not text.endswith("\n"):
        problems.append("the last line has no line end (the file was cut short?)")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[list[str]] = []
    line_nums: list[int] = []
    try:
        for rec in reader:
            records.append(rec)
            line_nums.append(reader.line_num)
    except csv.Error as exc:
        raise _damaged(path, [f"line {reader.line_num}: CSV syntax error: {exc}"]) from None
    header = records[0]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise _damaged(path, [f"header lacks the columns {missing} (header is line 1: {header[:6]}...)"])
    if len(set(header)) != len(header):
        raise _damaged(path, ["the header names a column twice"])
    width = len(header)
    good: list[list[str]] = []
    good_lines: list[int] = []
    for rec, lineno in zip(records[1:], line_nums[1:]):
        if len(rec) != width:
            problems.append(f"line {lineno} has {len(rec)} fields, the header has {width}" if rec
                            else f"line {lineno} is empty")
            continue
        good.append(rec)
        good_lines.append(lineno)
    df = pd.DataFrame(good, columns=header, dtype=object)
    lines = pd.Series(good_lines, dtype="int64")
    numeric: dict[str, pd.Series] = {}
    if len(df):
        problems += _check_frame(df, lines, numeric)
    if problems:
        raise _damaged(path, problems)
    for c, num in numeric.items():
        df[c] = num.astype("Int64") if _KIND[c] == _INT else num.astype("float64")
    return _typed(df)


def _check_frame(df: pd.DataFrame, lines: pd.Series, numeric: dict[str, pd.Series]) -> list[str]:
    """Problems of a freshly parsed all-string frame, each naming its line; fills ``numeric`` with
    the parsed number columns."""
    problems: list[str] = []
    bad_any = pd.Series(False, index=df.index)

    def report(mask: pd.Series, what: Any) -> None:
        nonlocal bad_any
        mask = mask & ~bad_any  # one problem per line
        for i in mask[mask].index[:5]:
            problems.append(f"line {lines[i]}: {what(i) if callable(what) else what}")
        bad_any |= mask

    for c in _REQUIRED:
        report(df[c] == "", f"no value for {c}")
    report(~df["status"].isin(STATUSES), lambda i: f"unknown status {df['status'][i]!r}")
    for c, kind, _ in SCHEMA:
        if kind == _STR:
            continue
        col = df[c]
        filled = col != ""
        num = pd.to_numeric(col.where(filled, None), errors="coerce")
        numeric[c] = num
        bad = filled & (num.isna() | (col.str.lower() == "nan"))
        if kind == _INT:
            bad |= filled & num.notna() & ((num % 1) != 0)
        report(bad, lambda i, c=c, kind=kind: f"{c}={df[c][i]!r} is not a{'n int' if kind == _INT else ' number'}")
    report((df["status"] == "ok") & (df["median_ms"] == ""), "an ok row without median_ms")
    cols = ["problem_key", "op", "layout", "dtype", "fused_op", *PROBLEM_FIELDS]
    uniq = df[cols].drop_duplicates()
    wrong: dict[tuple, str] = {}
    for rec in uniq.to_dict("records"):
        try:
            p = params_from_row(rec)
            want = problem_key(rec["op"], p, rec["layout"], rec["dtype"], rec["fused_op"])
        except ValueError as exc:
            wrong[tuple(rec[c] for c in cols)] = f"the problem fields do not make a problem ({exc})"
            continue
        if want != rec["problem_key"]:
            wrong[tuple(rec[c] for c in cols)] = (f"problem_key {rec['problem_key']!r} does not match its field "
                                                 f"columns ({want!r})")
    if wrong:
        keys = pd.Series(list(zip(*(df[c] for c in cols))), index=df.index)
        report(keys.isin(list(wrong)), lambda i: wrong[keys[i]])
    return problems


def write_db(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """Atomically replace ``path`` with ``df`` (temp file in the same folder, fsync, os.replace).

    Call it under the file's lock (TuningDB does); on its own it is atomic but not merge-safe.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = to_csv_text(df).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _before_replace_hook(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _before_replace_hook(tmp: str) -> None:
    """Test seam: runs between the temp file's fsync and the rename (crash tests replace it)."""


# --------------------------------------------------------------------------------------------
# a database file with its lock
# --------------------------------------------------------------------------------------------
class TuningDB:
    """One database file and its lock. ``add`` merges rows in safely; ``read`` takes a snapshot."""

    def __init__(self, path: str | os.PathLike, *, lock_timeout: float = 600.0):
        self.path = Path(path).expanduser()
        self.lock_timeout = lock_timeout

    def __repr__(self) -> str:
        return f"TuningDB({str(self.path)!r})"

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def lock(self):
        from filelock import FileLock

        self.path.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.lock_path), timeout=self.lock_timeout)

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> pd.DataFrame:
        """A consistent snapshot (os.replace makes every read see a whole file; no lock needed)."""
        return read_db(self.path)

    def add(self, rows: Iterable[Mapping[str, Any]] | pd.DataFrame) -> int:
        """Merge rows into the file under its lock (same identity: the new row wins); returns count."""
        new = _frame(rows)
        if len(new) == 0:
            return 0
        with self.lock():
            old = read_db(self.path)
            write_db(self.path, upsert(old, new))
        _notify_change()
        return len(new)

    def merge_from(self, sources: Sequence[str | os.PathLike], *, remove_sources: bool = False) -> int:
        """Fold shard files into this file, keeping the best row per identity (:func:`keep_best`)."""
        frames = []
        for s in sources:
            sdb = TuningDB(s)
            if Path(s).resolve() == self.path.resolve():
                continue
            frames.append(sdb.read())
        with self.lock():
            old = read_db(self.path)
            both = pd.concat([old, *frames], ignore_index=True) if frames else old
            merged = keep_best(both)
            write_db(self.path, merged)
        _notify_change()
        if remove_sources:
            for s in sources:
                if Path(s).resolve() != self.path.resolve():
                    Path(s).unlink(missing_ok=True)
                    Path(str(s) + ".lock").unlink(missing_ok=True)
        return len(merged)


def merge_files(sources: Sequence[str | os.PathLike], dest: str | os.PathLike, *,
                remove_sources: bool = False) -> int:
    """``instance-factory tune merge``: shards -> one file (best row per identity); returns rows."""
    return TuningDB(dest).merge_from(sources, remove_sources=remove_sources)


_LISTENERS: list[Any] = []


def _notify_change() -> None:
    """Tell in-process readers (the lookup cache) that a database file changed."""
    for fn in list(_LISTENERS):
        fn()


# --------------------------------------------------------------------------------------------
# validity and the derived best
# --------------------------------------------------------------------------------------------
def valid_rows(df: pd.DataFrame, *, device: DeviceInfo | None = None, software: Software | None = None,
               kernel_hashes: Mapping[str, str] | Callable[[str], str | None] | None = None,
               ok_only: bool = True) -> pd.DataFrame:
    """Rows measured on ``device`` with ``software`` whose kernel hash still matches.

    ``kernel_hashes`` maps instance name -> current kernel hash (a mapping, or a function such as
    :func:`registry_kernel_hashes`); an instance it does not know (removed from the registry) makes
    its rows invalid too.
    """
    if len(df) == 0:
        return df
    m = pd.Series(True, index=df.index)
    if ok_only:
        m &= df["status"] == "ok"
    if device is not None:
        m &= (df["device"] == device.name) & (df["device_cc"] == device.cc) & (
            df["device_sms"] == device.sms)
    if software is not None:
        m &= (df["triton_version"] == software.triton) & (df["torch_version"] == software.torch) & (
            df["package_version"] == software.package)
    if kernel_hashes is not None:
        get = kernel_hashes.get if isinstance(kernel_hashes, Mapping) else kernel_hashes
        current = {n: get(n) for n in df["instance"].unique()}
        m &= df["instance"].map(current) == df["kernel_hash"]
    return df[m.fillna(False).astype(bool)]


def read_valid_rows(path: str | os.PathLike, device: DeviceInfo, *, ok_only: bool = True,
                    software: Software | None = None, kernel_hashes: Callable | None = None) -> pd.DataFrame:
    """The rows of one database file that count on ``device`` with the current software and kernels."""
    return valid_rows(read_db(path), device=device, software=software or current_software(),
                      kernel_hashes=kernel_hashes or registry_kernel_hashes(), ok_only=ok_only)


def registry_kernel_hashes() -> Callable[[str], str | None]:
    """name -> the registry's current kernel hash (None for an unknown name), computed lazily."""
    from ..registry import get_registry

    reg = get_registry()

    def current(name: str) -> str | None:
        try:
            return reg.get(name).kernel_hash
        except KeyError:
            return None

    return current


def best_per_problem(df: pd.DataFrame) -> pd.DataFrame:
    """The fastest ``ok`` row per (problem, device, software): derived, never stored.

    Pass rows already filtered by :func:`valid_rows` to get what a lookup would choose.
    """
    ok = df[df["status"] == "ok"]
    if len(ok) == 0:
        return ok
    group = ["problem_key", *DEVICE_COLS, *SOFTWARE_COLS]
    ranked = ok.sort_values([*group, "median_ms", "instance"], kind="stable")
    return ranked.drop_duplicates(subset=group, keep="first").reset_index(drop=True)


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def instance_params_json(cfg: Mapping[str, Any]) -> str:
    return json.dumps(dict(cfg), sort_keys=True, separators=(",", ":"), default=str)
