"""The tuner on a real GPU (skipped elsewhere): parallel compile, do_bench, cuDNN in the same run."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from instance_factory.problem import ConvParams
from instance_factory.tuning import lookup as L
from instance_factory.tuning import tuner as T
from instance_factory.tuning._testing import isolated_tiers
from instance_factory.tuning.database import read_db
from instance_factory.tuning.problems import Problem

pytestmark = pytest.mark.gpu

LAYOUT = "NHWGC/GKYXC/NHWGK"


@pytest.mark.parametrize("op", ["conv_bwd_data", "conv_bwd_weight"])
def test_tune_on_gpu(tmp_path, op):
    p = ConvParams(2, 1, 32, 128, 64, (3, 3), (28, 28), (2, 2), (1, 1), (1, 1), (1, 1))
    pr = Problem(op, p, LAYOUT, "bf16")
    with isolated_tiers(tmp_path) as (user, _):
        rows = T.tune(pr, max_instances=6, progress=False, compile_workers=4)
        df = read_db(user / f"{T.current_device().kind}.csv")
        assert len(df) == len(rows) == 6
        ok = df[df.status == "ok"]
        assert len(ok) >= 1, df[["instance", "status", "reason"]].to_string()
        assert (ok.timing == "do_bench").all() and (ok.reps >= 5).all()
        assert ok.cudnn_impl.str.startswith("cudnn").all() and (ok.cudnn_ms > 0).all()
        assert (ok.rel_err <= ok.tolerance).all()
        winner = ok.sort_values("median_ms").instance.iloc[0]
        got = L.lookup(op, p, layout=LAYOUT, dtype=torch.bfloat16, device=torch.device("cuda"))
        assert got.name == winner
