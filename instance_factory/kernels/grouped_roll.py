"""Grouped dgrad with few channels per group, walking grad_out rows once per W tap ("bdroll").

``blockdiag`` and ``bdtap`` load one [positions x (g, k)] grad_out tile per tap: a 3x3 filter reads
each grad_out element nine times, and Nsight Compute on ResNeXt's G64 C4 56x56 layer (H100) showed
those re-reads going to L2 (L1 hit rate 5-10%, L2 throughput 71-75%, DRAM 30%): the kernels are L2
bound. Here, as in ``dwroll``, a program owns a column tile of one W stride phase, GPT whole groups
and a strip of input rows of one H phase, and walks the grad_out rows that strip needs: along H the
taps of a phase read consecutive grad_out rows when the dilation divides the stride, so one loaded
[columns x (g, k)] row tile feeds every H tap of the phase at once. The program keeps TY
accumulator tiles (slot j holds input row u + j at step u); a step loads the grad_out row once per W
(and D) tap, multiplies it on the tensor cores by each slot's block-diagonal [GPT*K x GPT*C] weight
tile, stores slot 0 (finished, through the fused epilogue) and rolls the slots. Each grad_out element
crosses L2 once per W tap instead of once per tap.

Grid = (row strips: (n, i_d, H phase, strip), column tiles x W phases, group tiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import MAX_GRID_YZ, require_contiguous
from .depthwise_roll import row_slots
from .grouped_blockdiag import (
    _DATA_DTYPES,
    _BlockdiagTile,
    _channels_ok,
    _decline_common,
    _packed,
    _precision,
    tile_groups,
)
from .grouped_taps import _phase_taps, tap_step
from .host import INT32_LIMIT, check_num_stages

__all__ = ["ALGORITHM_BWD_DATA", "MAX_SLOTS", "BdrollDataConfig"]

MAX_SLOTS = 4  # accumulator tiles: the taps of one H phase (3x3 at any stride, 5x5 and 7x7 at stride 2)
_MAX_ACC_PER_THREAD = 128  # fp32 accumulators of all slots per thread: no spills


@triton.jit
def _slot_dot(J: tl.constexpr, TY: tl.constexpr, acc, a, w_ptr, w_tap, tap_h, b_off, b_mask, jk, ny,
              UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Slot J += a @ the block-diagonal weight tile of its H tap (J-th of the phase). A slot past
    the phase's taps multiplies by zeros (masked load): no branch around the tensor-core step. (The
    slot test is a bound on the row index jk: a scalar bool in a mask fails in the interpreter.)"""
    if J < TY:
        live = jk < tl.where(ny > J, 1 << 30, 0)
        b = tl.load(w_ptr + w_tap + J * tap_h + b_off, mask=b_mask & live[:, None], other=0.0)
        if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _bdroll_dgrad_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G, Di, Hi, Wi, Do, Ho, Wo,
    FZ, FY, FX,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    st_h, st_w,  # tap_step along H and W
    NR_H, STRIPS, ROWS, COL_TILES,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # result (and every D) strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # weight strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr, ALIGN: tl.constexpr, TY: tl.constexpr,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
    PACKED_X: tl.constexpr, PACKED_Y: tl.constexpr,
    USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_r = tl.program_id(0)  # (n, i_d, H phase, strip), strip fastest: neighbours share halo rows in L2
    pid_c = tl.program_id(1)  # (column tile, W phase)
    pid_g = tl.program_id(2)
    strip = pid_r % STRIPS
    q = pid_r // STRIPS
    r_h = q % NR_H
    q = q // NR_H
    i_d = q % Di
    n = q // Di
    ct = pid_c % COL_TILES
    r_w = pid_c // COL_TILES
    if USE_INT64:
        n = n.to(tl.int64)
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_z, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_z * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_d, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_d * ALIGN, ys_h * ALIGN, ys_w * ALIGN

    # ---- taps of this phase: H taps y_j = fy + j*st_h read grad_out row u + ey at step u (slot j:
    # input row u + j); W taps x_t = fx + t*st_w read column i + ex - t*dex ------------------------
    fy, ny, ey, dey = _phase_taps(r_h, pad_h, dil_h, s_h, FY, st_h)
    fx, nx, ex, dex = _phase_taps(r_w, pad_w, dil_w, s_w, FX, st_w)
    cnt_h = (Hi - r_h + s_h - 1) // s_h
    m0 = strip * ROWS
    m1 = tl.minimum(m0 + ROWS, cnt_h)
    u0 = m0 - (tl.maximum(ny, 1) - 1)

    # ---- columns wi = r_w + s_w*i of the tile, the GPT groups' (g, k) / (g, c) channels -----------
    cnt_w = (Wi - r_w + s_w - 1) // s_w
    i = ct * BLOCK_W + tl.arange(0, BLOCK_W)
    col_ok = i < cnt_w
    g0 = pid_g * GPT
    jn = tl.arange(0, BLOCK_N)
    jk = tl.arange(0, BLOCK_K)
    gl_n = jn // C
    gl_k = jk // K
    n_ok = _channels_ok(jn, g0, G, C, GPT)
    k_ok = _channels_ok(jk, g0, G, K, GPT)
    if PACKED_Y:
        a_col = g0 * K + jk
    else:
        a_col = (g0 + gl_k) * ys_g + (jk % K) * ys_k
    if PACKED_X:
        x_col = g0 * C + jn
    else:
        x_col = (g0 + gl_n) * xs_g + (jn % C) * xs_c
    b_off = ((g0 + gl_k) * ws_g + (jk % K) * ws_k)[:, None] + ((jn % C) * ws_c)[None, :]
    b_mask = k_ok[:, None] & n_ok[None, :] & (gl_k[:, None] == gl_n[None, :])
    x_cols = ((r_w + s_w * i) * xs_w)[:, None] + x_col[None, :]
    smask = col_ok[:, None] & n_ok[None, :]
    x_plane = n * xs_n + i_d * xs_d
    tap_h = st_h * ws_y

    a0 = tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32)
    a1 = a0
    a2 = a0
    a3 = a0
    zero = a0
    # one flat loop over (step u, D tap z, W tap t) so that the software pipeliner keeps NUM_STAGES
    # grad_out row tiles in flight; taps that miss (D phase, rows outside grad_out) load zeros
    nxc = tl.maximum(nx, 1)  # a phase without W taps still walks its rows: its result is f(0, D)
    ny = tl.where(nx > 0, ny, 0)
    nzx = FZ * nxc
    for it in tl.range(0, (m1 - u0) * nzx, num_stages=NUM_STAGES):
        u = u0 + it // nzx
        r = it % nzx
        z = r // nxc
        t = r % nxc
        o_h = u + ey
        a_d = i_d + pad_d + s_d * dil_d * FZ - z * dil_d
        o_d = a_d // s_d - dil_d * FZ
        row_ok = (o_h >= 0) & (o_h < Ho) & (a_d % s_d == 0) & (o_d >= 0) & (o_d < Do) & (t < nx)
        lim = tl.where(row_ok, Wo, 0)
        o_w = i + (ex - t * dex)
        m = col_ok & (o_w >= 0) & (o_w < lim)
        y_row = n * ys_n + o_d * ys_d + o_h * ys_h
        a = tl.load(dy_ptr + y_row + (o_w * ys_w)[:, None] + a_col[None, :], mask=m[:, None] & k_ok[None, :],
                    other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
        w_tap = z * ws_z + fy * ws_y + (fx + t * st_w) * ws_x
        a0 = _slot_dot(0, TY, a0, a, w_ptr, w_tap, tap_h, b_off, b_mask, jk, ny, UPCAST, PRECISION)
        a1 = _slot_dot(1, TY, a1, a, w_ptr, w_tap, tap_h, b_off, b_mask, jk, ny, UPCAST, PRECISION)
        a2 = _slot_dot(2, TY, a2, a, w_ptr, w_tap, tap_h, b_off, b_mask, jk, ny, UPCAST, PRECISION)
        a3 = _slot_dot(3, TY, a3, a, w_ptr, w_tap, tap_h, b_off, b_mask, jk, ny, UPCAST, PRECISION)
        if r == nzx - 1:  # the row's last tap
            if u >= m0:  # slot 0 is input row u, finished: every later grad_out row lies past its taps
                offs = x_plane + (r_h + s_h * u) * xs_h + x_cols
                res = apply_epilogue(a0, offs, smask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS,
                                     USER_FN)
                tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=smask)
            a0 = a1
            a1 = a2
            a2 = a3
            a3 = zero  # slots from TY on are never added to: the roll keeps them zero


