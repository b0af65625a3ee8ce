"""The CK-style support tables, the fused-op table and the CK comparison, as data and as Markdown.

:func:`support_matrix_markdown` is what README.md embeds between ``<!-- support-matrix:begin -->`` and
``<!-- support-matrix:end -->``; it depends only on the registry, the evidence files and the tuning
database (no clock), so the README check is stable until one of those changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..dtypes import DATA_TYPES
from ..epilogue import FUSED_OPS
from ..layouts import layout_for
from .ck_tables import CK_DTYPE, CK_FUSED, CK_SOURCES, ck_combinations, ck_fused_combinations
from .model import ComboEvidence, LevelEvidence, Report

__all__ = ["LEGEND", "Mark", "Token", "ck_comparison", "cell_tokens", "layout_family_header", "layout_family_short",
           "fused_cell", "op_title", "support_matrix_markdown"]

SUP = {"D": "ᴰ", "I": "ᴵ", "G": "ᴳ", "T": "ᵀ"}
NDIMS = (1, 2, 3)

LEGEND = (
    "Cells list the spatial dims declared for the combination (fused op passthrough); each carries its "
    "evidence: **ᴰ** declared in configs only, nothing verified · **ᴵ** passes against float64 in the "
    "Triton interpreter · **ᴳ** passes on a GPU · **ᵀ** tuned on a GPU (tuning_db/) · **1.23×** "
    "geometric-mean speedup vs cuDNN of the best instance per tuned problem · **✗ᴵ / ✗ᴳ** a "
    "verification failed there · **⁽ᴵ⁾ ⁽ᴳ⁾ ⁽ᵀ⁾** evidence for a kernel that has changed since (stale) · "
    "**✗** not declared."
)

_OP_TITLES = {"conv_bwd_data": "Backward data", "conv_bwd_weight": "Backward weight"}
_SHORT = {"nhwgc": "NHWGC", "gnhwc": "GNHWC", "ngchw": "NGCHW", "ngchw_kcyx": "NGCHW (GKCYX)"}


def op_title(op: str) -> str:
    return f"{_OP_TITLES.get(op, op)} (`{op}`)"


def layout_family_header(layout_family: str) -> str:
    """CK's way of naming a column: the 2D layout triple (the 1D/3D ones follow by analogy)."""
    return layout_for(layout_family, 2).name


def layout_family_short(layout_family: str) -> str:
    return _SHORT.get(layout_family, layout_family_header(layout_family))


@dataclass(frozen=True)
class Mark:
    level: str  # "D", "I", "G", "T"
    state: str  # "pass", "fail", "stale", "declared"

    @property
    def text(self) -> str:
        s = SUP[self.level]
        return {"fail": f"✗{s}", "stale": f"⁽{s}⁾"}.get(self.state, s)


@dataclass
class Token:
    ndim: int
    marks: list[Mark] = field(default_factory=list)
    speed: float | None = None
    speed_device: str = ""
    title: str = ""

    @property
    def text(self) -> str:
        s = f"{self.ndim}D" + "".join(m.text for m in self.marks)
        if self.speed is not None:
            s += f" {self.speed:.2f}×"
        return s

    @property
    def css(self) -> str:
        """The strongest evidence, for the HTML colour: fail > tuned > gpu > interp > stale > declared."""
        states = {(m.level, m.state) for m in self.marks}
        if any(st == "fail" for _, st in states):
            return "ev-fail"
        for lvl, cls in (("T", "ev-tuned"), ("G", "ev-gpu"), ("I", "ev-interp")):
            if (lvl, "pass") in states:
                return cls
        if any(st == "stale" for _, st in states):
            return "ev-stale"
        return "ev-declared"


def _fmt_err(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.1e}"


def _level_title(name: str, lv: LevelEvidence) -> str:
    if not (lv.current or lv.stale):
        return f"{name}: none"
    parts = [f"{lv.passed} pass", f"{lv.failed} fail"]
    if lv.no_instance:
        parts.append(f"{lv.no_instance} no instance")
    s = f"{name}: {', '.join(parts)}, max rel. error {_fmt_err(lv.max_error)}"
    if lv.devices:
        s += f", {'; '.join(lv.devices)}"
    if lv.dates:
        s += f", {lv.dates[-1]}"
    if lv.stale:
        s += f" (+{len(lv.stale)} stale)"
    return s


