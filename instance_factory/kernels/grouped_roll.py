"""Grouped dgrad with few channels per group, walking grad_out rows once per W tap ("bdroll").

``blockdiag`` and ``bdtap`` load one [positions x (g, k)] grad_out tile per tap: a 3x3 filter reads
each grad_out element nine times, and Nsight Compute on ResNeXt's G64 C4 56x56 layer (H100) showed
those re-reads going to L2 (L1 hit rate 5-10%, L2 throughput 71-75%, DRAM 30%): L2 bound. Here, as in
``dwroll``, a program owns a column tile of one W stride phase, GPT whole groups and a strip of input
rows of one H phase, and walks the grad_out rows that strip needs: along H the taps of a phase read
consecutive grad_out rows when the dilation divides the stride, so one loaded [columns x (g, k)] row
tile feeds every H tap of the phase at once. The program keeps TY accumulator tiles (slot j holds
input row u + j at step u); a step loads the grad_out row once per W tap, multiplies it on the tensor
cores by each slot's block-diagonal [GPT*K x GPT*C] weight tile, stores slot 0 (finished, through
the fused epilogue) and rolls the slots. The phase's TY x TX weight tiles (at most 3 x 3) are loaded
once per program and stay in registers, so a step is TX grad_out loads and TY*TX tensor-core steps,
pipelined over rows (``num_stages``). 1D/2D, channels-last layouts; 3D and channels-first stay with
bdtap / blockdiag (and relayout).

Grid = (row strips: (n, H phase, strip), column tiles x W phases, group tiles).
"""

from __future__ import annotations

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
from .depthwise_roll import row_slots, strip_rows_reason
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

__all__ = ["ALGORITHM_BWD_DATA", "MAX_BLOCK_W", "MAX_TAPS", "BdrollDataConfig"]

MAX_TAPS = 3  # taps of one stride phase along H and along W (3x3 at any stride, 5x5 at stride 2)
MAX_BLOCK_W = 32  # wider column tiles failed to compile on the H100 (Triton 3.6), see BdrollDataConfig.check
_MAX_REGS_PER_THREAD = 160  # accumulator and weight tiles per thread: no spills


@triton.jit
def _w_tile(J: tl.constexpr, T: tl.constexpr, TY: tl.constexpr, TX: tl.constexpr, w_ptr, w_first, tap_h, tap_w,
            b_off, b_mask, jk, ny, nx, UPCAST: tl.constexpr):
    """The block-diagonal [GPT*K x GPT*C] weight tile of the phase's H tap J and W tap T (zeros for a
    tap the phase lacks: a masked load, so the tensor-core steps need no branch). The tap test is a
    bound on the row index jk: a scalar bool in a mask fails in the interpreter."""
    live = jk < tl.where((ny > J) & (nx > T), 1 << 30, 0)
    b = tl.load(w_ptr + w_first + J * tap_h + T * tap_w + b_off, mask=b_mask & live[:, None], other=0.0)
    if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
        b = b.to(tl.float32)
    return b


@triton.jit
def _dy_tile(T: tl.constexpr, y_row, i, ex, dex, col_ok, lim, ys_w, a_col, k_ok, dy_ptr, UPCAST: tl.constexpr):
    """grad_out row tile [columns x (g, k)] read by W tap T (column i + ex - T*dex); lim is Wo for a
    row that exists and the phase has tap T, else 0 (all masked)."""
    o_w = i + (ex - T * dex)
    m = col_ok & (o_w >= 0) & (o_w < lim)
    a = tl.load(dy_ptr + y_row + (o_w * ys_w)[:, None] + a_col[None, :], mask=m[:, None] & k_ok[None, :], other=0.0)
    if UPCAST:
        a = a.to(tl.float32)
    return a


