"""Tuning database you can trust: bad rows rejected on write (with the reader's own checks), damaged
tiers skipped with a warning, other processes' writes seen by lookups, no committed row lost under
concurrent writers, SIGKILLs and merges with removal, deterministic merge ties, appends that do not
rewrite the file, and verification that bounds the worst element."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import math
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch

from instance_factory.tuning import database as D
from instance_factory.tuning import lookup as L

sys.path.insert(0, str(Path(__file__).parent))
from test_tuning_database import LAYOUT, P, row  # noqa: E402
from test_tuning_lookup import PROB, look, runnable  # noqa: E402
from tuning_helpers import isolated_tiers, synthetic_row  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
KEY = D.problem_key("conv_bwd_data", P, LAYOUT, "fp16")

BAD_ROWS = {
    "ok row, median_ms None": dict(median_ms=None),
    "ok row, median_ms NaN": dict(median_ms=float("nan")),
    "median_ms <= 0": dict(median_ms=0.0),
    "negative median_ms": dict(median_ms=-1.0),
    "infinite median_ms": dict(median_ms=float("inf")),
    "empty instance": dict(instance=""),
    "None kernel_hash": dict(kernel_hash=None),
    "problem_key disagrees with its fields": dict(problem_key=KEY.replace("-k8-", "-k16-")),
    "field disagrees with problem_key": dict(N=4),
    "ok row above its tolerance": dict(rel_err=3e-3),
    "ok row with a NaN error": dict(rel_err=float("nan")),
    "ok row, worst element out of tolerance": dict(max_rel_err=0.2),
    "ok row without verification errors": dict(rel_err=None, max_rel_err=None),
    "tolerance looser than the dtype's": dict(tolerance=0.5, rel_err=0.1),
    "negative cudnn_ms": dict(cudnn_ms=-0.5),
    "p20 above the median": dict(p20_ms=2.0, median_ms=1.0, p80_ms=3.0),
    "unknown dtype": dict(dtype="fp64"),
    "newer schema_version": dict(schema_version=99),
    "zero reps": dict(reps=0),
}


@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_every_bad_row_is_rejected_before_anything_is_written(tmp_path, kind):
    path = tmp_path / "db.csv"
    db = D.TuningDB(path)
    db.add([row("good", 1.0)])
    before = path.read_bytes()
    with pytest.raises(D.DatabaseError, match="nothing was written") as ei:
        db.add([row("also_good", 2.0), {**row("bad", 1.0), **BAD_ROWS[kind]}])
    assert "row " in str(ei.value)
    assert path.read_bytes() == before  # not even the good row of the same call
    assert list(D.read_db(path).instance) == ["good"]
    db.add([row("later", 3.0)])  # the database keeps working
    assert sorted(D.read_db(path).instance) == ["good", "later"]


@pytest.mark.parametrize("kind", ["ok row, median_ms None", "None kernel_hash", "negative cudnn_ms",
                                  "ok row, worst element out of tolerance"])
def test_the_reader_refuses_what_the_writer_refuses(tmp_path, kind):
    """The same check on both sides: the bad row's text, put in a file by hand, makes the file damaged."""
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    D.TuningDB(good).add([row("x", 1.0)])
    bad.write_text(D.to_csv_text(pd.DataFrame([{**row("x", 1.0), **BAD_ROWS[kind]}])))
    with pytest.raises(D.DatabaseError, match="line 2"):
        D.read_db(bad)


def test_shipped_database_passes_the_row_check():
    h200 = D.read_db(REPO / "tuning_db" / "nvidia-h200.csv.gz")
    # version-1 rows (session 2) read as they are, beside the version-2 rows merged in session 26
    assert (h200["schema_version"] == 1).sum() > 500 and set(h200["schema_version"]) == {1, 2}
    h100 = D.read_db(REPO / "tuning_db" / "nvidia-h100-80gb-hbm3.csv.gz")
    assert len(h100) > 10_000 and set(h100["status"]) <= set(D.STATUSES)


def test_append_does_not_rewrite_and_compact_sorts(tmp_path):
    path = tmp_path / "db.csv"
    db = D.TuningDB(path)
    db.add([row(f"r{i:03d}", 1.0 + i) for i in range(50)])
    ino, text = path.stat().st_ino, path.read_bytes()
    db.add([row("a-new", 0.5), row("r007", 9.0)])
    assert path.stat().st_ino == ino and path.read_bytes().startswith(text)  # appended in place
    df = db.read()
    assert len(df) == 51 and df.set_index("instance").loc["r007", "median_ms"] == 9.0  # later row wins
    assert db.compact() == 51
    lines = path.read_text().splitlines()
    assert len(lines) == 52 and lines[1].split(",")[16] == "a-new"  # one per identity, sorted


