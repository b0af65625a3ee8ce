"""The tuning database's row schema: columns, problem keys, the CSV text, and the one row check.

Every row is checked by :func:`parse_csv_text` whether it is read from a file or about to be
written: a writer serializes its rows to the exact text it would write and parses that text back
through the reader's checks, so the writer can never store a row the reader would refuse.

Schema versions: 1 (no ``schema_version`` column; the files before it) and 2 (the column added,
always filled). Rows of a newer version than this software knows make the file unreadable here.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "COLUMNS", "IDENTITY", "SCHEMA", "SCHEMA_VERSION", "STATUSES", "DatabaseError", "empty_frame",
    "frame", "parse_csv_text", "problem_fields", "problem_key", "split_problem_key", "to_csv_text",
]

SCHEMA_VERSION = 2
_STR, _INT, _FLOAT = "str", "int", "float"

#: (column, kind, required-non-empty) in file order.
SCHEMA: tuple[tuple[str, str, bool], ...] = (
    # the problem: the fixed-order key, then every field on its own
    ("problem_key", _STR, True), ("op", _STR, True), ("layout", _STR, True), ("dtype", _STR, True),
    ("fused_op", _STR, True), ("ndim", _INT, True), ("G", _INT, True), ("N", _INT, True),
    ("K", _INT, True), ("C", _INT, True), ("filter", _STR, True), ("input", _STR, True),
    ("stride", _STR, True), ("dilation", _STR, True), ("left_pad", _STR, True), ("right_pad", _STR, True),
    # the instance
    ("instance", _STR, True), ("algorithm", _STR, True), ("instance_params", _STR, True),
    ("kernel_hash", _STR, True),
    # the device
    ("device", _STR, True), ("device_cc", _STR, False), ("device_sms", _INT, True),
    # the software
    ("triton_version", _STR, True), ("torch_version", _STR, True), ("package_version", _STR, True),
    # the result
    ("status", _STR, True), ("reason", _STR, False), ("median_ms", _FLOAT, False),
    ("p20_ms", _FLOAT, False), ("p80_ms", _FLOAT, False), ("reps", _INT, False),
    ("tflops", _FLOAT, False), ("gbps", _FLOAT, False), ("cudnn_ms", _FLOAT, False),
    ("cudnn_impl", _STR, False), ("speedup", _FLOAT, False), ("rel_err", _FLOAT, False),
    ("max_rel_err", _FLOAT, False), ("tolerance", _FLOAT, False), ("timing", _STR, False),
    ("timestamp", _STR, True),
    ("schema_version", _INT, True),  # appended last so that older column positions stay put
)
COLUMNS: tuple[str, ...] = tuple(c for c, _, _ in SCHEMA)
KIND = {c: k for c, k, _ in SCHEMA}
_REQUIRED = tuple(c for c, _, r in SCHEMA if r)

#: Columns that identify one result: a newer row with the same identity replaces an older one.
IDENTITY: tuple[str, ...] = (
    "problem_key", "device", "device_cc", "device_sms", "triton_version", "torch_version",
    "package_version", "instance", "kernel_hash",
)
PROBLEM_FIELDS = ("ndim", "G", "N", "K", "C", "filter", "input", "stride", "dilation", "left_pad",
                  "right_pad")
OPS = ("conv_bwd_data", "conv_bwd_weight")

#: ok: verified and timed. pruned: ran, but one run of it was so much slower than the problem's
#: best single run that it was not benchmarked (``median_ms`` holds that one run, ``timing`` says
#: ``single-run (pruned)``; verified unless the reason says otherwise); never chosen: lookups, the
#: derived best, the summary and the report read ``ok`` rows only, and a merge prefers an ``ok`` row
#: of the same identity. failed: wrong result, or an error while running. compile_error: the kernel
#: did not build. oom: out of GPU memory or of a kernel resource (shared memory, registers).
STATUSES = ("ok", "pruned", "failed", "compile_error", "oom")
STATUS_RANK = {"ok": 0, "pruned": 1, "failed": 2, "oom": 3, "compile_error": 4}


class DatabaseError(ValueError):
    """A tuning-database file or row that cannot be read as one; the message names the file and line
    (or the rejected row)."""


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


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def instance_params_json(cfg: Mapping[str, Any]) -> str:
    return json.dumps(dict(cfg), sort_keys=True, separators=(",", ":"), default=str)


# --------------------------------------------------------------------------------------------
# frames
# --------------------------------------------------------------------------------------------
def empty_frame() -> pd.DataFrame:
    return typed(pd.DataFrame({c: [] for c in COLUMNS}))


def typed(df: pd.DataFrame) -> pd.DataFrame:
    """Give every schema column its dtype (str, Int64, float64; extra columns str), in file order.
    A row without ``schema_version`` is written now, i.e. of the current version."""
    df = df.copy(deep=False)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = SCHEMA_VERSION if c == "schema_version" else None
    for c in df.columns:
        kind = KIND.get(c, _STR)
        col = df[c]
        if kind == _INT:
            if str(col.dtype) != "Int64":
                df[c] = pd.to_numeric(col, errors="raise").astype("Int64")
        elif kind == _FLOAT:
            if col.dtype != "float64":
                df[c] = pd.to_numeric(col, errors="raise").astype("float64")
        else:
            df[c] = col.where(col.notna(), "").astype(str)
    extra = sorted(c for c in df.columns if c not in KIND)
    return df[list(COLUMNS) + extra].reset_index(drop=True)


def frame(rows: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """A typed frame of rows (dicts or a DataFrame); not yet checked (see :func:`check_rows`)."""
    if isinstance(rows, pd.DataFrame):
        df = rows
    else:
        rows = list(rows)
        if not rows:
            return empty_frame()
        df = pd.DataFrame(rows)
    unknown_status = set(df["status"].astype(str)) - set(STATUSES) if "status" in df else set()
    if unknown_status:
        raise DatabaseError(f"unknown status {sorted(unknown_status)}; use one of {STATUSES}")
    try:
        return typed(df)
    except (ValueError, TypeError) as exc:
        raise DatabaseError(f"a row has a value of the wrong type: {exc}") from None


def sort_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(list(IDENTITY), kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------
def _column_text(col: pd.Series, kind: str) -> list[str]:
    if kind == _FLOAT:
        return ["" if v != v else format(v, ".6g")  # NaN -> empty; inf -> "inf"
                for v in col.to_numpy(dtype="float64", na_value=math.nan).tolist()]
    if kind == _INT:
        return ["" if v is pd.NA else str(v) for v in col.astype(object).tolist()]
    # one physical line per row: a line break inside a reason would defeat torn-append detection
    return col.str.replace(r"[\r\n]+", " ", regex=True).tolist()


def to_csv_text(df: pd.DataFrame, *, header: bool = True, sort: bool = True) -> str:
    """The file's text: header, rows sorted by identity, floats as %.6g, missing values empty."""
    df = typed(df)
    if sort:
        df = sort_rows(df)
    cols = [_column_text(df[c], KIND.get(c, _STR)) for c in df.columns]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if header:
        w.writerow(df.columns)
    w.writerows(zip(*cols))
    return buf.getvalue()


