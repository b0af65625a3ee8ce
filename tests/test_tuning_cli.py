"""The tuning subcommands through the real ``instance-factory`` entry point (interpreter, tiny problems)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import argparse
import json

import pytest
from tuning_helpers import isolated_tiers

from instance_factory.cli import bench, db, extract, lookup, main, merge, tune
from instance_factory.problem import ConvParams
from instance_factory.tuning.database import read_db
from instance_factory.tuning.problem_sets import Problem

LAYOUT = "NHWGC/GKYXC/NHWGK"
P = ConvParams(2, 1, 1, 8, 8, (3, 3), (4, 4), (1, 1), (1, 1), (1, 1), (1, 1))
KEY = Problem("conv_bwd_data", P, LAYOUT, "bf16").key


@pytest.fixture
def tiers(tmp_path):
    with isolated_tiers(tmp_path) as (user, system):
        yield user, system


def test_register_adds_the_subcommands_with_handlers():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    for command in (tune, lookup, merge, bench, db, extract):
        command.register(sub)
    for argv in (["tune", "quickstart", "--shard", "1/2", "--workers", "2", "--dtype", "bf16", "--pass", "data"],
                 ["lookup", KEY], ["merge", "out.csv", "a.csv", "b.csv"], ["bench", "resnet50"],
                 ["db", "show"], ["extract", "resnet50"]):
        ns = parser.parse_args(argv)
        assert callable(ns.func)


def test_tune_lookup_db_merge_bench(tiers, tmp_path, capsys):
    user, _ = tiers
    shard = tmp_path / "shard.csv"
    rc = main(["tune", "--problem", KEY, "--max-instances", "2", "--cpu-reps", "1", "--no-cudnn",
               "--db", str(shard), "--quiet", "--summary", str(tmp_path / "summary.md")])
    out = capsys.readouterr().out
    assert rc == 0 and "measured 2 instances (2 ok, 0 pruned, 0 failed)" in out and "instances/min" in out
    assert "benchmarked/min" in out and "stopped at the deadline" not in out
    assert "| problem | pass | dtype | best instance | ms | TFLOP/s | cuDNN ms | speedup |" in out
    md = (tmp_path / "summary.md").read_text()
    assert md.startswith("### Sweep on cpu") and "instances/min" in md and "| problem | pass |" in md
    assert len(read_db(shard)) == 2

    rc = main(["tune", "--problem", KEY, "--max-instances", "2", "--db", str(shard), "--quiet", "--no-summary"])
    assert rc == 0 and "1 already tuned (skipped); measured 0 instances" in capsys.readouterr().out

    assert main(["merge", str(user / "cpu.csv"), str(shard)]) == 0
    assert "2 rows" in capsys.readouterr().out

    assert main(["lookup", KEY]) == 0
    out = capsys.readouterr().out
    best = read_db(user / "cpu.csv").sort_values("median_ms").instance.iloc[0]
    # either of the two instances may win on a CPU; its parameters print whichever it is
    assert f"instance   {best}" in out and "exact (user tier)" in out and "\nparams     " in out
    assert ("block_m=" in out) == ("direct" not in best)

    assert main(["lookup", "--op", "data", "--params", P.key(), "--dtype", "bf16"]) == 0
    assert best in capsys.readouterr().out

    assert main(["db", "summary"]) == 0
    assert "2 rows, 1 problems; 2 rows valid" in capsys.readouterr().out
    assert main(["db", "show", "--best"]) == 0
    assert best in capsys.readouterr().out

    assert main(["bench", "quickstart", "--dtype", "bf16", "--pass", "data", "-o", str(tmp_path / "b.md")]) == 0
    out = capsys.readouterr().out
    assert "0 of 10 problems tuned" in out  # quickstart's problems are not the one tuned above


def test_lookup_error_policy_exit_code(tiers, capsys):
    assert main(["lookup", KEY, "--policy", "error"]) == 1
    assert "no tuned result" in capsys.readouterr().err


def test_extract_wav2vec2_to_yaml(tmp_path, capsys):
    out = tmp_path / "w.yaml"
    assert main(["extract", "wav2vec2", "--batch", "2", "--input", "1x16000", "-o", str(out)]) == 0
    from instance_factory.tuning.problem_sets import expand_problem_set

    probs = expand_problem_set(str(out))
    assert len({p.params for p in probs}) == 8 and all(p.params.N == 2 for p in probs)


def test_tune_max_minutes_stops_cleanly_and_a_rerun_resumes(tiers, tmp_path, capsys):
    db, md = tmp_path / "d.csv", tmp_path / "s.md"
    args = ["tune", "--problem", KEY, "--max-instances", "2", "--cpu-reps", "1", "--no-cudnn", "--db", str(db),
            "--quiet", "--no-summary", "--summary", str(md)]
    assert main(args + ["--max-minutes", "0"]) == 0
    out = capsys.readouterr().out
    assert "measured 0 instances" in out and "stopped at the deadline (--max-minutes)" in out
    assert not db.exists() and "stopped at the deadline" in md.read_text()  # nothing half-written
    assert main(args + ["--max-minutes", "30"]) == 0
    out = capsys.readouterr().out
    assert "measured 2 instances" in out and "stopped at the deadline" not in out and len(read_db(db)) == 2


def test_lookup_explain_bench_untuned_and_db_evaluate(tiers, tmp_path, capsys):
    """lookup --explain shows the cost model's ranking and neighbours; bench --untuned puts the untuned
    default (measured now: it has no row) beside the tuned best; db evaluate scores the policy."""
    from tuning_helpers import synthetic_row

    from instance_factory.registry import get_registry
    from instance_factory.tuning import lookup as L

    user, _ = tiers
    near = Problem("conv_bwd_data", ConvParams(2, 1, 1, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1)),
                   LAYOUT, "bf16")
    run, _ = get_registry().candidates(near.op, near.params, near.layout, near.dtype, near.fused_op)
    rc = main(["tune", "--problem", KEY, "--instances", run[1].name, "--cpu-reps", "1", "--no-cudnn",
               "--db", str(user / "cpu.csv"), "--quiet", "--no-summary"])
    assert rc == 0
    from instance_factory.tuning.database import TuningDB

    TuningDB(user / "cpu.csv").add([synthetic_row(near, run[0], 0.5), synthetic_row(near, run[1], 5.0)])
    L.clear_cache()
    assert main(["lookup", KEY, "--untuned", "--explain", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "chosen by  heuristic" in out and "predicted ms" in out and near.key in out
    assert f"instance   {run[0].name}" in out  # the neighbour's fastest kernel, not this problem's row
    assert main(["lookup", KEY, "--explain"]) == 0
    assert "an exact hit" in capsys.readouterr().out

    set_yaml = tmp_path / "one.yaml"
    set_yaml.write_text("name: one\ndtypes: [bf16]\npasses: [conv_bwd_data]\nproblems:\n"
                        "  - {name: tiny, ndim: 2, G: 1, N: 1, K: 8, C: 8, filter: [3, 3], input: [4, 4], "
                        "stride: [1, 1], dilation: [1, 1], left_pad: [1, 1], right_pad: [1, 1]}\n")
    assert main(["bench", str(set_yaml), "--untuned", "-o", str(tmp_path / "u.md")]) == 0
    out = capsys.readouterr().out
    assert "| problem | pass | dtype | class | untuned default |" in out and run[0].name.split("-")[1] in out
    assert "| data | dense | bf16 | 1 |" in out and "wrong result" not in out

    first = tmp_path / "loo.json"
    assert main(["db", "evaluate", "--db", str(user / "cpu.csv"), "--json", str(first)]) == 0
    assert "each hidden in turn" in capsys.readouterr().out
    results = json.loads(first.read_text())
    assert results and all(r["device"] and 0 < r["ratio"] <= 1 for r in results)
    assert main(["db", "evaluate", "--db", str(user / "cpu.csv"), "--compare", str(first)]) == 0
    assert f"{len(results)} problems in both runs; 0 moved" in capsys.readouterr().out


def test_compare_results_lists_the_problems_that_moved():
    from instance_factory.tuning.miss_eval import compare_results

    def res(key, ratio, chosen):
        return {"device": "gpu", "problem_key": key, "ratio": ratio, "chosen": chosen}

    before = [res("a", 0.9, "x"), res("b", 0.4, "y"), res("c", 1.0, "z")]
    after = [res("a", 0.3, "w"), res("b", 0.95, "v"), res("c", 0.97, "z"), res("d", 1.0, "u")]
    text = compare_results(before, after)
    assert "3 problems in both runs; 2 moved by more than 10%; below 0.5x 1 -> 1" in text
    assert "| 0.900 | 0.300 | a | x -> w |" in text and "| 0.400 | 0.950 | b | y -> v |" in text
    assert "| c |" not in text
    # a run written before the results named their device: paired by problem key
    undated = [{k: v for k, v in r.items() if k != "device"} for r in before]
    assert "3 problems in both runs; 2 moved" in compare_results(undated, after)


def test_db_suspects_lists_disturbed_rows_and_tune_todo_times_exactly_them(tiers, tmp_path, capsys):
    """An fp16 row over 2x its bf16 twin (same kernel) is listed with its twin's time; the todo file it
    writes makes `tune --todo` time that one instance of that one problem, whatever the database holds."""
    import json

    from tuning_helpers import synthetic_row

    from instance_factory.registry import get_registry
    from instance_factory.tuning.database import TuningDB

    bf16 = Problem("conv_bwd_data", P, LAYOUT, "bf16")
    fp16 = Problem("conv_bwd_data", P, LAYOUT, "fp16")
    reg = get_registry()
    run16, _ = reg.candidates(fp16.op, fp16.params, fp16.layout, fp16.dtype, fp16.fused_op)
    slow, fine = run16[0], run16[1]
    twin_of = {i.name: reg.get(i.name.replace("-fp16-", "-bf16-")) for i in (slow, fine)}
    shipped = tmp_path / "shipped.csv"
    TuningDB(shipped).add([synthetic_row(bf16, twin_of[slow.name], 0.010), synthetic_row(fp16, slow, 0.050),
                           synthetic_row(bf16, twin_of[fine.name], 0.020), synthetic_row(fp16, fine, 0.030)])
    todo_file = tmp_path / "todo.json"
    assert main(["db", "suspects", "--db", str(shipped), "--todo", str(todo_file)]) == 0
    out = capsys.readouterr().out
    assert "1 of 4 current rows over 2x" in out and "0.0500 ms vs 0.0100" in out and slow.name in out
    assert json.loads(todo_file.read_text()) == {fp16.key: [slow.name]}  # 0.030 vs 0.020: within 2x

    rows = tmp_path / "rows.csv"
    rc = main(["tune", "--todo", str(todo_file), "--cpu-reps", "1", "--no-cudnn", "--db", str(rows), "--quiet",
               "--no-summary"])
    assert rc == 0 and "measured 1 instances" in capsys.readouterr().out
    got = read_db(rows)
    assert list(got["instance"]) == [slow.name] and list(got["problem_key"]) == [fp16.key]

    todo_file.write_text(json.dumps({fp16.key: [twin_of[slow.name].name]}))  # a bf16 instance for an fp16 problem
    assert main(["tune", "--todo", str(todo_file), "--db", str(rows)]) == 2
    assert "does not serve" in capsys.readouterr().err
    assert main(["tune", "quickstart", "--todo", str(todo_file)]) == 2
    assert "leave out sets" in capsys.readouterr().err
    todo_file.write_text(json.dumps({"not-a-key": [slow.name]}))
    assert main(["tune", "--todo", str(todo_file)]) == 2
    assert "not a problem key" in capsys.readouterr().err


def test_suspects_list_family_outliers_once_and_need_a_family():
    """An ok row over 4x its kernel family's median on the same problem and device is a suspect (reference:
    that median); a family of three rows is too small to say, pruned rows and other devices do not count,
    and a row that is also a twin suspect is listed once, as that."""
    from instance_factory.tuning.suspects import family_outliers, suspect_rows

    def row(i, ms, alg="tma", key="p1", device="H100", status="ok", dtype="bf16"):
        return {"problem_key": f"conv_bwd_data|NHWGC/GKYXC/NHWGK|{dtype}|passthrough|{key}", "device": device,
                "algorithm": alg, "status": status, "median_ms": ms, "instance": f"{alg}-{dtype}-c{i}"}

    rows = [row(0, 0.02), row(1, 0.021), row(2, 0.019), row(3, 0.09), row(4, 0.5, status="pruned"),
            row(5, 0.02, alg="igemm"), row(6, 0.02, alg="igemm"), row(7, 0.2, alg="igemm"),  # 3 rows: no call
            row(8, 0.02, device="H200"), row(9, 0.02, device="H200"), row(10, 0.02, device="H200")]
    assert family_outliers(rows) == {3: pytest.approx(0.0205)}
    sus = suspect_rows(rows)
    assert [(s["instance"], s["why"]) for s in sus] == [("tma-bf16-c3", "family")]
    assert sus[0]["ms"] / sus[0]["ref_ms"] == pytest.approx(0.09 / 0.0205)
