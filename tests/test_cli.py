"""The command line's core subcommands: list (filters, counts, culled), verify, and error exits."""

import subprocess
import sys

from instance_factory.cli import main


def test_list_filters_and_counts(capsys):
    assert main(["list", "--op", "conv_bwd_data", "--layout", "NHWGC/GKYXC/NHWGK", "--dtype", "fp16",
                 "--ndim", "2", "--fused-op", "add"]) == 0
    out = capsys.readouterr().out
    names = [line for line in out.splitlines() if line.startswith("conv_bwd_data-")]
    assert names and all("-NHWGC_GKYXC_NHWGK-fp16-add-" in n for n in names)
    assert f"{len(names)} instances in 1 combinations" in out
    assert main(["list", "--pattern", "*direct*", "--op", "conv_bwd_weight", "--counts-only"]) == 0
    out = capsys.readouterr().out
    assert "conv_bwd_weight-direct" not in out  # counts only
    assert "combinations (op, layout, dtype, ndim, fused op)" in out


def test_list_culled_reports_reasons(capsys):
    assert main(["list", "--culled", "--algorithm", "igemm"]) == 0
    out = capsys.readouterr().out
    assert "culled igemm" in out and "is false" in out and "configs culled" in out


def test_bad_config_dir_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "x.yaml").write_text("op: conv_bwd_data\nsupport: []\nfamilies: []\n")
    assert main(["list", "--configs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "x.yaml" in err and "must be a non-empty list" in err


def test_verify_runs_the_builtin_set():
    # a subprocess: `verify` prints a table and exits 0 only when every row passes
    r = subprocess.run([sys.executable, "-m", "instance_factory", "verify", "--max-instances", "1"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "8 passed, 0 failed" in r.stdout and "FAIL" not in r.stdout