def combo_title(c: ComboEvidence) -> str:
    op, fam, dt, nd, fo = c.key
    parts = [f"{op} {layout_for(fam, nd).name} {dt} {nd}D {fo}: {c.instances} instances",
             _level_title("interpreter", c.interpreter), _level_title("GPU", c.gpu)]
    for t in c.tuned.values():
        g = f", geomean {t.geomean:.2f}x vs cuDNN over {len(t.speedups)}" if t.speedups else ""
        parts.append(f"tuned on {t.device}: {t.problems} problems ({t.stale_problems} stale){g}")
    return " | ".join(parts)


def combo_marks(c: ComboEvidence) -> tuple[list[Mark], float | None, str]:
    marks = []
    for lvl, lv in (("I", c.interpreter), ("G", c.gpu)):
        if lv.state != "none":
            marks.append(Mark(lvl, lv.state))
    if c.tuned_state != "none":
        marks.append(Mark("T", c.tuned_state))
    if not any(m.state in ("pass", "fail") for m in marks):
        marks.insert(0, Mark("D", "declared"))
    best = c.best_tuned
    speed = best.geomean if best and math.isfinite(best.geomean) else None
    return marks, speed, best.device if best and speed is not None else ""


def cell_tokens(report: Report, op: str, layout_family: str, dtype: str, fused_op: str = "passthrough") -> list[Token]:
    """One token per declared ndim (empty: the cell is ✗)."""
    out = []
    for nd in NDIMS:
        c = report.combos.get((op, layout_family, dtype, nd, fused_op))
        if not (c and c.declared):
            continue
        marks, speed, dev = combo_marks(c)
        out.append(Token(nd, marks, speed, dev, combo_title(c)))
    return out


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["|" + "|".join(header) + "|", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["|" + "|".join(r) + "|" for r in rows]
    return lines


def main_table_rows(report: Report, op: str) -> list[tuple[str, list[list[Token]]]]:
    return [(dt.label, [cell_tokens(report, op, lf, dt.name) for lf in report.layout_families]) for dt in report.dtypes]


# --------------------------------------------------------------------------------------------
# fused ops
# --------------------------------------------------------------------------------------------
@dataclass
class FusedCell:
    declared: list[ComboEvidence]
    summary: str
    evidence: str  # compact, e.g. "ᴵ 1/96 · ᴳ 0/96"
    css: str


def _count_state(cs: list[ComboEvidence], attr: str, state: str) -> int:
    return sum(getattr(c, attr).state == state for c in cs)


def fused_cell(report: Report, op: str, fused_op: str) -> FusedCell:
    cs = [c for k, c in sorted(report.combos.items()) if k[0] == op and k[4] == fused_op and c.declared]
    if not cs:
        return FusedCell([], "✗", "", "ev-none")
    nds = sorted({c.key[3] for c in cs})
    fams = [f for f in report.layout_families if any(c.key[1] == f for c in cs)]
    dts = [d for d in DATA_TYPES if any(c.key[2] == d for c in cs)]
    op_dts = [d for d in DATA_TYPES if any(k[0] == op and k[2] == d and k[4] == "passthrough" and c.declared
                                          for k, c in report.combos.items())]
    full = len(nds) * len(fams) * len(dts)
    fam_s = ("all layouts" if fams == report.layout_families and len(fams) > 1
             else "/".join(layout_family_short(f) for f in fams))
    dt_s = "all dtypes of the table" if dts == op_dts and len(dts) > 1 else "/".join(DATA_TYPES[d].label for d in dts)
    summary = f"{', '.join(f'{n}D' for n in nds)}; {fam_s}; {dt_s}"
    if len(cs) != full:
        summary += f" ({len(cs)} of these {full} combinations)"
    n = len(cs)
    parts = []
    for lvl, attr in (("I", "interpreter"), ("G", "gpu")):
        ok, bad = _count_state(cs, attr, "pass"), _count_state(cs, attr, "fail")
        if ok or bad:
            parts.append(f"{SUP[lvl]} {ok}/{n}" + (f" ✗{SUP[lvl]} {bad}" if bad else ""))
    tuned = sum(c.tuned_state == "pass" for c in cs)
    if tuned:
        parts.append(f"{SUP['T']} {tuned}/{n}")
    if not parts:
        parts.append(f"{SUP['D']} only")
    css = "ev-fail" if any("✗" in p for p in parts) else (
        "ev-tuned" if tuned else "ev-gpu" if _count_state(cs, "gpu", "pass") else
        "ev-interp" if _count_state(cs, "interpreter", "pass") else "ev-declared")
    return FusedCell(cs, summary, " · ".join(parts), css)


# --------------------------------------------------------------------------------------------
# CK comparison
# --------------------------------------------------------------------------------------------
@dataclass
class Comparison:
    op: str
    rows: list[tuple[str, list[str]]]  # (row label, one cell per layout_family)
    ck_only: list[str]  # what CK supports that we lack
    ours_only: list[str]  # what we support that CK lacks
    fused_ck_only: list[str]
    fused_ours_only: list[str]


def _nd_list(nds) -> str:
    return ", ".join(f"{n}D" for n in sorted(nds))


def ck_comparison(report: Report, op: str) -> Comparison:
    """Cells: "2D" both, "+1D" ours only, "−3D" CK only (we lack it); "✗" neither."""
    ck = ck_combinations(op)  # (ck label, layout_family, ndim) -> instructions
    ours_label = {v: k for k, v in CK_DTYPE.items() if v}
    labels: list[tuple[str, str | None, str | None]] = []  # (row label, our dtype, CK label)
    for dt in report.dtypes:
        labels.append((dt.label, dt.name, ours_label.get(dt.name)))
    for ck_label, ours in CK_DTYPE.items():
        if ours is None and any(k[0] == ck_label for k in ck):
            labels.append((f"{ck_label} (CK only)", None, ck_label))
    rows, ck_only, ours_only = [], [], []
    for label, ours, ckl in labels:
        cells = []
        for fam in report.layout_families:
            toks = []
            for nd in NDIMS:
                have = bool(ours) and report.declared(op, fam, ours, nd)
                theirs = ckl is not None and (ckl, fam, nd) in ck
                if have and theirs:
                    toks.append(f"{nd}D")
                elif have:
                    toks.append(f"+{nd}D")
                elif theirs:
                    toks.append(f"−{nd}D")
            cells.append(", ".join(toks) or "✗")
            ck_nds = [nd for nd in NDIMS if ckl is not None and (ckl, fam, nd) in ck
                      and not (ours and report.declared(op, fam, ours, nd))]
            if ck_nds:
                instr = sorted({i for nd in ck_nds for i in ck[(ckl, fam, nd)]})
                ck_only.append(f"{ckl} {layout_family_header(fam)} {_nd_list(ck_nds)} (CK {'/'.join(instr)})")
        rows.append((label, cells))
        if ours:
            extra = {}
            for fam in report.layout_families:
                nds = [nd for nd in NDIMS if report.declared(op, fam, ours, nd) and not (ckl and (ckl, fam, nd) in ck)]
                if nds:
                    extra[fam] = nds
            if extra:
                ours_only.append(f"{label}: " + "; ".join(f"{layout_family_short(f)} {_nd_list(n)}"
                                                          for f, n in extra.items()))
    # fused ops
    ck_f = ck_fused_combinations(op)
    fused_ck_only = []
    for f in CK_FUSED:
        if f.op != op:
            continue
        for ckl in f.dtypes:
            ours = CK_DTYPE.get(ckl)
            missing = [nd for nd in f.ndims
                       if not (ours and report.declared(op, f.layout_family, ours, nd, f.fused_op))]
            if missing:
                fused_ck_only.append(f"{f.ck_name} {layout_family_short(f.layout_family)} {ckl} {_nd_list(missing)}")
    fused_ours_only = []
    for fo in report.fused_ops(op):
        cs = [c for k, c in report.combos.items() if k[0] == op and k[4] == fo and c.declared]
        beyond = []
        for c in cs:
            _, fam, dt, nd, _ = c.key
            ckl = ours_label.get(dt)
            if not (ckl and (fo, ckl, fam, nd) in ck_f):
                beyond.append(c)
        if not beyond:
            continue
        if len(beyond) == len(cs) and not any(k[0] == fo for k in ck_f):
            fused_ours_only.append(f"{fo} ({FUSED_OPS[fo].formula}): CK has no such fused op; "
                                   f"we declare {len(cs)} combinations")
        else:
            fused_ours_only.append(f"{fo}: {len(beyond)} combinations beyond CK's 3D NHWGC "
                                   f"({len(cs)} declared in all)")
    return Comparison(op, rows, ck_only, ours_only, fused_ck_only, fused_ours_only)


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------
def _fam_header_md(report: Report) -> list[str]:
    return [" "] + [layout_family_header(f) for f in report.layout_families]


def evidence_sources_md(report: Report) -> list[str]:
    ev = report.evidence
    lines = []
    if ev.interpreter:
        f = ev.interpreter
        recs = f.records
        bad = sum(r.failed for r in recs)
        none = sum(r.status == "NO INSTANCE" for r in recs)
        lines.append(f"- ᴵ `{f.shown}`: {f.device}, {f.date}, triton {f.meta.get('triton', '?')}: {len(recs)} runs, "
                     f"{sum(r.passed for r in recs)} pass, {bad} fail, "
                     + (f"{none} without an instance that can run there, " if none else "") + "max rel. error "
                     f"{_fmt_err(max((r.error for r in recs if math.isfinite(r.error)), default=math.nan))}")
    for f in ev.gpu:
        recs = f.records
        lines.append(f"- ᴳ `{f.shown}`: {f.device}, {f.date}, triton {f.meta.get('triton', '?')}: {len(recs)} runs, "
                     f"{sum(r.passed for r in recs)} pass, {sum(r.failed for r in recs)} fail, max rel. error "
                     f"{_fmt_err(max((r.error for r in recs if math.isfinite(r.error)), default=math.nan))}")
    t = report.tuning
    if len(t):
        for dev, g in t.groupby("device", sort=True):
            cur = g[g["current"]]
            best = cur.sort_values(["problem_key", "median_ms"]).drop_duplicates("problem_key")
            sp = [v for v in best["speedup_vs_cudnn"] if v == v and v > 0]
            gm = f", geomean speedup vs cuDNN {math.exp(sum(map(math.log, sp)) / len(sp)):.2f}× over {len(sp)}" \
                if sp else ""
            lines.append(f"- ᵀ tuning_db: {dev}: {cur['problem_key'].nunique()} problems tuned{gm}")
    for n in report.notes:
        lines.append(f"- note: {n}")
    return lines


def support_matrix_markdown(report: Report, *, heading_level: int = 3, comparison: bool = True) -> str:
    """The Markdown README.md embeds: per-op tables, fused ops, legend, evidence sources, CK comparison."""
    h = "#" * heading_level
    out: list[str] = [LEGEND, ""]
    for op in report.ops:
        if not any(k[0] == op and c.declared for k, c in report.combos.items()) and op not in CK_SOURCES:
            continue
        out.append(f"{h} {op_title(op)}")
        out.append("")
        rows = [[label] + [", ".join(t.text for t in toks) or "✗" for toks in cells]
                for label, cells in main_table_rows(report, op)]
        out += _md_table(_fam_header_md(report), rows)
        out.append("")
    out.append(f"{h} Fused elementwise ops")
    out.append("")
    out.append("Each cell: the spatial dims; layouts; data types declared, then how many of those combinations "
               "have evidence (ᴵ interpreter, ᴳ GPU, ᵀ tuned).")
    out.append("")
    frows = []
    for fo in FUSED_OPS:
        if fo == "passthrough" or not any(fo in report.fused_ops(op) for op in report.ops):
            continue
        cells = []
        for op in report.ops:
            fc = fused_cell(report, op, fo)
            cells.append(fc.summary + (f" · {fc.evidence}" if fc.evidence else ""))
        frows.append([f"**{fo}**", f"`{FUSED_OPS[fo].formula}`", *cells])
    out += _md_table(["fused op", "E =", *report.ops], frows)
    out.append("")
    out.append(f"{h} Evidence sources")
    out.append("")
    out += evidence_sources_md(report) or ["- none"]
    out.append("")
    if comparison:
        out += comparison_markdown(report, heading_level)
    return "\n".join(out).rstrip() + "\n"


def comparison_markdown(report: Report, heading_level: int = 3) -> list[str]:
    h = "#" * heading_level
    out = [f"{h} Compared with CK's published tables", "",
           "Cells: **2D** both declare it · **+1D** only we do · **−3D** only CK does (we lack it) · ✗ neither. "
           "CK's tables are the union of its XDL, WMMA and DL instance tables; ours are declarations (the "
           "evidence is in the tables above).", ""]
    for op in report.ops:
        if op not in CK_SOURCES:
            continue
        cmp_ = ck_comparison(report, op)
        out.append(f"**{op_title(op)}** vs {CK_SOURCES[op]}")
        out.append("")
        out += _md_table(_fam_header_md(report), [[lab, *cells] for lab, cells in cmp_.rows])
        out.append("")
        for title, items in (("CK supports, we lack", cmp_.ck_only + cmp_.fused_ck_only),
                             ("We support, CK lacks", cmp_.ours_only + cmp_.fused_ours_only)):
            out.append(f"- {title}:" + ("" if items else " nothing"))
            out += [f"  - {x}" for x in items]
        out.append("")
    return out