@dataclass(frozen=True)
class BdrollDataConfig(_BlockdiagTile):
    """bdroll dgrad: block_w columns (of one W stride phase) x block_n columns of whole groups per
    tile, strips of ``rows`` input rows of one H phase (0: the whole phase), ``num_stages`` grad_out
    row tiles in flight."""

    block_w: int
    block_n: int
    rows: int
    num_warps: int
    num_stages: int

    ALGORITHM: ClassVar[str] = "bdroll"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_w", "block_n")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        rows = self.rows
        if not isinstance(rows, int) or isinstance(rows, bool) or not 0 <= rows <= 4096:
            return f"rows={rows!r} must be 0 (the whole phase) or a row count from 1 to 4096"
        return check_num_stages(self.num_stages)


def _plan(p: ConvParams, cfg: BdrollDataConfig) -> tuple[int | None, int, int, int, int]:
    """(slots, H phases, W phases, row strips per phase, column tiles) of a problem."""
    in3, s3, d3, f3 = (p.spatial3(name) for name in ("input", "stride", "dilation", "filter"))
    slots = row_slots(f3[1], s3[1], d3[1])
    nr_h, nr_w = min(s3[1], in3[1]), min(s3[2], in3[2])
    phase_rows = triton.cdiv(in3[1], s3[1])
    rows = int(cfg.rows) or phase_rows
    return slots, nr_h, nr_w, triton.cdiv(phase_rows, rows), triton.cdiv(triton.cdiv(in3[2], s3[2]), cfg.block_w)


