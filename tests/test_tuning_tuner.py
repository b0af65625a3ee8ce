"""Tuner and sweeps in the interpreter: rows written, wrong instances failed, resume, shards, workers."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import dataclasses

import pytest
import torch
from tuning_helpers import isolated_tiers

from instance_factory.algorithms import ALGORITHMS
from instance_factory.harness import timing as TM
from instance_factory.problem import ConvParams
from instance_factory.registry import get_registry
from instance_factory.tuning import candidates as C
from instance_factory.tuning import compile_ahead as CA
from instance_factory.tuning import errors as E
from instance_factory.tuning import lookup as L
from instance_factory.tuning import options as O
from instance_factory.tuning import pipeline as PL
from instance_factory.tuning import tuner as T
from instance_factory.tuning.database import TuningDB, read_db
from instance_factory.tuning.problem_sets import Problem
from instance_factory.tuning.progress import Progress
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


def _bind_of(launch):
    """An Algorithm.bind whose runner calls ``launch(RunArgs)`` with each call's tensors."""
    def bind(args):
        def run(a, b, out, ds, alpha, beta):
            launch(dataclasses.replace(args, a=a, b=b, out=out, ds=ds, alpha=alpha, beta=beta))

        return run

    return bind


def _patch_algorithm(monkeypatch, key, launch):
    from instance_factory import ops

    monkeypatch.setattr(ops, "_RUNNERS", {})  # runners bound to the real kernels must not be reused
    monkeypatch.setitem(ALGORITHMS, key, dataclasses.replace(ALGORITHMS[key], bind=_bind_of(launch)))


def _patched(monkeypatch, inst, launch):
    _patch_algorithm(monkeypatch, (inst.op, inst.algorithm), launch)


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

    assert E.classify_error(OutOfResources(300000, 232448, "shared memory"))[0] == "oom"
    assert E.classify_error(torch.cuda.OutOfMemoryError("CUDA out of memory"))[0] == "oom"
    CompilationError = type("CompilationError", (Exception,), {})
    assert E.classify_error(CompilationError("at 12:4: bad"))[0] == "compile_error"
    st, reason, fatal = E.classify_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert (st, fatal) == ("failed", True) and "illegal memory access" in reason
    assert E.classify_error(ValueError("nope")) == ("failed", "ValueError: nope", False)


def test_fatal_device_error_keeps_rows_and_resume_skips_the_culprit(tiers, monkeypatch):
    pr = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    run, _ = get_registry().candidates(pr.op, P, LAYOUT, "fp16", "passthrough")
    bad, ok = run[0], run[1]
    assert bad.kernel_hash and ok.kernel_hash

    def fault(args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    _patched(monkeypatch, bad, fault)
    with pytest.raises(O.FatalDeviceError, match="resumes"):
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
    bar = Progress(3, desc="t")
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
        t = TM.time_cpu(fn, 1)
        return TM.Timing(t.median_ms, t.p20_ms, t.p80_ms, int(rep_ms), "do_bench (simulated)")

    monkeypatch.setattr(PL, "SIMULATE_GPU_PIPELINE", True)
    monkeypatch.setattr(TM, "time_gpu", fake_gpu_timer)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    opts = O.TuneOptions(compile_workers=2, quick_rep_ms=3, rep_ms=7, refine_top=1, cudnn=False, prune=False)
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
    monkeypatch.setattr(PL, "SIMULATE_GPU_PIPELINE", True)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    with pytest.raises(O.FatalDeviceError, match="--compile-workers 1"):
        T.tune(pr, instances=[bad.name], compile_workers=2, progress=False, cudnn=False)
    assert len(read_db(tiers.path)) == 0  # the culprit is unknown: no row blames anyone
    with pytest.raises(O.FatalDeviceError, match="skips the instance that broke it"):
        T.tune(pr, instances=[bad.name], compile_workers=1, progress=False, cudnn=False)
    df = read_db(tiers.path)
    assert list(df.instance) == [bad.name] and df.status[0] == "failed"


# ----------------------------------------------------------------------------------------------
# candidate order, pruning, deadline, compiling ahead
# ----------------------------------------------------------------------------------------------
def test_order_candidates_puts_likely_fast_ones_first():
    depthwise = Problem("conv_bwd_data", ConvParams(2, 144, 128, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1),
                                                    (1, 1), (1, 1)), LAYOUT, "bf16")
    run, _ = get_registry().candidates(depthwise.op, depthwise.params, LAYOUT, "bf16", "passthrough")
    order = C.order_candidates(depthwise, run)
    n_direct = sum(C._gemm_mn(depthwise, i) is None for i in run)  # the untiled families (no block_m x block_n)
    assert 0 < n_direct < len(run) and sorted(i.name for i in order) == sorted(i.name for i in run)
    first = {i.algorithm for i in order[:n_direct]}  # C = K = 1: the direct-style ones first
    assert {"direct", "dwroll", "dwtaps", "dwtile"} <= first and all(C._gemm_mn(depthwise, i) is None
                                                                    for i in order[:n_direct])
    tc = order[n_direct:]  # then the tensor-core tiles, smallest padding waste (block_n vs C = 1) first
    assert tc[0].cfg["block_n"] == min(i.cfg["block_n"] for i in tc)

    dense = Problem("conv_bwd_weight", ConvParams(2, 1, 128, 64, 64, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1),
                                                  (1, 1)), LAYOUT, "bf16")
    run, _ = get_registry().candidates(dense.op, dense.params, LAYOUT, "bf16", "passthrough")
    order = C.order_candidates(dense, run)
    assert order[0].algorithm != "direct" and order[0].cfg["block_m"] <= 64  # K = 64: no 128-row tiles first
    few = Problem("conv_bwd_weight", ConvParams(2, 32, 128, 4, 4, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1),
                                                (1, 1)), LAYOUT, "bf16")
    run, _ = get_registry().candidates(few.op, few.params, LAYOUT, "bf16", "passthrough")
    assert C.order_candidates(few, run)[0].algorithm == "direct"  # ResNeXt 32x4d: direct first


