"""tools/bench_from_rows.py: a GPU's bench summary from its shipped rows on a CPU."""

import csv
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
spec = importlib.util.spec_from_file_location("bench_from_rows", ROOT / "tools" / "bench_from_rows.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_summary_names_the_gpu_of_the_rows(tmp_path):
    rows = ROOT / "tuning_db" / "nvidia-h100-80gb-hbm3.csv.gz"
    out = tmp_path / "summary.csv"
    assert tool.main([str(rows), "--", "grouped_depthwise", "--layout", "nhwgc", "--pass", "data", "--dtype", "bf16",
                      "--copy-gbps", "3000", "--matmul-tflops", "700", "--summary-csv", str(out), "--quiet"]) == 0
    got = {r["class"]: r for r in csv.DictReader(out.open())}
    assert got["depthwise"]["device"] == "NVIDIA H100 80GB HBM3" and int(got["depthwise"]["problems"]) == 11
    assert float(got["depthwise"]["geomean_speedup"]) > 1.0  # the shipped rows, not an empty CPU run
