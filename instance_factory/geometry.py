"""The integers every conv kernel takes: sizes padded to 3 spatial dims and per-logical-index strides.

Padding 1D/2D problems to 3D (length 1, filter 1, stride 1, pad 0, stride-0 axes) lets one kernel
serve every ndim; Triton specializes integer arguments equal to 1, so the padded axes cost little.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .layouts import LayoutTriple
from .problem import ConvParams

__all__ = ["ConvGeometry", "stride_phases"]


@dataclass(frozen=True)
class ConvGeometry:
    G: int
    N: int
    K: int
    C: int
    in3: tuple[int, int, int]  # Di, Hi, Wi
    out3: tuple[int, int, int]  # Do, Ho, Wo
    filt3: tuple[int, int, int]  # Z, Y, X
    stride3: tuple[int, int, int]
    dil3: tuple[int, int, int]
    pad3: tuple[int, int, int]  # left pads (right pads only shape the output lengths)
    # strides in elements, logical order
    x_strides: tuple[int, ...]  # input / grad_in: (g, n, c, d, h, w)
    w_strides: tuple[int, ...]  # weight / grad_wei: (g, k, c, z, y, x)
    y_strides: tuple[int, ...]  # output / grad_out: (g, n, k, d, h, w)
    x_numel: int
    w_numel: int
    y_numel: int

    @classmethod
    def build(cls, p: ConvParams, lt: LayoutTriple) -> ConvGeometry:
        xs = lt.strides("input", p)
        ws = lt.strides("weight", p)
        ys = lt.strides("output", p)
        return cls(
            G=p.G, N=p.N, K=p.K, C=p.C,
            in3=p.spatial3("input"), out3=p.spatial3("output"), filt3=p.spatial3("filter"),
            stride3=p.spatial3("stride"), dil3=p.spatial3("dilation"), pad3=p.spatial3("left_pad"),
            x_strides=(xs["G"], xs["N"], xs["C"], xs["D"], xs["H"], xs["W"]),
            w_strides=(ws["G"], ws["K"], ws["C"], ws["Z"], ws["Y"], ws["X"]),
            y_strides=(ys["G"], ys["N"], ys["K"], ys["D"], ys["H"], ys["W"]),
            x_numel=p.numel("input"), w_numel=p.numel("weight"), y_numel=p.numel("output"),
        )

    @property
    def needs_int64(self) -> bool:
        """True when any tensor has 2**31 elements or more: offsets must be computed in int64."""
        return max(self.x_numel, self.w_numel, self.y_numel) >= 2**31 - 1

    @property
    def taps(self) -> int:
        return math.prod(self.filt3)

    def channel_alignment(self, cap: int = 16) -> int:
        """The largest power of two (at most ``cap``) dividing K, C and every stride of a dim longer
        than 1 other than the channel axes, when all three tensors have unit channel stride; else 1.

        Triton treats an integer argument that is not a multiple of 16 as having no divisor at all,
        so with 8 or 24 channels per group (row strides of 8*G, 24*G) its loads fall to 2 bytes. A
        kernel that receives these strides divided by the alignment and multiplies them back by a
        constexpr gets its 16-byte vector loads and cp.async pipeline again (CUTLASS's "alignment").
        """
        tensors = ((self.x_strides, (self.G, self.N, self.C, *self.in3)),
                   (self.w_strides, (self.G, self.K, self.C, *self.filt3)),
                   (self.y_strides, (self.G, self.N, self.K, *self.out3)))
        if any(strides[2] != 1 for strides, _ in tensors):
            return 1
        values = [self.K, self.C] + [s for strides, lens in tensors
                                     for i, (s, n) in enumerate(zip(strides, lens)) if i != 2 and n > 1]
        align = cap
        while align > 1 and any(v % align for v in values):
            align //= 2
        return align

    def strides_over(self, align: int) -> tuple[int, ...]:
        """x, w and y strides (18 values, logical order) with all but the channel ones divided by
        ``align`` (from channel_alignment), for a kernel that multiplies them back by a constexpr; a
        dim of length 1 may floor, which is harmless: its index is always 0."""
        return tuple(v if i == 2 else v // align
                     for strides in (self.x_strides, self.w_strides, self.y_strides)
                     for i, v in enumerate(strides))


@dataclass(frozen=True)
class PhaseDim:
    """One spatial dim of one stride phase r: input positions hi = r + s*i, i in [0, count)."""

    r: int
    count: int  # number of input positions in this phase
    tap0: int  # first filter tap that hits, or 0 when none does
    ntaps: int  # taps y = tap0 + step*j, j in [0, ntaps)
    step: int  # tap step = s / gcd(s, dil)
    ho_base: int  # ho = ho_base + i - j*ho_step for tap j and phase index i
    ho_step: int  # dil / gcd(s, dil)


def _phase_dim(r: int, n_in: int, f: int, s: int, d: int, lp: int) -> PhaseDim:
    count = max(0, (n_in - r + s - 1) // s)
    g = math.gcd(s, d)
    step, ho_step = s // g, d // g
    tap0 = next((y for y in range(min(f, step)) if (r + lp - y * d) % s == 0), None)
    if tap0 is None:
        return PhaseDim(r, count, 0, 0, step, 0, ho_step)
    ntaps = (f - 1 - tap0) // step + 1
    return PhaseDim(r, count, tap0, ntaps, step, (r + lp - tap0 * d) // s, ho_step)


def stride_phases(geo: ConvGeometry) -> tuple[list[PhaseDim], list[PhaseDim], list[PhaseDim]]:
    """Per spatial dim (D, H, W), the stride phases that hold input positions, with their taps.

    For input position hi the taps y with (hi + lp - y*dil) divisible by s depend only on
    r = hi mod s, so each phase is a dense sub-GEMM over just those taps (no zero insertion). A
    phase of the whole problem is one PhaseDim of each dim; residues r >= in have no input
    position and are left out, so a dim has min(stride, in) phases.
    """
    return tuple(  # type: ignore[return-value]
        [_phase_dim(r, geo.in3[a], geo.filt3[a], geo.stride3[a], geo.dil3[a], geo.pad3[a])
         for r in range(min(geo.stride3[a], geo.in3[a]))]
        for a in range(3)
    )