def _simulate_gpu(monkeypatch, pr):
    """The GPU pipeline on CPU tensors: every family's launch replaced by a correct torch stand-in
    (fast, thread-safe), CUDA context calls stubbed; returns the candidates in tuning order."""
    import contextlib

    from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight

    run, _ = get_registry().candidates(pr.op, pr.params, LAYOUT, pr.dtype, "passthrough")
    ref = ref_conv_bwd_data if pr.op == "conv_bwd_data" else ref_conv_bwd_weight

    def torch_launch(args):
        args.out.copy_(ref(args.a, args.b, args.params, args.layout.name))

    for i in run:
        assert i.kernel_hash
    for alg in {i.algorithm for i in run}:
        key = (pr.op, alg)
        _patch_algorithm(monkeypatch, key, torch_launch)
    monkeypatch.setattr(PL, "SIMULATE_GPU_PIPELINE", True)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    return C.order_candidates(pr, run)


def test_pruning_skips_the_do_bench_of_slow_candidates_and_pruned_rows_never_win(tiers, monkeypatch):
    from tuning_helpers import synthetic_row

    from instance_factory.tuning.database import _frame, best_per_problem, keep_best

    pr = Problem("conv_bwd_weight", P, LAYOUT, "fp16", name="tiny")
    fast, fast2, slow, hopeless, other, late = _simulate_gpu(monkeypatch, pr)[:6]
    first_run = {fast.name: 1.0, fast2.name: 1.1, slow.name: 9.0, hopeless.name: 500.0, late.name: 20.0}
    one_run = {fast.name: 1.0, fast2.name: 1.2, slow.name: 9.0, late.name: 20.0}  # slow: > 5 x 1.0
    seen = []

    def fake_single(fn, case, inst, stage):
        fn()
        seen.append((inst.name, stage))
        if stage == "warm-up" and inst.name == fast2.name and seen.count((inst.name, stage)) == 1:
            return 300.0  # its first run compiled the kernel: the hard cap judges a second run
        return (first_run if stage == "warm-up" else one_run)[inst.name]

    bench = []

    def fake_do_bench(fn, warmup_ms, rep_ms):  # fast, fast2 (quick), then the faster of them (refined)
        bench.append(rep_ms)
        ms = [3.0, 2.0, 1.5][len(bench) - 1]
        return TM.Timing(ms, ms, ms, 10, "do_bench (simulated)")

    monkeypatch.setattr(TM, "single_run_ms", fake_single)
    monkeypatch.setattr(TM, "time_gpu", fake_do_bench)
    names = [fast.name, fast2.name, slow.name, hopeless.name]
    res = T.tune(pr, instances=names, progress=False, cudnn=False, refine_top=1, quick_rep_ms=3, rep_ms=7)
    rows = {r["instance"]: r for r in res}
    assert [rows[n]["status"] for n in names] == ["ok", "ok", "pruned", "pruned"]
    assert bench == [3, 3, 7]  # no do_bench for the pruned ones
    assert (hopeless.name, "single") not in seen  # over the hard cap (50 x best): not even verified
    assert seen.count((hopeless.name, "warm-up")) == 2 and seen.count((fast2.name, "warm-up")) == 2
    assert "not verified" in rows[hopeless.name]["reason"] and rows[hopeless.name].get("rel_err") is None
    assert "verified; single run 9 ms" in rows[slow.name]["reason"] and rows[slow.name]["rel_err"] <= 2e-3
    df = read_db(tiers.path)
    pruned = df[df.status == "pruned"]
    assert set(pruned.instance) == {slow.name, hopeless.name} and (pruned.timing == O.PRUNED_TIMING).all()
    assert sorted(pruned.median_ms) == [9.0, 500.0] and (pruned.reps == 1).all()
    assert res.stats["pruned"] == 2 and res.stats["ok"] == 2 and not res.stopped_early

    # a pruned row, however fast it claims to be, never wins: lookup, the derived best, merges
    fake = synthetic_row(pr, other, 0.001, status="pruned", timing=O.PRUNED_TIMING)
    TuningDB(tiers.path).add([fake])
    assert L.lookup("conv_bwd_weight", P, layout=LAYOUT, dtype=torch.float16) is fast2
    assert list(best_per_problem(read_db(tiers.path)).instance) == [fast2.name]
    both = keep_best(_frame([synthetic_row(pr, fast, 5.0), synthetic_row(pr, fast, 0.001, status="pruned")]))
    assert list(both.status) == ["ok"]
    parts = fast2.name.split("-")  # the summary's short name: family and tile parameters
    assert f"`{'-'.join([parts[1], *parts[5:]])}`" in summary_table(read_db(tiers.path), [pr])

    # resume: pruned rows count as measured, and a new candidate is pruned against the stored best
    assert len(T.tune(pr, instances=names, progress=False, cudnn=False)) == 0
    (r,) = T.tune(pr, instances=names + [late.name], progress=False, cudnn=False)
    assert r["instance"] == late.name and r["status"] == "pruned" and "best so far 1.5 ms" in r["reason"]


