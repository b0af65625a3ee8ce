"""The cost model's term for the CUDA-core dgrad kernels: the rolling-row walks (``dwroll``, ``dwtaps``), ``direct``,
``dwtile``.

These kernels run on CUDA cores and, on the H100, are bound by instruction latency at low
occupancy (session 24: the best ConvNeXt-T configs leave ~2.5 warps per scheduler), so their time
depends on how many warps the grid keeps resident, not only on the FLOPs: a whole-phase walk of a
112x112 layer with G = 32 launched 128 programs (under one per SM) and ran at half the speed of
16-row strips. Without this term every config of a family got the same prediction and the
neighbours' corrections chose between them by what was fast on other layers. ``direct`` dgrad goes by
the same occupancy rule, so that the walks are not ranked against a config-blind FLOP count (it served
dwtaps over direct on 14x14 maps with many channels; `--hide layer` depthwise dgrad 0.918 -> 0.923).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ..kernels.depthwise_roll import RollWalk
from ..kernels.depthwise_tile import TilePlan

__all__ = ["DIRECT_DGRAD", "ROLL_WALKS", "TILE_DGRAD", "WARPS_TO_SATURATE", "direct_data_s", "roll_walk_s",
           "tile_data_s", "walk_term"]

#: the bwd-data families that walk grad_out rows with rolling accumulator slots
ROLL_WALKS = ("dwroll", "dwtaps")
DIRECT_DGRAD = ("conv_bwd_data", "direct")  # (op, algorithm) timed by :func:`direct_data_s`
TILE_DGRAD = ("conv_bwd_data", "dwtile")  # timed by :func:`tile_data_s`
# resident warps per SM from which the FMA pipes stay busy. `db evaluate --hide layer` over depthwise
# dgrad (H100 file, 130 problems; 0.896 without this term): 8 0.887, 16 0.888, 32 0.911, 48 0.914,
# 64 0.918, 128 0.913. These kernels' latency is hidden only by warps, up to full occupancy.
WARPS_TO_SATURATE = 64
_REGISTERS = 65536  # per SM
_MAX_WARPS = 64  # per SM
_BASE_REGS = 32  # per thread besides the accumulator slots and the loaded tile


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _occupied_s(programs: int, per_program: float, warps: int, regs: float, flops_per_s: float, sms: int) -> float:
    """Seconds for ``programs`` of ``per_program`` FLOPs: the SMs hold as many as registers allow,
    each SM's FMA rate scaled by its resident warps up to :data:`WARPS_TO_SATURATE`."""
    fit = max(1, min(_MAX_WARPS, int(_REGISTERS // (32 * regs))) // warps)  # programs an SM holds
    resident = min(fit, _cdiv(programs, sms))
    waves = _cdiv(programs, sms * resident)
    rate = flops_per_s / sms * min(1.0, resident * warps / WARPS_TO_SATURATE)
    return waves * resident * per_program / rate


def direct_data_s(params: Any, cfg: Mapping[str, Any], flops_per_s: float, sms: int) -> float | None:
    """Seconds of ``direct`` dgrad: block_p input positions x block_ch channels per program, every
    tap and grad_out channel of the group (tile-padded), by the same occupancy rule as the walks."""
    try:
        bp, bch, warps = int(cfg["block_p"]), int(cfg["block_ch"]), int(cfg["num_warps"])
    except (KeyError, TypeError, ValueError):
        return None
    programs = _cdiv(params.N * math.prod(params.input), bp) * _cdiv(params.G * params.C, bch)
    per_program = 2.0 * bp * bch * math.prod(params.filter) * params.K / math.prod(params.stride)
    return _occupied_s(programs, per_program, warps, 2 * bp * bch / (32 * warps) + _BASE_REGS, flops_per_s, sms)


def roll_walk_s(params: Any, cfg: Mapping[str, Any], flops_per_s: float, sms: int) -> float | None:
    """Seconds of one rolling-row walk (the kernels' own grid, :class:`RollWalk`): each program's
    ``rows`` + slots - 1 steps of block_w x block_ch x slots x W taps x D taps FMAs, by the
    occupancy rule; None when the config is not such a walk."""
    try:
        bw, bch, warps = int(cfg["block_w"]), int(cfg["block_ch"]), int(cfg["num_warps"])
        rows = int(cfg["rows"])
    except (KeyError, TypeError, ValueError):
        return None
    walk = RollWalk.plan(params, bw, bch, rows)
    if not walk.slots:
        return None
    fz = params.spatial3("filter")[0]
    per_program = 2.0 * (walk.rows + walk.slots - 1) * bw * bch * walk.slots * walk.w_taps * fz
    regs = (walk.slots + 2) * bw * bch / (32 * warps) + _BASE_REGS
    return _occupied_s(walk.programs(params), per_program, warps, regs, flops_per_s, sms)


def tile_data_s(params: Any, cfg: Mapping[str, Any], flops_per_s: float, sms: int) -> float | None:
    """Seconds of ``dwtile``: a block_h x block_w tile of input positions x block_ch channels per program,
    every tap, by the same occupancy rule. Unrolled (row_stages 0), its taps' loads are all in flight at once,
    each a 16-byte vector (4 registers) per 8 elements: 144 registers at 16 elements per thread on a 3x3 filter
    (Nsight Compute, session 46), which this count (2 per accumulator, half a register per element per live
    tap, the base) gives; with the row loop (row_stages 1) a filter row's taps are live (72 registers on that
    3x3, 114 on a 7x7, 111 at 32 elements on the 3x3: session 47)."""
    try:
        bh, bw, bch, warps = (int(cfg[k]) for k in ("block_h", "block_w", "block_ch", "num_warps"))
        row_loop = int(cfg.get("row_stages", 0)) > 0
    except (KeyError, TypeError, ValueError):
        return None
    taps = math.prod(params.filter)
    live = params.spatial3("filter")[2] if row_loop else taps
    per_thread = bh * bw * bch / (32 * warps)
    per_program = 2.0 * bh * bw * bch * taps
    regs = min(255.0, per_thread * (2 + live / 2) + _BASE_REGS)
    programs = TilePlan.plan(params, bh, bw, bch).programs(params)
    return _occupied_s(programs, per_program, warps, regs, flops_per_s, sms)


def walk_term(op: str, algorithm: str) -> Callable[[Any, Mapping[str, Any], float, int], float | None] | None:
    """The function of this module that times ``algorithm``'s kernel, None for a kernel it does not model."""
    if algorithm in ROLL_WALKS:
        return roll_walk_s
    return {DIRECT_DGRAD: direct_data_s, TILE_DGRAD: tile_data_s}.get((op, algorithm))