def bind_bwd_data(args: RunArgs) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    require_contiguous(args, "bdroll", "conv_bwd_data")
    gpt, bn, bk = tile_groups(geo.K, geo.C, int(cfg.block_n))
    slots, nr_h, nr_w, strips, col_tiles = _plan(p, cfg)
    rows = int(cfg.rows) or triton.cdiv(geo.in3[1], geo.stride3[1])
    upcast, precision = _precision(args)
    align = geo.channel_alignment()
    strip_programs = geo.N * geo.in3[0] * nr_h * strips
    use_int64 = geo.needs_int64 or strip_programs >= INT32_LIMIT
    grid = (strip_programs, col_tiles * nr_w, triton.cdiv(geo.G, gpt))
    kernel = BoundKernel(
        _bdroll_dgrad_kernel, grid,
        K=geo.K, C=geo.C, GPT=gpt, ALIGN=align, TY=slots, BLOCK_W=int(cfg.block_w), BLOCK_N=bn, BLOCK_K=bk,
        NUM_STAGES=int(cfg.num_stages),
        PACKED_X=_packed(geo.x_strides, geo.C), PACKED_Y=_packed(geo.y_strides, geo.K),
        USE_INT64=use_int64, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=int(cfg.num_warps),
    )
    sizes = (geo.G, *geo.in3, *geo.out3, *geo.filt3, *geo.stride3, *geo.dil3, *geo.pad3,
             tap_step(geo.stride3[1], geo.dil3[1]), tap_step(geo.stride3[2], geo.dil3[2]),
             nr_h, strips, rows, col_tiles, *geo.strides_over(align))

    def run(dy, w, out, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline_bwd_data(cfg: BdrollDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
                     fused: FusedOp) -> str | None:
    reason = _decline_common(cfg, p, dtype, _DATA_DTYPES, "conv_bwd_data")
    if reason:
        return reason
    slots, nr_h, nr_w, strips, col_tiles = _plan(p, cfg)
    if slots is None:
        return (f"dilation {p.spatial3('dilation')[1]} along H does not divide the stride "
                f"{p.spatial3('stride')[1]}: a phase's taps would not read consecutive grad_out rows")
    if slots > MAX_SLOTS:
        return f"a stride phase holds {slots} filter taps along H: more than bdroll's {MAX_SLOTS} accumulator slots"
    _, bn, _ = tile_groups(p.K, p.C, cfg.block_n)
    per_thread = slots * cfg.block_w * bn / (32 * cfg.num_warps)
    if per_thread > _MAX_ACC_PER_THREAD:
        return (f"{slots} accumulator slots of block_w={cfg.block_w} x {bn} need {per_thread:g} fp32 registers "
                f"per thread with num_warps={cfg.num_warps}, over {_MAX_ACC_PER_THREAD}")
    if col_tiles * nr_w > MAX_GRID_YZ:
        return f"{col_tiles * nr_w} column tiles x W phases exceed the grid's {MAX_GRID_YZ}"
    gpt, _, _ = tile_groups(p.K, p.C, cfg.block_n)
    if math.ceil(p.G / gpt) > MAX_GRID_YZ:
        return f"G={p.G} needs more than {MAX_GRID_YZ} group tiles of {gpt}"
    return None


ALGORITHM_BWD_DATA = register_algorithm(Algorithm(
    op="conv_bwd_data", name="bdroll", config=BdrollDataConfig, decline=decline_bwd_data, bind=bind_bwd_data,
    description="grouped dgrad with few channels per group on tensor cores: a strip of input rows per program, "
                "each grad_out row loaded once per W tap and fed to every H tap's accumulator tile, fused epilogue",
    kernels=(_bdroll_dgrad_kernel,),
))
