"""README.md embeds the support matrix between two markers; these helpers make and check that block.

    <!-- support-matrix:begin -->
    ... support_matrix_markdown(build_report(get_registry(), "evidence", "tuning_db")) ...
    <!-- support-matrix:end -->

Regenerate: ``instance-factory report --update-readme README.md`` (or :func:`update_readme`).
"""

from __future__ import annotations

from pathlib import Path

from .model import build_report
from .tables import support_matrix_markdown

__all__ = ["BEGIN", "END", "MarkersMissing", "readme_block", "readme_status", "readme_support_matrix",
           "replace_block", "update_readme"]

BEGIN = "<!-- support-matrix:begin -->"
END = "<!-- support-matrix:end -->"
REPO = Path(__file__).resolve().parent.parent.parent


class MarkersMissing(ValueError):
    """README.md lacks the begin/end markers (or has them out of order)."""


def readme_support_matrix(configs: str | Path | None = None, evidence_dir: str | Path | None = None,
                          tuning_db_dir: str | Path | None = None) -> str:
    """The Markdown README.md embeds, built from the repo's configs/, evidence/ and tuning_db/ (defaults)."""
    from ..registry import get_registry

    report = build_report(get_registry(configs),
                          REPO / "evidence" if evidence_dir is None else evidence_dir,
                          REPO / "tuning_db" if tuning_db_dir is None else tuning_db_dir)
    return support_matrix_markdown(report)


def readme_block(text: str, path: str = "README.md") -> str:
    """The text between the markers (raises MarkersMissing)."""
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0 or e < b:
        raise MarkersMissing(f"{path} has no `{BEGIN}` ... `{END}` block")
    return text[b + len(BEGIN):e]


def replace_block(text: str, markdown: str, path: str = "README.md") -> str:
    readme_block(text, path)
    b, e = text.find(BEGIN), text.find(END)
    return text[:b + len(BEGIN)] + "\n" + markdown.strip() + "\n" + text[e:]


def readme_status(path: str | Path, markdown: str) -> tuple[bool, str]:
    """(current?, message). Compares the block with ``markdown`` ignoring surrounding blank lines."""
    path = Path(path)
    block = readme_block(path.read_text(encoding="utf-8"), str(path))
    if block.strip() == markdown.strip():
        return True, f"{path}: support matrix is current"
    import difflib

    diff = "\n".join(difflib.unified_diff(block.strip().splitlines(), markdown.strip().splitlines(),
                                          "README.md (embedded)", "generated now", lineterm="", n=1))
    return False, (f"{path}: the embedded support matrix is stale; regenerate it with "
                   f"`instance-factory report --update-readme {path}`.\n{diff[:6000]}")


def update_readme(path: str | Path, markdown: str) -> bool:
    """Rewrite the block in ``path``; returns True when the file changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    new = replace_block(text, markdown, str(path))
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True
