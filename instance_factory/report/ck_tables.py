"""Composable Kernel's published support tables for grouped conv backward data and backward weight, as data.

Transcribed from CK's ``client_example/10_grouped_convnd_bwd_data/README.md`` and
``client_example/11_grouped_conv_bwd_weight/README.md`` ("Table of supported cases by instance factory
with XDL / WMMA / DL instruction" and "... with fused elementwise operation"). CK writes 2D layout
names; a CK row label maps to one of our DataType names where one exists (int8 has none).

Each entry: (op, instruction, CK row label, layout family, ndims).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CK_DTYPE", "CK_FUSED", "CK_SOURCES", "CK_TABLES", "CkEntry", "CkFused", "ck_combinations",
           "ck_fused_combinations"]

#: CK row label -> our DataType name (None: a type we do not offer).
CK_DTYPE: dict[str, str | None] = {
    "bf16": "bf16",
    "fp16": "fp16",
    "fp32": "fp32",
    "bf16(fp32 for weight)": "bf16_fp32w",
    "int8": None,
}

CK_SOURCES = {
    "conv_bwd_data": "CK client_example/10_grouped_convnd_bwd_data/README.md",
    "conv_bwd_weight": "CK client_example/11_grouped_conv_bwd_weight/README.md",
}


@dataclass(frozen=True)
class CkEntry:
    op: str
    instruction: str  # XDL, WMMA, DL
    dtype: str  # CK's row label
    layout_family: str  # our layout family name
    ndims: tuple[int, ...]


@dataclass(frozen=True)
class CkFused:
    op: str
    fused_op: str  # our fused-op name (CK: Bilinear -> bilinear, Scale -> scale)
    ck_name: str
    layout_family: str
    dtypes: tuple[str, ...]  # CK row labels
    ndims: tuple[int, ...]


def _table(op: str, instr: str, columns: tuple[str, ...], rows: dict[str, tuple[str, ...]]) -> list[CkEntry]:
    out = []
    for label, cells in rows.items():
        assert len(cells) == len(columns), (op, instr, label)
        for fam, cell in zip(columns, cells):
            nd = () if cell == "x" else tuple(int(t.strip().rstrip("D")) for t in cell.split(","))
            if nd:
                out.append(CkEntry(op, instr, label, fam, nd))
    return out


_D, _W = "conv_bwd_data", "conv_bwd_weight"
_C3 = ("nhwgc", "ngchw", "gnhwc")  # NHWGC/GKYXC/NHWGK | NGCHW/GKYXC/NGKHW | GNHWC/GKYXC/GNHWK
_C4 = ("nhwgc", "ngchw", "ngchw_kcyx", "gnhwc")  # ... | NGCHW/GKCYX/NGKHW | ...

CK_TABLES: tuple[CkEntry, ...] = tuple(
    # backward data
    _table(_D, "XDL", _C3, {
        "bf16": ("2D, 3D", "2D, 3D", "2D, 3D"),
        "fp16": ("2D, 3D", "2D, 3D", "2D, 3D"),
        "fp32": ("2D, 3D", "2D, 3D", "2D, 3D"),
    })
    + _table(_D, "WMMA", _C3, {
        "fp16": ("2D, 3D", "x", "2D, 3D"),
        "int8": ("2D, 3D", "x", "2D, 3D"),
    })
    # backward weight
    + _table(_W, "XDL", _C4, {
        "bf16": ("2D, 3D", "2D, 3D", "2D, 3D", "x"),
        "bf16(fp32 for weight)": ("2D, 3D", "x", "x", "1D, 2D, 3D"),
        "fp16": ("2D, 3D", "2D, 3D", "2D, 3D", "1D, 2D, 3D"),
        "fp32": ("2D, 3D", "2D, 3D", "2D, 3D", "1D, 2D, 3D"),
    })
    + _table(_W, "WMMA", _C3, {
        "fp16": ("3D", "x", "3D"),
        "int8": ("3D", "x", "3D"),
    })
    + _table(_W, "DL", _C3, {
        "bf16(fp32 for weight)": ("1D, 2D, 3D", "x", "1D, 2D, 3D"),
        "fp16": ("1D, 2D, 3D", "x", "1D, 2D, 3D"),
        "fp32": ("1D, 2D, 3D", "x", "1D, 2D, 3D"),
    })
)

CK_FUSED: tuple[CkFused, ...] = (
    CkFused(_D, "bilinear", "Bilinear", "nhwgc", ("bf16", "fp16", "fp32"), (3,)),
    CkFused(_D, "scale", "Scale", "nhwgc", ("bf16", "fp16", "fp32"), (3,)),
    CkFused(_W, "bilinear", "Bilinear", "nhwgc", ("bf16(fp32 for weight)", "fp16", "fp32"), (3,)),
    CkFused(_W, "scale", "Scale", "nhwgc", ("bf16(fp32 for weight)", "fp16", "fp32"), (3,)),
)


def ck_combinations(op: str) -> dict[tuple[str, str, int], list[str]]:
    """(CK row label, layout_family, ndim) -> the CK instructions offering it, for one op."""
    out: dict[tuple[str, str, int], list[str]] = {}
    for e in CK_TABLES:
        if e.op != op:
            continue
        for n in e.ndims:
            out.setdefault((e.dtype, e.layout_family, n), []).append(e.instruction)
    return out


def ck_fused_combinations(op: str) -> set[tuple[str, str, str, int]]:
    """(fused op, CK row label, layout_family, ndim) that CK offers for one op."""
    return {(f.fused_op, d, f.layout_family, n) for f in CK_FUSED if f.op == op for d in f.dtypes for n in f.ndims}
