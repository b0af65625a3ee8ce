"""The direct algorithms' configs (with their tile checks) and work planning: taps per program and
the automatic split of the bwd-weight reduction (host only, no device code).

Split from ``direct_grouped.py``, which keeps the kernels, the problem declines and the binds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import triton

from ..problem import ConvParams
from .common import MAX_SPLIT, DirectStyleConfig

__all__ = ["DirectDataConfig", "DirectWeightConfig", "auto_split", "taps_per_program"]


@dataclass(frozen=True)
class DirectDataConfig(DirectStyleConfig):
    """direct dgrad: block_p input positions x block_ch channels of the flattened (g, c) axis per program."""

    block_p: int
    block_ch: int
    num_warps: int

    ALGORITHM: ClassVar[str] = "direct"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_ch", "block_p")
    TILE_HOLDS: ClassVar[str] = "accumulators"  # what a block_p x block_ch tile keeps per thread

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        tile = self.block_p * self.block_ch
        if tile > 64 * 32 * self.num_warps:
            return (f"block_p*block_ch={tile} needs more than 64 fp32 {self.TILE_HOLDS} per thread with "
                    f"num_warps={self.num_warps}")
        return None


@dataclass(frozen=True)
class DirectWeightConfig(DirectDataConfig):
    """direct wgrad: block_p reduction positions x block_ch channels (flattened (g, k, c)) per tile,
    the reduction split in ``split`` chunks (0: automatic, :func:`auto_split`)."""

    split: int

    TILE_HOLDS: ClassVar[str] = "registers (the grad_out tile)"


def taps_per_program(taps: int, block_ch: int, num_warps: int) -> int:
    """Taps per program (unrolled in the kernel): all of them unless the [taps x channels] fp32
    accumulator would exceed 32 registers per thread, or more than 16 taps would be unrolled; then
    the taps are spread evenly over grid axis 1."""
    cap = max(1, (32 * 32 * num_warps) // block_ch)
    cap = min(1 << (cap.bit_length() - 1), 16)
    return triton.cdiv(taps, triton.cdiv(taps, cap))


def auto_split(params: ConvParams, block_p: int, block_ch: int, num_warps: int, elem_bytes: int,
               sms: int) -> int:
    """Reduction chunks for bwd weight: enough programs for ~16 per SM, but every chunk long enough
    that its fp32 partials (written and read back) cost at most ~1/8 of its operand reads, and at
    least two position tiles long."""
    taps = math.prod(params.filter)
    gkc = params.G * params.K * params.C
    if params.K * params.C > 1:  # whole groups per program (K, C padded to powers of two)
        per = max(1, block_ch // (triton.next_power_of_2(params.K) * triton.next_power_of_2(params.C)))
        cblocks = triton.cdiv(params.G, per)
    else:
        cblocks = triton.cdiv(gkc, block_ch)
    base = cblocks * triton.cdiv(taps, taps_per_program(taps, block_ch, num_warps))
    P = params.N * math.prod(params.output)
    min_chunk = max(2 * block_p,
                    math.ceil(64 * taps * params.K * params.C / ((params.C + params.K) * elem_bytes)))
    want = triton.cdiv(16 * sms, base)  # ~16 programs per SM: a memory-bound loop needs the warps
    return int(max(1, min(want, P // min_chunk, MAX_SPLIT)))
