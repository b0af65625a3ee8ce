"""gzip'd database files (the shipped tier, ``tuning_db/<kind>.csv.gz``): the same rows, checks and
crash safety as a plain CSV file, at a twelfth of the size."""

import gzip
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import warnings

import pytest
from test_tuning_database import REPO, row

from instance_factory.tuning import database as D


def test_gzip_file_reads_back_the_same_rows_as_csv(tmp_path):
    rows = [row("b", 2.0), row("a", 1.0), row("c", None, "failed")]
    plain, packed = D.TuningDB(tmp_path / "x.csv"), D.TuningDB(tmp_path / "x.csv.gz")
    plain.add(rows)
    packed.add(rows)
    assert gzip.decompress(packed.path.read_bytes()) == plain.path.read_bytes()
    assert plain.read().equals(packed.read())
    # a rewrite of the same rows gives the same bytes (no time stamp in the gzip header)
    before = packed.path.read_bytes()
    D.write_db(packed.path, packed.read())
    assert packed.path.read_bytes() == before


def test_append_adds_a_gzip_member_and_the_newer_row_wins(tmp_path):
    db = D.TuningDB(tmp_path / "x.csv.gz")
    db.add([row("a", 1.0), row("b", 2.0)])
    size = db.path.stat().st_size
    db.add([row("a", 5.0), row("c", 3.0)])
    raw = db.path.read_bytes()
    assert raw[:size] == gzip.compress(gzip.decompress(raw[:size]), compresslevel=9, mtime=0)  # untouched
    df = db.read()
    assert sorted(df.instance) == ["a", "b", "c"]
    assert df.loc[df.instance == "a", "median_ms"].item() == 5.0
    assert db.compact() == 3  # one member again, sorted
    assert gzip.decompress(db.path.read_bytes()).decode().count("\n") == 4


def test_torn_gzip_member_is_ignored_then_cut(tmp_path):
    db = D.TuningDB(tmp_path / "x.csv.gz")
    db.add([row("a", 1.0), row("b", 2.0)])
    good = db.path.read_bytes()
    member = gzip.compress(b"".join(b"junk line\n" for _ in range(50)), mtime=0)
    db.path.write_bytes(good + member[: len(member) // 2])  # a writer killed mid-append
    with pytest.warns(D.TornTailWarning, match="incomplete last gzip member"):
        assert sorted(db.read().instance) == ["a", "b"]
    db.add([row("c", 3.0)])  # cuts the torn member off under the lock, then appends
    assert db.path.read_bytes().startswith(good)
    with warnings.catch_warnings():
        warnings.simplefilter("error", D.TornTailWarning)
        assert sorted(db.read().instance) == ["a", "b", "c"]


@pytest.mark.parametrize("damage", ["not gzip", "cut first member", "bad rows inside"])
def test_damaged_gzip_file_is_a_readable_error_and_is_left_alone(tmp_path, damage):
    path = tmp_path / "db.csv.gz"
    D.TuningDB(path).add([row("a", 1.0)])
    raw = path.read_bytes()
    if damage == "not gzip":
        data = raw + b"this is not gzip data"
    elif damage == "cut first member":
        data = raw[: len(raw) // 2]
    else:
        data = gzip.compress(gzip.decompress(raw).replace(b",ok,", b",great,", 1), mtime=0)
    path.write_bytes(data)
    with pytest.raises(D.DatabaseError, match="damaged tuning database") as ei:
        D.read_db(path)
    assert str(path) in str(ei.value)
    with pytest.raises(D.DatabaseError):
        D.TuningDB(path).compact()
    assert path.read_bytes() == data


def test_merge_into_gzip_and_back_is_lossless(tmp_path):
    a, b = D.TuningDB(tmp_path / "a.csv"), D.TuningDB(tmp_path / "b.csv")
    a.add([row("a", 1.0), row("b", 2.0)])
    b.add([row("b", 1.5), row("c", 3.0)])
    assert D.merge_files([a.path, b.path], tmp_path / "m.csv.gz") == 3
    assert D.merge_files([tmp_path / "m.csv.gz"], tmp_path / "m.csv") == 3
    m = D.read_db(tmp_path / "m.csv")
    assert m.equals(D.read_db(tmp_path / "m.csv.gz"))
    assert m.loc[m.instance == "b", "median_ms"].item() == 1.5


def test_tier_paths_prefer_the_gzip_file(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTANCE_FACTORY_SYSTEM_DB", str(tmp_path))
    assert D.system_db_path("kind") == tmp_path / "kind.csv.gz"  # a new shipped file is gzip'd
    (tmp_path / "kind.csv").write_text("")
    assert D.system_db_path("kind") == tmp_path / "kind.csv"  # an old plain file still serves
    (tmp_path / "kind.csv.gz").write_bytes(b"")
    assert D.system_db_path("kind") == tmp_path / "kind.csv.gz"
    (tmp_path / "notes.md").write_text("")
    assert [p.name for p in D.system_db_files()] == ["kind.csv", "kind.csv.gz"]
    monkeypatch.setenv("INSTANCE_FACTORY_USER_DB", str(tmp_path / "mine.csv.gz"))
    assert D.user_db_path("kind") == tmp_path / "mine.csv.gz"


def test_shipped_tier_is_gzip_only():
    """The repository ships gzip'd files only: the device copy of the tree (64 MiB) and wheels stay small."""
    files = D.system_db_files(REPO / "tuning_db")
    assert files and all(p.name.endswith(".csv.gz") for p in files)
    assert sum(p.stat().st_size for p in files) < 32 * 2**20
