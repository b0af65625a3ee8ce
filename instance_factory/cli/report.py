"""``instance-factory report``: write the support matrix as Markdown and/or self-contained HTML."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report", help="support-matrix report (CK-style tables with evidence) as Markdown and HTML",
        description="Build CK-style support tables from the registry, each cell carrying its evidence "
                    "(declared / interpreter / GPU / tuned / speed), a comparison with CK's tables and "
                    "performance plots; write reports/support_matrix.{md,html}.")
    p.add_argument("--out", default="reports", help="output folder (default: reports/)")
    p.add_argument("--evidence", default="evidence", help="evidence folder (default: evidence/)")
    p.add_argument("--db", default="tuning_db", help="tuning database folder (default: tuning_db/)")
    p.add_argument("--format", choices=["md", "html", "both"], default="both", help="what to write (default: both)")
    p.add_argument("--configs", help="config directory (default: configs/ or $INSTANCE_FACTORY_CONFIGS)")
    p.add_argument("--allow-missing-interpreter-evidence", action="store_true",
                   help="report without <evidence>/interpreter.jsonl instead of failing")
    p.add_argument("--update-readme", metavar="README", help="also rewrite the support-matrix block of this file")
    p.add_argument("--check-readme", metavar="README",
                   help="only check that this file's support-matrix block is current (exit 1 if stale)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..registry import get_registry
    from ..report.evidence import EvidenceError
    from ..report.files import write_report_files
    from ..report.model import build_report
    from ..report.readme import MarkersMissing, readme_status, update_readme
    from ..report.tables import support_matrix_markdown
    from ..tuning.database import DatabaseError

    try:
        report = build_report(get_registry(ns.configs), ns.evidence, ns.db,
                              require_interpreter=not ns.allow_missing_interpreter_evidence)
        if ns.check_readme:
            ok, msg = readme_status(ns.check_readme, support_matrix_markdown(report))
            print(msg, file=sys.stdout if ok else sys.stderr)
            return 0 if ok else 1
        written = write_report_files(report, ns.out, ns.format)
        if ns.update_readme:
            changed = update_readme(ns.update_readme, support_matrix_markdown(report))
            print(f"{ns.update_readme}: support matrix {'updated' if changed else 'already current'}")
    except (EvidenceError, DatabaseError, MarkersMissing, FileNotFoundError) as exc:
        print(f"instance-factory report: error: {exc}", file=sys.stderr)
        return 2
    for p in written:
        print(f"wrote {p}")
    for n in report.notes:
        print(f"note: {n}")
    return 0
