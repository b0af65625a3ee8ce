"""The tuning database: one row per (device, software, problem, instance) measurement.

Storage
    A CSV file with a header row, one row per result, columns in :data:`COLUMNS` order
    (:mod:`.schema`, with a ``schema_version``), floats written with 6 significant digits and missing
    values as empty fields; gzip-compressed when the name ends in ``.gz`` (the shipped tier: the
    device copies and wheels stay small; ``gzip -dc`` or ``instance-factory db show`` read it).
    ``add`` appends (it never rewrites the file; a later row replaces an
    earlier one of the same identity when read); ``compact`` (run at the end of every sweep) and
    merges rewrite it sorted by identity, so a re-tune shows up in ``git diff`` as the changed rows.

Tiers
    * system tier: ``tuning_db/<device-kind>.csv.gz`` shipped with the package, read-only at run time
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
    Every row is checked on write exactly as on read (:func:`.schema.parse_csv_text`): an invalid row
    (an ok row without a positive median or outside its tolerance, an empty instance or kernel hash,
    a problem key that disagrees with its fields, ...) raises :class:`DatabaseError` and nothing is
    written. Every writer takes ``<file>.lock`` (filelock). Appends are fsynced before ``add``
    returns; a writer killed mid-append leaves a torn last line that readers ignore and the next
    writer cuts off; rewrites go through a temporary file, fsync and ``os.replace``, and temporary
    files left by a killed writer are removed by the next one (:mod:`.storage`). A file that does not
    parse raises :class:`DatabaseError` naming the file and the line; lookups warn
    (:class:`DamagedTierWarning`) and skip that tier instead; writers never rewrite a damaged file.

The best instance per problem is derived (:func:`best_per_problem`), never stored.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..algorithms import emulating_gpu
from .schema import (
    COLUMNS,
    IDENTITY,
    SCHEMA,
    SCHEMA_VERSION,
    STATUS_RANK,
    STATUSES,
    DatabaseError,
    empty_frame,
    instance_params_json,
    now_utc,
    params_from_row,
    problem_fields,
    problem_key,
    sort_rows,
    split_problem_key,
    to_csv_text,
    typed,
)
from .schema import frame as _frame
from .storage import (
    TornTailWarning,
    append_rows,
    check_new_rows,
    file_signature,
    read_db,
    remove_stale_temps,
    write_db,
)

__all__ = [
    "COLUMNS",
    "IDENTITY",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STATUSES",
    "DamagedTierWarning",
    "DatabaseError",
    "DeviceInfo",
    "Software",
    "TornTailWarning",
    "TuningDB",
    "best_per_problem",
    "current_device",
    "current_software",
    "emulated",
    "empty_frame",
    "file_signature",
    "instance_params_json",
    "merge_files",
    "now_utc",
    "params_from_row",
    "problem_fields",
    "problem_key",
    "read_db",
    "read_db_or_warn",
    "split_problem_key",
    "system_db_dir",
    "system_db_files",
    "system_db_path",
    "DB_SUFFIXES",
    "to_csv_text",
    "user_db_path",
    "valid_rows",
    "write_db",
]

DEVICE_COLS = ("device", "device_cc", "device_sms")
SOFTWARE_COLS = ("triton_version", "torch_version", "package_version")


class DamagedTierWarning(UserWarning):
    """A database tier could not be read: lookups skip it (the other tier, then the miss policy)."""


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

        from ..version import __version__

        _SOFTWARE.append(Software(str(triton.__version__), str(torch.__version__), str(__version__)))
    return _SOFTWARE[0]


@contextmanager
def emulated(device: DeviceInfo, software: Software | None = None, *, as_current: bool = False) -> Iterator[str]:
    """Inside, ``current_device(key)`` (the key given back: the device's kind, e.g. "nvidia-h100-80gb-hbm3")
    answers ``device`` and ``current_software()`` answers ``software`` (when given): lookups made with that
    key choose as they would on that GPU with those versions (rows of other versions fail the software
    check), e.g. to replay a GPU run's untuned picks on a CPU (tools/heldout_replay.py). ``as_current``: so
    does ``current_device()`` itself, for code that asks for the machine's own device (a whole CLI command,
    tools/bench_from_rows.py)."""
    key = device.kind
    keys = (key, None) if as_current else (key,)
    saved = {k: _DEVICE_CACHE[k] for k in keys if k in _DEVICE_CACHE}
    old_software = list(_SOFTWARE)
    for k in keys:
        _DEVICE_CACHE[k] = device
    if software is not None:
        _SOFTWARE[:] = [software]
    try:
        with emulating_gpu():  # candidates as on the GPU: families that need one (bdring) do not decline
            yield key
    finally:
        for k in keys:
            if k in saved:
                _DEVICE_CACHE[k] = saved[k]
            else:
                _DEVICE_CACHE.pop(k, None)
        _SOFTWARE[:] = old_software


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


DB_SUFFIXES = (".csv.gz", ".csv")  # the shipped tier's files are gzip'd; a plain one still reads


def system_db_path(device_kind: str) -> Path:
    """``tuning_db/<kind>.csv.gz``, or the plain ``<kind>.csv`` where only that one exists."""
    d = system_db_dir()
    for suffix in DB_SUFFIXES:
        if (d / f"{device_kind}{suffix}").exists():
            return d / f"{device_kind}{suffix}"
    return d / f"{device_kind}{DB_SUFFIXES[0]}"


def system_db_files(folder: str | os.PathLike | None = None) -> list[Path]:
    """Every database file of the system tier (or of ``folder``), sorted by name."""
    d = Path(folder) if folder is not None else system_db_dir()
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.is_file() and p.name.lower().endswith(DB_SUFFIXES))


def user_db_path(device_kind: str) -> Path:
    """``$INSTANCE_FACTORY_USER_DB`` (a ``.csv`` or ``.csv.gz`` file, or a folder holding ``<kind>.csv``)."""
    env = os.environ.get("INSTANCE_FACTORY_USER_DB")
    if env:
        p = Path(env).expanduser()
        if p.name.lower().endswith(DB_SUFFIXES):
            return p
        return p / f"{device_kind}.csv"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "instance_factory" / f"{device_kind}.csv"


# --------------------------------------------------------------------------------------------
# combining rows
# --------------------------------------------------------------------------------------------
def keep_best(df: pd.DataFrame) -> pd.DataFrame:
    """One row per identity: an ``ok`` row before a failed one, then the fastest, then the newest;
    a full tie goes to the row whose file text sorts first (the result never depends on the order
    of the sources)."""
    if len(df) == 0:
        return typed(df)
    df = typed(df)
    text = pd.Series(to_csv_text(df, header=False, sort=False).splitlines(), index=df.index)
    order = df.assign(
        _rank=df["status"].map(STATUS_RANK).fillna(9),
        _ms=df["median_ms"].fillna(math.inf),
        _neg_ts=df["timestamp"],
        _text=text,
    ).sort_values(["_rank", "_ms", "_neg_ts", "_text"], ascending=[True, True, False, True], kind="stable")
    out = order.drop_duplicates(subset=list(IDENTITY), keep="first")
    return sort_rows(out.drop(columns=["_rank", "_ms", "_neg_ts", "_text"]))


# --------------------------------------------------------------------------------------------
# a database file with its lock
# --------------------------------------------------------------------------------------------
class TuningDB:
    """One database file and its lock. ``add`` appends checked rows; ``read`` takes a snapshot."""

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
        """A consistent snapshot, one row per identity (no lock needed: appends are whole lines and
        rewrites are renames; an append in progress is an ignored torn tail)."""
        return read_db(self.path)

    def add(self, rows: Iterable[Mapping[str, Any]] | pd.DataFrame) -> int:
        """Append rows under the file's lock (same identity: the new row wins when read); returns the
        count. Every row is checked as a reader checks it first: one invalid row raises
        :class:`DatabaseError` and nothing is written."""
        new = _frame(rows)
        if len(new) == 0:
            return 0
        body = check_new_rows(new)  # outside the lock: other writers wait only for the append
        with self.lock():
            append_rows(self.path, new, body)
        _notify_change(self.path)
        return len(new)

    def compact(self) -> int:
        """Rewrite the file under its lock: one row per identity, sorted (diff-friendly); returns rows."""
        with self.lock():
            remove_stale_temps(self.path)
            if not self.path.exists():
                return 0
            df = read_db(self.path)
            write_db(self.path, df)
        _notify_change(self.path)
        return len(df)

    def prune_stale(self, kernel_hashes: Mapping[str, str] | Callable[[str], str | None] | None = None
                    ) -> tuple[int, int]:
        """Drop, under the lock, the rows whose kernel no longer exists or whose kernel hash changed
        (lookups ignore them already); rows of every device and software are kept. Returns
        (rows kept, rows dropped). An explicit maintenance step: nothing prunes on its own."""
        with self.lock():
            remove_stale_temps(self.path)
            if not self.path.exists():
                return 0, 0
            df = read_db(self.path)
            keep = valid_rows(df, kernel_hashes=kernel_hashes or registry_kernel_hashes(), ok_only=False)
            if len(keep) < len(df):
                write_db(self.path, keep)
        _notify_change(self.path)
        return len(keep), len(df) - len(keep)

    def merge_from(self, sources: Sequence[str | os.PathLike], *, remove_sources: bool = False) -> int:
        """Fold shard files into this file, keeping the best row per identity (:func:`keep_best`).

        Every file's lock is held (taken in path order, so two merges cannot deadlock) from reading
        the sources until they are removed: a writer appending to a shard meanwhile waits, then
        creates the shard anew, and no committed row is lost. A damaged source stops the merge before
        anything is written or removed. Lock files stay (removing one a waiter holds open would let two
        writers in at once).
        """
        me = self.path.resolve()
        srcs = [TuningDB(s) for s in dict.fromkeys(Path(s).expanduser() for s in sources)
                if Path(s).expanduser().resolve() != me]
        with ExitStack() as stack:
            for db in sorted([self, *srcs], key=lambda d: str(d.path.resolve())):
                stack.enter_context(db.lock())
            frames = [read_db(db.path) for db in srcs]
            remove_stale_temps(self.path)
            merged = keep_best(pd.concat([read_db(self.path), *frames], ignore_index=True))
            write_db(self.path, merged)
            if remove_sources:
                for db in srcs:
                    db.path.unlink(missing_ok=True)
        _notify_change(self.path)
        return len(merged)


def merge_files(sources: Sequence[str | os.PathLike], dest: str | os.PathLike, *,
                remove_sources: bool = False) -> int:
    """``instance-factory merge``: shards -> one file (best row per identity); returns rows."""
    return TuningDB(dest).merge_from(sources, remove_sources=remove_sources)


_LISTENERS: list[Any] = []


def _notify_change(path: Path) -> None:
    """Tell in-process readers (the lookup cache) that the database file ``path`` changed."""
    for fn in list(_LISTENERS):
        fn(path)


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
                    software: Software | None = None, kernel_hashes: Callable | None = None,
                    damaged: str = "raise") -> pd.DataFrame:
    """The rows of one database file that count on ``device`` with the current software and kernels.
    ``damaged="warn"``: a file that cannot be read gives a :class:`DamagedTierWarning` and no rows
    (lookups then serve the other tier or the miss policy) instead of a DatabaseError."""
    df = read_db_or_warn(path, stacklevel=3) if damaged == "warn" else read_db(path)
    return valid_rows(df, device=device, software=software or current_software(),
                      kernel_hashes=kernel_hashes or registry_kernel_hashes(), ok_only=ok_only)


def read_db_or_warn(path: str | os.PathLike, *, stacklevel: int = 2) -> pd.DataFrame:
    """:func:`read_db`, or no rows and a :class:`DamagedTierWarning` for a file that cannot be read
    (lookups then serve the other tier or the miss policy)."""
    try:
        return read_db(path)
    except DatabaseError as exc:
        warnings.warn(f"instance_factory: skipping a tuning database that cannot be read: {exc}",
                      DamagedTierWarning, stacklevel=stacklevel + 1)
        return empty_frame()


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


def best_per_problem(df: pd.DataFrame, group: Sequence[str] | None = None) -> pd.DataFrame:
    """The fastest ``ok`` row per (problem, device, software), or per ``group`` columns: derived,
    never stored (ties: the instance name decides).

    Pass rows already filtered by :func:`valid_rows` to get what a lookup would choose.
    """
    ok = df[df["status"] == "ok"]
    if len(ok) == 0:
        return ok
    group = list(group) if group is not None else ["problem_key", *DEVICE_COLS, *SOFTWARE_COLS]
    ranked = ok.sort_values([*group, "median_ms", "instance"], kind="stable")
    return ranked.drop_duplicates(subset=group, keep="first").reset_index(drop=True)
