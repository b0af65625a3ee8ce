"""CK layout triples (input/weight/output) and how each tensor maps to logical indices.

A tensor layout is a string of letters; its shape is the letters in order, spatial letters standing
for lengths. Kernels never see layout strings: they get one stride per *logical* index, padded to 3
spatial dims (D, H, W for activations, Z, Y, X for the filter), with stride 0 for a padded dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from .problem import ConvParams

__all__ = [
    "LAYOUT_FAMILIES",
    "LayoutTriple",
    "all_layouts",
    "channels_last_twin",
    "layout_for",
    "parse_layout",
]

# layout family name -> per-ndim (input, weight, output) layout strings, exactly as CK writes them
_SPATIAL_ACT = {1: "W", 2: "HW", 3: "DHW"}
_SPATIAL_WEI = {1: "X", 2: "YX", 3: "ZYX"}


def _layout_family_triples(layout_family: str, ndim: int) -> tuple[str, str, str]:
    a, w = _SPATIAL_ACT[ndim], _SPATIAL_WEI[ndim]
    if layout_family == "nhwgc":
        return f"N{a}GC", f"GK{w}C", f"N{a}GK"
    if layout_family == "gnhwc":
        return f"GN{a}C", f"GK{w}C", f"GN{a}K"
    if layout_family == "ngchw":
        return f"NGC{a}", f"GK{w}C", f"NGK{a}"
    if layout_family == "ngchw_kcyx":
        return f"NGC{a}", f"GKC{w}", f"NGK{a}"
    raise ValueError(f"unknown layout family {layout_family!r}")


LAYOUT_FAMILIES: dict[str, str] = {
    "nhwgc": "channels-last grouped",
    "gnhwc": "group-major",
    "ngchw": "channels-first",
    "ngchw_kcyx": "channels-first, KC weight",
}


@dataclass(frozen=True)
class LayoutTriple:
    """One CK layout triple for one ndim, e.g. ``NHWGC/GKYXC/NHWGK``."""

    layout_family: str  # e.g. "nhwgc" (LAYOUT_FAMILIES); a kernel's family is its algorithm
    ndim: int
    input: str
    weight: str
    output: str

    @property
    def name(self) -> str:
        return f"{self.input}/{self.weight}/{self.output}"

    @property
    def channels_last(self) -> bool:
        """True when the activation channel axis is the contiguous one."""
        return self.input.endswith("C")

    def shape(self, tensor: str, params: ConvParams) -> tuple[int, ...]:
        """Expected shape of ``input``/``weight``/``output`` for these params."""
        return tuple(self._lengths(tensor, params)[ch] for ch in getattr(self, tensor))

    def _lengths(self, tensor: str, p: ConvParams) -> dict[str, int]:
        act = _SPATIAL_ACT[p.ndim]
        if tensor == "input":
            return {"N": p.N, "G": p.G, "C": p.C, **dict(zip(act, p.input))}
        if tensor == "output":
            return {"N": p.N, "G": p.G, "K": p.K, **dict(zip(act, p.output))}
        if tensor == "weight":
            return {"G": p.G, "K": p.K, "C": p.C, **dict(zip(_SPATIAL_WEI[p.ndim], p.filter))}
        raise ValueError(f"unknown tensor {tensor!r}")

    def strides(self, tensor: str, params: ConvParams) -> dict[str, int]:
        """Element strides of a contiguous tensor, per logical letter, padded to 3 spatial dims.

        Activations give keys G, N, C|K, D, H, W; the weight gives G, K, C, Z, Y, X. Padded spatial
        dims get stride 0 (their length is 1, so any stride would do).
        """
        letters = getattr(self, tensor)
        lengths = self._lengths(tensor, params)
        out: dict[str, int] = {}
        acc = 1
        for ch in reversed(letters):
            out[ch] = acc
            acc *= lengths[ch]
        for ch in ("DHW" if tensor != "weight" else "ZYX"):
            out.setdefault(ch, 0)
        return out


def all_layouts(ndim: int | None = None) -> list[LayoutTriple]:
    """Every layout triple of the contract (optionally for one ndim)."""
    ndims = (1, 2, 3) if ndim is None else (ndim,)
    return [LayoutTriple(f, n, *_layout_family_triples(f, n)) for f in LAYOUT_FAMILIES for n in ndims]


def layout_for(layout_family: str, ndim: int) -> LayoutTriple:
    return LayoutTriple(layout_family, ndim, *_layout_family_triples(layout_family, ndim))


def channels_last_twin(ndim: int) -> LayoutTriple:
    """The channels-last triple (GKYXC weight) that ``relayout`` copies a problem of ``ndim`` to; the
    cost model prices relayout by that twin problem."""
    return layout_for("nhwgc", ndim)


_BY_NAME = {lt.name: lt for lt in all_layouts()}


def parse_layout(layout: str | LayoutTriple, ndim: int | None = None) -> LayoutTriple:
    """Accept a CK triple string (``"NHWGC/GKYXC/NHWGK"``) or a LayoutTriple; check its ndim."""
    if isinstance(layout, LayoutTriple):
        lt = layout
    else:
        lt = _BY_NAME.get(str(layout).strip().upper().replace(" ", ""))
        if lt is None:
            known = ", ".join(sorted(_BY_NAME))
            raise ValueError(f"unknown layout {layout!r}; the layouts of the contract are: {known}")
    if ndim is not None and lt.ndim != ndim:
        raise ValueError(f"layout {lt.name} is a {lt.ndim}D layout but the problem has ndim={ndim}")
    return lt
