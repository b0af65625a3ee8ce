"""Carry tuning rows and verification evidence over a change of the kernel-hash formula.

A row or an evidence line names its instance and the kernel hash it was measured with. When the
formula changes but not the kernel code (e.g. session 4: module text -> the kernels' own code,
``instance_factory/kernel_identity.py``), a row whose hash equals the *old* formula's hash of its
instance measured exactly today's kernel, and gets the new hash; any other row (already stale)
is left as it is, so it stays stale.

    git stash; python tools/rekey_kernel_hashes.py dump old.json; git stash pop   # old formula
    python tools/rekey_kernel_hashes.py dump new.json                             # new formula
    python tools/rekey_kernel_hashes.py apply old.json new.json tuning_db/*.csv.gz evidence/*.jsonl evidence/gpu/*.jsonl
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import sys
from pathlib import Path

from instance_factory.tuning.storage import encode_text, is_compressed


def dump(path: str) -> None:
    from instance_factory.registry import get_registry

    hashes = {i.name: i.kernel_hash for i in get_registry().instances()}
    Path(path).write_text(json.dumps(hashes, sort_keys=True))
    print(f"{len(hashes)} instances -> {path}")


def _rekey_csv(text: str, mapping: dict[str, tuple[str, str]]) -> tuple[str, int, int]:
    rows = list(csv.reader(io.StringIO(text)))
    head = rows[0]
    i_inst, i_hash = head.index("instance"), head.index("kernel_hash")
    changed = kept = 0
    for row in rows[1:]:
        old_new = mapping.get(row[i_inst])
        if old_new and row[i_hash] == old_new[0]:
            row[i_hash] = old_new[1]
            changed += 1
        else:
            kept += 1
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue(), changed, kept


def _rekey_jsonl(text: str, mapping: dict[str, tuple[str, str]]) -> tuple[str, int, int]:
    lines, changed, kept = [], 0, 0
    for line in text.splitlines():
        rec = json.loads(line) if line.strip() else None
        if isinstance(rec, dict) and "kernel_hash" in rec and "instance" in rec:
            old_new = mapping.get(rec["instance"])
            if old_new and rec["kernel_hash"] == old_new[0]:
                line = line.replace(f'"kernel_hash": "{old_new[0]}"', f'"kernel_hash": "{old_new[1]}"')
                changed += 1
            else:
                kept += 1
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else ""), changed, kept


def apply(old_path: str, new_path: str, files: list[str]) -> None:
    old, new = json.loads(Path(old_path).read_text()), json.loads(Path(new_path).read_text())
    mapping = {name: (old[name], new[name]) for name in old.keys() & new.keys()}
    for f in files:
        raw = Path(f).read_bytes()
        text = (gzip.decompress(raw) if is_compressed(f) else raw).decode("utf-8")  # the shipped tier: gzip'd
        fn = _rekey_csv if f.endswith((".csv", ".csv.gz")) else _rekey_jsonl
        out, changed, kept = fn(text, mapping)
        if out != text:
            tmp = Path(f + ".rekey.tmp")
            tmp.write_bytes(encode_text(f, out))  # the bytes storage.write_db would write
            os.replace(tmp, f)
        print(f"{f}: {changed} re-keyed, {kept} left as they were")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dump":
        dump(sys.argv[2])
    elif len(sys.argv) >= 5 and sys.argv[1] == "apply":
        apply(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)
