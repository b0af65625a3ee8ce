"""The convolution problem description (CK's ``ConvParam``) and its canonical key.

``ConvParams`` keeps CK's argument order and meaning: K and C are *per group*, every spatial
argument is a tuple of length ``ndim``. The problem key follows MIOpen's rule: one fixed-order
serialization; new fields may only ever be appended as suffixes so old keys stay valid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ConvParams", "padded_extent"]


def _as_tuple(name: str, value: Sequence[int] | int, ndim: int) -> tuple[int, ...]:
    if isinstance(value, int):
        raise ValueError(f"ConvParams.{name} must be a tuple of {ndim} ints, got the int {value}")
    try:
        out = tuple(int(v) for v in value)
    except TypeError as exc:
        raise ValueError(f"ConvParams.{name} must be a tuple of {ndim} ints, got {value!r}") from exc
    if len(out) != ndim:
        raise ValueError(f"ConvParams.{name} has {len(out)} entries, ndim={ndim} needs {ndim}: {value!r}")
    for v, raw in zip(out, value):
        if v != raw:
            raise ValueError(f"ConvParams.{name} must hold integers, got {value!r}")
    return out


def padded_extent(out_len: int, stride: int, filt: int, dil: int) -> int:
    """Input positions one axis's taps reach, padding included: the last position any tap of any
    output reads, plus one (a right pad no output reaches does not count)."""
    return (out_len - 1) * stride + (filt - 1) * dil + 1


@dataclass(frozen=True)
class ConvParams:
    """A grouped N-d convolution, argument for argument like CK's ``ck::utils::conv::ConvParam``."""

    ndim: int
    G: int
    N: int
    K: int
    C: int
    filter: tuple[int, ...]
    input: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    left_pad: tuple[int, ...]
    right_pad: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.ndim not in (1, 2, 3):
            raise ValueError(f"ConvParams.ndim must be 1, 2 or 3, got {self.ndim!r}")
        for name in ("G", "N", "K", "C"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"ConvParams.{name} must be a positive int, got {v!r}")
        for name in ("filter", "input", "stride", "dilation", "left_pad", "right_pad"):
            object.__setattr__(self, name, _as_tuple(name, getattr(self, name), self.ndim))
        for name in ("filter", "input", "stride", "dilation"):
            if min(getattr(self, name)) < 1:
                raise ValueError(f"ConvParams.{name} must be positive, got {getattr(self, name)}")
        for name in ("left_pad", "right_pad"):
            if min(getattr(self, name)) < 0:
                raise ValueError(f"ConvParams.{name} must be >= 0, got {getattr(self, name)}")
        out = self.output
        if min(out) < 1:
            raise ValueError(
                f"ConvParams gives output lengths {out} (< 1): input {self.input} with pads "
                f"{self.left_pad}/{self.right_pad} is smaller than the dilated filter "
                f"{tuple(d * (f - 1) + 1 for d, f in zip(self.dilation, self.filter))}"
            )

    # --- derived sizes -------------------------------------------------------------------
    @property
    def output(self) -> tuple[int, ...]:
        """Output lengths: (in + lp + rp - dil*(f-1) - 1) // stride + 1 per spatial dim."""
        return tuple(
            (i + lp + rp - d * (f - 1) - 1) // s + 1
            for i, lp, rp, d, f, s in zip(
                self.input, self.left_pad, self.right_pad, self.dilation, self.filter, self.stride
            )
        )

    @property
    def reached_input(self) -> tuple[int, ...]:
        """Per spatial dim, the padded input extent the taps reach (:func:`padded_extent`)."""
        return tuple(padded_extent(o, s, f, d)
                     for o, s, f, d in zip(self.output, self.stride, self.filter, self.dilation))

    def flops(self) -> int:
        """2*G*N*K*C*prod(out)*prod(filter): the same count for fwd, bwd data and bwd weight."""
        return 2 * self.G * self.N * self.K * self.C * math.prod(self.output) * math.prod(self.filter)

    def numel(self, tensor: str) -> int:
        """Element count of ``"input"``, ``"weight"`` or ``"output"``."""
        if tensor == "input":
            return self.N * self.G * self.C * math.prod(self.input)
        if tensor == "weight":
            return self.G * self.K * self.C * math.prod(self.filter)
        if tensor == "output":
            return self.N * self.G * self.K * math.prod(self.output)
        raise ValueError(f"unknown tensor {tensor!r}: use input, weight or output")

    def bytes_moved(self, op: str, elem_bytes: int, n_ds: int = 0, result_bytes: int | None = None) -> int:
        """The fewest bytes an op must move: each operand read once, the result (and Ds) once."""
        result_bytes = elem_bytes if result_bytes is None else result_bytes
        if op == "conv_bwd_data":
            reads = (self.numel("output") + self.numel("weight")) * elem_bytes
            result = self.numel("input")
        elif op == "conv_bwd_weight":
            reads = (self.numel("input") + self.numel("output")) * elem_bytes
            result = self.numel("weight")
        elif op == "conv_fwd":
            reads = (self.numel("input") + self.numel("weight")) * elem_bytes
            result = self.numel("output")
        else:
            raise ValueError(f"unknown op {op!r}")
        return reads + result * result_bytes * (1 + n_ds)

    # --- padded-to-3D views used by the kernels -------------------------------------------
    def spatial3(self, name: str) -> tuple[int, int, int]:
        """A spatial tuple padded to 3 dims in (D, H, W) order; missing leading dims are neutral."""
        neutral = {"filter": 1, "input": 1, "stride": 1, "dilation": 1, "left_pad": 0, "right_pad": 0,
                   "output": 1}[name]
        vals = self.output if name == "output" else getattr(self, name)
        return (neutral,) * (3 - self.ndim) + tuple(vals)  # type: ignore[return-value]

    @property
    def is_1x1_pad0(self) -> bool:
        """A 1x1(x1) filter without padding, any stride: every output position reads one input position."""
        return all(f == 1 for f in self.filter) and all(p == 0 for p in self.left_pad + self.right_pad)

    @property
    def is_1x1_stride1_pad0(self) -> bool:
        return self.is_1x1_pad0 and all(s == 1 for s in self.stride)

    # --- canonical key (MIOpen style: fixed order, suffix-only evolution) ------------------
    def key(self) -> str:
        """Fixed-order serialization, e.g. ``2d-g1-n128-k256-c128-f3x3-i71x71-s2x2-d1x1-l1x1-r1x1``."""

        def j(t: tuple[int, ...]) -> str:
            return "x".join(str(v) for v in t)

        return (
            f"{self.ndim}d-g{self.G}-n{self.N}-k{self.K}-c{self.C}-f{j(self.filter)}-i{j(self.input)}"
            f"-s{j(self.stride)}-d{j(self.dilation)}-l{j(self.left_pad)}-r{j(self.right_pad)}"
        )

    @classmethod
    def from_key(cls, key: str) -> ConvParams:
        """Inverse of :meth:`key`."""
        try:
            parts = key.split("-")
            ndim = int(parts[0].rstrip("d"))
            fields = {p[0]: p[1:] for p in parts[1:]}

            def t(letter: str) -> tuple[int, ...]:
                return tuple(int(v) for v in fields[letter].split("x"))

            return cls(ndim, int(fields["g"]), int(fields["n"]), int(fields["k"]), int(fields["c"]),
                       t("f"), t("i"), t("s"), t("d"), t("l"), t("r"))
        except (KeyError, ValueError, IndexError) as exc:
            raise ValueError(f"not a ConvParams key: {key!r} ({exc})") from exc

    def as_dict(self) -> dict:
        return {"ndim": self.ndim, "G": self.G, "N": self.N, "K": self.K, "C": self.C,
                "filter": list(self.filter), "input": list(self.input), "stride": list(self.stride),
                "dilation": list(self.dilation), "left_pad": list(self.left_pad),
                "right_pad": list(self.right_pad)}

    def __str__(self) -> str:
        return self.key()
