"""Tensor-core work of the families that pack several whole groups into one block-diagonal tile
(blockdiag, bdtap and bdroll dgrad; bdrow, bdwin and the Gluon walks of bdring and bdstride wgrad), for the cost
model's roofline.

The generic GEMM count puts one group in a tile and pads C to the tile: with C = 4 in a 32-wide tile
that is 8x the tiles. These count the tiles the kernels launch: GPT groups side by side
(``tile_groups``), each tap's K extent next_pow2(GPT*K). Each function returns the padded FLOPs and
the fraction of the last wave the programs fill; the caller divides by its tensor-core rate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import triton

from ..kernels.bwd_weight_bdring import plan as bdring_plan
from ..kernels.bwd_weight_bdstride import copies as bdstride_copies
from ..kernels.bwd_weight_bdstride import ring_slots as bdstride_ring_slots
from ..kernels.bwd_weight_bdstride import row_width as bdstride_row_width
from ..kernels.grouped_blockdiag import tile_groups
from ..kernels.grouped_rows import program_taps, row_split
from ..kernels.grouped_window import unit_split, window_plan
from .model_constants import L2_BW

__all__ = ["BLOCKDIAG_DGRAD", "bdrow_work", "bdwin_work", "blockdiag_dgrad_work", "gluon_walk_work"]

#: bwd-data families on block-diagonal tiles of several whole groups
BLOCKDIAG_DGRAD = ("blockdiag", "bdtap", "bdroll")
#: an H100's shared-memory/L1 data pipe: 128 bytes per clock per SM at ~1.75 GHz, 132 SMs
SMEM_PIPE_BW = 29.6e12
_LINE = 128  # bytes an L1 wavefront serves
_RESIDENT = 4  # bdwin programs resident per SM (registers, 4 warps each)
_RING_RESIDENT = 8  # bdring's one-warp programs resident per SM (~200 registers each)
#: one bdring step's latency (its copies' wait and two barriers): session 52, H200, G32 C16 14x14 N64 ran 53
#: one-row steps a program in 0.0331 ms and 14 four-row steps in 0.0294, G46 C8 7x7 0.0203 and 0.0173
RING_STEP_S = 0.1e-6
SMEM_PER_SM = 227 * 1024  # Hopper's shared memory a block may take, per SM


def _fill(programs: int, sms: int) -> float:
    return programs / (triton.cdiv(programs, sms) * sms)


def blockdiag_dgrad_work(params: Any, algorithm: str, cfg: Mapping[str, Any], sms: int) -> tuple[float, float]:
    """(padded FLOPs, wave fill) of blockdiag / bdtap / bdroll dgrad: [positions x next_pow2(GPT*C)]
    tiles per stride phase, a K extent of next_pow2(GPT*K) per tap hitting the phase. Memory stays
    the fewest bytes: the dy loads of a tile's padded (g, k) columns are masked off."""
    gpt, bn, bk = tile_groups(params.K, params.C, int(cfg["block_n"]))
    phases = math.prod(params.stride)
    positions = params.N * math.prod(params.input)
    bm = int(cfg["block_w"] if algorithm == "bdroll" else cfg["block_m"])
    tiles = phases * triton.cdiv(triton.cdiv(positions, phases), bm) * triton.cdiv(params.G, gpt)
    return 2.0 * tiles * bm * bn * bk * max(1.0, math.prod(params.filter) / phases), _fill(tiles, sms)


def bdrow_work(params: Any, cfg: Mapping[str, Any], sms: int, elem_bytes: int) -> tuple[float, float, int]:
    """(padded FLOPs, wave fill, split) of bdrow wgrad: GPT groups of K rows x the program's taps of
    GPT groups of C columns, block_w positions of a row per step, over the programs its grid and
    automatic split fill."""
    bw, warps = int(cfg["block_w"]), int(cfg.get("num_warps", 4))
    gpt, bn, bk = tile_groups(params.K, params.C, int(cfg["block_n"]))
    taps = math.prod(params.filter)
    nt = max(1, program_taps(taps, bk, bn, warps, bw, elem_bytes))
    do, ho, wo = params.spatial3("output")
    steps = params.N * do * ho * triton.cdiv(wo, bw)
    base = triton.cdiv(params.G, gpt) * triton.cdiv(taps, nt)
    split = int(cfg.get("split", 0) or 0) or row_split(steps, base, sms)
    split = max(1, min(split, steps))
    padded = 2.0 * triton.cdiv(params.G, gpt) * taps * bk * bn * steps * bw
    return padded, _fill(base * split, sms), split


