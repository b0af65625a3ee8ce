"""Support-matrix report: CK-style tables from the registry, every cell carrying its evidence.

    from instance_factory.registry import get_registry
    from instance_factory.report import build_report, render_markdown, render_html

    report = build_report(get_registry(), "evidence", "tuning_db")
    render_markdown(report); render_html(report)

README.md embeds :func:`readme_support_matrix` between ``<!-- support-matrix:begin -->`` and
``<!-- support-matrix:end -->``; ``instance-factory report --update-readme README.md`` rewrites it.
"""

from __future__ import annotations

import importlib
from typing import Any

# Attributes load lazily: importing the package loads neither pandas nor the renderers.
_EXPORTS = {
    "BEGIN": "readme", "END": "readme", "MarkersMissing": "readme", "readme_status": "readme",
    "readme_support_matrix": "readme", "update_readme": "readme",
    "EvidenceError": "evidence", "load_evidence": "evidence", "read_evidence_file": "evidence",
    "Report": "model", "build_report": "model",
    "render_html": "htmlpage", "render_markdown": "markdown", "support_matrix_markdown": "tables",
    "write_report_files": "files",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
