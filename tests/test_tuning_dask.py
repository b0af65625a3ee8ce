"""Dask sweeps on a local cluster in the interpreter: the rows match the plain sweep's, the driver is
the only writer, and a worker killed (SIGKILL) in the middle of a problem has that problem retried."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import signal
import threading
import time

import pytest

distributed = pytest.importorskip("distributed")

from instance_factory.problem import ConvParams  # noqa: E402
from instance_factory.tuning.dask_sweep import dask_sweep  # noqa: E402
from instance_factory.tuning.database import read_db  # noqa: E402
from instance_factory.tuning.problem_sets import Problem  # noqa: E402
from instance_factory.tuning.sweep import sweep  # noqa: E402

LAYOUT = "NHWGC/GKYXC/NHWGK"
PARAMS = [ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1)),
          ConvParams(2, 2, 2, 4, 4, (3, 3), (5, 5), (2, 2), (1, 1), (1, 1), (1, 1))]
PROBLEMS = [Problem(op, p, LAYOUT, "fp16") for p in PARAMS for op in ("conv_bwd_data", "conv_bwd_weight")]
OPTS = dict(max_instances=1, cpu_reps=1, cudnn=False, progress=False)
CONTENT = ["problem_key", "instance", "kernel_hash", "instance_params", "device", "status", "rel_err",
           "max_rel_err", "tolerance", "schema_version"]


def _kill_one_busy_worker(client, killed: list, stop: threading.Event) -> None:
    """SIGKILL the first worker seen running a tuning task (once it has been at it for a moment)."""
    while not stop.is_set():
        for addr, keys in client.processing().items():
            busy = [k for k in keys if str(k).startswith("if-tune-")]
            if busy:
                pid = client.run(os.getpid, workers=[addr])[addr]
                time.sleep(1.0)
                os.kill(pid, signal.SIGKILL)
                killed.append(busy[0])
                return
        time.sleep(0.1)


def test_dask_sweep_matches_the_plain_sweep_and_retries_a_killed_worker(tmp_path):
    plain = sweep(PROBLEMS, db=str(tmp_path / "plain.csv"), **OPTS)
    assert plain.tuned == len(PROBLEMS)

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    killed: list = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_one_busy_worker, args=(client, killed, stop), daemon=True)
    try:
        killer.start()
        res = dask_sweep(PROBLEMS, client=client, db=str(tmp_path / "dask.csv"), **OPTS)
    finally:
        stop.set()
        killer.join(timeout=30)
        client.close()
        cluster.close()
    assert killed, "no worker was killed: the test did not test the retry"
    assert res.failed_problems == [] and res.tuned == len(PROBLEMS)

    a = read_db(tmp_path / "plain.csv")[CONTENT].sort_values(["problem_key", "instance"]).reset_index(drop=True)
    b = read_db(tmp_path / "dask.csv")[CONTENT].sort_values(["problem_key", "instance"]).reset_index(drop=True)
    assert len(b) == len(PROBLEMS) and a.equals(b)  # the same rows in content (timings aside)
    assert not list(tmp_path.glob("*.tmp"))

    # a rerun resumes: nothing left to do, nothing submitted
    again = dask_sweep(PROBLEMS, client=_FakeClient(res), db=str(tmp_path / "dask.csv"), **OPTS)
    assert again.tuned == 0 and again.skipped_problems == len(PROBLEMS)


class _FakeClient:
    """Answers the driver's device question in-process and fails on any tuning task (none expected)."""

    def __init__(self, res):
        self.res = res

    def submit(self, fn, *args, **kw):
        from concurrent.futures import Future

        if fn.__name__ != "_worker_device":
            raise AssertionError(f"unexpected task {fn.__name__}")
        f = Future()
        f.set_result(fn())
        return f


def test_without_dask_the_cli_says_how_to_install_it(monkeypatch, capsys):
    import sys

    from instance_factory.cli import main

    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    rc = main(["tune", "--problem", f"conv_bwd_data|{LAYOUT}|fp16|passthrough|{PARAMS[0].key()}", "--dask",
               "--no-summary", "--quiet"])
    assert rc == 2 and "[distributed]" in capsys.readouterr().err
