"""Depthwise conv_bwd_weight (C = 1, depth multiplier K <= 4) with a sliding window along the row: "dwslide".

dw[g, k, 0, z, y, x] = sum over output positions o of dy[o, g, k] * x[o*s - p + (z, y, x)*dil, g, 0]

``dwstream`` (session 6) holds a [taps, columns, channels] gather per output row: every FMA there
costs its own x load from L1 and two bf16 -> fp32 conversions, and the taps are padded to a power
of two. Here one program owns one filter row (z, y), a block of up to eight taps along x and a block
of channels; each thread owns one output row (n, od, oh) and a vector of channels and walks that row
column by column. The TXB input columns the taps of one output column read stay in registers, already
converted to fp32, and slide: the next output column reuses TXB - SHIFT of them (SHIFT = stride /
dilation along x) and loads SHIFT new ones, so each x element is loaded and converted once per filter
row and each dy element once per tap block, and no tap is padded. Unrolling the column loop by the
window's lifetime (``unroll`` 0) lets the compiler rename the window instead of moving registers.

Taps past the filter never exist (the window holds exactly min(FX, 8) slots, the last tap block
being partly masked at the store). Strides other than the channel one travel divided by VEC (as in
``dwstream``) so the 16-byte loads along the channel axis are provable.

``num_stages`` 2-3 hands the column loop to Triton's pipeliner (later columns' loads issued ahead as async
copies): 1.13-1.14x on the large 3x3 planes, where the walk was latency bound (session 48); 1 is the plain loop.
Grid = (filter rows x tap blocks x channel blocks, row chunks), filter row fastest so the programs
reading the same input rows run together (L2). One row chunk: the epilogue is applied here;
otherwise fp32 partials [chunk, taps, G*K] go through ``direct``'s deterministic reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import (
    MAX_GRID_YZ,
    DirectStyleConfig,
    _dw_finalize_kernel,
    finalize_launcher,
    occupancy_split,
    require_contiguous,
    split_chunks,
    split_runner,
)
from .depthwise_stream import depthwise_decline, strides_by_vec
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "MAX_WINDOW", "DwSlideConfig", "auto_split", "bind", "decline", "window_config_reason",
           "window_plan", "window_registers"]

MAX_WINDOW = 8  # register slots of the sliding window (taps along x per program)
_MAX_REGS_PER_THREAD = 128  # fp32 accumulators + window values per thread: no spills


@triton.jit
def _pick(i: tl.constexpr, x0, x1, x2, x3, x4, x5, x6, x7):
    """Window slot ``i`` (a compile-time index) of the eight slots."""
    r = x0
    if i == 1:
        r = x1
    if i == 2:
        r = x2
    if i == 3:
        r = x3
    if i == 4:
        r = x4
    if i == 5:
        r = x5
    if i == 6:
        r = x6
    if i == 7:
        r = x7
    return r


@triton.jit
def _column(x_rows, col, xs_w, rlim, cmask, VEC: tl.constexpr):
    """One input column [rows, channels] as fp32; rows whose input row is out of range (rlim 0)
    and columns outside [0, Wi) read zeros."""
    cc = tl.where(col >= 0, col, 2147483647)  # left of the row: past every limit (scalar & tensor bools
    m = (cc < rlim)[:, None] & cmask[None, :]  # mistype in the interpreter, so one int compare per row)
    return tl.load(x_rows + col * xs_w * VEC, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _dy_column(y_rows, ow, ys_w, ylim, cmask, VEC: tl.constexpr):
    """dy at output column ow [rows, channels] as fp32; zeros past the row (ylim = Wo) or a dead row (0)."""
    m = (ow < ylim)[:, None] & cmask[None, :]
    return tl.load(y_rows + ow * ys_w * VEC, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _slot_next(t: tl.constexpr, SHIFT: tl.constexpr, TXB: tl.constexpr, own, x0, x1, x2, x3, x4, x5, x6, x7,
               x_rows, col, dil_w, xs_w, rlim, cmask, VEC: tl.constexpr):
    """Slot t of the next output column's window: slot t + SHIFT of this one where it exists, a new
    load otherwise; slots past the window keep their (unused) value, so the compiler drops them."""
    r = own
    if t < TXB:
        if SHIFT > 0 and t + SHIFT < TXB:
            r = _pick(t + SHIFT, x0, x1, x2, x3, x4, x5, x6, x7)
        else:
            r = _column(x_rows, col + t * dil_w, xs_w, rlim, cmask, VEC)
    return r


@triton.jit
def _slide(SHIFT: tl.constexpr, TXB: tl.constexpr, x0, x1, x2, x3, x4, x5, x6, x7,
           x_rows, col, dil_w, xs_w, rlim, cmask, VEC: tl.constexpr):
    """The window of the output column whose first tap reads input column ``col``."""
    n0 = _slot_next(0, SHIFT, TXB, x0, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n1 = _slot_next(1, SHIFT, TXB, x1, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n2 = _slot_next(2, SHIFT, TXB, x2, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n3 = _slot_next(3, SHIFT, TXB, x3, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n4 = _slot_next(4, SHIFT, TXB, x4, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n5 = _slot_next(5, SHIFT, TXB, x5, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n6 = _slot_next(6, SHIFT, TXB, x6, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    n7 = _slot_next(7, SHIFT, TXB, x7, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC)
    return n0, n1, n2, n3, n4, n5, n6, n7


@triton.jit
def _fma(t: tl.constexpr, TXB: tl.constexpr, acc, xv, dyv):
    if t < TXB:
        acc += xv * dyv
    return acc


@triton.jit
def _store_tap(t: tl.constexpr, TXB: tl.constexpr, acc, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid,
               GKC, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
               ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """Tap (tz, ty, tx0 + t): the rows' sum of its accumulator, final (epilogue) or an fp32 partial."""
    if t < TXB:
        tx = tx0 + t
        res = tl.sum(acc, axis=0)  # [channels]
        keep = cmask & (j * 0 + tx < FX)
        if FINAL:
            offs = tz * ws_z + ty * ws_y + tx * ws_x + g * ws_g + k * ws_k + c * ws_c
            res = apply_epilogue(res, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
            tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)
        else:
            tap = (tz * FY + ty) * FX + tx
            tl.store(ws_ptr + (sid * TAPS + tap) * GKC + j, res, mask=keep)


