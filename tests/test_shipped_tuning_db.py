"""The shipped system tier (tuning_db/*.csv.gz) parses and names only instances the registry knows."""

import warnings
from pathlib import Path

import pytest

from instance_factory.registry import get_registry
from instance_factory.tuning.database import best_per_problem, read_db, system_db_files

SHIPPED = system_db_files(Path(__file__).resolve().parent.parent / "tuning_db")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_db_is_consistent_with_the_registry(path):
    df = read_db(path)
    assert len(df) > 0
    reg = get_registry()
    unknown = sorted(set(df["instance"]) - {i.name for i in reg.instances()})
    assert not unknown, f"{path.name} names instances the registry no longer has: {unknown[:5]}"
    ok = df[df["status"] == "ok"]
    assert (ok["rel_err"] <= ok["tolerance"]).all(), "an ok row must have passed verification"
    assert ok["median_ms"].gt(0).all()
    best = best_per_problem(ok)
    assert set(best["problem_key"]) == set(ok["problem_key"])
    # a kernel edit since tuning makes rows stale (ignored by lookup): say so, the sweep must be redone
    stale = {name for name, h in zip(df["instance"], df["kernel_hash"]) if reg.get(name).kernel_hash != h}
    if stale:
        warnings.warn(f"{path.name}: {len(stale)} instances were tuned with an older kernel source; "
                      "re-run the sweeps on that device", stacklevel=1)


def test_residual_set_is_fused_add_dgrad_and_tuned_on_the_h100():
    """resnet50_residual_b64: every entry is a conv_bwd_data problem with fused op "add" (one D, the skip
    gradient), and the H100 file holds a verified row for each, so a converted ResNet-50 whose
    bottlenecks fuse their skip gradient (ResidualConv / forward_with_skip) looks its conv1s up exactly."""
    from instance_factory.tuning.problem_sets import gather_problems

    probs = gather_problems(["resnet50_residual_b64"])
    assert len(probs) == 18 and {p.op for p in probs} == {"conv_bwd_data"} and {p.fused_op for p in probs} == {"add"}
    h100 = [p for p in SHIPPED if p.name == "nvidia-h100-80gb-hbm3.csv.gz"]
    assert h100, "the H100 file is part of the shipped system tier"
    ok = read_db(h100[0])
    ok = ok[ok["status"] == "ok"]
    missing = {p.key for p in probs} - set(ok["problem_key"])
    assert not missing, f"fused-add problems without an H100 row: {sorted(missing)[:3]}"


def test_candidate_cut_puts_another_gpus_best_first_in_its_family():
    """A ``max_instances`` cut (a sweep on a GPU nobody tuned) takes each kernel family's instances in the
    order the cost model predicts, the other GPU's rows of the same problem included: the ResNet stem's
    best H100 wgrad instance (a padx config) is in a 6-instance cut, where registry order had only padx's
    first config."""
    import pandas as pd

    from instance_factory.problem import ConvParams
    from instance_factory.tuning.candidates import candidates_for
    from instance_factory.tuning.options import TuneOptions
    from instance_factory.tuning.problem_sets import Problem

    params = ConvParams(2, 1, 64, 64, 3, (7, 7), (224, 224), (2, 2), (1, 1), (3, 3), (3, 3))
    pr = Problem("conv_bwd_weight", params, "NHWGC/GKYXC/NHWGK", "bf16")
    h100 = read_db(next(p for p in SHIPPED if "h100" in p.name))
    rows = h100[(h100["problem_key"] == pr.key) & (h100["status"] == "ok")]
    best = rows.loc[pd.to_numeric(rows["median_ms"]).idxmin(), "instance"]
    reg = get_registry()
    runnable, _ = reg.candidates(pr.op, params, pr.layout, pr.dtype, pr.fused_op)
    family = [i.name for i in runnable if i.algorithm == reg.get(best).algorithm]
    assert family.index(best) > 0  # registry order would not take it first
    cut, _ = candidates_for(pr, TuneOptions(max_instances=6))
    assert best in {i.name for i in cut}
    assert len({i.algorithm for i in cut}) >= 4  # still spread over the families