def bdwin_work(params: Any, cfg: Mapping[str, Any], sms: int, elem_bytes: int,
               group_major: bool = False) -> tuple[float, float, int, float]:
    """(padded FLOPs, wave fill, split, pipe seconds) of bdwin wgrad: per output row and filter row, a
    tile of the program's column taps (stacked to a power of two) x GPT groups' C channels times GPT
    groups' K, block_w positions deep, over the programs of its grid (groups x depth taps x column-tap
    blocks) and automatic split.

    The MMAs are not what bounds it (session 22, Nsight Compute): every window tile goes through
    shared memory for each MMA that reads it (stored, then read), and the input loads cost one L1
    wavefront per channel run shorter than a 128-byte line. Pipe seconds: those bytes per row over the
    SMs' shared-memory/L1 bandwidth, scaled by how many of ~4 resident programs per SM the grid fills
    (a small grid leaves each program's chain of rows exposed). ``group_major`` (GN..C tensors): each group's
    channels are a run of their own, the next group's a plane away, so a run is C channels, not the tile's GPT
    groups' (session 40, H100 group-major rows: block_n 64 ran 2-3x block_n 16 on G32 / G64 C8 56x56 and the
    1D G64 C8 layer, where the model, reading GPT x C runs, put them level)."""
    bw = int(cfg["block_w"])
    plan = window_plan(params, bw, int(cfg["block_n"]), int(cfg.get("taps_x", 0)))
    split = int(cfg.get("split", 0) or 0) or unit_split(plan.units, plan.base, sms)
    split = max(1, min(split, plan.units))
    rows = plan.base * plan.units * plan.ho  # program row steps
    padded = 2.0 * rows * plan.rows * plan.txp * plan.bn * plan.bk * bw
    window = plan.rows * plan.txp * plan.bn * bw * elem_bytes * 2  # stored to shared memory, read by the MMA
    grad_out = (plan.rows + 1) * bw * plan.bk * elem_bytes
    run = max(1, (1 if group_major else plan.gpt) * params.C * elem_bytes)  # contiguous bytes of a position's channels
    loads = plan.txb * plan.bn * bw * elem_bytes * max(1.0, _LINE / run)
    programs = plan.base * split
    slots = _RESIDENT * sms
    occupancy = programs / (triton.cdiv(programs, slots) * slots)
    pipe_s = rows * (window + grad_out + loads) / (SMEM_PIPE_BW * occupancy)
    return padded, _fill(programs, sms), split, pipe_s


def gluon_walk_work(params: Any, cfg: Mapping[str, Any], sms: int, elem_bytes: int) -> tuple[float, float, int, float]:
    """(padded FLOPs, wave fill, chunks, pipe seconds) of the Gluon walks of bdring (stride 1) and bdstride. A step
    copies NQ dy shifts and the new input rows' NP phases ([rows * WX, 16] tiles) from L2 and reads NQ + FY x NP
    tiles from shared memory (stride 1: one phase, FX shifts). The ring walk (``rows`` 1) copies SH input rows a
    step, the stacked one FY per output row. The tiles also bound how many programs an SM holds (stacked, 64 KB at
    128 positions: 3); ``warps`` 2 / 4 programs take that many 16-channel blocks (a warp each) with that many times
    the tiles, at most 8 warps an SM. Pipe seconds: the longer of the tiles' bytes at L2's and the shared-memory
    pipe's rates (over the share of resident programs the grid fills) and each program's steps one after
    another, RING_STEP_S each."""
    _, fy, fx = params.spatial3("filter")
    step = int(cfg.get("rows", 1))
    warps = int(cfg.get("warps", 1))
    blocks, chunk, chunks = bdring_plan(params, int(cfg["waves"]), sms, step)
    rows = params.N * params.spatial3("output")[1]
    n_phases, n_shifts, _ = bdstride_copies(params)
    wx = bdstride_row_width(params)
    tile = step * wx * 16 * elem_bytes
    read = n_shifts + fy * n_phases
    if step == 1:
        sh = params.spatial3("stride")[1]
        copied = n_shifts + min(sh, fy) * n_phases
        smem = (2 * n_shifts + bdstride_ring_slots(params) * n_phases) * tile
    else:
        copied, smem = read, 2 * read * tile
    steps = triton.cdiv(rows, step) * blocks
    padded = 2.0 * steps * fy * fx * 16 * 16 * step * wx
    programs = triton.cdiv(blocks, warps) * chunks
    resident = max(1, min(_RING_RESIDENT // warps, SMEM_PER_SM // (smem * warps)))
    slots = resident * sms
    occupancy = programs / (triton.cdiv(programs, slots) * slots)
    pipe_s = steps * max(copied * tile / L2_BW, (copied + read) * tile / SMEM_PIPE_BW) / occupancy
    latency_s = triton.cdiv(programs, slots) * triton.cdiv(chunk, step) * RING_STEP_S
    return padded, _fill(programs, sms), chunks, max(pipe_s, latency_s)
