"""Replay the untuned default on held-out layers on the CPU, priced by a GPU run's measurements.

``untuned_check.py`` (on a GPU) times each held-out problem's default and a tuned best's search and writes
those rows to ``heldout_tuned.csv`` (never merged into tuning_db/). Here the tuning layer of this working
tree picks, for every problem in such files, the instance ``instance=None`` would serve now (the shipped
database alone, as on that GPU: its name, SM count and software versions are taken from the rows), and the
rows price the pick: tuned best / pick per problem, their geometric mean per (pass, class, dtype), the worst.
A pick the run did not time is counted as unmeasured. Leave-one-out (``instance-factory db evaluate``) hides
tuned layers; this checks a tuning-layer change against layers that were never tuned, without device time
(session 41: a planar bandwidth term raised leave-one-out 0.9307 -> 0.9328 and moved a held-out pick to a
kernel at 0.30 of the best).

    python tools/heldout_replay.py docs/bench/h100-2026-11-27-s40-untuned-heldout-*-rows.csv.gz
    python tools/heldout_replay.py FILES --classes depthwise --verbose
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import warnings
from collections import defaultdict
from dataclasses import dataclass

os.environ.setdefault("TRITON_INTERPRET", "1")

import pandas as pd  # noqa: E402

from instance_factory.tuning import database as db  # noqa: E402
from instance_factory.tuning import untuned  # noqa: E402
from instance_factory.tuning.cost_model import conv_class  # noqa: E402
from instance_factory.tuning.problem_sets import Problem  # noqa: E402
from instance_factory.tuning.row_times import kernel_ms  # noqa: E402


@dataclass(frozen=True)
class Replay:
    problem_key: str
    op: str
    dtype: str
    klass: str
    pick: str
    best: str
    ratio: float  # tuned best / pick; nan when the pick was not timed


def _mode(series: pd.Series) -> str:
    return str(series.dropna().astype(str).mode().iloc[0])


def run_device(rows: pd.DataFrame) -> tuple[db.DeviceInfo, db.Software]:
    """The GPU and the software versions the rows were measured with (their most common values)."""
    device = db.DeviceInfo(_mode(rows["device"]), _mode(rows["device_cc"]), int(float(_mode(rows["device_sms"]))))
    software = db.Software(_mode(rows["triton_version"]), _mode(rows["torch_version"]), _mode(rows["package_version"]))
    return device, software


def replay(rows: pd.DataFrame, classes: set[str] | None = None) -> list[Replay]:
    """Each problem's untuned pick (this tree's tuning layer, as on the rows' GPU) priced by the rows: what
    ``untuned.compare`` does for ``untuned_check.py``, without measuring what the rows lack."""
    device, software = run_device(rows)
    ok = rows[rows["status"] == "ok"].copy()
    # a disturbed run (p80 over twice its p20: host contention in the sweep) counts with its p20, as the cost
    # model reads rows (kernel_ms); the GPU run timed such defaults again, and those times are not in the rows
    ok["median_ms"] = [kernel_ms(r) for r in ok.to_dict("records")]
    fastest = ok.sort_values("median_ms", kind="stable").drop_duplicates(["problem_key", "instance"])  # several runs
    problems = [Problem.from_key(k) for k in sorted(fastest["problem_key"].unique())]
    problems = [pr for pr in problems if not classes or conv_class(pr.params) in classes]
    with db.emulated(device, software) as key:
        records = untuned.compare(problems, fastest, device=key, measure_missing=False)
    return [Replay(r["key"], r["op"], r["dtype"], r["class"], r["default"], r["tuned"],
                   r["ratio"] if r["ratio"] is not None else float("nan")) for r in records]


def summary(results: list[Replay]) -> list[tuple[str, str, str, int, float, float, int]]:
    """(pass, class, dtype, problems, geomean of tuned best / pick, worst, unmeasured picks) per group."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for r in results:
        groups[(r.op.removeprefix("conv_bwd_"), r.klass, r.dtype)].append(r.ratio)
    table = []
    for (pas, klass, dtype), ratios in sorted(groups.items()):
        timed = [x for x in ratios if x == x]
        gm = math.exp(sum(map(math.log, timed)) / len(timed)) if timed else float("nan")
        table.append((pas, klass, dtype, len(ratios), gm, min(timed, default=float("nan")), len(ratios) - len(timed)))
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="rows an untuned_check run measured (heldout_tuned.csv, .csv.gz)")
    ap.add_argument("--classes", help="comma-separated conv classes (dense, grouped, depthwise)")
    ap.add_argument("--verbose", action="store_true", help="one line per problem")
    ns = ap.parse_args(argv)
    os.environ["INSTANCE_FACTORY_USER_DB"] = tempfile.mkdtemp()  # the shipped database alone
    os.environ.pop("INSTANCE_FACTORY_MISS_POLICY", None)
    warnings.simplefilter("ignore")
    rows = pd.concat([db.read_db(f) for f in ns.files], ignore_index=True)
    results = replay(rows, set(ns.classes.split(",")) if ns.classes else None)
    if ns.verbose:
        for r in results:
            print(f"{r.ratio:6.3f}  {r.problem_key}  pick {r.pick.split('-')[1]} {r.pick.split('-')[-1]}")
    timed = [r.ratio for r in results if r.ratio == r.ratio]
    print("| pass | class | dtype | problems | tuned best / pick (geomean) | worst | pick not timed |")
    print("|---|---|---|---:|---:|---:|---:|")
    for pas, klass, dtype, n, gm, worst, missing in summary(results):
        print(f"| {pas} | {klass} | {dtype} | {n} | {gm:.3f} | {worst:.3f} | {missing} |")
    if timed:
        print(f"all: {len(results)} problems, geomean {math.exp(sum(map(math.log, timed)) / len(timed)):.3f}, "
              f"worst {min(timed):.3f}, {len(results) - len(timed)} picks not timed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
