"""Run-time lookup: exact hits, tiers, stale rows, miss policies, warn-once, the cache's cost, the ops path."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import time
import warnings
from pathlib import Path

import pytest
import torch
from tuning_helpers import isolated_tiers, synthetic_row

import instance_factory
from instance_factory.problem import ConvParams
from instance_factory.registry import get_registry
from instance_factory.tuning import lookup as L
from instance_factory.tuning.database import TuningDB, current_device, read_db
from instance_factory.tuning.miss_eval import problem_distance
from instance_factory.tuning.problem_sets import Problem
from instance_factory.tuning.tune_on_miss import TUNE_OPTIONS

LAYOUT = "NHWGC/GKYXC/NHWGK"
P = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
PROB = Problem("conv_bwd_data", P, LAYOUT, "fp16")


@pytest.fixture
def tiers(tmp_path):
    with isolated_tiers(tmp_path) as (user, system):
        yield TuningDB(user / "cpu.csv"), TuningDB(system / "cpu.csv")


def runnable(problem=PROB):
    run, declined = get_registry().candidates(problem.op, problem.params, problem.layout, problem.dtype,
                                              problem.fused_op)
    assert len(run) >= 3
    return run, declined


def look(params=P, **kw):
    return L.lookup("conv_bwd_data", params, layout=LAYOUT, dtype=torch.float16, **kw)


def test_exact_hit_returns_the_fastest_valid_row(tiers):
    user, _ = tiers
    a, b, c = runnable()[0][:3]
    user.add([
        synthetic_row(PROB, a, 3.0),
        synthetic_row(PROB, b, 1.0),
        synthetic_row(PROB, c, 0.2, status="failed"),  # wrong results are never chosen
        synthetic_row(PROB, c, 0.1, triton_version="0.0.1"),  # stale software
    ])
    assert look() is b
    ch = L.explain("conv_bwd_data", P, layout=LAYOUT, dtype=torch.float16)
    assert ch.source == "exact (user tier)" and ch.instance is b and ch.row["median_ms"] == 1.0
    # DataType names and LayoutTriple objects work too
    assert L.lookup("conv_bwd_data", P, layout=get_registry().get(b.name).layout, dtype="fp16") is b


def test_user_tier_is_read_first(tiers):
    user, system = tiers
    a, b, _ = runnable()[0][:3]
    q = ConvParams(2, 1, 2, 8, 8, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1))
    qprob = Problem("conv_bwd_data", q, LAYOUT, "fp16")
    system.add([synthetic_row(PROB, a, 1.0), synthetic_row(PROB, b, 2.0), synthetic_row(qprob, b, 1.0)])
    assert look() is a
    assert L.explain("conv_bwd_data", P, layout=LAYOUT, dtype="fp16").source == "exact (system tier)"
    user.add([synthetic_row(PROB, b, 5.0)])  # the write clears the cache
    assert look() is b  # the user tier's answer, even though slower than the system tier's number
    assert look(params=q) is b and L.explain("conv_bwd_data", q, layout=LAYOUT, dtype="fp16").source == \
        "exact (system tier)"


def test_stale_kernel_hash_and_declining_winner_are_skipped(tiers):
    user, _ = tiers
    run, declined = runnable()
    a, b = run[:2]
    decliner = next(i for i, _ in declined if i.op == "conv_bwd_data")
    user.add([
        synthetic_row(PROB, a, 0.1, kernel_hash="0000000000000000"),  # the kernel changed since
        synthetic_row(PROB, decliner, 0.05),  # cannot run this problem (e.g. a 1x1 specialization)
        synthetic_row(PROB, b, 1.0),
    ])
    assert look() is b


def test_heuristic_ranks_by_the_nearest_measurements_and_warns_once(tiers):
    user, _ = tiers
    run, _ = runnable()
    a, b = run[:2]
    near = Problem("conv_bwd_data", ConvParams(2, 1, 4, 8, 8, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1)),
                   LAYOUT, "fp16")
    far = Problem("conv_bwd_data", ConvParams(2, 1, 64, 64, 64, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1),
                                              (1, 1)), LAYOUT, "fp16")
    user.add([synthetic_row(near, a, 1.0), synthetic_row(near, b, 2.0), synthetic_row(far, b, 1.0)])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert look() is a
        assert look() is a  # cached
        L.clear_cache()
        ch = L.explain("conv_bwd_data", P, layout=LAYOUT, dtype=torch.float16)
    assert ch.source == "heuristic" and ch.neighbor == near.key and ch.instance is a
    assert [n for _, n in ch.neighbors] == [near.key, far.key]
    assert ch.ranking[0].name == a.name and len(ch.ranking) == len(run)
    assert [p.predicted_ms for p in ch.ranking] == sorted(p.predicted_ms for p in ch.ranking)
    miss = [x for x in w if issubclass(x.category, L.TuningMissWarning)]
    assert len(miss) == 1 and PROB.key in str(miss[0].message) and near.key in str(miss[0].message)
    assert problem_distance(P, near.params) < problem_distance(P, far.params)
    assert problem_distance(P, P) == 0.0


def test_fp16_miss_takes_the_bf16_winner_of_the_same_problem(tiers):
    """fp16 and bf16 instances with the same tile are one kernel: bf16 rows rank fp16 candidates."""
    user, _ = tiers
    bf = Problem("conv_bwd_data", P, LAYOUT, "bf16")
    brun, _ = runnable(bf)
    slow, fast = brun[0], brun[-1]
    user.add([synthetic_row(bf, slow, 5.0), synthetic_row(bf, fast, 0.5)]
             + [synthetic_row(bf, i, 2.0) for i in brun[1:-1]])
    ch = L.explain("conv_bwd_data", P, layout=LAYOUT, dtype=torch.float16)
    assert ch.source == "heuristic" and ch.neighbor == bf.key
    assert ch.instance.data_type.name == "fp16" and ch.instance.cfg == fast.cfg
    assert ch.instance.algorithm == fast.algorithm and ch.instance.name != fast.name


def test_failed_kernel_on_a_neighbour_is_avoided(tiers):
    user, _ = tiers
    run, _ = runnable()
    near = Problem("conv_bwd_data", ConvParams(2, 1, 4, 8, 8, (3, 3), (8, 8), (1, 1), (1, 1), (1, 1), (1, 1)),
                   LAYOUT, "fp16")
    # every kernel measured at 1 ms except the first, which produced wrong results there
    user.add([synthetic_row(near, run[0], 0.1, status="failed")]
             + [synthetic_row(near, i, 1.0 + 0.01 * n) for n, i in enumerate(run[1:])])
    assert look() is run[1]


def test_without_tuned_rows_the_analytic_model_ranks(tiers):
    with pytest.warns(L.TuningMissWarning, match="analytic model"):
        inst = look()
    ch = L.explain("conv_bwd_data", P, layout=LAYOUT, dtype="fp16")
    assert ch.source == "model" and inst is ch.instance and not ch.neighbors
    assert "model only" in ch.ranking[0].basis
    # depthwise: a tensor-core tile would waste nearly all of its work; a memory-bound family wins
    dw = ConvParams(2, 256, 32, 1, 1, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1))
    with pytest.warns(L.TuningMissWarning):
        got = L.lookup("conv_bwd_weight", dw, layout=LAYOUT, dtype=torch.float16)
    assert "block_m" not in got.cfg


def test_error_policy_by_argument_and_environment(tiers, monkeypatch):
    with pytest.raises(L.TuningMissError, match=PROB.key.replace("|", r"\|")):
        look(policy="error")
    monkeypatch.setenv("INSTANCE_FACTORY_MISS_POLICY", "error")
    L.clear_cache()
    with pytest.raises(L.TuningMissError, match="not tuned|no tuned result"):
        look()
    monkeypatch.setenv("INSTANCE_FACTORY_MISS_POLICY", "sometimes")
    with pytest.raises(ValueError, match="unknown miss policy"):
        look()
    with pytest.warns(L.TuningMissWarning):
        assert look(policy="heuristic") is not None  # the argument wins over the variable


def test_tune_policy_tunes_stores_and_returns_the_winner(tiers):
    user, _ = tiers
    TUNE_OPTIONS.update(max_instances=2, cpu_reps=1, cudnn=False)
    with pytest.warns(L.TuningMissWarning, match="tuning it now"):
        inst = look(policy="tune")
    rows = read_db(user.path)
    assert len(rows) == 2 and set(rows.status) == {"ok"}
    best = rows.sort_values("median_ms").iloc[0]
    assert inst.name == best.instance
    assert L.explain("conv_bwd_data", P, layout=LAYOUT, dtype="fp16").source == "exact (user tier)"


def test_tune_policy_calls_the_registered_tuner_and_errors_without_one(tiers):
    # lookup never imports the tuner: the "tune" policy runs whatever the composition root registered
    calls = []
    saved = list(L._TUNE_ON_MISS)
    try:
        L.set_tune_on_miss(lambda *args: calls.append(args))
        with pytest.warns(L.TuningMissWarning), pytest.raises(L.TuningMissError, match="found no instance"):
            look(policy="tune")  # the stand-in stored no rows
        assert calls == [("conv_bwd_data", P, LAYOUT, "fp16", "passthrough", None)]
        L.set_tune_on_miss(None)
        with pytest.raises(L.TuningMissError, match="no tuner is registered"):
            L.explain("conv_bwd_data", P, layout=LAYOUT, dtype="fp16", policy="tune")
    finally:
        L._TUNE_ON_MISS[:] = saved


def test_repeated_hit_is_cheap(tiers):
    user, _ = tiers
    a = runnable()[0][0]
    user.add([synthetic_row(PROB, a, 1.0)])
    dev = torch.device("cpu")
    args = dict(layout=LAYOUT, dtype=torch.float16, fused_op="passthrough", device=dev)
    assert L.lookup("conv_bwd_data", P, **args) is a
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        L.lookup("conv_bwd_data", P, **args)
    same = (time.perf_counter() - t0) / n * 1e6
    fresh = [ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1)) for _ in range(n)]
    t0 = time.perf_counter()
    for p in fresh:
        L.lookup("conv_bwd_data", p, **args)
    new_obj = (time.perf_counter() - t0) / n * 1e6
    print(f"\nlookup hit: {same:.2f} us (same ConvParams object), {new_obj:.2f} us (equal new object)")
    assert same < 50 and new_obj < 50  # loose for CI; about 1-3 us on a 2-core machine


def test_ops_use_lookup_when_instance_is_none(tiers, monkeypatch):
    from instance_factory.harness.operands import make_problem_tensors
    from instance_factory.reference import ref_conv_bwd_data, rel_error

    user, _ = tiers
    a, b = runnable()[0][:2]
    user.add([synthetic_row(PROB, a, 2.0), synthetic_row(PROB, b, 1.0)])
    seen = []
    real = L.lookup

    def spy(*args, **kw):
        inst = real(*args, **kw)
        seen.append((args, kw, inst))
        return inst

    monkeypatch.setattr(L, "lookup", spy)
    t = make_problem_tensors("conv_bwd_data", P, LAYOUT, "fp16")
    out = instance_factory.conv_bwd_data(t["a"], t["b"], P, layout=LAYOUT)
    assert len(seen) == 1 and seen[0][2] is b
    assert seen[0][1]["dtype"] == torch.float16 and current_device(seen[0][1]["device"]).name == "cpu"
    assert rel_error(out, ref_conv_bwd_data(t["a"], t["b"], P, LAYOUT)) < 2e-3


def test_ops_hot_path_follows_database_writes(tiers):
    """Repeated instance=None calls skip plan, lookup and runner lookups (one dict hit), and a database
    write (which clears the lookup cache) reaches them: the next call serves the new winner."""
    from instance_factory import ops
    from instance_factory.harness.operands import make_problem_tensors
    from instance_factory.reference import ref_conv_bwd_data, rel_error

    user, _ = tiers
    a, b = runnable()[0][:2]
    user.add([synthetic_row(PROB, a, 1.0), synthetic_row(PROB, b, 2.0)])
    t = make_problem_tensors("conv_bwd_data", P, LAYOUT, "fp16", seed=3)
    ref = ref_conv_bwd_data(t["a"], t["b"], P, LAYOUT)
    instance_factory.conv_bwd_data(t["a"], t["b"], P, layout=LAYOUT)
    hot = [v for k, v in ops._HOT.items() if k[1] == P and k[0] == "conv_bwd_data"]
    assert len(hot) == 1
    out = instance_factory.conv_bwd_data(t["a"], t["b"], P, layout=LAYOUT)  # served from the hot cache
    assert rel_error(out, ref) < 2e-3
    user.add([synthetic_row(PROB, b, 0.5)])  # b is now the fastest: the write clears the caches
    assert not any(k[1] == P for k in ops._HOT)
    out = instance_factory.conv_bwd_data(t["a"], t["b"], P, layout=LAYOUT)
    assert rel_error(out, ref) < 2e-3 and look() is b
    with pytest.raises(ValueError, match="shape"):  # the per-call tensor checks still run on the hot path
        instance_factory.conv_bwd_data(t["a"][:, :-1], t["b"], P, layout=LAYOUT)


def test_writes_to_other_files_keep_the_index(tiers, tmp_path):
    """A sweep writing its own --db file does not drop the tiers' index (relayout looks its twin up on
    every bind: a re-read of the tiers costs seconds); a write to a tier file does."""
    user, _ = tiers
    a, b = runnable()[0][:2]
    user.add([synthetic_row(PROB, a, 1.0)])
    assert look() is a
    index = L.INDEXES[current_device()]
    TuningDB(tmp_path / "sweep.csv").add([synthetic_row(PROB, b, 0.5)])
    assert L.INDEXES.get(current_device()) is index and look() is a
    user.add([synthetic_row(PROB, b, 0.5)])
    assert L.INDEXES.get(current_device()) is not index and look() is b


def test_a_user_tier_write_does_not_parse_the_shipped_file_again(tiers, monkeypatch):
    """Each database file is parsed once per version (tier_index): after a write to the user tier the
    next index reads that file only (parsing a shipped file takes seconds), and a change to the
    shipped file is still seen."""
    from instance_factory.tuning import database

    user, system = tiers
    a, b, c = runnable()[0][:3]
    system.add([synthetic_row(PROB, a, 1.0)])
    parsed = []
    real = database.read_db
    monkeypatch.setattr(database, "read_db", lambda path, *k, **kw: parsed.append(Path(path).name) or real(path, *k, **kw))
    assert look() is a and parsed.count("cpu.csv") == 1  # the system file (no user file yet)
    user.add([synthetic_row(PROB, b, 0.5)])
    assert look() is b and len(parsed) == 2  # the user file only
    system.add([synthetic_row(PROB, c, 0.1)])
    L._NEXT_CHECK[0] = 0.0
    assert look() is b and len(parsed) == 3  # the user tier still wins; the changed system file re-read
    assert L.explain("conv_bwd_data", P, layout=LAYOUT, dtype=torch.float16).source == "exact (user tier)"
