"""tools/fuzz_verify.py: its random problems are valid CK problems, and a short run of both modes passes in the
interpreter (every accepting family against float64; instance_factory.torch's layers against torch's own)."""

import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import fuzz_verify  # noqa: E402


@pytest.mark.parametrize("large", [False, True])
def test_random_problems_are_valid(large):
    rng = random.Random(3)
    seen = set()
    for _ in range(3000):
        p = fuzz_verify.random_params(rng, large)
        extents = [(f - 1) * d + 1 for f, d in zip(p.filter, p.dilation)]
        assert all(o >= 1 for o in p.output), p.key()
        assert all(0 <= lp < e and 0 <= rp < e for lp, rp, e in zip(p.left_pad, p.right_pad, extents)), p.key()
        seen.add((p.ndim, p.C == p.K == 1 and p.G > 1, p.G > 1, any(s > f for s, f in zip(p.stride, p.filter))))
    # every dimensionality, depthwise, grouped and dense, and strides over the filter all come up
    assert {s[0] for s in seen} == {1, 2, 3}
    assert any(s[1] for s in seen) and any(s[2] and not s[1] for s in seen) and any(not s[2] for s in seen)
    assert any(s[3] for s in seen)


def test_random_layers_have_outputs():
    rng = random.Random(5)
    kinds = set()
    for _ in range(2000):
        case = fuzz_verify.random_module_case(rng)
        kinds.add(case["padding"] if isinstance(case["padding"], str) else type(case["padding"]).__name__)
        assert case["cin"] % case["groups"] == 0 and case["cout"] % case["groups"] == 0
        if case["padding"] == "same":
            assert case["stride"] == (1,) * case["ndim"]
    assert kinds == {"same", "valid", "int", "tuple"}


def test_short_run_passes(tmp_path, capsys):
    rc = fuzz_verify.main(["--cases", "3", "--seed", "11", "--seconds", "120", "--out", str(tmp_path)])
    rows = [json.loads(line) for line in (tmp_path / "fuzz.jsonl").read_text().splitlines()]
    assert rows, capsys.readouterr().out
    assert rc == 0 and all(r["passed"] for r in rows), [r for r in rows if not r["passed"]]
    assert len({r["algorithm"] for r in rows}) >= 2  # several families took part


def test_short_torch_run_passes(tmp_path, capsys):
    rc = fuzz_verify.main(["--torch", "--cases", "4", "--seed", "2", "--seconds", "120", "--out", str(tmp_path)])
    rows = [json.loads(line) for line in (tmp_path / "fuzz_torch.jsonl").read_text().splitlines()]
    assert len(rows) == 4, capsys.readouterr().out  # the first one builds the miss evidence (~30 s)
    assert rc == 0 and all(r["passed"] and r["errors"] for r in rows), [r for r in rows if not r["passed"]]


def test_a_wrong_result_fails(tmp_path, monkeypatch):
    """The harness can fail: a kernel whose result is off by 1% shows up as a FAIL row and exit status 1."""
    import instance_factory.verify as verify

    real = verify.verify_instance

    def off(*a, **kw):
        res = real(*a, **kw)
        res.error, res.max_error = res.error + 0.01, res.max_error + 0.01
        return res

    monkeypatch.setattr(verify, "verify_instance", off)
    rc = fuzz_verify.main(["--cases", "1", "--seed", "11", "--seconds", "60", "--out", str(tmp_path)])
    rows = [json.loads(line) for line in (tmp_path / "fuzz.jsonl").read_text().splitlines()]
    assert rc == 1 and rows and not any(r["passed"] for r in rows)


def test_short_errors_run_passes(tmp_path, capsys):
    """Broken calls of the public ops (every mutation kind) raise a named ValueError / TypeError before a launch."""
    rc = fuzz_verify.main(["--errors", "--cases", "60", "--seed", "4", "--seconds", "120", "--out", str(tmp_path)])
    rows = [json.loads(line) for line in (tmp_path / "fuzz_errors.jsonl").read_text().splitlines()]
    assert len(rows) == 60, capsys.readouterr().out
    assert {r["mutation"] for r in rows} == set(fuzz_verify.MUTATIONS)
    assert rc == 0 and all(r["passed"] for r in rows), [r for r in rows if not r["passed"]]
