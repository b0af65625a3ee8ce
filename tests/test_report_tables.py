"""Support-matrix tables: a registry change changes the table; each cell shows its evidence level."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_report_support as S  # noqa: E402

from instance_factory.report import build_report, render_markdown, support_matrix_markdown  # noqa: E402
from instance_factory.report.tables import ck_comparison, main_table_rows  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def fake_family():
    S.register_fake()
    yield
    S.unregister_fake()


def _row(md: str, op_title: str, label: str) -> str:
    """The Markdown row for ``label`` in the table under the heading containing ``op_title``."""
    section = md.split(op_title, 1)[1]
    for line in section.splitlines():
        if line.startswith(f"|{label}|"):
            return line
    raise AssertionError(f"no row {label!r} under {op_title!r}")


def test_registry_change_changes_the_table(tmp_path):
    reg = S.make_registry(tmp_path)
    md = support_matrix_markdown(build_report(reg, None, None))
    # columns in CK's order: NHWGC, NGCHW/GKYXC, NGCHW/GKCYX, GNHWC; only 2D fp16 NHWGC declared
    assert "| |NHWGC/GKYXC/NHWGK|NGCHW/GKYXC/NGKHW|NGCHW/GKCYX/NGKHW|GNHWC/GKYXC/GNHWK|" in md
    assert _row(md, "Backward data", "fp16") == "|fp16|2Dᴰ|✗|✗|✗|"
    assert _row(md, "Backward data", "bf16") == "|bf16|✗|✗|✗|✗|"
    assert _row(md, "Backward weight", "bf16 (fp32 for weight)") == "|bf16 (fp32 for weight)|✗|✗|✗|✗|"

    reg2 = S.make_registry(tmp_path, data={"layouts": ("nhwgc", "gnhwc"), "ndims": (1, 2, 3),
                                           "dtypes": ("fp16", "bf16")},
                           weight={"dtypes": ("fp16", "bf16_fp32w", "fp32_tf32")})
    md2 = support_matrix_markdown(build_report(reg2, None, None))
    assert md2 != md
    assert _row(md2, "Backward data", "fp16") == "|fp16|1Dᴰ, 2Dᴰ, 3Dᴰ|✗|✗|1Dᴰ, 2Dᴰ, 3Dᴰ|"
    assert _row(md2, "Backward data", "bf16") == "|bf16|1Dᴰ, 2Dᴰ, 3Dᴰ|✗|✗|1Dᴰ, 2Dᴰ, 3Dᴰ|"
    assert _row(md2, "Backward weight", "bf16 (fp32 for weight)") == "|bf16 (fp32 for weight)|2Dᴰ|✗|✗|✗|"
    assert _row(md2, "Backward weight", "fp32 (tf32 compute)") == "|fp32 (tf32 compute)|2Dᴰ|✗|✗|✗|"
    # every DataType is a row, mixed and compute rows included
    labels = [label for label, _ in main_table_rows(build_report(reg2, None, None), "conv_bwd_weight")]
    assert labels == ["fp32", "fp32 (tf32 compute)", "fp16", "bf16", "bf16 (fp32 for weight)",
                      "fp16 (bf8/fp8 compute)"]


def test_fused_table_follows_the_configs(tmp_path):
    reg = S.make_registry(tmp_path, data={"fused": ("passthrough", "bilinear", "add")})
    md = support_matrix_markdown(build_report(reg, None, None))
    assert "|**bilinear**|`E = alpha*acc + beta*D0`|2D; NHWGC; fp16 · ᴰ only|2D; NHWGC; fp16 · ᴰ only|" in md
    assert "|**add**|`E = acc + D0 + D1 + ...`|2D; NHWGC; fp16 · ᴰ only|✗|" in md
    assert "**add_relu**" not in md


def test_cells_carry_their_evidence_levels(tmp_path):
    reg = S.make_registry(tmp_path, data={"ndims": (1, 2, 3)})
    ev = tmp_path / "evidence"
    i2 = S.inst_name()
    i3 = S.inst_name(layout="NDHWGC_GKZYXC_NDHWGK")
    i1 = S.inst_name(layout="NWGC_GKXC_NWGK")
    S.write_jsonl(ev / "interpreter.jsonl", S.INTERP_META, [
        S.ev_row(reg, i2),
        S.ev_row(reg, i3, layout="NDHWGC/GKZYXC/NDHWGK", problem=S.PROBLEM_3D, status="FAIL", error=0.5),
        S.ev_row(reg, i1, layout="NWGC/GKXC/NWGK", problem="1d-g1-n2-k8-c8-f3-i9-s1-d1-l1-r1",
                 kernel_hash="0123456789abcdef"),  # recorded for an older kernel source: stale
        S.ev_row(reg, S.inst_name(fused="bilinear"), fused="bilinear"),
    ])
    S.write_jsonl(ev / "gpu" / "h100.jsonl", S.GPU_META, [
        S.ev_row(reg, i2, kernel_hash=None, error=3e-4),
        {"case": "x", "status": "SKIPPED (time budget)"},
        {"bench": "seed s2", "op": "conv_bwd_data", "ms": 1.0},
    ])
    db = tmp_path / "db"
    S.write_db(db, [S.tuning_row(reg, i2, S.PROBLEM_2D, 1.0, 1.5),
                    S.tuning_row(reg, S.inst_name(block=32), S.PROBLEM_2D, 2.0, 1.5),
                    S.tuning_row(reg, i2, "2d-g1-n4-k8-c8-f3x3-i6x6-s1x1-d1x1-l1x1-r1x1", 1.0, 0.6)])
    rep = build_report(reg, ev, db)
    md = support_matrix_markdown(rep)
    # 1D: only stale interpreter evidence; 2D: interpreter + GPU + tuned, geomean(1.5, 0.6) = 0.95;
    # 3D: failed in the interpreter
    assert _row(md, "Backward data", "fp16") == "|fp16|1Dᴰ⁽ᴵ⁾, 2Dᴵᴳᵀ 0.95×, 3D✗ᴵ|✗|✗|✗|"
    # conv_bwd_weight has no evidence at all: declared only, visibly different
    assert _row(md, "Backward weight", "fp16") == "|fp16|2Dᴰ|✗|✗|✗|"
    assert "|1D, 2D, 3D; NHWGC; fp16 · ᴵ 1/3|" in md  # the fused table counts combinations with evidence
    # evidence sources: device, date, max error of the GPU run; benchmark / skipped rows ignored
    assert "ᴳ `evidence/gpu/h100.jsonl`: NVIDIA H100 80GB HBM3, 2026-01-05 10:00:00" in md
    assert "1 runs, 1 pass, 0 fail, max rel. error 3.0e-04" in md
    assert "ᵀ tuning_db: NVIDIA H100 80GB HBM3: 2 problems tuned, geomean speedup vs cuDNN 0.95× over 2" in md
    assert "stale" in md
    c = rep.combo("conv_bwd_data", "nhwgc", "fp16", 2)
    assert c.gpu.devices == ["NVIDIA H100 80GB HBM3"] and c.gpu.dates == ["2026-01-05 10:00:00"]
    assert c.tuned["NVIDIA H100 80GB HBM3"].problems == 2
    full = render_markdown(rep)
    assert "## Evidence per combination" in full and "NDHWGC/GKZYXC/NDHWGK" in full


def test_tuning_rows_of_changed_kernels_are_stale(tmp_path):
    reg = S.make_registry(tmp_path)
    (tmp_path / "ev").mkdir()
    S.write_jsonl(tmp_path / "ev" / "interpreter.jsonl", S.INTERP_META, [])
    db = tmp_path / "db"
    S.write_db(db, [S.tuning_row(reg, S.inst_name(), S.PROBLEM_2D, 1.0, 2.0, kernel_hash="feedfacefeedface")])
    md = support_matrix_markdown(build_report(reg, tmp_path / "ev", db))
    assert _row(md, "Backward data", "fp16") == "|fp16|2Dᴰ⁽ᵀ⁾|✗|✗|✗|"


def test_ck_comparison_both_ways(tmp_path):
    reg = S.make_registry(tmp_path, data={"layouts": ("nhwgc", "ngchw_kcyx"), "ndims": (1, 2),
                                          "dtypes": ("fp16", "fp32_tf32")})
    rep = build_report(reg, None, None)
    c = ck_comparison(rep, "conv_bwd_data")
    rows = dict(c.rows)
    # NHWGC fp16: we have 1D (CK lacks), both 2D, CK has 3D (we lack)
    assert rows["fp16"][0] == "+1D, 2D, −3D"
    assert rows["fp16"][2] == "+1D, +2D"  # NGCHW/GKCYX: CK has no bwd-data column for it
    assert rows["int8 (CK only)"][0] == "−2D, −3D"
    assert "bf16 NHWGC/GKYXC/NHWGK 2D, 3D (CK XDL)" in c.ck_only
    assert "int8 NHWGC/GKYXC/NHWGK 2D, 3D (CK WMMA)" in c.ck_only
    assert any(x.startswith("fp32 (tf32 compute): NHWGC 1D, 2D") for x in c.ours_only)
    assert "Bilinear NHWGC fp16 3D" in c.fused_ck_only and "Scale NHWGC fp32 3D" in c.fused_ck_only
    cw = ck_comparison(rep, "conv_bwd_weight")
    assert "bf16(fp32 for weight) GNHWC/GKYXC/GNHWK 1D, 2D, 3D (CK DL/XDL)" in cw.ck_only
    md = support_matrix_markdown(rep)
    assert "Compared with CK's published tables" in md and "CK supports, we lack" in md