def test_rewrites_keep_the_file_mode(tmp_path):
    """A compaction or merge rewrites through a temporary file, which mkstemp makes 0600: the database
    keeps its own mode (a shared file stays readable), a new one gets 0644."""
    path = tmp_path / "db.csv"
    db = D.TuningDB(path)
    db.add([row("r1", 1.0)])
    path.chmod(0o664)
    db.add([row("r2", 2.0), row("r1", 0.5)])
    assert db.compact() == 2
    assert path.stat().st_mode & 0o777 == 0o664
    fresh = tmp_path / "new.csv"
    D.write_db(fresh, db.read())
    assert fresh.stat().st_mode & 0o777 == 0o644


def test_prune_drops_only_rows_of_changed_or_removed_kernels(tmp_path):
    """``db prune``: rows whose instance is gone or whose kernel hash changed leave the file; rows of
    current kernels stay, whatever their device, software or status."""
    path = tmp_path / "db.csv"
    db = D.TuningDB(path)
    db.add([row("kept", 1.0), row("kept-failed", None, status="failed"), row("changed", 2.0),
            row("removed", 3.0), row("kept-other-gpu", 4.0, device="NVIDIA H200")])
    current = {"kept": "h-kept", "kept-failed": "h-kept-failed", "changed": "h-new",
               "kept-other-gpu": "h-kept-other-gpu"}
    assert db.prune_stale(current) == (3, 2)
    assert sorted(db.read()["instance"]) == ["kept", "kept-failed", "kept-other-gpu"]
    assert db.prune_stale(current) == (3, 0)


def test_old_schema_file_is_migrated_on_its_first_write(tmp_path):
    path = tmp_path / "db.csv"
    D.TuningDB(path).add([row("a", 1.0)])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(ln.rsplit(",", 1)[0] for ln in lines) + "\n")  # drop schema_version
    assert D.read_db(path)["schema_version"].tolist() == [1]
    D.TuningDB(path).add([row("b", 2.0)])
    assert path.read_text().splitlines()[0].endswith(",schema_version")
    df = D.read_db(path).set_index("instance")
    assert df.loc["a", "schema_version"] == 1 and df.loc["b", "schema_version"] == 2


