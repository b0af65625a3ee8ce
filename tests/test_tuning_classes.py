"""Layer classes and the per-class benchmark summary (issue 11/12's numbers), on synthetic rows."""

import csv
import math

import pandas as pd
import pytest

from instance_factory.problem import ConvParams
from instance_factory.tuning.classes import (
    SUMMARY_COLUMNS,
    class_summary,
    class_table,
    problem_class,
    with_ceilings,
    write_summary_csv,
)
from instance_factory.tuning.problem_sets import Problem


def params(G, K, C):
    return ConvParams(2, G, 8, K, C, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))


@pytest.mark.parametrize("G,K,C,cls", [
    (1, 64, 64, "dense"), (32, 1, 1, "depthwise"), (32, 4, 4, "grouped"), (32, 16, 8, "grouped"),
    (32, 24, 24, "grouped_wide"), (32, 64, 64, "grouped_wide"), (8, 128, 128, "dense"), (4, 1, 2, "grouped"),
])
def test_problem_class(G, K, C, cls):
    assert problem_class(params(G, K, C)) == cls


def _frame():
    rows = []
    for (G, K, C), op, ms, cudnn, gbps, tf in [
        ((32, 1, 1), "conv_bwd_data", 0.1, 0.2, 2000.0, 1.0),
        ((64, 1, 1), "conv_bwd_data", 0.1, 0.05, 1000.0, 1.0),
        ((32, 4, 4), "conv_bwd_weight", 0.2, 0.8, 3000.0, 5.0),
        ((1, 64, 64), "conv_bwd_data", 0.5, None, 500.0, 400.0),  # no cuDNN time: not summarized
        ((1, 64, 32), "conv_bwd_data", None, 0.5, None, None),  # not tuned
    ]:
        key = Problem(op, params(G, K, C), "NHWGC/GKYXC/NHWGK", "bf16").key
        rows.append({"problem": key, "pass": "data" if op == "conv_bwd_data" else "weight", "dtype": "bf16",
                     "best instance": "x" if ms else "", "ms": ms or math.nan, "TFLOP/s": tf or math.nan,
                     "GB/s": gbps or math.nan, "cuDNN ms": cudnn or math.nan,
                     "speedup": (cudnn / ms) if (ms and cudnn) else math.nan, "key": key})
    return pd.DataFrame(rows)


def test_class_summary_geomean_min_and_ceilings():
    sf = with_ceilings(_frame(), copy_gbps=4000.0, matmul_tflops=800.0)
    assert list(sf["class"]) == ["depthwise", "depthwise", "grouped", "dense", "dense"]
    assert sf["% copy BW"].iloc[0] == pytest.approx(50.0) and sf["% matmul"].iloc[3] == pytest.approx(50.0)
    s = class_summary(sf, device="NVIDIA H200", day="2026-11-23")
    assert list(s.columns) == list(SUMMARY_COLUMNS)
    dw = s[s["class"] == "depthwise"].iloc[0]
    assert dw["problems"] == 2 and dw["geomean_speedup"] == pytest.approx(1.0) and dw["min_speedup"] == 0.5
    assert dw["mean_pct_copy_bw"] == pytest.approx(37.5)
    assert list(s["class"]) == ["depthwise", "grouped"]  # dense has no problem with both times
    table = class_table(sf, s, 4000.0, 800.0)
    assert "| nhwgc | depthwise | data | bf16 | 2 | 1.00x | 0.50x | 38 |" in table
    assert "4 of 5 problems tuned." in table
    assert table.startswith("Ceilings measured in this run: copy 4000 GB/s")
    # ceilings from the command line (a summary rebuilt from stored rows) do not claim a measurement
    given = class_table(sf, s, 3001.0, 718.0, ceilings_given=True)
    assert given.startswith("Ceilings given on the command line (not measured in this run): copy 3001 GB/s")


def test_write_summary_csv(tmp_path):
    sf = with_ceilings(_frame(), None, None)
    s = class_summary(sf, device="cpu", day="2026-11-23")
    path = tmp_path / "summary.csv"
    write_summary_csv(s, str(path))
    rows = list(csv.DictReader(path.open()))
    assert [r["class"] for r in rows] == ["depthwise", "grouped"]
    assert rows[1]["geomean_speedup"] == "4.0" and rows[1]["device"] == "cpu" and rows[1]["layout"] == "nhwgc"


def test_summary_per_layout_family():
    """The same problem in two layout families: two summary rows, channels-last first."""
    rows = []
    for layout, ms in (("NGCHW/GKYXC/NGKHW", 0.4), ("NHWGC/GKYXC/NHWGK", 0.1)):
        key = Problem("conv_bwd_weight", params(32, 4, 4), layout, "bf16").key
        rows.append({"problem": key, "pass": "weight", "dtype": "bf16", "best instance": "x", "ms": ms,
                     "TFLOP/s": 1.0, "GB/s": 100.0, "cuDNN ms": 0.2, "speedup": 0.2 / ms, "key": key})
    s = class_summary(with_ceilings(pd.DataFrame(rows), None, None), device="cpu", day="2026-11-26")
    assert list(s["layout"]) == ["nhwgc", "ngchw"]
    assert list(s["geomean_speedup"]) == [2.0, 0.5]


def test_summary_frame_takes_the_median_cudnn_time_over_runs():
    """A run whose cuDNN time is an outlier (3x slow) must not set the speedup when it also holds the best row."""
    from instance_factory.tuning.database import _frame
    from instance_factory.tuning.summary import cudnn_reference, summary_frame

    pr = Problem("conv_bwd_weight", params(32, 1, 1), "NHWGC/GKYXC/NHWGK", "bf16")
    rows = []
    for run, (cudnn, times) in enumerate([(0.031, [0.040, 0.050]), (0.030, [0.045]), (0.097, [0.030, 0.060]),
                                          (0.032, [0.041, 0.070, 0.080])]):
        for i, ms in enumerate(times):
            rows.append({"problem_key": pr.key, "instance": f"i{run}{i}", "status": "ok", "median_ms": ms,
                         "cudnn_ms": cudnn, "speedup": cudnn / ms, "device": "gpu-a"})
    rows.append({"problem_key": pr.key, "instance": "bad", "status": "failed", "median_ms": None,
                 "cudnn_ms": 0.001, "speedup": None, "device": "gpu-a"})
    rows.append({"problem_key": pr.key, "instance": "other-gpu", "status": "ok", "median_ms": 0.5,
                 "cudnn_ms": 0.9, "speedup": 1.8, "device": "gpu-b"})  # another device: not pooled
    df = _frame(rows)
    assert cudnn_reference(df) == {(pr.key, "gpu-a"): pytest.approx(0.0315),  # median of 0.030, 0.031, 0.032, 0.097
                                   (pr.key, "gpu-b"): pytest.approx(0.9)}
    line = summary_frame(df[df["device"] == "gpu-a"], [pr]).iloc[0]  # bench's rows: one device
    assert line["ms"] == 0.030 and line["best instance"] == "i20"
    assert line["cuDNN ms"] == pytest.approx(0.0315) and line["speedup"] == pytest.approx(0.0315 / 0.030)
    assert math.isnan(summary_frame(df.iloc[:0], [pr]).iloc[0]["speedup"])  # untuned: no speedup