def header_line() -> str:
    return ",".join(COLUMNS) + "\n"


def parse_csv_text(text: str) -> tuple[pd.DataFrame, list[str]]:
    """Parse and check a whole file's text (header first): (typed frame, problems). Each problem
    names its line; a frame is returned only when there is none (else an empty one)."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        records: list[list[str]] = list(reader)
    except csv.Error as exc:
        return empty_frame(), [f"line {reader.line_num}: CSV syntax error: {exc}"]
    if reader.line_num == len(records):  # one physical line per record (the format): record i is line i + 1
        line_nums = list(range(1, len(records) + 1))
    else:  # a quoted field spans lines: count them record by record
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        line_nums = []
        for _ in reader:
            line_nums.append(reader.line_num)
    if not records:
        return empty_frame(), ["the file is empty (no header row)"]
    header = records[0]
    missing = [c for c in COLUMNS if c not in header and c != "schema_version"]
    if missing:
        return empty_frame(), [f"header lacks the columns {missing} (header is line 1: {header[:6]}...)"]
    if len(set(header)) != len(header):
        return empty_frame(), ["the header names a column twice"]
    width = len(header)
    problems: list[str] = []
    good, good_lines = [], []
    for rec, lineno in zip(records[1:], line_nums[1:]):
        if len(rec) != width:
            problems.append(f"line {lineno} has {len(rec)} fields, the header has {width}" if rec
                            else f"line {lineno} is empty")
            continue
        good.append(rec)
        good_lines.append(lineno)
    df = pd.DataFrame(good, columns=header, dtype=object)
    if "schema_version" not in df.columns:
        df["schema_version"] = "1"
    numeric: dict[str, pd.Series] = {}
    if len(df):
        problems += check_rows(df, pd.Series(good_lines, dtype="int64"), numeric)
    if problems:
        return empty_frame(), problems
    for c, num in numeric.items():
        df[c] = num.astype("Int64") if KIND[c] == _INT else num.astype("float64")
    return typed(df), []


# --------------------------------------------------------------------------------------------
# the row check
# --------------------------------------------------------------------------------------------
def check_rows(df: pd.DataFrame, lines: pd.Series, numeric: dict[str, pd.Series]) -> list[str]:
    """Problems of a freshly parsed all-string frame, each naming its line (at most one per line);
    fills ``numeric`` with the parsed number columns."""
    from ..dtypes import DATA_TYPES

    problems: list[str] = []
    df = df.reset_index(drop=True)
    bad_any = np.zeros(len(df), dtype=bool)

    def report(mask: pd.Series, what: Any) -> None:
        m = mask.to_numpy(dtype=bool, na_value=False)
        if not m.any():  # the usual case: keep it cheap (plain numpy, no pandas alignment)
            return
        m = m & ~bad_any
        for i in np.flatnonzero(m)[:5]:
            problems.append(f"line {lines.iloc[i]}: {what(i) if callable(what) else what}")
        bad_any[m] = True

    for c in _REQUIRED:
        report(df[c] == "", f"no value for {c}")
    report(~df["status"].isin(STATUSES), lambda i: f"unknown status {df['status'][i]!r}")
    report(~df["op"].isin(OPS), lambda i: f"unknown op {df['op'][i]!r}")
    report(~df["dtype"].isin(list(DATA_TYPES)), lambda i: f"unknown dtype {df['dtype'][i]!r}")
    for c, kind, _ in SCHEMA:
        if kind == _STR:
            continue
        col = df[c]
        filled = col != ""
        num = pd.to_numeric(col.where(filled, None), errors="coerce")
        numeric[c] = num
        bad = filled & num.isna()  # "nan" parses to NaN too: never a stored value
        if kind == _INT:
            bad |= filled & num.notna() & ((num % 1) != 0)
        report(bad, lambda i, c=c, kind=kind: f"{c}={df[c][i]!r} is not a{'n int' if kind == _INT else ' number'}")
    problems += _check_ranges(df, numeric, report)
    problems += _check_keys(df, report)
    return problems


def _check_ranges(df: pd.DataFrame, num: dict[str, pd.Series], report: Any) -> list[str]:
    """Numbers that parse but cannot be true: timings <= 0, an ok row outside its tolerance, ..."""
    from ..dtypes import DATA_TYPES

    v = num["schema_version"]
    report((v < 1) | (v > SCHEMA_VERSION), lambda i: (
        f"schema_version {df['schema_version'][i]} is not one this instance_factory knows (1..{SCHEMA_VERSION}); "
        f"the file was written by a newer version"))
    for c in ("median_ms", "p20_ms", "p80_ms", "cudnn_ms", "speedup", "tolerance"):
        x = num[c]
        report(x.notna() & ~((x > 0) & (x < math.inf)),
               lambda i, c=c: f"{c}={df[c][i]} is not a positive finite number")
    for c in ("tflops", "gbps"):
        x = num[c]
        report(x.notna() & ~((x >= 0) & (x < math.inf)), lambda i, c=c: f"{c}={df[c][i]} is not a finite number >= 0")
    report(num["reps"].notna() & (num["reps"] < 1), "reps < 1")
    report(num["device_sms"] < 0, "device_sms < 0")
    for c in ("rel_err", "max_rel_err"):
        report(num[c] < 0, lambda i, c=c: f"{c}={df[c][i]} is negative")
    med, p20, p80 = num["median_ms"], num["p20_ms"], num["p80_ms"]
    report((p20 > med) | (med > p80), lambda i: f"p20_ms <= median_ms <= p80_ms does not hold "
                                                f"({df['p20_ms'][i]}, {df['median_ms'][i]}, {df['p80_ms'][i]})")
    ok = df["status"] == "ok"
    report(ok & med.isna(), "an ok row without median_ms")
    report((df["status"] == "pruned") & med.isna(), "a pruned row without median_ms (its single run)")
    # an ok row is a verified one: both errors within the data type's tolerances
    dt_tol = df["dtype"].map({n: d.tolerance for n, d in DATA_TYPES.items()})
    dt_max = df["dtype"].map({n: d.max_tolerance for n, d in DATA_TYPES.items()})
    rel, mrel, tol = num["rel_err"], num["max_rel_err"], num["tolerance"]
    report(ok & (rel.isna() | tol.isna() | mrel.isna()), "an ok row without rel_err, max_rel_err and tolerance "
                                                         "(ok means verified)")
    report(ok & (tol > dt_tol), lambda i: f"tolerance {df['tolerance'][i]} is looser than {df['dtype'][i]}'s "
                                          f"{dt_tol[i]:g}")
    report(ok & ~(rel <= tol), lambda i: f"an ok row with rel_err {df['rel_err'][i]} > its tolerance "
                                         f"{df['tolerance'][i]}")
    report(ok & ~(mrel <= dt_max), lambda i: f"an ok row with max_rel_err {df['max_rel_err'][i]} > "
                                             f"{df['dtype'][i]}'s worst-element tolerance {dt_max[i]:g}")
    return []


def _check_keys(df: pd.DataFrame, report: Any) -> list[str]:
    """Each row's problem_key must be the key of its own field columns."""
    cols = ["problem_key", "op", "layout", "dtype", "fused_op", *PROBLEM_FIELDS]
    wrong: dict[tuple, str] = {}
    for rec in df[cols].drop_duplicates().to_dict("records"):
        try:
            want = problem_key(rec["op"], params_from_row(rec), rec["layout"], rec["dtype"], rec["fused_op"])
        except ValueError as exc:
            wrong[tuple(rec[c] for c in cols)] = f"the problem fields do not make a problem ({exc})"
            continue
        if want != rec["problem_key"]:
            wrong[tuple(rec[c] for c in cols)] = (f"problem_key {rec['problem_key']!r} does not match its field "
                                                 f"columns ({want!r})")
    if wrong:
        keys = pd.Series(list(zip(*(df[c] for c in cols))), index=df.index)
        report(keys.isin(list(wrong)), lambda i: wrong[keys[i]])
    return []
