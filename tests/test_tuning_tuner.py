"""Tuner and sweeps in the interpreter: rows written, wrong instances failed, resume, shards, workers."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import dataclasses

import pytest
import torch

from instance_factory.algorithms import ALGORITHMS
from instance_factory.problem import ConvParams
from instance_factory.registry import get_registry
from instance_factory.tuning import lookup as L
from instance_factory.tuning import tuner as T
from instance_factory.tuning._testing import isolated_tiers
from instance_factory.tuning.database import TuningDB, read_db
from instance_factory.tuning.problems import Problem
from instance_factory.tuning.summary import summary_table
from instance_factory.tuning.sweep import sweep

LAYOUT = "NHWGC/GKYXC/NHWGK"
P = ConvParams(2, 1, 1, 8, 8, (3, 3), (4, 4), (1, 1), (1, 1), (1, 1), (1, 1))
Q = ConvParams(2, 2, 1, 4, 4, (3, 3), (5, 5), (2, 2), (1, 1), (1, 1), (1, 1))
FAST = dict(cpu_reps=1, cudnn=False)


@pytest.fixture
def tiers(tmp_path):
    with isolated_tiers(tmp_path) as (user, system):
        yield TuningDB(user / "cpu.csv")


def test_tune_writes_verified_timed_rows_and_lookup_serves_the_winner(tiers):
    pr = Problem("conv_bwd_weight", P, LAYOUT, "fp16", name="tiny")
    rows = T.tune(pr, max_instances=3, cpu_reps=2, progress=False)
    assert len(rows) == 3
    df = read_db(tiers.path)
    assert len(df) == 3 and set(df.status) == {"ok"}
    assert (df.rel_err <= df.tolerance).all() and (df.tolerance == 2e-3).all()
    assert (df.median_ms > 0).all() and (df.reps == 2).all() and (df.p20_ms <= df.p80_ms).all()
    assert (df.tflops > 0).all() and (df.gbps > 0).all()
    assert df.cudnn_ms.notna().all() and df.cudnn_impl.str.startswith("torch-cpu").all()
    assert (abs(df.speedup - df.cudnn_ms / df.median_ms) < 1e-3 * df.speedup).all()
    assert set(df.device) == {"cpu"} and df.timing.str.contains("interpreter").all()
    assert len(set(df.algorithm)) == 3  # max_instances spreads over the kernel families
    winner = df.sort_values("median_ms").instance.iloc[0]
    got = L.lookup("conv_bwd_weight", P, layout=LAYOUT, dtype=torch.float16)
    assert got.name == winner
    table = summary_table(df, [pr])
    assert "| tiny: G1 C8->K8 4x4 f3x3 | weight | fp16 |" in table and "speedup" in table
    assert "1 of 1 problems tuned" in table and "geometric mean" in table


def _patched(monkeypatch, inst, launch):
    key = (inst.op, inst.algorithm)
    monkeypatch.setitem(ALGORITHMS, key, dataclasses.replace(ALGORITHMS[key], launch=launch))


def test_wrong_or_crashing_instances_are_failed_and_never_chosen(tiers, monkeypatch):
    pr = Problem("conv_bwd_weight", P, LAYOUT, "fp16")
    run, _ = get_registry().candidates(pr.op, P, LAYOUT, "fp16", "passthrough")
    by_alg = {}
    for i in run:
        by_alg.setdefault(i.algorithm, i)
    wrong, crash, good = by_alg["igemm"], by_alg["splitk_atomic"], by_alg["two_stage"]
    for i in (wrong, crash, good):
        assert i.kernel_hash  # computed (and cached) before the launchers are patched

    def wrong_launch(args):  # fast and wrong: writes zeros
        args.out.zero_()

    def crash_launch(args):
        raise RuntimeError("kernel exploded")

    _patched(monkeypatch, wrong, wrong_launch)
    _patched(monkeypatch, crash, crash_launch)
    rows = {r["instance"]: r for r in T.tune(pr, instances=[wrong.name, crash.name, good.name], progress=False,
                                             **FAST)}
    assert rows[wrong.name]["status"] == "failed" and "wrong result" in rows[wrong.name]["reason"]
    assert rows[crash.name]["status"] == "failed" and "kernel exploded" in rows[crash.name]["reason"]
    assert rows[good.name]["status"] == "ok"
    assert L.lookup("conv_bwd_weight", P, layout=LAYOUT, dtype=torch.float16) is good


def test_classify_error():
    from triton.runtime.errors import OutOfResources

    assert T.classify_error(OutOfResources(300000, 232448, "shared memory"))[0] == "oom"
    assert T.classify_error(torch.cuda.OutOfMemoryError("CUDA out of memory"))[0] == "oom"
    CompilationError = type("CompilationError", (Exception,), {})
    assert T.classify_error(CompilationError("at 12:4: bad"))[0] == "compile_error"
    st, reason, fatal = T.classify_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert (st, fatal) == ("failed", True) and "illegal memory access" in reason
    assert T.classify_error(ValueError("nope")) == ("failed", "ValueError: nope", False)


def test_fatal_device_error_keeps_rows_and_resume_skips_the_culprit(tiers, monkeypatch):
    pr = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    run, _ = get_registry().candidates(pr.op, P, LAYOUT, "fp16", "passthrough")
    bad, ok = run[0], run[1]
    assert bad.kernel_hash and ok.kernel_hash

    def fault(args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    _patched(monkeypatch, bad, fault)
    with pytest.raises(T.FatalDeviceError, match="resumes"):
        T.tune(pr, instances=[bad.name, ok.name], progress=False, **FAST)
    df = read_db(tiers.path)
    assert list(df.instance) == [bad.name] and df.status[0] == "failed"
    monkeypatch.undo()
    rows = T.tune(pr, instances=[bad.name, ok.name], progress=False, **FAST)  # resume: only `ok` left
    assert [r["instance"] for r in rows] == [ok.name]


def test_sweep_resumes_forces_and_adds_new_instances_only(tiers):
    probs = [Problem("conv_bwd_data", P, LAYOUT, "fp16"), Problem("conv_bwd_data", Q, LAYOUT, "fp16")]
    r1 = sweep(probs, max_instances=1, progress=False, **FAST)
    assert r1.tuned == 2 and r1.skipped_problems == 0 and len(read_db(tiers.path)) == 2
    r2 = sweep(probs, max_instances=1, progress=False, **FAST)
    assert r2.tuned == 0 and r2.skipped_problems == 2
    r3 = sweep(probs, max_instances=2, progress=False, **FAST)  # one more candidate per problem
    assert r3.tuned == 2 and len(read_db(tiers.path)) == 4
    r4 = sweep(probs, max_instances=1, force=True, progress=False, **FAST)
    assert r4.tuned == 2 and len(read_db(tiers.path)) == 4


def test_sweep_shards_split_the_work(tmp_path, tiers):
    probs = [Problem(op, p, LAYOUT, "bf16") for op in ("conv_bwd_data", "conv_bwd_weight") for p in (P, Q)]
    keys = []
    for i in range(2):
        db = tmp_path / f"shard{i}.csv"
        res = sweep(probs, shard=f"{i}/2", db=str(db), max_instances=1, progress=False, **FAST)
        assert len(res.problems) == 2
        keys.append(set(read_db(db).problem_key))
    assert keys[0].isdisjoint(keys[1]) and keys[0] | keys[1] == {p.key for p in probs}
    merged = tmp_path / "merged.csv"
    from instance_factory.tuning.database import merge_files

    assert merge_files([tmp_path / "shard0.csv", tmp_path / "shard1.csv"], merged) == 4


def test_sweep_with_worker_processes_merges_their_shards(tmp_path, tiers):
    probs = [Problem("conv_bwd_data", p, LAYOUT, "fp16") for p in (P, Q)]
    target = tmp_path / "out.csv"
    res = sweep(probs, db=str(target), workers=2, max_instances=1, progress=False, **FAST)
    assert not res.failed_workers and res.tuned == 2
    assert set(read_db(target).problem_key) == {p.key for p in probs}
    assert not list(tmp_path.glob("out.worker*"))  # shard files merged and removed


def test_progress_fallback_prints_eta(capsys):
    bar = T.Progress(3, desc="t")
    bar._bar = None
    for _ in range(3):
        bar.update(1, "note")
    err = capsys.readouterr().err
    assert "[t] 3/3 (100%)" in err and "eta" in err


def test_gpu_pipeline_simulated_on_cpu(tiers, monkeypatch):
    """The GPU path's control flow (thread-pool compile, failures as rows, short timing of all, full
    timing of the fastest) with CPU stand-ins for do_bench and the CUDA context calls."""
    import contextlib

    from triton.runtime.errors import OutOfResources

    pr = Problem("conv_bwd_weight", P, LAYOUT, "fp16")
    run, _ = get_registry().candidates(pr.op, P, LAYOUT, "fp16", "passthrough")
    by_alg = {}
    for i in run:
        by_alg.setdefault(i.algorithm, []).append(i)
    oom, bad_build = by_alg["igemm"][0], by_alg["splitk_atomic"][0]
    good = [by_alg["two_stage"][0], by_alg["splitk_reduce"][0]]
    for i in (oom, bad_build, *good):
        assert i.kernel_hash

    def oom_launch(args):
        raise OutOfResources(300000, 232448, "shared memory")

    def bad_launch(args):
        raise type("CompilationError", (Exception,), {})("at 3:4: unsupported")

    def torch_launch(args):  # correct, and thread-safe (the interpreter is not)
        from instance_factory.reference import ref_conv_bwd_weight

        args.out.copy_(ref_conv_bwd_weight(args.a, args.b, args.params, args.layout.name))

    _patched(monkeypatch, oom, oom_launch)
    _patched(monkeypatch, bad_build, bad_launch)
    for g in good:
        _patched(monkeypatch, g, torch_launch)
    calls = []

    def fake_gpu_timer(fn, warmup_ms, rep_ms):
        calls.append(rep_ms)
        t = T._time_cpu(fn, 1)
        return T.Timing(t.median_ms, t.p20_ms, t.p80_ms, int(rep_ms), "do_bench (simulated)")

    monkeypatch.setattr(T, "_SIMULATE_GPU_PIPELINE", True)
    monkeypatch.setattr(T, "_time_gpu", fake_gpu_timer)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    opts = T.TuneOptions(compile_workers=2, quick_rep_ms=3, rep_ms=7, refine_top=1, cudnn=False)
    rows = {r["instance"]: r for r in T.tune(pr, instances=[oom.name, bad_build.name] + [g.name for g in good],
                                             options=opts, progress=False)}
    assert rows[oom.name]["status"] == "oom" and "shared memory" in rows[oom.name]["reason"]
    assert rows[bad_build.name]["status"] == "compile_error"
    assert all(rows[g.name]["status"] == "ok" for g in good), [rows[g.name]["reason"] for g in good]
    assert sorted(calls) == [3, 3, 7]  # both verified ones briefly, then the fastest at full length
    assert sorted(r["reps"] for r in rows.values() if r["status"] == "ok") == [3, 7]


def test_gpu_pipeline_fatal_error_while_compiling_in_parallel(tiers, monkeypatch):
    import contextlib

    pr = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    run, _ = get_registry().candidates(pr.op, P, LAYOUT, "fp16", "passthrough")
    bad = run[0]
    assert bad.kernel_hash

    def fault(args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    _patched(monkeypatch, bad, fault)
    monkeypatch.setattr(T, "_SIMULATE_GPU_PIPELINE", True)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    with pytest.raises(T.FatalDeviceError, match="--compile-workers 1"):
        T.tune(pr, instances=[bad.name], compile_workers=2, progress=False, cudnn=False)
    assert len(read_db(tiers.path)) == 0  # the culprit is unknown: no row blames anyone
    with pytest.raises(T.FatalDeviceError, match="skips the instance that broke it"):
        T.tune(pr, instances=[bad.name], compile_workers=1, progress=False, cudnn=False)
    df = read_db(tiers.path)
    assert list(df.instance) == [bad.name] and df.status[0] == "failed"
