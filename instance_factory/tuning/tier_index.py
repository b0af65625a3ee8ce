"""The run-time lookup's index of the database tiers: per device, the rows that count, cached per file.

:func:`get_index` builds a :class:`TierIndex` for one device from the system tier
(``tuning_db/<kind>.csv.gz``) and the user tier; on the first miss its evidence adds the other GPU
kinds' shipped files (the cost model's foreign rows). Parsing a shipped file takes seconds (the H100
file: ~3.5 s on a fast CPU), so each file is parsed once per signature (inode, size, mtime) and
reduced at once to what lookup keeps: its rows for this device and software (ranked per problem, and
as cost-model records) and its rows of other devices. When one tier changes (a sweep or the
background tuner appends to the user tier), the next index re-reads that file only: the shipped files
are not parsed again, nor twice (the system tier's file is also one of the foreign-evidence files).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["INDEXES", "TierIndex", "clear_indexes", "get_index"]

#: one index per device (``database.DeviceInfo``); lookup drops them when a tier file changes
INDEXES: dict[Any, TierIndex] = {}
_LOCK = threading.RLock()

_EVIDENCE_COLS = ("problem_key", "device", "instance", "algorithm", "instance_params", "status", "median_ms",
                  "p20_ms", "p80_ms")  # kernel_ms reads a disturbed row by its p20


@dataclass
class TierIndex:
    # problem key -> [(instance name, row)] fastest first, per tier
    user: dict[str, list[tuple[str, dict]]] = field(default_factory=dict)
    system: dict[str, list[tuple[str, dict]]] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    signatures: tuple[tuple, ...] = ()  # (path, file_signature) of both tiers, taken before reading
    rows: dict[str, list[dict]] = field(default_factory=dict)  # tier -> valid rows of any status
    _evidence: Any = None

    def evidence(self, dev: Any) -> Any:
        """The cost model's evidence (built on the first miss): every valid row of both tiers, a
        problem's user-tier rows replacing its system-tier ones, and the other GPU kinds' shipped rows."""
        if self._evidence is None:
            from .cost_model import Evidence
            from .database import file_signature, system_db_files

            user = self.rows.get("user", [])
            mine = {r["problem_key"] for r in user}
            rows = [r for r in self.rows.get("system", []) if r["problem_key"] not in mine] + user
            foreign = [r for path in system_db_files()
                       for r in getattr(_file_rows(path, file_signature(path), dev), "foreign", ())]
            self._evidence = Evidence.from_rows(rows, sms=dev.sms, foreign_rows=foreign)
        return self._evidence

    def ranked(self, key: str):
        """(tier, instance name, row), fastest first: the user tier's rows if it has the key."""
        if key in self.user:
            for name, row in self.user[key]:
                yield "user", name, row
        elif key in self.system:
            for name, row in self.system[key]:
                yield "system", name, row


@dataclass
class _FileRows:
    """One file's rows as lookup keeps them, valid while the file's signature and the registry hold."""

    signature: tuple | None
    registry: Any
    software: Any
    own: list[dict]  # rows measured on this device with this software, any status (cost-model records)
    ranked: dict[str, list[tuple[str, dict]]]  # problem key -> its ok rows fastest first
    foreign: list[dict]  # rows of other devices whose kernels are current (any software)


_FILES: dict[tuple[str, Any], _FileRows] = {}  # (resolved path, device) -> its rows


def get_index(dev: Any) -> TierIndex:
    idx = INDEXES.get(dev)
    if idx is not None:
        return idx
    with _LOCK:
        idx = INDEXES.get(dev)
        if idx is None:
            idx = INDEXES[dev] = _build_index(dev)
    return idx


def clear_indexes() -> None:
    """Forget the indexes (the per-file rows stay, checked against each file's signature on reuse)."""
    with _LOCK:
        INDEXES.clear()


def _build_index(dev: Any) -> TierIndex:
    from .database import file_signature, system_db_path, user_db_path

    idx = TierIndex()
    files = []
    tiers = (("system", system_db_path(dev.kind)), ("user", user_db_path(dev.kind)))
    idx.signatures = tuple((path, file_signature(path)) for _, path in tiers)
    for (tier, path), (_, sig) in zip(tiers, idx.signatures):
        got = _file_rows(path, sig, dev)
        if got is None:
            continue
        files.append(str(path))
        idx.rows[tier] = got.own
        setattr(idx, tier, got.ranked)
    idx.files = tuple(files)
    return idx


def _file_rows(path: Path, sig: tuple | None, dev: Any) -> _FileRows | None:
    """The file's rows for ``dev`` (None when it does not exist): from the cache while its signature,
    the registry and the software are those it was read with; a damaged file warns and counts as empty."""
    from ..registry import get_registry
    from .database import current_software, read_db_or_warn, registry_kernel_hashes, valid_rows

    if sig is None:
        return None
    key = (str(Path(path).resolve()), dev)
    reg, sw = get_registry(), current_software()
    with _LOCK:
        hit = _FILES.get(key)
        if hit is not None and hit.signature == sig and hit.registry is reg and hit.software == sw:
            return hit
    current = valid_rows(read_db_or_warn(path, stacklevel=3), kernel_hashes=registry_kernel_hashes(), ok_only=False)
    own = valid_rows(current, device=dev, software=sw, ok_only=False)
    got = _FileRows(sig, reg, sw, _evidence_records(own), _ranked_by_key(own[own["status"] == "ok"]),
                    _evidence_records(current[current["device"] != dev.name]) if len(current) else [])
    with _LOCK:
        _FILES[key] = got
    return got


def _evidence_records(df: Any) -> list[dict]:
    """The columns the cost model reads, as dicts (far quicker than ``to_dict("records")``)."""
    if len(df) == 0:
        return []
    cols = [df[c].tolist() for c in _EVIDENCE_COLS]
    return [dict(zip(_EVIDENCE_COLS, vals)) for vals in zip(*cols)]


def _ranked_by_key(df: Any) -> dict[str, list[tuple[str, dict]]]:
    out: dict[str, list[tuple[str, dict]]] = {}
    if len(df) == 0:
        return out
    df = df.sort_values(["problem_key", "median_ms", "instance"], kind="stable")
    for row in df.to_dict("records"):
        out.setdefault(row["problem_key"], []).append((row["instance"], row))
    return out
