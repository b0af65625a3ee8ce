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
