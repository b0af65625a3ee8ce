"""tools/heldout_replay.py and ``database.emulated``: a GPU run's untuned picks replayed on the CPU, priced by the
rows that run measured (session 41)."""

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

from instance_factory.problem import ConvParams
from instance_factory.tuning import database as db
from instance_factory.tuning.lookup import explain

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("heldout_replay", ROOT / "tools" / "heldout_replay.py")
tool = importlib.util.module_from_spec(spec)
sys.modules["heldout_replay"] = tool  # its dataclass looks its module up
spec.loader.exec_module(tool)

H100 = db.DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132)
GPU_SOFTWARE = db.Software("3.6.0", "2.11.0+cu130", "0.1.0")
LAYOUT = "NHWGC/GKYXC/NHWGK"
# a depthwise layer the shipped files do not hold (odd channel count), and a dense one
DW = ConvParams(2, 200, 24, 1, 1, (5, 5), (15, 15), (1, 1), (1, 1), (2, 2), (2, 2))
DENSE = ConvParams(2, 1, 24, 72, 40, (3, 3), (13, 13), (1, 1), (1, 1), (1, 1), (1, 1))


def test_emulated_restores_the_device_and_the_software():
    before = db.current_software()
    with db.emulated(H100, GPU_SOFTWARE) as key:
        assert key == "nvidia-h100-80gb-hbm3"
        assert db.current_device(key) == H100
        assert db.current_software() == GPU_SOFTWARE
    assert db.current_software() == before
    assert db._DEVICE_CACHE.get("nvidia-h100-80gb-hbm3") is None


def _rows(params: ConvParams, times: dict[str, float]) -> list[dict]:
    key = db.problem_key("conv_bwd_data", params, LAYOUT, "bf16", "passthrough")
    return [{"problem_key": key, "instance": name, "median_ms": ms, "status": "ok", "device": H100.name,
             "device_cc": H100.cc, "device_sms": H100.sms, "triton_version": GPU_SOFTWARE.triton,
             "torch_version": GPU_SOFTWARE.torch, "package_version": GPU_SOFTWARE.package} for name, ms in times.items()]


def test_replay_prices_the_pick_with_the_runs_rows(monkeypatch, tmp_path):
    monkeypatch.setenv("INSTANCE_FACTORY_USER_DB", str(tmp_path))  # the shipped database alone
    with db.emulated(H100, GPU_SOFTWARE) as key:
        pick = explain("conv_bwd_data", DW, layout=LAYOUT, dtype="bf16", device=key, untuned=True).instance.name
    faster = "conv_bwd_data-some-other-instance"
    # the pick timed twice (its best counts) and one instance twice as fast; the dense layer's pick never timed
    rows = pd.DataFrame(_rows(DW, {pick: 2.0, faster: 1.0}) + _rows(DW, {pick: 3.0})
                        + _rows(DENSE, {faster: 0.5}))
    assert tool.run_device(rows) == (H100, GPU_SOFTWARE)
    results = {r.problem_key.split("|")[-1]: r for r in tool.replay(rows)}
    dw, dense = results[DW.key()], results[DENSE.key()]
    assert (dw.pick, dw.best, dw.klass) == (pick, faster, "depthwise")
    assert dw.ratio == pytest.approx(0.5)
    assert math.isnan(dense.ratio) and dense.klass == "dense"
    table = {(row[1], row[2]): row for row in tool.summary(list(results.values()))}
    assert table[("depthwise", "bf16")][3:] == (1, pytest.approx(0.5), pytest.approx(0.5), 0)
    assert table[("dense", "bf16")][3] == 1 and table[("dense", "bf16")][6] == 1  # one problem, its pick not timed
    assert [r.problem_key for r in tool.replay(rows, {"dense"})] == [dense.problem_key]