@triton.jit
def _dwslide_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GKC_V, ROWS, chunk, FROWS, XBLOCKS,  # channels / VEC, output rows N*Do*Ho, rows per chunk, FZ*FY, tap blocks
    Do, Ho, Wo, Di, Hi, Wi,
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # x strides (n, d, h, w divided by VEC)
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # dy strides (n, d, h, w divided by VEC)
    K: tl.constexpr, C: tl.constexpr, VEC: tl.constexpr,
    TXB: tl.constexpr, SHIFT: tl.constexpr, UNROLL: tl.constexpr, PREFETCH: tl.constexpr, STAGES: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_CH: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_a = tl.program_id(0)  # (filter row, tap block, channel block), filter row fastest
    pid_s = tl.program_id(1)  # row chunk
    fr = pid_a % FROWS
    q = pid_a // FROWS
    xb = q % XBLOCKS
    cb = q // XBLOCKS
    tz = fr // FY
    ty = fr % FY
    tx0 = xb * TXB

    j = cb * BLOCK_CH + tl.arange(0, BLOCK_CH)
    cmask = (j // VEC) < GKC_V  # constant over aligned runs of VEC: the loads vectorize
    g = j // (K * C)
    k = (j // C) % K
    c = j % C
    x_ch = g * xs_g + c * xs_c
    y_ch = g * ys_g + k * ys_k
    if USE_INT64:
        x_ch = x_ch.to(tl.int64)
        y_ch = y_ch.to(tl.int64)

    sid = pid_s
    if USE_INT64:
        sid = sid.to(tl.int64)
    r_start = sid * chunk
    r_end = tl.minimum(r_start + chunk, ROWS)
    lanes = tl.arange(0, BLOCK_R)
    if USE_INT64:
        lanes = lanes.to(tl.int64)
    col0 = tx0 * dil_w - pad_w  # input column of the window's first tap at output column 0
    a0 = tl.zeros((BLOCK_R, BLOCK_CH), dtype=tl.float32)
    a1 = a0
    a2 = a0
    a3 = a0
    a4 = a0
    a5 = a0
    a6 = a0
    a7 = a0
    for r0 in range(r_start, r_end, BLOCK_R):
        r = r0 + lanes
        live = r < r_end
        oh = r % Ho
        q2 = r // Ho
        od = q2 % Do
        n = q2 // Do
        i_d = od * s_d - pad_d + tz * dil_d
        i_h = oh * s_h - pad_h + ty * dil_h
        row_ok = live & (i_d >= 0) & (i_d < Di) & (i_h >= 0) & (i_h < Hi)
        rlim = tl.where(row_ok, Wi, 0)
        x_rows = x_ptr + ((n * xs_n + i_d * xs_d + i_h * xs_h) * VEC)[:, None] + x_ch[None, :]
        y_rows = dy_ptr + ((n * ys_n + od * ys_d + oh * ys_h) * VEC)[:, None] + y_ch[None, :]
        ylim = tl.where(live, Wo, 0)  # dy column ow of this row exists where ow < ylim
        x0, x1, x2, x3, x4, x5, x6, x7 = _slide(0, TXB, a0, a0, a0, a0, a0, a0, a0, a0,
                                                x_rows, col0, dil_w, xs_w, rlim, cmask, VEC)
        if PREFETCH:  # the window of the next column too: new slots load two columns ahead
            w0, w1, w2, w3, w4, w5, w6, w7 = _slide(SHIFT, TXB, x0, x1, x2, x3, x4, x5, x6, x7,
                                                    x_rows, col0 + s_w, dil_w, xs_w, rlim, cmask, VEC)
        dyv = _dy_column(y_rows, 0, ys_w, ylim, cmask, VEC)
        for ow in tl.range(0, Wo, num_stages=STAGES, loop_unroll_factor=UNROLL):
            # the next column's loads are issued before this column's products
            dyn = _dy_column(y_rows, ow + 1, ys_w, ylim, cmask, VEC)
            if PREFETCH:
                n0, n1, n2, n3, n4, n5, n6, n7 = _slide(SHIFT, TXB, w0, w1, w2, w3, w4, w5, w6, w7,
                                                        x_rows, col0 + (ow + 2) * s_w, dil_w, xs_w, rlim, cmask, VEC)
            else:
                n0, n1, n2, n3, n4, n5, n6, n7 = _slide(SHIFT, TXB, x0, x1, x2, x3, x4, x5, x6, x7,
                                                        x_rows, col0 + (ow + 1) * s_w, dil_w, xs_w, rlim, cmask, VEC)
            a0 = _fma(0, TXB, a0, x0, dyv)
            a1 = _fma(1, TXB, a1, x1, dyv)
            a2 = _fma(2, TXB, a2, x2, dyv)
            a3 = _fma(3, TXB, a3, x3, dyv)
            a4 = _fma(4, TXB, a4, x4, dyv)
            a5 = _fma(5, TXB, a5, x5, dyv)
            a6 = _fma(6, TXB, a6, x6, dyv)
            a7 = _fma(7, TXB, a7, x7, dyv)
            dyv = dyn
            if PREFETCH:
                x0, x1, x2, x3, x4, x5, x6, x7 = w0, w1, w2, w3, w4, w5, w6, w7
                w0, w1, w2, w3, w4, w5, w6, w7 = n0, n1, n2, n3, n4, n5, n6, n7
            else:
                x0, x1, x2, x3, x4, x5, x6, x7 = n0, n1, n2, n3, n4, n5, n6, n7

    GKC = GKC_V * VEC
    _store_tap(0, TXB, a0, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(1, TXB, a1, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(2, TXB, a2, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(3, TXB, a3, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(4, TXB, a4, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(5, TXB, a5, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(6, TXB, a6, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)
    _store_tap(7, TXB, a7, tz, ty, tx0, FX, TAPS, FY, j, g, k, c, cmask, sid, GKC, out_ptr, ws_ptr,
               d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               FINAL, OP, NUM_DS, USER_FN)


@dataclass(frozen=True)
class DwSlideConfig(DirectStyleConfig):
    """dwslide: block_r output rows in flight x block_ch result channels per program, a window of
    block_x taps (0: min(FX, 8)), the column loop unrolled ``unroll`` times (0: the window's
    lifetime), the next window loaded one column early when ``prefetch`` is 1, the rows split in
    ``split`` chunks (0: automatic, :func:`auto_split`)."""

    block_r: int
    block_ch: int
    block_x: int
    unroll: int
    prefetch: int
    num_stages: int  # 1: the column loop as written; 2-4: Triton's pipeliner issues later columns' loads ahead
    num_warps: int
    split: int

    ALGORITHM: ClassVar[str] = "dwslide"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_r", "block_ch")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        if self.num_stages not in (1, 2, 3, 4):
            return f"num_stages={self.num_stages!r} must be 1 to 4"
        return window_config_reason(self.block_x, self.unroll, self.prefetch)


def window_config_reason(block_x: int, unroll: int, prefetch: int) -> str | None:
    """Why a sliding-window config (dwslide, dwslab) is invalid, or None."""
    if not isinstance(block_x, int) or isinstance(block_x, bool) or not 0 <= block_x <= MAX_WINDOW:
        return f"block_x={block_x!r} must be 0 (min(FX, {MAX_WINDOW})) or a tap count from 1 to {MAX_WINDOW}"
    if not isinstance(unroll, int) or isinstance(unroll, bool) or not 0 <= unroll <= 16:
        return f"unroll={unroll!r} must be 0 (the window's lifetime) or a factor from 1 to 16"
    if prefetch not in (0, 1):
        return f"prefetch={prefetch!r} must be 0 or 1"
    return None


def window_plan(fx: int, stride_w: int, dil_w: int, block_x: int, unroll: int) -> tuple[int, int, int]:
    """(taps per window, slots reused per column step, unroll factor of the column loop).

    The window holds block_x taps (0: min(FX, 8)); it slides by SHIFT = stride / dilation slots
    when the stride is a multiple of the dilation (else every column reloads its window); unroll 0
    unrolls by the lifetime of a window value, ceil(taps / SHIFT) steps."""
    txb = min(fx, MAX_WINDOW) if block_x == 0 else min(block_x, fx)
    shift = stride_w // dil_w if stride_w % dil_w == 0 else 0
    if shift >= txb:
        shift = 0
    if unroll == 0:
        unroll = triton.cdiv(txb, shift) if shift else 1
    return txb, shift, unroll


def window_registers(p: ConvParams, cfg: Any, tile: int) -> tuple[int, float]:
    """(taps per window, fp32 registers per thread) of a sliding-window config (dwslide, dwslab) whose tile holds
    ``tile`` elements: the window, the accumulators, the dy value and, with prefetch, the next
    window's new slots, per element a thread owns."""
    txb, shift, _ = window_plan(p.filter[-1], p.stride[-1], p.dilation[-1], cfg.block_x, cfg.unroll)
    ahead = (shift or txb) if cfg.prefetch else 0
    return txb, (2 * txb + 1 + ahead) * tile / (32 * cfg.num_warps)


def auto_split(rows: int, base_programs: int, block_r: int, sms: int) -> int:
    """Row chunks: ~8 programs per SM, each chunk at least one step of block_r rows."""
    return occupancy_split(base_programs, sms, 8, triton.cdiv(rows, block_r))


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "dwslide")
    block_r, block_ch = int(cfg.block_r), int(cfg.block_ch)
    num_warps, split = int(cfg.num_warps), int(cfg.split)
    fz, fy, fx = geo.filt3
    txb, shift, unroll = window_plan(fx, geo.stride3[2], geo.dil3[2], int(cfg.block_x), int(cfg.unroll))
    xblocks = triton.cdiv(fx, txb)
    gkc = geo.G * geo.K * geo.C
    vec, xs_v, ys_v = strides_by_vec(geo.x_strides, geo.y_strides, gkc)
    Do, Ho, Wo = geo.out3
    rows = geo.N * Do * Ho
    base = fz * fy * xblocks * triton.cdiv(gkc, block_ch)
    if split <= 0:
        split = auto_split(rows, base, block_r, sm_count(args.out.device))
    split, chunk = split_chunks(min(split, MAX_GRID_YZ), rows)
    taps = geo.taps
    total = taps * gkc
    use_int64 = force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT or rows + chunk >= INT32_LIMIT
    final = split == 1
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    main = BoundKernel(_dwslide_kernel, (base, split),
                       K=geo.K, C=geo.C, VEC=vec, TXB=txb, SHIFT=shift, UNROLL=unroll, PREFETCH=bool(cfg.prefetch),
                       # None: tl.range without a num_stages attribute, the loop (and PTX) of session 47
                       STAGES=None if int(cfg.num_stages) == 1 else int(cfg.num_stages),
                       BLOCK_R=block_r, BLOCK_CH=block_ch, FINAL=final, USE_INT64=use_int64,
                       num_warps=num_warps, **epi)
    sizes = (gkc // vec, rows, chunk, fz * fy, xblocks, *geo.out3, *geo.in3, fy, fx, taps,
             *geo.stride3, *geo.dil3, *geo.pad3, *xs_v, *geo.w_strides, *ys_v)
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, gkc, geo.K * geo.C, geo.C, fy, fx, *geo.w_strides)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


def decline(cfg: DwSlideConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    reason = depthwise_decline("dwslide", p, dtype)
    if reason:
        return reason
    txb, regs = window_registers(p, cfg, cfg.block_r * cfg.block_ch)
    if regs > _MAX_REGS_PER_THREAD:
        return (f"a window of {txb} taps x block_r={cfg.block_r} x block_ch={cfg.block_ch} needs {regs:g} "
                f"fp32 registers per thread with num_warps={cfg.num_warps} (more than {_MAX_REGS_PER_THREAD})")
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="dwslide", config=DwSlideConfig, decline=decline, bind=bind,
    description="depthwise wgrad with a sliding register window along the row: one filter row and up to 8 taps "
                "per program, one output row per thread, each x value loaded and converted once per filter row",
    kernels=(_dwslide_kernel, _dw_finalize_kernel),
))