def test_a_disturbed_single_run_is_rechecked_before_a_prune(tiers, monkeypatch):
    """A single run over the prune cap gets a second run, and the faster one decides: a host stall in
    one sample no longer prunes a fast kernel (H100: a cfirst config stored at 28x its neighbour)."""
    pr = Problem("conv_bwd_weight", P, LAYOUT, "fp16", name="tiny")
    fast, stalled, slow = _simulate_gpu(monkeypatch, pr)[:3]
    single = {fast.name: [1.0], stalled.name: [40.0, 1.1], slow.name: [9.0, 8.0]}
    seen = []

    def fake_single(fn, case, inst, stage):
        fn()
        seen.append((inst.name, stage))
        if stage == "warm-up":
            return 1.0
        return single[inst.name][sum(1 for n, s in seen if n == inst.name and s != "warm-up") - 1]

    monkeypatch.setattr(TM, "single_run_ms", fake_single)
    monkeypatch.setattr(TM, "time_gpu", lambda fn, warmup_ms, rep_ms: TM.Timing(2.0, 2.0, 2.0, 10, "do_bench (simulated)"))
    res = T.tune(pr, instances=[fast.name, stalled.name, slow.name], progress=False, cudnn=False)
    rows = {r["instance"]: r for r in res}
    assert rows[stalled.name]["status"] == "ok" and rows[slow.name]["status"] == "pruned"
    assert "single run 8 ms" in rows[slow.name]["reason"]  # the faster of its two runs
    assert (fast.name, "recheck") not in seen and (stalled.name, "recheck") in seen


def test_single_run_is_timed_after_an_untimed_public_call(tiers, monkeypatch):
    """The pruning run times a public op call whose plan is already built: on the H100 the first
    call's host work (~1 ms) outlasted the busy wait, every small-layer candidate after the first
    read ~1 ms and was pruned against a 0.01 ms best."""
    pr = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    cands = _simulate_gpu(monkeypatch, pr)[:3]
    calls: dict[str, int] = {}
    real_op_call = PL.op_call

    def counting_op_call(case, inst):
        fn = real_op_call(case, inst)

        def call():
            calls[inst.name] = calls.get(inst.name, 0) + 1
            return fn()
        return call

    timed_after: dict[str, int] = {}

    def fake_single(fn, case, inst, stage):
        if stage == "single":
            timed_after[inst.name] = calls.get(inst.name, 0)
        fn()
        return 1.0

    monkeypatch.setattr(PL, "op_call", counting_op_call)
    monkeypatch.setattr(TM, "single_run_ms", fake_single)
    T.tune(pr, instances=[i.name for i in cands], progress=False, cudnn=False)
    assert timed_after and all(n >= 1 for n in timed_after.values()), timed_after


