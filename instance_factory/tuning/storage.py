"""Database files on disk: strict reads, appends, atomic rewrites, torn tails and stale temp files.

A file is the CSV text of :mod:`.schema`: a header, then one physical line per row. Writers hold the
file's lock (see :class:`~.database.TuningDB`) and either

* **append** new rows (O(new rows): the file is not rewritten; a later row replaces an earlier one
  with the same identity when the file is read), or
* **rewrite** it whole (compaction, merges, a header from an older schema): a temporary file in the
  same folder, fsync, ``os.replace``, so a reader sees the old or the new file, never half of one.

A writer killed in the middle of an append leaves a last line without its line end (a *torn tail*):
readers ignore it with a :class:`TornTailWarning` and the next writer cuts it off under the lock (it
was never a committed row: ``add`` returns only after the append is fsynced). A writer killed
between a temporary file's fsync and its rename leaves that temporary file behind: the next writer
of the file removes it (under the lock no other writer of that file can be using one).
"""

from __future__ import annotations

import os
import stat
import tempfile
import warnings
from pathlib import Path

import pandas as pd

from .schema import (
    IDENTITY,
    DatabaseError,
    empty_frame,
    header_line,
    parse_csv_text,
    sort_rows,
    to_csv_text,
)

__all__ = ["TornTailWarning", "append_rows", "check_new_rows", "file_signature", "read_db",
           "remove_stale_temps", "write_db"]


class TornTailWarning(UserWarning):
    """A database file's last line has no line end: an append in progress or a killed writer."""


def _damaged(path: Path, problems: list[str]) -> DatabaseError:
    shown = "; ".join(problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return DatabaseError(
        f"damaged tuning database {path}: {shown}{more}. Nothing was read from it or written to it; "
        f"repair the file (it is CSV; `git diff` or a backup shows what changed) or move it away."
    )


def read_db(path: str | os.PathLike) -> pd.DataFrame:
    """Read one database file: a missing file is an empty database, a damaged one a DatabaseError.
    Rows come back one per identity (the last one in the file wins), sorted by identity."""
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
    if not text.endswith("\n"):
        cut = text.rfind("\n") + 1
        if cut == 0:
            raise _damaged(path, ["the header row has no line end (the file was cut short?)"])
        warnings.warn(f"tuning database {path}: ignoring its incomplete last line ({len(text) - cut} bytes "
                      f"without a line end: an append in progress, or a writer killed while appending)",
                      TornTailWarning, stacklevel=2)
        text = text[:cut]
    df, problems = parse_csv_text(text)
    if problems:
        raise _damaged(path, problems)
    if df.duplicated(subset=list(IDENTITY)).any():
        df = df.drop_duplicates(subset=list(IDENTITY), keep="last")
    return sort_rows(df)


def check_new_rows(df: pd.DataFrame) -> str:
    """The text that writing ``df`` appends (sorted rows, no header), after the reader's own checks
    accepted exactly that text; invalid rows raise DatabaseError naming each, and nothing is written."""
    body = to_csv_text(df, header=False)
    _, problems = parse_csv_text(header_line() + body)
    if problems:
        rows = sort_rows(df)

        def name(p: str) -> str:  # "line N: ..." -> the row's instance and problem
            if p.startswith("line "):
                n = int(p[5:p.index(":")]) - 2
                r = rows.iloc[n]
                return f"row {n + 1} of {len(rows)} ({r['instance'] or '(no instance)'} on {r['problem_key']}): " \
                       f"{p[p.index(':') + 2:]}"
            return p

        shown = "; ".join(name(p) for p in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise DatabaseError(f"invalid tuning-database rows, nothing was written: {shown}{more}")
    return body


def write_db(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """Atomically replace ``path`` with ``df`` (temp file in the same folder, fsync, os.replace).

    Call it under the file's lock (TuningDB does); on its own it is atomic but not merge-safe.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (header_line() + check_new_rows(df)).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file 0600: keep the replaced file's mode (a shared database stays readable by
        # the others who read it)
        os.fchmod(fd, _file_mode(path))
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
    _fsync_dir(path.parent)


def _file_mode(path: Path) -> int:
    """The mode a rewrite of ``path`` keeps: its own, or 0644 for a new file (reading the umask would
    set it for a moment, which other threads creating files would see)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o644


def _fsync_dir(folder: Path) -> None:
    try:  # make a rename or a new file's name durable
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _before_replace_hook(tmp: str) -> None:
    """Test seam: runs between the temp file's fsync and the rename (crash tests replace it)."""


def _before_append_hook(path: Path) -> None:
    """Test seam: runs after an append's first half is written, before the rest (crash tests)."""


def remove_stale_temps(path: Path) -> list[str]:
    """Remove temporary files a killed writer of ``path`` left; call under the file's lock."""
    removed = []
    try:
        names = os.listdir(path.parent)
    except FileNotFoundError:
        return removed
    prefix = f".{path.name}."
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                os.unlink(path.parent / name)
                removed.append(name)
            except OSError:
                pass
    return removed


def append_rows(path: Path, df: pd.DataFrame, body: str | None = None) -> None:
    """Append ``df``'s rows to ``path`` (under its lock): creates the file if missing, rewrites it when
    its header is not this schema's (a file of an older version), cuts off a torn tail first.
    ``body``: :func:`check_new_rows` of ``df`` if the caller checked it already (outside the lock)."""
    if body is None:
        body = check_new_rows(df)  # before anything is touched
    remove_stale_temps(path)
    if not path.exists():
        write_db(path, df)
        return
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", "replace")
    if first != header_line():  # another schema version (or a damaged header: read_db says so)
        old = read_db(path)
        write_db(path, pd.concat([old, df], ignore_index=True).drop_duplicates(list(IDENTITY), keep="last"))
        return
    _cut_torn_tail(path)
    data = body.encode("utf-8")
    with open(path, "ab") as f:
        half = len(data) // 2
        f.write(data[:half])
        f.flush()
        _before_append_hook(path)
        f.write(data[half:])
        f.flush()
        os.fsync(f.fileno())


def _cut_torn_tail(path: Path) -> None:
    """Truncate ``path`` after its last line end (it has at least the header line)."""
    size = path.stat().st_size
    with open(path, "rb+") as f:
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        pos, chunk = size, 65536
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            buf = f.read(pos - start)
            i = buf.rfind(b"\n")
            if i >= 0:
                f.truncate(start + i + 1)
                f.flush()
                os.fsync(f.fileno())
                return
            pos = start
        raise DatabaseError(f"damaged tuning database {path}: no complete line (not even the header)")


def file_signature(path: Path) -> tuple | None:
    """(inode, size, mtime) of ``path`` or None: changes with every append, rewrite or removal."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
