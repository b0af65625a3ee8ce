"""tools/untuned_check.py end to end on the CPU (--cpu-smoke, one shrunken held-out layer), and its parts."""

import importlib.util
import json
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("untuned_check", ROOT / "tools" / "untuned_check.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_shrink_keeps_class_and_interleave_covers_groups():
    from instance_factory.tuning.cost_model import conv_class

    ns = tool.parse_args(["--cpu-smoke"])
    probs = tool.load_problems(ns)
    assert probs and all(p.params.N == 1 and p.params.C <= 5 and p.params.K <= 6 for p in probs)
    full = tool.load_problems(tool.parse_args([]))
    assert [conv_class(p.params) for p in probs] == [conv_class(p.params) for p in full]
    order = tool.interleave(full)
    groups = {(p.op, conv_class(p.params), p.dtype) for p in full}
    first = {(p.op, conv_class(p.params), p.dtype) for p in order[:len(groups)]}
    assert first == groups and sorted(p.key for p in order) == sorted(p.key for p in full)
    assert tool.shipped_overlap(full) == [] and tool.shipped_overlap(probs) == []


def test_cpu_smoke_run_writes_results(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTANCE_FACTORY_USER_DB", str(tmp_path / "untouched"))  # the tool sets its own
    rc = tool.main(["--cpu-smoke", "--out", str(tmp_path), "--layers", "efficientnet_b0.se_reduce",
                    "--dtypes", "bf16", "--passes", "data", "--max-instances", "1", "--host-calls", "2"])
    assert rc == 0
    lines = [json.loads(x) for x in (tmp_path / "untuned_check.jsonl").read_text().splitlines()]
    host = [r for r in lines if r["kind"] == "host"]
    assert {h["op"] for h in host} == {"conv_bwd_data", "conv_bwd_weight"}
    assert all(h["ours_us"] > 0 and h["cudnn_us"] > 0 for h in host)
    probs = [r for r in lines if r["kind"] == "problem"]
    assert len(probs) == 1 and probs[0]["verified"] is True and probs[0]["default_ms"] > 0
    assert 0 < probs[0]["ratio"] <= 1.0 and probs[0]["cudnn_ms"] > 0
    md = (tmp_path / "untuned_check.md").read_text()
    assert "| data | dense | bf16 | 1 |" in md and "small call" in md
    assert (tmp_path / "heldout_tuned.csv").exists()
    from instance_factory.tuning import lookup

    lookup.clear_cache()  # the run's user tier must not leak into later tests' lookups


def test_a_default_far_below_the_tuned_best_is_timed_again(monkeypatch):
    # one disturbed timing must not decide a class's worst case: under RETIME_BELOW both the default and
    # the tuned best are timed once more and each keeps its faster timing; above it nothing is re-timed
    import pandas as pd

    from instance_factory.problem import ConvParams
    from instance_factory.registry import get_registry
    from instance_factory.tuning import untuned
    from instance_factory.tuning.database import DEVICE_COLS, SOFTWARE_COLS
    from instance_factory.tuning.problem_sets import Problem

    pr = Problem("conv_bwd_data", ConvParams(2, 1, 1, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1)),
                 "NHWGC/GKYXC/NHWGK", "fp16")
    insts = [i for i in get_registry().instances() if i.op == pr.op and i.layout_family == "nhwgc"
             and i.ndim == 2 and i.dtype == "fp16" and i.fused_op == "passthrough"][:2]
    default, best = insts
    again = {default.name: 0.05, best.name: 0.03}
    calls = []

    def fake_measure(problem, inst, **kw):
        calls.append(inst.name)
        return {"ms": again[inst.name], "cudnn_ms": 0.02, "rel_err": 0.0, "verified": True}

    monkeypatch.setattr(untuned, "measure", fake_measure)

    def rows(default_ms):
        base = {c: "x" for c in (*DEVICE_COLS, *SOFTWARE_COLS)}
        return pd.DataFrame([dict(base, problem_key=pr.key, instance=name, status="ok", median_ms=ms, cudnn_ms=0.02)
                             for name, ms in ((default.name, default_ms), (best.name, 0.04))])

    rec, = untuned.compare([pr], rows(0.25), defaults={pr.key: default})
    assert calls == [default.name, best.name]
    assert (rec["default_first_ms"], rec["tuned_first_ms"]) == (0.25, 0.04)
    assert (rec["default_ms"], rec["tuned_ms"]) == (0.05, 0.03) and abs(rec["ratio"] - 0.6) < 1e-9
    calls.clear()
    rec, = untuned.compare([pr], rows(0.06), defaults={pr.key: default})
    assert calls == [] and "default_first_ms" not in rec and abs(rec["ratio"] - 0.04 / 0.06) < 1e-9

    # the tool's own records (from its sweep rows) go through the same guard after the sweep
    calls.clear()
    from instance_factory.tuning.schema import split_problem_key

    recs = tool._records([pr], {pr.key: default}, rows(0.25), split_problem_key)
    assert untuned.retime_outliers(recs, [pr], {pr.key: default}) == 1
    assert calls == [default.name, best.name] and recs[0]["default_first_ms"] == 0.25
    assert (recs[0]["default_ms"], recs[0]["tuned_ms"]) == (0.05, 0.03) and abs(recs[0]["ratio"] - 0.6) < 1e-9
    calls.clear()
    recs = tool._records([pr], {pr.key: default}, rows(0.06), split_problem_key)
    assert untuned.retime_outliers(recs, [pr], {pr.key: default}) == 0 and calls == []