def test_deadline_keeps_finished_rows_drops_untimed_ones_and_a_rerun_resumes(tiers, monkeypatch):
    pr = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    a, b, c = _simulate_gpu(monkeypatch, pr)[:3]
    clock = [0.0]
    monkeypatch.setattr(O, "now", lambda: clock[0])
    monkeypatch.setattr(TM, "single_run_ms", lambda fn, case, inst, stage: (fn(), {a.name: 1.0}.get(inst.name, 1.1))[1])

    def do_bench_then_time_is_up(fn, warmup_ms, rep_ms):
        clock[0] = 100.0  # the deadline passes during the first do_bench
        return TM.Timing(1.0, 1.0, 1.0, 10, "do_bench (simulated)")

    monkeypatch.setattr(TM, "time_gpu", do_bench_then_time_is_up)
    names = [a.name, b.name, c.name]
    res = T.tune(pr, instances=names, progress=False, cudnn=False, deadline=50.0)
    assert res.stopped_early and [r["instance"] for r in res] == [a.name]  # b, c verified, never timed
    df = read_db(tiers.path)
    assert list(df.instance) == [a.name] and df.status[0] == "ok" and df.median_ms[0] == 1.0

    clock[0] = 0.0
    assert len(T.tune(pr, instances=names, progress=False, cudnn=False, deadline=-1.0)) == 0  # already past
    res = T.tune(pr, instances=names, progress=False, cudnn=False)  # no deadline: the rest
    assert sorted(r["instance"] for r in res) == sorted([b.name, c.name]) and not res.stopped_early
    assert len(read_db(tiers.path)) == 3


def test_sweep_max_minutes_zero_measures_nothing_and_says_so(tiers):
    probs = [Problem("conv_bwd_data", P, LAYOUT, "fp16")]
    res = sweep(probs, max_instances=1, progress=False, max_minutes=0, **FAST)
    assert res.stopped_early and res.tuned == 0 and not tiers.path.exists()
    assert "stopped at the deadline" in res.throughput_line("cpu")
    res = sweep(probs, max_instances=1, progress=False, max_minutes=10, **FAST)
    assert not res.stopped_early and res.tuned == 1 and res.instances_per_minute > 0
    assert "1 ok, 0 pruned, 0 failed" in res.throughput_line() and "do_bench" in res.time_split()


def test_compile_workers_in_processes_and_a_broken_pool_falls_back(tiers, monkeypatch):
    pr = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    run, _ = get_registry().candidates(pr.op, P, LAYOUT, "fp16", "passthrough")
    insts = C.order_candidates(pr, run)[:2]
    pc = CA.Precompiler(torch.device("cpu"), [(pr, insts)], O.TuneOptions(compile_workers=2))
    try:
        got, cut = pc.results(pr, timeout=120)
    finally:
        pc.close()
    assert not cut and set(got) == {i.name for i in insts} and not pc.broken
    assert all(v is not None and v["error"] is None and v["s"] > 0 for v in got.values()), got

    class Bogus:  # the workers cannot start: every answer is None, with one warning, and no hang
        def __str__(self):
            return "no-such-device:0"

    pc = CA.Precompiler(Bogus(), [(pr, insts)], O.TuneOptions(compile_workers=1))
    try:
        with pytest.warns(RuntimeWarning, match="compile workers failed"):
            got, cut = pc.results(pr, timeout=120)
    finally:
        pc.close()
    assert got == {i.name: None for i in insts} and pc.broken


def test_precompile_skips_problems_whose_operands_would_not_fit_beside_the_workers(monkeypatch):
    class Props:
        total_memory = 140 * 2**30

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props)
    cuda = torch.device("cuda:0")
    huge = ConvParams(2, 1, 64, 64, 64, (3, 3), (1024, 512), (1, 1), (1, 1), (1, 1), (1, 1))  # 2^31-element dx
    assert not CA.precompile_fits(huge, 15, cuda)  # 15 x 16 GB operands > 35 GB
    assert CA.precompile_fits(huge, 1, torch.device("cpu"))  # the interpreter builds them anyway
    assert CA.precompile_fits(P, 15, cuda)
