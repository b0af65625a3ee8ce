"""Database files on disk: strict reads, appends, atomic rewrites, torn tails and stale temp files.

A file is the CSV text of :mod:`.schema`: a header, then one physical line per row; a name ending in
``.gz`` holds that text gzip-compressed (the shipped tier: a twelfth of the size), as one or more
gzip members (each append adds one; any gzip reader joins them). Writers hold the file's lock (see
:class:`~.database.TuningDB`) and either

* **append** new rows (O(new rows): the file is not rewritten; a later row replaces an earlier one
  with the same identity when the file is read), or
* **rewrite** it whole (compaction, merges, a header from an older schema): a temporary file in the
  same folder, fsync, ``os.replace``, so a reader sees the old or the new file, never half of one.

A writer killed in the middle of an append leaves a last line without its line end, or in a ``.gz``
file a last member cut short (a *torn tail*): readers ignore it with a :class:`TornTailWarning` and
the next writer cuts it off under the lock (it was never a committed row: ``add`` returns only after
the append is fsynced). A writer killed between a temporary file's fsync and its rename leaves that
temporary file behind: the next writer of the file removes it (under the lock no other writer of that
file can be using one).
"""

from __future__ import annotations

import gzip
import os
import stat
import tempfile
import warnings
import zlib
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

__all__ = ["TornTailWarning", "append_rows", "check_new_rows", "encode_text", "file_signature", "is_compressed",
           "read_db", "remove_stale_temps", "write_db"]


def is_compressed(path: str | os.PathLike) -> bool:
    """A ``.gz`` database file (gzip members of the CSV text)."""
    return str(path).lower().endswith(".gz")


def _gzip_members(raw: bytes) -> tuple[bytes, int, str | None]:
    """(the text of the complete members, the byte length they span, a problem or None). A last
    member cut short is a torn tail (its bytes are left out of the length); anything that is not
    gzip data is a problem."""
    out, pos = [], 0
    while pos < len(raw):
        d = zlib.decompressobj(wbits=31)
        try:
            chunk = d.decompress(raw[pos:])
        except zlib.error as exc:
            return b"".join(out), pos, f"byte {pos}: not gzip data ({exc})"
        if not d.eof:  # cut short: a writer killed while appending this member
            return b"".join(out), pos, None
        out.append(chunk)
        pos = len(raw) - len(d.unused_data)
    return b"".join(out), pos, None


class TornTailWarning(UserWarning):
    """A database file's last line has no line end (a ``.gz`` file's last member is cut short): an append
    in progress or a killed writer."""


def _damaged(path: Path, problems: list[str]) -> DatabaseError:
    shown = "; ".join(problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return DatabaseError(
        f"damaged tuning database {path}: {shown}{more}. Nothing was read from it or written to it; "
        f"repair the file (it is CSV, gzip'd when its name ends in .gz; `git diff` or a backup shows what "
        f"changed) or move it away."
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
    if is_compressed(path):
        plain, complete, problem = _gzip_members(raw)
        if problem:
            raise _damaged(path, [problem])
        if complete < len(raw):
            if complete == 0:
                raise _damaged(path, ["its first gzip member is cut short (the file was cut short?)"])
            warnings.warn(f"tuning database {path}: ignoring its incomplete last gzip member "
                          f"({len(raw) - complete} bytes: an append in progress, or a writer killed while "
                          f"appending)", TornTailWarning, stacklevel=2)
        raw = plain
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
    data = encode_text(path, header_line() + check_new_rows(df))
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


def encode_text(path: str | os.PathLike, text: str) -> bytes:
    """The bytes that hold ``text`` in ``path``: gzip for a ``.gz`` name (no time stamp, so the same
    rows give the same bytes), UTF-8 otherwise."""
    data = text.encode("utf-8")
    return gzip.compress(data, compresslevel=9, mtime=0) if is_compressed(path) else data


def _first_line(path: Path) -> str:
    if is_compressed(path):
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="") as f:
                return f.readline()
        except (OSError, EOFError, zlib.error):
            return ""  # not a header: the caller rewrites through read_db, which names the damage
    with open(path, "rb") as f:
        return f.readline().decode("utf-8", "replace")


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
    if _first_line(path) != header_line():  # another schema version (or a damaged header: read_db says so)
        old = read_db(path)
        write_db(path, pd.concat([old, df], ignore_index=True).drop_duplicates(list(IDENTITY), keep="last"))
        return
    _cut_torn_tail(path)
    data = encode_text(path, body)  # a .gz file gains one gzip member
    with open(path, "ab") as f:
        half = len(data) // 2
        f.write(data[:half])
        f.flush()
        _before_append_hook(path)
        f.write(data[half:])
        f.flush()
        os.fsync(f.fileno())


def _cut_torn_tail(path: Path) -> None:
    """Truncate ``path`` after its last line end, or a ``.gz`` file after its last complete member
    (it has at least the header line)."""
    if is_compressed(path):
        raw = path.read_bytes()
        _, complete, problem = _gzip_members(raw)
        if problem or complete == 0:
            raise DatabaseError(f"damaged tuning database {path}: {problem or 'no complete gzip member'}")
        if complete < len(raw):
            with open(path, "rb+") as f:
                f.truncate(complete)
                f.flush()
                os.fsync(f.fileno())
        return
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