def test_merge_ties_do_not_depend_on_source_order(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    D.TuningDB(a).add([row("x", 1.0, gbps=10.0, reason="from a")])
    D.TuningDB(b).add([row("x", 1.0, gbps=20.0, reason="from b")])  # same status, time and timestamp
    D.merge_files([a, b], tmp_path / "ab.csv")
    D.merge_files([b, a], tmp_path / "ba.csv")
    assert (tmp_path / "ab.csv").read_bytes() == (tmp_path / "ba.csv").read_bytes()


# ------------------------------------------------------------------------------------------------
# lookups: damaged tiers and other processes' writes
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def tiers(tmp_path):
    with isolated_tiers(tmp_path) as (user, system):
        yield D.TuningDB(user / "cpu.csv"), D.TuningDB(system / "cpu.csv")


@pytest.mark.parametrize("damage", ["0-byte file", "truncated header", "bad row"])
def test_damaged_user_tier_warns_and_serves_the_system_tier(tiers, damage):
    user, system = tiers
    a, b = runnable()[0][:2]
    system.add([synthetic_row(PROB, a, 1.0)])
    user.add([synthetic_row(PROB, b, 1.0)])
    text = user.path.read_text()
    user.path.write_text({"0-byte file": "", "truncated header": text[:150],
                          "bad row": text.replace(",ok,", ",okay,")}[damage])
    L.clear_cache()
    with pytest.warns(D.DamagedTierWarning, match=str(user.path)):
        assert look() is a  # the system tier's hit
    # and the ops' instance=None path runs (the heuristic would serve if the system tier had nothing)
    system.path.unlink()
    L.clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert look(policy="heuristic") is not None


def test_lookup_sees_rows_another_process_writes(tiers, monkeypatch):
    user, _ = tiers
    a, b = runnable()[0][:2]
    user.add([synthetic_row(PROB, a, 2.0)])
    monkeypatch.setattr(L, "RECHECK_S", 0.0)
    assert look() is a
    code = f"""
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_tuning_lookup import PROB
        from instance_factory.registry import get_registry
        from tuning_helpers import synthetic_row
        from instance_factory.tuning.database import TuningDB
        TuningDB({str(user.path)!r}).add([synthetic_row(PROB, get_registry().get({b.name!r}), 0.5)])
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=120)
    L._NEXT_CHECK[0] = 0.0
    assert look() is b  # no clear_cache(): the file's change was seen


# ------------------------------------------------------------------------------------------------
# concurrency: 8 writers, SIGKILLs, merges with removal while they write
# ------------------------------------------------------------------------------------------------
def _writer(shard: str, wid: str, log: str) -> None:
    """A writer process: add rows one by one; a name is logged only once its add returned (committed)."""
    db = D.TuningDB(shard)
    with open(log, "a") as f:
        for i in range(100_000):
            db.add([row(f"{wid}-{i}", 1.0 + i)])
            f.write(f"{wid}-{i}\n")
            f.flush()
            time.sleep(0.05)  # a sweep adds once per problem: leave the lock free now and then


def test_no_committed_row_is_lost_to_kills_or_merges_while_writing(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # forked from this process: no interpreter start-up per writer
    shard, dest = tmp_path / "shard.csv", tmp_path / "dest.csv"
    rng = random.Random(0)
    procs: dict[str, mp.Process] = {}

    def start(wid: str) -> None:
        procs[wid] = ctx.Process(target=_writer, args=(str(shard), wid, str(tmp_path / f"{wid}.log")), daemon=True)
        procs[wid].start()

    D.read_db(REPO / "tuning_db" / "nvidia-h200.csv.gz").head(0)  # warm the imports the writers inherit
    for w in range(8):
        start(f"w{w}")
    deadline = time.monotonic() + 60
    while (not shard.exists() or len(D.read_db(shard)) < 16) and time.monotonic() < deadline:
        time.sleep(0.05)
    kills = merges = 0
    while (kills < 12 or merges < 12) and time.monotonic() < deadline:
        time.sleep(0.05)
        if shard.exists():
            D.merge_files([shard], dest, remove_sources=True)  # reads and removes under the shard's lock
            merges += 1
        if kills < 12:
            victim = rng.choice(sorted(w for w, p in procs.items() if p.is_alive()))
            os.kill(procs[victim].pid, signal.SIGKILL)
            kills += 1
            start(f"r{kills}")
    for p in procs.values():
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
        p.join(timeout=30)
        assert p.exitcode == -signal.SIGKILL  # every one was killed while writing, none failed
    committed = set()
    for log in tmp_path.glob("*.log"):
        committed |= set(log.read_text().split())
    assert kills == 12 and merges >= 12 and len(committed) >= 30
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", D.TornTailWarning)  # a writer killed mid-append
        D.merge_files([shard], dest, remove_sources=True)
    got = set(D.read_db(dest).instance)
    assert committed <= got, sorted(committed - got)[:10]


# ------------------------------------------------------------------------------------------------
# verification bounds the worst element
# ------------------------------------------------------------------------------------------------
def test_one_zeroed_element_of_65536_fails_verification_though_the_norm_passes():
    from instance_factory.harness.checks import verdict
    from instance_factory.reference import result_errors

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(65536, generator=g, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    rel, mrel = result_errors(out, ref)
    assert verdict(rel, mrel, "bf16") is None  # correct bf16 rounding passes
    for n_bad in (1, 4):
        bad = out.clone()
        idx = torch.argsort((ref.abs() - 1.0).abs())[:n_bad]  # elements of 1 rms, a quarter of the max
        bad[idx] = 0
        rel, mrel = result_errors(bad, ref)
        assert rel < 1e-2 < 0.19 <= mrel  # the normwise check alone would pass it
        assert "worst element" in verdict(rel, mrel, "bf16")
    nan = out.clone()
    nan[7] = float("nan")
    assert result_errors(nan, ref) == (math.inf, math.inf)
    assert verdict(*result_errors(nan, ref), "bf16") is not None


def test_tuner_stores_a_one_element_corruption_as_failed(tmp_path, monkeypatch):
    """End to end in the tuner: zero one result element whose error hides in the norm."""
    from instance_factory.harness import checks
    from instance_factory.problem import ConvParams
    from instance_factory.tuning import tuner as T
    from instance_factory.tuning.problem_sets import Problem

    params = ConvParams(2, 1, 4, 8, 16, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))  # 4096 outputs
    prob = Problem("conv_bwd_data", params, LAYOUT, "bf16")
    real = checks.run_poisoned

    def corrupt(case, inst, timed=False):
        out, ms = real(case, inst, timed)
        ref = case.ref.flatten()
        rms = float(ref.pow(2).mean().sqrt())
        i = int((ref.abs() - 0.5 * rms).abs().argmin())  # an element of 0.5 rms: the norm barely moves
        out.view(-1)[i] = 0
        return out, ms

    monkeypatch.setattr(checks, "run_poisoned", corrupt)
    db = D.TuningDB(tmp_path / "db.csv")
    rows = T.tune(prob, db=db, max_instances=1, progress=False, cpu_reps=1, cudnn=False)
    assert len(rows) == 1 and rows[0]["status"] == "failed", rows[0]
    assert rows[0]["rel_err"] <= 1e-2 and "worst element" in rows[0]["reason"]
    assert D.read_db(db.path)["status"].tolist() == ["failed"]
