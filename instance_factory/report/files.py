"""Writing a built report: ``support_matrix.md`` and/or ``support_matrix.html`` into a folder."""

from __future__ import annotations

import os
from pathlib import Path

from .model import Report

__all__ = ["write_report_files"]


def write_report_files(report: Report, out_dir: str | os.PathLike, fmt: str = "both") -> list[Path]:
    """Write ``report`` as Markdown ("md"), self-contained HTML ("html") or both into ``out_dir``
    (created); returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if fmt in ("md", "both"):
        from .markdown import render_markdown

        (out / "support_matrix.md").write_text(render_markdown(report), encoding="utf-8")
        written.append(out / "support_matrix.md")
    if fmt in ("html", "both"):
        from .htmlpage import render_html

        (out / "support_matrix.html").write_text(render_html(report), encoding="utf-8")
        written.append(out / "support_matrix.html")
    return written
