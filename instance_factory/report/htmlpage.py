"""The self-contained HTML report: inline CSS, plots as base64 PNG, no scripts, no external resources."""

from __future__ import annotations

import html
from datetime import datetime, timezone

from ..epilogue import FUSED_OPS
from .ck_tables import CK_SOURCES
from .markdown import DETAIL_HEADER, details_rows
from .model import Report, best_per_device, group_problem_sets
from .tables import LEGEND, cell_tokens, ck_comparison, evidence_sources_md, fused_cell, layout_family_header, op_title

__all__ = ["render_html"]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #1b1b1b; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.3em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.1em; }
table { border-collapse: collapse; margin: 0.6em 0 1.2em; font-size: 0.92em; }
th, td { border: 1px solid #c8c8c8; padding: 4px 8px; vertical-align: top; }
th { background: #f2f2f2; text-align: left; }
td.rowlabel { font-weight: 600; white-space: nowrap; }
span.tok { display: inline-block; padding: 1px 5px; margin: 1px; border-radius: 4px; white-space: nowrap; }
.ev-declared { background: #fff4c2; border: 1px dashed #b59b00; }
.ev-stale { background: #ececec; color: #555; font-style: italic; }
.ev-interp { background: #d9e8ff; }
.ev-gpu { background: #c9f0c9; }
.ev-tuned { background: #86d686; font-weight: 600; }
.ev-fail { background: #ffc9c9; border: 1px solid #c00; }
.ev-none { color: #999; }
.cmp-both { color: #1b1b1b; } .cmp-ours { color: #0a6a0a; font-weight: 600; } .cmp-ck { color: #b00000; }
.note { background: #fafafa; border-left: 4px solid #999; padding: 0.5em 1em; margin: 0.8em 0; }
.nodata { background: #fff8e1; border-left: 4px solid #e0a800; padding: 0.8em 1em; }
.legend span.tok { margin-right: 0.3em; }
img.plot { max-width: 100%; border: 1px solid #ddd; }
small.muted { color: #666; }
"""


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def _table(header: list[str], rows: list[list[str]], raw: bool = False, first_is_label: bool = True) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for r in rows:
        tds = []
        for i, v in enumerate(r):
            cls = ' class="rowlabel"' if first_is_label and i == 0 else ""
            tds.append(f"<td{cls}>{v if raw else _e(v)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _main_table(report: Report, op: str) -> str:
    header = [""] + [layout_family_header(f) for f in report.layout_families]
    rows = []
    for dt in report.dtypes:
        cells = [_e(dt.label)]
        for fam in report.layout_families:
            toks = cell_tokens(report, op, fam, dt.name)
            if not toks:
                cells.append('<span class="ev-none">✗</span>')
            else:
                cells.append(" ".join(f'<span class="tok {t.css}" title="{_e(t.title)}">{_e(t.text)}</span>'
                                      for t in toks))
        rows.append(cells)
    return _table(header, rows, raw=True)


def _fused_table(report: Report) -> str:
    rows = []
    for fo, spec in FUSED_OPS.items():
        if fo == "passthrough" or not any(fo in report.fused_ops(op) for op in report.ops):
            continue
        cells = [f"<b>{_e(fo)}</b>", f"<code>{_e(spec.formula)}</code>"]
        for op in report.ops:
            fc = fused_cell(report, op, fo)
            ev = f' <span class="tok {fc.css}">{_e(fc.evidence)}</span>' if fc.evidence else ""
            cells.append(f"{_e(fc.summary)}{ev}")
        rows.append(cells)
    return _table(["fused op", "E ="] + report.ops, rows, raw=True)


def _cmp_cell(cell: str) -> str:
    if cell == "✗":
        return '<span class="ev-none">✗</span>'
    out = []
    for t in cell.split(", "):
        cls = "cmp-ours" if t.startswith("+") else "cmp-ck" if t.startswith("−") else "cmp-both"
        out.append(f'<span class="{cls}">{_e(t)}</span>')
    return ", ".join(out)


def _comparison(report: Report) -> str:
    parts = ["<p>Cells: <b>2D</b> both declare it · <span class='cmp-ours'>+1D</span> only we do · "
             "<span class='cmp-ck'>−3D</span> only CK does (we lack it) · ✗ neither. CK's side is the union of "
             "its XDL, WMMA and DL instance tables; ours are declarations (evidence is in the tables above).</p>"]
    for op in report.ops:
        if op not in CK_SOURCES:
            continue
        c = ck_comparison(report, op)
        parts.append(f"<h3>{_md_inline(op_title(op))} <small class='muted'>vs {_e(CK_SOURCES[op])}</small></h3>")
        header = [""] + [layout_family_header(f) for f in report.layout_families]
        parts.append(_table(header, [[_e(lab)] + [_cmp_cell(x) for x in cells] for lab, cells in c.rows], raw=True))
        lack = c.ck_only + c.fused_ck_only
        extra = c.ours_only + c.fused_ours_only
        parts.append("<p><b>CK supports, we lack:</b></p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in lack)
                     + ("" if lack else "<li>nothing</li>") + "</ul>")
        parts.append("<p><b>We support, CK lacks:</b></p><ul>" + "".join(f"<li>{_e(x)}</li>" for x in extra)
                     + ("" if extra else "<li>nothing</li>") + "</ul>")
    return "\n".join(parts)


def _plots(report: Report) -> str:
    t = report.tuning
    cur = t[t["current"]] if len(t) else t
    if len(cur) == 0:
        why = ("the tuning database has only stale rows (kernels changed since)" if len(t)
               else "the tuning database has no ok rows measured on a GPU")
        return (f'<div class="nodata" id="no-tuning-data"><b>No tuning data yet</b>: {_e(why)}. Run '
                "<code>instance-factory tune</code> on a GPU and merge the results into tuning_db/ to get the "
                "speedup and roofline plots.</div>")
    from .plots import roofline_png, speedup_png

    best = best_per_device(cur)
    sets = group_problem_sets(sorted({k.split("|")[4] for k in best["problem_key"]}))
    out = []
    if best["speedup_vs_cudnn"].notna().any():
        out.append("<h3>Speedup vs cuDNN per problem set</h3>")
        out.append(f'<img class="plot" id="plot-speedup" alt="speedup vs cuDNN per problem set" '
                   f'src="data:image/png;base64,{speedup_png(best, sets)}">')
    else:
        out.append('<div class="nodata">The tuning rows carry no cuDNN timings: no speedup plot.</div>')
    png, notes = roofline_png(best)
    out.append("<h3>TFLOP/s against the roofline</h3>")
    out.append(f'<img class="plot" id="plot-roofline" alt="TFLOP/s vs roofline" src="data:image/png;base64,{png}">')
    for n in notes:
        out.append(f'<div class="note">{_e(n)}</div>')
    return "\n".join(out)


def _md_inline(s: str) -> str:
    """The few Markdown marks the shared text uses (**bold**, `code`) -> HTML, everything escaped."""
    import re

    s = _e(s)
    s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", s)


def render_html(report: Report) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    legend_toks = " ".join(
        f'<span class="tok {cls}">{_e(txt)}</span> {_e(desc)}' for cls, txt, desc in (
            ("ev-declared", "2Dᴰ", "declared only;"), ("ev-interp", "2Dᴵ", "interpreter;"),
            ("ev-gpu", "2Dᴵᴳ", "GPU;"), ("ev-tuned", "2Dᴵᴳᵀ 1.20×", "tuned, speedup;"),
            ("ev-fail", "2D✗ᴳ", "a failure;"), ("ev-stale", "2D⁽ᴵ⁾", "stale.")))
    body = [
        "<h1>instance_factory support matrix</h1>",
        f"<p><small class='muted'>Generated {_e(now)} by <code>instance-factory report</code> from "
        f"{report.sources.get('instances', 0)} instances; evidence folder "
        f"<code>{_e(report.sources.get('evidence_dir'))}</code>, tuning database "
        f"<code>{_e(report.sources.get('tuning_db_dir'))}</code>.</small></p>",
        f"<p class='legend'>{legend_toks}</p>",
        f"<p>{_md_inline(LEGEND)} Hover a cell for its counts, devices, dates and errors.</p>",
    ]
    for op in report.ops:
        body.append(f"<h2 id='table-{_e(op)}'>{_md_inline(op_title(op))}</h2>")
        body.append(_main_table(report, op))
    body.append("<h2 id='fused'>Fused elementwise ops</h2>")
    body.append(_fused_table(report))
    body.append("<h2 id='sources'>Evidence sources</h2><ul>")
    body += [f"<li>{_md_inline(x[2:])}</li>" for x in evidence_sources_md(report)] or ["<li>none</li>"]
    body.append("</ul>")
    body.append("<h2 id='ck'>Compared with CK's published tables</h2>")
    body.append(_comparison(report))
    body.append("<h2 id='performance'>Performance</h2>")
    body.append(_plots(report))
    body.append("<h2 id='details'>Evidence per combination</h2>")
    rows = details_rows(report)
    body.append(_table(DETAIL_HEADER, rows, first_is_label=False) if rows
                else "<p>No combination has evidence beyond its declaration yet.</p>")
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<title>instance_factory support matrix</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")

