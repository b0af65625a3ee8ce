"""The held-out problem sets (configs/problem_sets/heldout*.yaml) stay
out of the shipped database and of every tuned problem set."""

from pathlib import Path

import pytest

from instance_factory.tuning.cost_model import conv_class
from instance_factory.tuning.database import read_db, split_problem_key, system_db_files
from instance_factory.tuning.problem_sets import expand_problem_set, list_problem_sets, load_problem_set

ROOT = Path(__file__).resolve().parent.parent


HELDOUT_SETS = ("heldout", "heldout_1x1", "heldout_dense3x3", "heldout_skinny_1x1", "heldout_fresh", "heldout_regnet",
                "heldout_fewch", "heldout_fewch_s2")


def heldout_problems():
    return [p for name in HELDOUT_SETS for p in expand_problem_set(name)]


def test_heldout_covers_every_class_ndim_and_both_passes():
    probs = heldout_problems()
    assert {conv_class(p.params) for p in probs} == {"dense", "grouped", "depthwise"}
    assert {p.params.ndim for p in probs} == {1, 2, 3}
    assert {p.op for p in probs} == {"conv_bwd_data", "conv_bwd_weight"}
    assert {p.dtype for p in probs} == {"fp16", "bf16"}


@pytest.mark.parametrize("db", system_db_files(ROOT / "tuning_db"), ids=lambda p: p.name)
def test_no_heldout_problem_is_in_the_shipped_database(db):
    held = {(p.op, p.params.key()) for p in heldout_problems()}
    keys = set(read_db(db)["problem_key"].unique())
    tuned = {(op, pkey) for op, _, _, _, pkey in map(split_problem_key, keys)}
    leaked = sorted(held & tuned)
    assert not leaked, f"{db.name} holds held-out problems (in any dtype/layout): {leaked[:5]}"


def test_heldout_layers_are_in_no_tuned_problem_set():
    held = {e["params"] for name in HELDOUT_SETS for e in load_problem_set(name)["problems"]}
    for name in list_problem_sets():
        if name in HELDOUT_SETS:
            continue
        others = {e["params"] for e in load_problem_set(name)["problems"]}
        assert not held & others, f"problem set {name} shares layers with the held-out set"
