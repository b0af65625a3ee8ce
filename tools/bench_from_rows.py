"""`instance-factory bench` on a CPU from a GPU's shipped rows: the GPU (and its software versions) is
emulated from the rows file, so the tables and ``--summary-csv`` come out as that GPU's bench without
``--measure`` would print them. Give the ceilings (``--copy-gbps``, ``--matmul-tflops``): they cannot be
measured here.

    python tools/bench_from_rows.py tuning_db/nvidia-h100-80gb-hbm3.csv.gz -- grouped_depthwise \\
        --layout nhwgc,gnhwc,ngchw,ngchw_kcyx --pass data,weight --dtype bf16,fp16 \\
        --copy-gbps 3001 --matmul-tflops 718 --summary-csv docs/bench/summary.csv
"""

from __future__ import annotations

import sys

import pandas as pd
from heldout_replay import run_device

from instance_factory.cli import main as cli_main
from instance_factory.tuning import database as db


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") != 1:
        sys.exit(__doc__)
    device, software = run_device(pd.read_csv(argv[0], low_memory=False))
    with db.emulated(device, software, as_current=True):  # bench asks for the machine's own device
        return cli_main(["bench", *argv[2:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
