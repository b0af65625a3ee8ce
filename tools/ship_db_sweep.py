"""Re-tune the shipped database for this GPU in resumable chunks: fp16, bf16, fp32_tf32 and fp32, both
passes, channels-last (NHWGC) and channels-first (NGCHW), for the repo's network problem sets.

    python tools/ship_db_sweep.py --minutes 8 --out $OUT          # one chunk; run again to go on
    python tools/ship_db_sweep.py --status                          # what is done, what is left

Each run tunes in priority order (the dtypes and layouts the untuned path lacks most first) until
--minutes, into ``tuning_db/<device>.csv.gz`` (``--db system``) or --db. The tuner skips every
(problem, instance) pair the file already holds for this device, software and kernel, so a rerun
resumes where the last one stopped. The held-out set (configs/problem_sets/heldout.yaml) is never
tuned here: it must stay out of tuning_db/. Copy the database file and the printed summaries from
--out back into the repository after each chunk (``instance-factory merge`` if chunks ran on
several machines).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETS = ("quickstart", "resnet50", "mobilenet_v2", "resnext50_32x4d", "r3d_18", "wav2vec2")
#: (dtype, layout family) in priority order: fp16 had no shipped rows; channels-first had none
PLAN = (("fp16", "nhwgc"), ("bf16", "nhwgc"), ("fp16", "ngchw"), ("bf16", "ngchw"), ("fp32_tf32", "nhwgc"),
        ("fp32", "nhwgc"), ("fp32_tf32", "ngchw"), ("fp32", "ngchw"))


def status(db: str) -> list[tuple[str, str, int, int]]:
    """(dtype, layout, problems with valid rows, problems) per plan step."""
    from instance_factory.tuning.database import current_device, current_software, registry_kernel_hashes, valid_rows
    from instance_factory.tuning.problem_sets import expand_problem_set
    from instance_factory.tuning.tuner import resolve_db

    target = resolve_db(db)
    df = target.read()
    dev = current_device()
    keys = set()
    if len(df):
        keys = set(valid_rows(df, device=dev, software=current_software(), kernel_hashes=registry_kernel_hashes(),
                              ok_only=False)["problem_key"])
    out = []
    for dt, lay in PLAN:
        probs = [p for s in SETS for p in expand_problem_set(s, dtypes=[dt], layout=lay)]
        out.append((dt, lay, sum(p.key in keys for p in probs), len(probs)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=8.0, help="stop starting new measurements after this")
    ap.add_argument("--db", default="system", help="'system' (tuning_db/<device>.csv, default) or a file")
    ap.add_argument("--out", default=os.environ.get("OUT", "ship_db_out"), help="summaries go here")
    ap.add_argument("--status", action="store_true", help="only print what is done and what is left")
    ns = ap.parse_args(argv)
    from instance_factory.cli import main as cli

    if ns.status:
        for dt, lay, done, total in status(ns.db):
            print(f"{dt:10s} {lay:6s} {done:4d} of {total:4d} problems tuned")
        return 0
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + 60.0 * ns.minutes
    for dt, lay, done, total in status(ns.db):
        left = (deadline - time.time()) / 60.0
        if done == total:
            continue
        if left < 0.5:
            break
        print(f"== {dt} {lay}: {done} of {total} problems tuned; {left:.1f} min left", flush=True)
        rc = cli(["tune", *SETS, "--dtype", dt, "--layout", lay, "--db", ns.db, "--max-minutes", f"{left:.2f}",
                  "--quiet", "--summary", str(out / f"summary-{dt}-{lay}.md")])
        if rc not in (0, 1):
            return rc
    for dt, lay, done, total in status(ns.db):
        print(f"{dt:10s} {lay:6s} {done:4d} of {total:4d} problems tuned")
    return 0


if __name__ == "__main__":
    sys.exit(main())