@triton.jit
def _bdroll_dgrad_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G, Hi, Wi, Ho, Wo,
    FY, FX,
    s_h, s_w, dil_h, dil_w, pad_h, pad_w,
    st_h, st_w,  # tap_step along H and W
    NR_H, STRIPS, ROWS, COL_TILES,
    xs_g, xs_n, xs_c, xs_h, xs_w,  # result (and every D) strides
    ws_g, ws_k, ws_c, ws_y, ws_x,  # weight strides
    ys_g, ys_n, ys_k, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr, ALIGN: tl.constexpr,
    TY: tl.constexpr, TX: tl.constexpr,  # the most H / W taps of one stride phase (<= 3)
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
    PACKED_X: tl.constexpr, PACKED_Y: tl.constexpr,
    USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_r = tl.program_id(0)  # (n, H phase, strip), strip fastest: neighbours share halo rows in L2
    pid_c = tl.program_id(1)  # (column tile, W phase)
    pid_g = tl.program_id(2)
    strip = pid_r % STRIPS
    q = pid_r // STRIPS
    r_h = q % NR_H
    n = q // NR_H
    ct = pid_c % COL_TILES
    r_w = pid_c // COL_TILES
    if USE_INT64:
        n = n.to(tl.int64)
    xs_g, xs_n, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_h * ALIGN, ys_w * ALIGN

    # ---- taps of this phase: H taps y_j = fy + j*st_h read grad_out row u + ey at step u (slot j:
    # input row u + j); W taps x_t = fx + t*st_w read column i + ex - t*dex ------------------------
    fy, ny, ey, dey = _phase_taps(r_h, pad_h, dil_h, s_h, FY, st_h)
    fx, nx, ex, dex = _phase_taps(r_w, pad_w, dil_w, s_w, FX, st_w)
    fy = tl.where(ny > 0, fy, 0)  # keep the (masked) weight addresses in range
    fx = tl.where(nx > 0, fx, 0)
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
    x_cols = ((r_w + s_w * i) * xs_w)[:, None] + x_col[None, :]
    smask = col_ok[:, None] & n_ok[None, :]

    # ---- the phase's weight tiles, loaded once (registers) for every row the strip walks ----------
    b_off = ((g0 + gl_k) * ws_g + (jk % K) * ws_k)[:, None] + ((jn % C) * ws_c)[None, :]
    b_mask = k_ok[:, None] & n_ok[None, :] & (gl_k[:, None] == gl_n[None, :])
    w_first = fy * ws_y + fx * ws_x
    tap_h = st_h * ws_y
    tap_w = st_w * ws_x
    w00 = _w_tile(0, 0, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
    if TX > 1:
        w01 = _w_tile(0, 1, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
    if TX > 2:
        w02 = _w_tile(0, 2, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
    if TY > 1:
        w10 = _w_tile(1, 0, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
        if TX > 1:
            w11 = _w_tile(1, 1, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
        if TX > 2:
            w12 = _w_tile(1, 2, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
    if TY > 2:
        w20 = _w_tile(2, 0, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
        if TX > 1:
            w21 = _w_tile(2, 1, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)
        if TX > 2:
            w22 = _w_tile(2, 2, TY, TX, w_ptr, w_first, tap_h, tap_w, b_off, b_mask, jk, ny, nx, UPCAST)

    a0 = tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32)
    a1 = a0
    a2 = a0
    zero = a0
    y_plane = n * ys_n
    x_plane = n * xs_n
    for u in tl.range(u0, m1, num_stages=NUM_STAGES):
        # step u: grad_out row u + ey, once per W tap, feeds slot j (input row u + j) through tap y_j
        o_h = u + ey
        y_row = y_plane + o_h * ys_h
        row_ok = (o_h >= 0) & (o_h < Ho)
        v = _dy_tile(0, y_row, i, ex, dex, col_ok, tl.where(row_ok & (nx > 0), Wo, 0), ys_w, a_col, k_ok,
                     dy_ptr, UPCAST)
        a0 = tl.dot(v, w00, a0, input_precision=PRECISION)
        if TY > 1:
            a1 = tl.dot(v, w10, a1, input_precision=PRECISION)
        if TY > 2:
            a2 = tl.dot(v, w20, a2, input_precision=PRECISION)
        if TX > 1:
            v = _dy_tile(1, y_row, i, ex, dex, col_ok, tl.where(row_ok & (nx > 1), Wo, 0), ys_w, a_col, k_ok,
                         dy_ptr, UPCAST)
            a0 = tl.dot(v, w01, a0, input_precision=PRECISION)
            if TY > 1:
                a1 = tl.dot(v, w11, a1, input_precision=PRECISION)
            if TY > 2:
                a2 = tl.dot(v, w21, a2, input_precision=PRECISION)
        if TX > 2:
            v = _dy_tile(2, y_row, i, ex, dex, col_ok, tl.where(row_ok & (nx > 2), Wo, 0), ys_w, a_col, k_ok,
                         dy_ptr, UPCAST)
            a0 = tl.dot(v, w02, a0, input_precision=PRECISION)
            if TY > 1:
                a1 = tl.dot(v, w12, a1, input_precision=PRECISION)
            if TY > 2:
                a2 = tl.dot(v, w22, a2, input_precision=PRECISION)
        if u >= m0:  # slot 0 is input row u, finished: every later grad_out row lies past its taps
            offs = x_plane + (r_h + s_h * u) * xs_h + x_cols
            res = apply_epilogue(a0, offs, smask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
            tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=smask)
        a0 = a1
        a1 = a2
        a2 = zero  # slots from TY on are never added to: the roll keeps them zero


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
        reason = strip_rows_reason(self.rows)
        if reason:
            return reason
        if self.block_w > MAX_BLOCK_W:
            return (f"block_w={self.block_w} is over {MAX_BLOCK_W}: with the weight tiles held in registers, "
                    f"Triton 3.6 fails to compile wider tiles for sm_90 (H100: 'PassManager::run failed')")
        return check_num_stages(self.num_stages)


def _plan(p: ConvParams, cfg: BdrollDataConfig) -> tuple[int | None, int, int, int, int, int, int]:
    """(H taps per phase TY (None: the dilation does not divide the stride), W taps per phase TX,
    H phases, W phases, rows per strip, row strips per phase, column tiles) of a 1D/2D problem."""
    in3, s3, d3, f3 = (p.spatial3(name) for name in ("input", "stride", "dilation", "filter"))
    slots = row_slots(f3[1], s3[1], d3[1])
    taps_w = triton.cdiv(f3[2], tap_step(s3[2], d3[2]))
    nr_h, nr_w = min(s3[1], in3[1]), min(s3[2], in3[2])
    phase_rows = triton.cdiv(in3[1], s3[1])
    rows = int(cfg.rows) or phase_rows
    return (slots, taps_w, nr_h, nr_w, rows, triton.cdiv(phase_rows, rows),
            triton.cdiv(triton.cdiv(in3[2], s3[2]), cfg.block_w))


def _registers(slots: int, taps_w: int, cfg: BdrollDataConfig, bn: int, bk: int, elem_bytes: int) -> float:
    """32-bit registers per thread for the fp32 accumulator tiles and the phase's weight tiles."""
    return (slots * cfg.block_w * bn + slots * taps_w * bk * bn * elem_bytes / 4) / (32 * cfg.num_warps)


def bind_bwd_data(args: RunArgs) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    require_contiguous(args, "bdroll", "conv_bwd_data")
    gpt, bn, bk = tile_groups(geo.K, geo.C, int(cfg.block_n))
    slots, taps_w, nr_h, nr_w, rows, strips, col_tiles = _plan(p, cfg)
    upcast, precision = _precision(args)
    align = geo.channel_alignment()
    strip_programs = geo.N * nr_h * strips
    use_int64 = geo.needs_int64 or strip_programs >= INT32_LIMIT
    grid = (strip_programs, col_tiles * nr_w, triton.cdiv(geo.G, gpt))
    kernel = BoundKernel(
        _bdroll_dgrad_kernel, grid,
        K=geo.K, C=geo.C, GPT=gpt, ALIGN=align, TY=slots, TX=taps_w, BLOCK_W=int(cfg.block_w), BLOCK_N=bn,
        BLOCK_K=bk, NUM_STAGES=int(cfg.num_stages),
        PACKED_X=_packed(geo.x_strides, geo.C), PACKED_Y=_packed(geo.y_strides, geo.K),
        USE_INT64=use_int64, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=int(cfg.num_warps),
    )
    strides = geo.strides_over(align)  # (g, n, c, d, h, w) per tensor: no d here (1D/2D)
    strides = tuple(v for j, v in enumerate(strides) if j % 6 != 3)
    sizes = (geo.G, geo.in3[1], geo.in3[2], geo.out3[1], geo.out3[2], geo.filt3[1], geo.filt3[2],
             geo.stride3[1], geo.stride3[2], geo.dil3[1], geo.dil3[2], geo.pad3[1], geo.pad3[2],
             tap_step(geo.stride3[1], geo.dil3[1]), tap_step(geo.stride3[2], geo.dil3[2]),
             nr_h, strips, rows, col_tiles, *strides)

    def run(dy, w, out, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline_bwd_data(cfg: BdrollDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
                     fused: FusedOp) -> str | None:
    reason = _decline_common(cfg, p, dtype, _DATA_DTYPES, "conv_bwd_data")
    if reason:
        return reason
    if not layout.channels_last:
        return ("bdroll loads (g, k) rows along a contiguous channel axis; channels-first tensors go "
                "through blockdiag / bdtap or relayout")
    if p.ndim == 3:
        return "bdroll walks the rows of 1D/2D problems; a 3D one is bdtap's or blockdiag's"
    slots, taps_w, nr_h, nr_w, _, _, col_tiles = _plan(p, cfg)
    if slots is None:
        return (f"dilation {p.spatial3('dilation')[1]} along H does not divide the stride "
                f"{p.spatial3('stride')[1]}: a phase's taps would not read consecutive grad_out rows")
    if slots > MAX_TAPS or taps_w > MAX_TAPS:
        return (f"a stride phase holds {slots} x {taps_w} filter taps along H x W: bdroll keeps at most "
                f"{MAX_TAPS} x {MAX_TAPS} weight tiles")
    _, bn, bk = tile_groups(p.K, p.C, cfg.block_n)
    regs = _registers(slots, taps_w, cfg, bn, bk, dtype.data.itemsize)
    if regs > _MAX_REGS_PER_THREAD:
        return (f"{slots} accumulator tiles of block_w={cfg.block_w} x {bn} and {slots * taps_w} weight tiles of "
                f"{bk} x {bn} need {regs:g} registers per thread with num_warps={cfg.num_warps}, over "
                f"{_MAX_REGS_PER_THREAD}")
    if col_tiles * nr_w > MAX_GRID_YZ:
        return f"{col_tiles * nr_w} column tiles x W phases exceed the grid's {MAX_GRID_YZ}"
    return None


ALGORITHM_BWD_DATA = register_algorithm(Algorithm(
    op="conv_bwd_data", name="bdroll", config=BdrollDataConfig, decline=decline_bwd_data, bind=bind_bwd_data,
    description="grouped dgrad with few channels per group on tensor cores: a strip of input rows per program, "
                "each grad_out row loaded once per W tap and fed to every H tap's accumulator tile, fused epilogue",
    kernels=(_bdroll_dgrad_kernel,),
))
