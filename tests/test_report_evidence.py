"""Missing or malformed evidence files and tuning databases give errors naming the file and the line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_report_support as S  # noqa: E402

from instance_factory.cli.report import register  # noqa: E402
from instance_factory.report import EvidenceError, build_report  # noqa: E402
from instance_factory.tuning.database import DatabaseError  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def fake_family():
    S.register_fake()
    yield
    S.unregister_fake()


@pytest.fixture
def reg(tmp_path):
    return S.make_registry(tmp_path)


def _interp(tmp_path, rows=(), raw=None, meta=S.INTERP_META):
    return S.write_jsonl(tmp_path / "evidence" / "interpreter.jsonl", meta, list(rows), raw)


def test_missing_evidence_folder(tmp_path, reg):
    with pytest.raises(EvidenceError, match=r"evidence folder .*nowhere does not exist .*collect_interpreter_evidence"):
        build_report(reg, tmp_path / "nowhere", None)


def test_missing_interpreter_file(tmp_path, reg):
    (tmp_path / "evidence").mkdir()
    with pytest.raises(EvidenceError) as info:
        build_report(reg, tmp_path / "evidence", None)
    msg = str(info.value)
    assert "evidence/interpreter.jsonl does not exist" in msg and "collect_interpreter_evidence.py" in msg
    # allowed explicitly: the report says so
    rep = build_report(reg, tmp_path / "evidence", None, require_interpreter=False)
    assert any("interpreter.jsonl is missing" in n for n in rep.notes)


def test_missing_tuning_folder(tmp_path, reg):
    _interp(tmp_path)
    with pytest.raises(EvidenceError, match="tuning database folder .*no_db does not exist"):
        build_report(reg, tmp_path / "evidence", tmp_path / "no_db")


@pytest.mark.parametrize("rows, raw, meta, where, problem", [
    ([], ['{"case": "x", "op": '], S.INTERP_META, "line 2", "not valid JSON"),
    ([{"op": "conv_bwd_data"}], None, S.INTERP_META, "line 2", "the row lacks"),
    (["good", "good"], ["[1, 2]"], S.INTERP_META, "line 4", "expected a JSON object"),
    ([], None, {"case": "not meta"}, "line 1", "the first line must be the run's metadata"),
    (["dtype=fp64"], None, S.INTERP_META, "line 2", "unknown dtype 'fp64'"),
    (["layout=NCHW/KCYX/NKHW"], None, S.INTERP_META, "line 2", "unknown layout 'NCHW/KCYX/NKHW'"),
    (["problem=3d"], None, S.INTERP_META, "line 2", "is 3D but layout NHWGC/GKYXC/NHWGK is 2D"),
    (["problem=bogus"], None, S.INTERP_META, "line 2", "not a ConvParams key"),
    (["status=OK"], None, S.INTERP_META, "line 2", "unknown status 'OK'"),
    (["error=nan"], None, S.INTERP_META, "line 2", "status PASS with error=nan"),
    (["error=str"], None, S.INTERP_META, "line 2", "error='small' is not a number"),
    (["op=conv_fwd"], None, S.INTERP_META, "line 2", "unknown op 'conv_fwd'"),
])
def test_malformed_interpreter_file_names_file_and_line(tmp_path, reg, rows, raw, meta, where, problem):
    made = []
    for r in rows:
        if not isinstance(r, str):
            made.append(r)
            continue
        row = S.ev_row(reg, S.inst_name())
        if r == "dtype=fp64":
            row["dtype"] = "fp64"
        elif r.startswith("layout="):
            row["layout"] = r.split("=", 1)[1]
        elif r == "problem=3d":
            row["problem"] = S.PROBLEM_3D
        elif r == "problem=bogus":
            row["problem"] = "bogus"
        elif r == "status=OK":
            row["status"] = "OK"
        elif r == "error=nan":
            row["error"] = float("nan")
        elif r == "error=str":
            row["error"] = "small"
        elif r == "op=conv_fwd":
            row["op"] = "conv_fwd"
        made.append(row)
    _interp(tmp_path, made, raw, meta)
    with pytest.raises(EvidenceError) as info:
        build_report(reg, tmp_path / "evidence", None)
    msg = str(info.value)
    assert f"evidence/interpreter.jsonl {where}:" in msg and problem in msg, msg


def test_empty_and_cut_gpu_files(tmp_path, reg):
    _interp(tmp_path, [S.ev_row(reg, S.inst_name())])
    gpu = tmp_path / "evidence" / "gpu"
    gpu.mkdir()
    (gpu / "run1.jsonl").write_text("")
    with pytest.raises(EvidenceError, match=r"evidence file evidence/gpu/run1.jsonl is empty"):
        build_report(reg, tmp_path / "evidence", None)
    (gpu / "run1.jsonl").write_text(json.dumps(S.GPU_META) + "\n" + json.dumps(S.ev_row(reg, S.inst_name()))[:40])
    with pytest.raises(EvidenceError, match=r"evidence/gpu/run1.jsonl line 2: not valid JSON .*cut short"):
        build_report(reg, tmp_path / "evidence", None)


def test_damaged_tuning_db_names_file_and_line(tmp_path, reg):
    _interp(tmp_path)
    db = S.write_db(tmp_path / "db", [S.tuning_row(reg, S.inst_name(), S.PROBLEM_2D, 1.0, 2.0)])
    lines = db.read_text().splitlines()
    lines[1] = lines[1].replace(",ok,", ",great,")
    db.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatabaseError) as info:
        build_report(reg, tmp_path / "evidence", tmp_path / "db")
    assert str(db) in str(info.value) and "line 2" in str(info.value)


def _cli(argv):
    import argparse

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(argv)
    return ns.func(ns)


def test_cli_writes_reports_and_reports_errors(tmp_path, reg, capsys, monkeypatch):
    _interp(tmp_path, [S.ev_row(reg, S.inst_name())])
    (tmp_path / "db").mkdir()
    monkeypatch.setattr("instance_factory.registry.get_registry", lambda configs=None: reg)
    out = tmp_path / "out"
    rc = _cli(["report", "--out", str(out), "--evidence", str(tmp_path / "evidence"), "--db", str(tmp_path / "db")])
    assert rc == 0
    assert (out / "support_matrix.md").read_text().startswith("# Support matrix")
    assert "<!DOCTYPE html>" in (out / "support_matrix.html").read_text()
    rc = _cli(["report", "--out", str(tmp_path / "o2"), "--format", "md", "--evidence", str(tmp_path / "evidence"),
               "--db", str(tmp_path / "db")])
    assert rc == 0 and not (tmp_path / "o2" / "support_matrix.html").exists()
    (tmp_path / "evidence" / "interpreter.jsonl").write_text("{oops\n")
    rc = _cli(["report", "--out", str(out), "--evidence", str(tmp_path / "evidence"), "--db", str(tmp_path / "db")])
    err = capsys.readouterr().err
    assert rc == 2 and "evidence/interpreter.jsonl line 1: not valid JSON" in err
