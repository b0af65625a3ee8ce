"""Tuning database: file format, merge-on-write, concurrent writers, crashes, damage, merge, validity."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from instance_factory.problem import ConvParams
from instance_factory.tuning import database as D
from instance_factory.tuning import storage as S

P = ConvParams(2, 1, 2, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
LAYOUT = "NHWGC/GKYXC/NHWGK"
DEV = D.DeviceInfo("cpu", "", 0)
REPO = Path(__file__).resolve().parent.parent


def row(instance: str, ms: float | None = 1.0, status: str = "ok", params: ConvParams = P, **kw) -> dict:
    r = {**D.problem_fields("conv_bwd_data", params, LAYOUT, "fp16"), "instance": instance,
         "algorithm": "igemm", "instance_params": D.instance_params_json({"block_m": 64, "spec": "a,b"}),
         "kernel_hash": "h-" + instance, **DEV.as_columns(),
         **D.Software("3.9.0", "2.13.0", "0.1.0").as_columns(), "status": status,
         "reason": "" if status == "ok" else "boom, with a comma", "median_ms": ms, "reps": 5,
         "rel_err": 1e-4 if status == "ok" else float("inf"), "max_rel_err": 2e-4 if status == "ok" else None,
         "tolerance": 2e-3, "timestamp": "2026-01-01T00:00:00Z"}
    r.update(kw)
    return r


def test_roundtrip_sorted_and_typed(tmp_path):
    db = D.TuningDB(tmp_path / "x.csv")
    assert len(db.read()) == 0  # a missing file is an empty database
    db.add([row("b", 2.0), row("a", 1.0), row("c", None, "failed")])
    text = db.path.read_text()
    lines = text.splitlines()
    assert lines[0].split(",")[:3] == ["problem_key", "op", "layout"]
    assert [ln.split(",")[16] for ln in lines[1:]] == ["a", "b", "c"]  # sorted by identity
    df = db.read()
    assert list(df.columns) == list(D.COLUMNS)
    assert df["median_ms"].dtype == "float64" and str(df["reps"].dtype) == "Int64"
    assert df.loc[df.instance == "c", "rel_err"].item() == float("inf")
    assert df.loc[df.instance == "a", "instance_params"].item() == '{"block_m":64,"spec":"a,b"}'
    assert (df["problem_key"] == D.problem_key("conv_bwd_data", P, LAYOUT, "fp16")).all()
    assert D.split_problem_key(df["problem_key"][0])[4] == P.key()
    # rewriting the same content is byte-identical (diff-friendly)
    D.write_db(db.path, df)
    assert db.path.read_text() == text


def test_upsert_replaces_same_identity_keeps_others(tmp_path):
    db = D.TuningDB(tmp_path / "x.csv")
    db.add([row("a", 1.0), row("b", 2.0)])
    db.add([row("a", 5.0)])
    df = db.read()
    assert len(df) == 2
    assert df.set_index("instance").loc["a", "median_ms"] == 5.0


def test_best_per_problem_is_derived(tmp_path):
    q = ConvParams(2, 1, 4, 8, 8, (3, 3), (6, 6), (1, 1), (1, 1), (1, 1), (1, 1))
    df = D._frame([row("a", 3.0), row("b", 2.0), row("c", 0.5, "failed"), row("a", 1.0, params=q)])
    best = D.best_per_problem(df)
    assert len(best) == 2
    assert set(zip(best.problem_key, best.instance)) == {
        (D.problem_key("conv_bwd_data", P, LAYOUT, "fp16"), "b"),
        (D.problem_key("conv_bwd_data", q, LAYOUT, "fp16"), "a")}


def test_valid_rows_ignore_stale_software_hash_and_other_devices():
    sw = D.Software("3.9.0", "2.13.0", "0.1.0")
    df = D._frame([
        row("fresh", 1.0),
        row("old_triton", 0.1, triton_version="3.0.0"),
        row("old_pkg", 0.1, package_version="0.0.9"),
        row("old_hash", 0.1, kernel_hash="changed"),
        row("gone", 0.1),  # no longer in the registry
        row("other_gpu", 0.1, device="NVIDIA H100", device_cc="9.0", device_sms=132),
        row("failed", 0.1, status="failed"),
    ])
    hashes = {n: "h-" + n for n in ("fresh", "old_triton", "old_pkg", "other_gpu", "failed")}
    hashes["old_hash"] = "h-old_hash-now"
    v = D.valid_rows(df, device=DEV, software=sw, kernel_hashes=hashes)
    assert list(v.instance) == ["fresh"]
    v_any = D.valid_rows(df, device=DEV, software=sw, kernel_hashes=hashes.get, ok_only=False)
    assert sorted(v_any.instance) == ["failed", "fresh"]


def test_merge_keeps_best_row_per_identity(tmp_path):
    a, b, out = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "merged.csv"
    D.TuningDB(a).add([row("x", 2.0), row("y", None, "failed"), row("only_a", 1.0)])
    D.TuningDB(b).add([row("x", 1.5), row("y", 3.0), row("only_b", 1.0)])
    D.TuningDB(out).add([row("pre", 9.0)])
    n = D.merge_files([a, b], out, remove_sources=True)
    df = D.read_db(out).set_index("instance")
    assert n == 5 and sorted(df.index) == ["only_a", "only_b", "pre", "x", "y"]
    assert df.loc["x", "median_ms"] == 1.5  # the faster of two ok rows
    assert df.loc["y", "status"] == "ok"  # ok beats failed
    assert not a.exists() and not b.exists()


def _child(code: str) -> subprocess.Popen:
    prelude = f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
    return subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_concurrent_writers_lose_no_rows(tmp_path):
    path = tmp_path / "shared.csv"
    code = f"""
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_tuning_database import row
        from instance_factory.tuning.database import TuningDB
        db = TuningDB({str(path)!r})
        for i in range(25):
            db.add([row(f"{{WRITER}}-{{i}}", 1.0 + i)])
    """
    procs = [_child(code.replace("{WRITER}", w)) for w in ("w0", "w1")]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    df = D.read_db(path)
    assert len(df) == 50
    assert sorted(df.instance) == sorted(f"w{w}-{i}" for w in (0, 1) for i in range(25))


@pytest.mark.parametrize("how", ["sigkill_before_replace", "exception_before_replace"])
def test_interrupted_rewrite_leaves_previous_file(tmp_path, how):
    path = tmp_path / "db.csv"
    db = D.TuningDB(path)
    db.add([row("a", 1.0), row("b", 2.0)])
    before = path.read_bytes()
    if how == "sigkill_before_replace":
        # a real process killed (SIGKILL) after writing and fsyncing the temp file, before the rename
        p = _child(f"""
            import os, signal, time
            from instance_factory.tuning import database as D, storage as S
            def die(tmp):
                assert os.path.getsize(tmp) > 0
                print("writing", flush=True)
                time.sleep(60)
            S._before_replace_hook = die
            D.TuningDB({str(path)!r}).compact()
        """)
        assert p.stdout.readline().strip() == "writing"
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
        assert [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]  # the orphan it left
    else:
        def boom(tmp):
            raise OSError("disk full (simulated)")

        old = S._before_replace_hook
        S._before_replace_hook = boom
        try:
            with pytest.raises(OSError, match="simulated"):
                db.compact()
        finally:
            S._before_replace_hook = old
    assert path.read_bytes() == before
    assert sorted(D.read_db(path).instance) == ["a", "b"]
    db.add([row("c", 3.0)])  # the lock was released by the dead writer; its temp file is removed
    assert sorted(D.read_db(path).instance) == ["a", "b", "c"]
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_sigkill_mid_append_leaves_a_torn_tail_that_is_ignored_then_cut(tmp_path):
    path = tmp_path / "db.csv"
    db = D.TuningDB(path)
    db.add([row("a", 1.0), row("b", 2.0)])
    p = _child(f"""
        import time
        from instance_factory.tuning import database as D, storage as S
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_tuning_database import row
        def die(path):
            print("appending", flush=True)
            time.sleep(60)
        S._before_append_hook = die
        D.TuningDB({str(path)!r}).add([row(f"new{{i:03d}}", 1.0) for i in range(201)])
    """)
    assert p.stdout.readline().strip() == "appending"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    assert not path.read_bytes().endswith(b"\n")  # half an append: the last line is cut
    with pytest.warns(D.TornTailWarning, match="incomplete last line"):
        got = set(D.read_db(path).instance)
    assert {"a", "b"} <= got and len(got) < 203  # whole lines only, the torn one ignored
    db.add([row("c", 3.0)])  # cuts the torn line off under the lock, then appends
    assert path.read_bytes().endswith(b"\n")
    assert {"a", "b", "c"} <= set(D.read_db(path).instance)


DAMAGE = {
    "truncated header": lambda t: t[:200],
    "extra field": lambda t: t.replace(",ok,", ",ok,extra,", 1),
    "missing column": lambda t: t.replace("kernel_hash", "kernel_hsh", 1),
    "bad number": lambda t: t.replace(",ok,,1,", ",ok,,fast,", 1),
    "nan number": lambda t: t.replace(",ok,,1,", ",ok,,NaN,", 1),
    "unknown status": lambda t: t.replace(",ok,", ",great,", 1),
    "key mismatch": lambda t: t.replace("-k8-c8-f3x3", "-k9-c8-f3x3", 1),
    "not utf-8": lambda t: t[:100] + "\udcff" + t[100:],
    "empty": lambda t: "",
    "unbalanced quote": lambda t: t.replace('"{', '{', 1),
}


def test_error_names_the_physical_line_after_a_field_over_two_lines(tmp_path):
    # CSV lets a quoted field span lines (JSON whitespace in instance_params): rows still read, and an
    # error further down names the file's line, not the record's number
    path = tmp_path / "db.csv"
    D.TuningDB(path).add([row("a", 1.0), row("b", 2.0)])
    text = path.read_text().replace('"{', '"\n{', 1)
    assert sorted(D.read_db(_write(path, text)).instance) == ["a", "b"]
    with pytest.raises(D.DatabaseError, match="line 4: median_ms='fast'"):
        D.read_db(_write(path, text.replace(",ok,,2,", ",ok,,fast,", 1)))


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damaged_file_is_a_readable_error(tmp_path, kind):
    path = tmp_path / "db.csv"
    D.TuningDB(path).add([row("a", 1.0), row("b", 2.0)])
    damaged = DAMAGE[kind](path.read_text())
    path.write_bytes(damaged.encode("utf-8", "surrogateescape"))
    with pytest.raises(D.DatabaseError) as ei:
        D.read_db(path)
    msg = str(ei.value)
    assert str(path) in msg and "damaged tuning database" in msg
    if kind in ("extra field", "bad number", "nan number", "unknown status", "key mismatch"):
        assert "line " in msg
    if kind == "nan number":
        assert "median_ms='NaN' is not a number" in msg

    data = damaged.encode("utf-8", "surrogateescape")
    if kind in ("truncated header", "missing column", "not utf-8", "empty"):
        # the header is damaged: a writer (which would have to rewrite it) refuses to touch it
        with pytest.raises(D.DatabaseError):
            D.TuningDB(path).add([row("c", 3.0)])
        assert path.read_bytes() == data
    else:
        # damage inside the rows: an append (which reads only the header) keeps every byte of it
        D.TuningDB(path).add([row("c", 3.0)])
        assert path.read_bytes().startswith(data)
    with pytest.raises(D.DatabaseError):  # neither does a compaction (nor any full rewrite)
        D.TuningDB(path).compact()
    assert path.read_bytes().startswith(data)


def test_tier_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTANCE_FACTORY_USER_DB", str(tmp_path / "u"))
    assert D.user_db_path("nvidia-h200") == tmp_path / "u" / "nvidia-h200.csv"
    monkeypatch.setenv("INSTANCE_FACTORY_USER_DB", str(tmp_path / "one.csv"))
    assert D.user_db_path("nvidia-h200") == tmp_path / "one.csv"
    monkeypatch.delenv("INSTANCE_FACTORY_USER_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert D.user_db_path("cpu") == tmp_path / "cache" / "instance_factory" / "cpu.csv"
    monkeypatch.delenv("INSTANCE_FACTORY_SYSTEM_DB", raising=False)
    assert D.system_db_path("nvidia-h200") == REPO / "tuning_db" / "nvidia-h200.csv.gz"
    assert D.DeviceInfo("NVIDIA H100 80GB HBM3", "9.0", 132).kind == "nvidia-h100-80gb-hbm3"
