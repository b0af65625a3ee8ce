"""README.md embeds the current support matrix: fails when the tables there are stale.

The block between ``<!-- support-matrix:begin -->`` and ``<!-- support-matrix:end -->`` must equal
``instance_factory.report.readme_support_matrix()`` (built from configs/, evidence/ and tuning_db/).
Regenerate it with ``instance-factory report --update-readme README.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from instance_factory.report.readme import BEGIN, END, MarkersMissing, readme_block, readme_status, replace_block

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def test_readme_support_matrix_is_current():
    if not README.exists():
        pytest.skip("README.md does not exist yet")
    text = README.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        pytest.skip(f"README.md has no {BEGIN} ... {END} markers yet; add them where the support matrix goes")
    from instance_factory.report import readme_support_matrix

    ok, msg = readme_status(README, readme_support_matrix())
    assert ok, msg


def test_block_helpers(tmp_path):
    text = f"# Title\n\nintro\n\n{BEGIN}\nold table\n{END}\n\nrest\n"
    new = replace_block(text, "| new |\n")
    assert new == f"# Title\n\nintro\n\n{BEGIN}\n| new |\n{END}\n\nrest\n"
    assert readme_block(new).strip() == "| new |"
    p = tmp_path / "README.md"
    p.write_text(new)
    assert readme_status(p, "| new |")[0]
    ok, msg = readme_status(p, "| newer |")
    assert not ok and "stale" in msg and "--update-readme" in msg and "+| newer |" in msg
    with pytest.raises(MarkersMissing, match="has no"):
        readme_block("no markers here")
