"""The tuner on a real GPU (skipped elsewhere): parallel compile, do_bench, cuDNN in the same run."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
from tuning_helpers import isolated_tiers

from instance_factory.problem import ConvParams
from instance_factory.tuning import lookup as L
from instance_factory.tuning import tuner as T
from instance_factory.tuning.candidates import candidates_for
from instance_factory.tuning.database import current_device, read_db
from instance_factory.tuning.options import PRUNED_TIMING
from instance_factory.tuning.problem_sets import Problem

pytestmark = pytest.mark.gpu

LAYOUT = "NHWGC/GKYXC/NHWGK"


@pytest.mark.parametrize("op", ["conv_bwd_data", "conv_bwd_weight"])
def test_tune_on_gpu(tmp_path, op):
    p = ConvParams(2, 1, 32, 128, 64, (3, 3), (28, 28), (2, 2), (1, 1), (1, 1), (1, 1))
    pr = Problem(op, p, LAYOUT, "bf16")
    with isolated_tiers(tmp_path) as (user, _):
        rows = T.tune(pr, max_instances=6, progress=False, compile_workers=4)
        df = read_db(user / f"{current_device().kind}.csv")
        assert len(df) == len(rows) == 6
        ok = df[df.status == "ok"]
        assert len(ok) >= 1, df[["instance", "status", "reason"]].to_string()
        assert ok.timing.str.startswith("do_bench").all() and (ok.reps >= 5).all()
        assert ok.cudnn_impl.str.startswith("cudnn").all() and (ok.cudnn_ms > 0).all()
        assert (ok.rel_err <= ok.tolerance).all()
        winner = ok.sort_values("median_ms").instance.iloc[0]
        got = L.lookup(op, p, layout=LAYOUT, dtype=torch.bfloat16, device=torch.device("cuda"))
        assert got.name == winner


def test_depthwise_prunes_tensor_core_tiles_and_compiles_ahead_in_processes(tmp_path):
    """Depthwise (C = K = 1): igemm tiles are 100x slower than ``direct`` and must not reach do_bench;
    kernels are compiled ahead by worker processes (compile-only) and loaded here."""
    p = ConvParams(2, 64, 32, 1, 1, (3, 3), (56, 56), (1, 1), (1, 1), (1, 1), (1, 1))
    pr = Problem("conv_bwd_data", p, LAYOUT, "bf16")
    run, _ = candidates_for(pr)
    direct = [i.name for i in run if i.algorithm == "direct"][:2]
    igemm = [i.name for i in run if i.algorithm == "igemm"][-3:]  # the largest tiles
    with isolated_tiers(tmp_path) as (user, _):
        res = T.tune(pr, instances=direct + igemm, progress=False, compile_mode="process", compile_workers=2)
        rows = {r["instance"]: r for r in res}
        assert all(rows[n]["status"] == "ok" for n in direct), [rows[n]["reason"] for n in direct]
        assert all(rows[n]["status"] == "pruned" for n in igemm), [rows[n]["reason"] for n in igemm]
        assert all(rows[n]["timing"] == PRUNED_TIMING for n in igemm)
        assert res.stats.get("precompiled", 0) == 5 and not res.stopped_early
        assert read_db(user / f"{current_device().kind}.csv").status.value_counts().to_dict() == \
            {"ok": 2, "pruned": 3}
        got = L.lookup("conv_bwd_data", p, layout=LAYOUT, dtype=torch.bfloat16, device=torch.device("cuda"))
        assert got.name in direct
