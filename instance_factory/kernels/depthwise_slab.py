"""Depthwise conv_bwd_weight (C = 1, depth multiplier K <= 4) over a slab of filter rows: "dwslab".

dw[g, k, 0, z, y, x] = sum over output positions o of dy[o, g, k] * x[o*s - p + (z, y, x)*dil, g, 0]

``dwslide`` gives each program one filter row (z, y): a 7x7 filter has seven programs per channel
block reading the same dy rows and, shifted by one row each, the same x rows, so every x and dy
element crosses L2 about FY times (ConvNeXt 7x7 at 28x28: ~270 MB of L2 reads for 38 MB of data).
Here a program owns a slab of ``block_fy`` consecutive filter rows: its tiles are 3D, [output rows,
filter rows, channels], the dy column of an output row is loaded once and broadcast over the slab,
and the x rows that neighbouring (output row, filter row) pairs share are read by the same program
(L1). Along the row it is dwslide's window: up to eight taps of fp32 x columns in registers that
slide by stride / dilation slots per output column (``depthwise_slide.window_plan``).

Filter rows are the flattened (z, y) rows, so a slab may cross a z boundary (3D) and the last slab
is partly past the filter (its rows masked: no loads, no stores). Grid = (slabs x tap blocks x
channel blocks, row chunks); one row chunk applies the epilogue here, otherwise fp32 partials
[chunk, taps, G*K] go through the deterministic split reduce. Channels-last layouts only: on
channels-first tensors the channel vectors would be strided loads, and relayout (a channels-last copy,
then this kernel) ran the held-out NGCHW layers 2.3x faster on an H100.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

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
from .depthwise_slide import _fma, _pick, window_config_reason, window_plan, window_registers
from .depthwise_stream import depthwise_decline, strides_by_vec
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "DwSlabConfig", "auto_split", "bind", "decline"]

_MAX_REGS_PER_THREAD = 128  # fp32 accumulators + window values per thread: no spills


@triton.jit
def _slab_column(x_rows, col, xs_w, rlim, cmask, VEC: tl.constexpr):
    """Input column ``col`` of every (output row, filter row) pair [rows, slab, channels] as fp32;
    pairs whose input row is out of range (rlim 0) and columns outside [0, Wi) read zeros."""
    cc = tl.where(col >= 0, col, 2147483647)  # left of the row: past every limit
    m = (cc < rlim)[:, :, None] & cmask[None, None, :]
    return tl.load(x_rows + col * xs_w * VEC, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _slab_dy(y_rows, ow, ys_w, ylim, cmask, VEC: tl.constexpr):
    """dy at output column ow [rows, 1, channels] as fp32 (broadcast over the slab); zeros past
    the row (ylim = Wo) or for a dead row (0)."""
    m = (ow < ylim)[:, None, None] & cmask[None, None, :]
    return tl.load(y_rows + ow * ys_w * VEC, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _slab_slot(t: tl.constexpr, SHIFT: tl.constexpr, TXB: tl.constexpr, own, x0, x1, x2, x3, x4, x5, x6, x7,
               x_rows, col, dil_w, xs_w, rlim, cmask, VEC: tl.constexpr):
    """Window slot t after a step to the column whose first tap reads ``col``: the slot SHIFT
    further on where the window still holds it, else loaded; slots past the window stay as they
    are (dead code)."""
    if t >= TXB:
        return own
    if SHIFT > 0 and t + SHIFT < TXB:
        return _pick(t + SHIFT, x0, x1, x2, x3, x4, x5, x6, x7)
    return _slab_column(x_rows, col + t * dil_w, xs_w, rlim, cmask, VEC)


@triton.jit
def _slab_window(SHIFT: tl.constexpr, TXB: tl.constexpr, x0, x1, x2, x3, x4, x5, x6, x7,
                 x_rows, col, dil_w, xs_w, rlim, cmask, VEC: tl.constexpr):
    """All eight slots of the window at the output column whose first tap reads ``col``."""
    return (_slab_slot(0, SHIFT, TXB, x0, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(1, SHIFT, TXB, x1, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(2, SHIFT, TXB, x2, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(3, SHIFT, TXB, x3, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(4, SHIFT, TXB, x4, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(5, SHIFT, TXB, x5, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(6, SHIFT, TXB, x6, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC),
            _slab_slot(7, SHIFT, TXB, x7, x0, x1, x2, x3, x4, x5, x6, x7, x_rows, col, dil_w, xs_w, rlim, cmask, VEC))


@triton.jit
def _slab_store(t: tl.constexpr, TXB: tl.constexpr, acc, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask,
                sid, GKC, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x,
                FINAL: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """Taps (slab rows, tx0 + t): the output rows' sum of the accumulator [slab, channels], final
    (epilogue) or an fp32 partial."""
    if t < TXB:
        tx = tx0 + t
        res = tl.sum(acc, axis=0)  # [slab, channels]
        keep = (fr_ok & (fr * 0 + tx < FX))[:, None] & cmask[None, :]
        if FINAL:
            offs = (tap_offs + tx * ws_x)[:, None] + ch_offs[None, :]
            res = apply_epilogue(res, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
            tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)
        else:
            tap = fr * FX + tx
            tl.store(ws_ptr + ((sid * TAPS + tap) * GKC)[:, None] + j[None, :], res, mask=keep)


@triton.jit
def _dwslab_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GKC_V, ROWS, chunk, FROWS, SLABS, XBLOCKS,  # channels / VEC, output rows N*Do*Ho, rows per chunk, FZ*FY
    Do, Ho, Wo, Di, Hi, Wi,
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # x strides (n, d, h, w divided by VEC)
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # dy strides (n, d, h, w divided by VEC)
    K: tl.constexpr, C: tl.constexpr, VEC: tl.constexpr,
    TXB: tl.constexpr, SHIFT: tl.constexpr, UNROLL: tl.constexpr, PREFETCH: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_FY: tl.constexpr, BLOCK_CH: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_a = tl.program_id(0)  # (slab, tap block, channel block), slab fastest
    pid_s = tl.program_id(1)  # row chunk
    slab = pid_a % SLABS
    q = pid_a // SLABS
    xb = q % XBLOCKS
    cb = q // XBLOCKS
    tx0 = xb * TXB
    fr = slab * BLOCK_FY + tl.arange(0, BLOCK_FY)  # flattened (z, y) filter rows of the slab
    fr_ok = fr < FROWS
    tz = fr // FY
    ty = fr % FY
    tap_offs = tz * ws_z + ty * ws_y
    row_dz = tz * dil_d  # input row offsets of the slab's filter rows
    row_dy = ty * dil_h

    j = cb * BLOCK_CH + tl.arange(0, BLOCK_CH)
    cmask = (j // VEC) < GKC_V  # constant over aligned runs of VEC: the loads vectorize
    g = j // (K * C)
    k = (j // C) % K
    c = j % C
    ch_offs = g * ws_g + k * ws_k + c * ws_c
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
    a0 = tl.zeros((BLOCK_R, BLOCK_FY, BLOCK_CH), dtype=tl.float32)
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
        i_d = (od * s_d - pad_d)[:, None] + row_dz[None, :]  # [rows, slab]
        i_h = (oh * s_h - pad_h)[:, None] + row_dy[None, :]
        pair_ok = (live[:, None] & fr_ok[None, :]) & (i_d >= 0) & (i_d < Di) & (i_h >= 0) & (i_h < Hi)
        rlim = tl.where(pair_ok, Wi, 0)
        x_rows = x_ptr + (((n * xs_n)[:, None] + i_d * xs_d + i_h * xs_h) * VEC)[:, :, None] + x_ch[None, None, :]
        y_rows = dy_ptr + ((n * ys_n + od * ys_d + oh * ys_h) * VEC)[:, None, None] + y_ch[None, None, :]
        ylim = tl.where(live, Wo, 0)
        x0, x1, x2, x3, x4, x5, x6, x7 = _slab_window(0, TXB, a0, a0, a0, a0, a0, a0, a0, a0,
                                                      x_rows, col0, dil_w, xs_w, rlim, cmask, VEC)
        if PREFETCH:  # the next column's window too: new slots load two columns ahead
            w0, w1, w2, w3, w4, w5, w6, w7 = _slab_window(SHIFT, TXB, x0, x1, x2, x3, x4, x5, x6, x7,
                                                          x_rows, col0 + s_w, dil_w, xs_w, rlim, cmask, VEC)
        dyv = _slab_dy(y_rows, 0, ys_w, ylim, cmask, VEC)
        for ow in tl.range(0, Wo, loop_unroll_factor=UNROLL):
            dyn = _slab_dy(y_rows, ow + 1, ys_w, ylim, cmask, VEC)  # next column's loads first
            if PREFETCH:
                n0, n1, n2, n3, n4, n5, n6, n7 = _slab_window(SHIFT, TXB, w0, w1, w2, w3, w4, w5, w6, w7,
                                                              x_rows, col0 + (ow + 2) * s_w, dil_w, xs_w, rlim,
                                                              cmask, VEC)
            else:
                n0, n1, n2, n3, n4, n5, n6, n7 = _slab_window(SHIFT, TXB, x0, x1, x2, x3, x4, x5, x6, x7,
                                                              x_rows, col0 + (ow + 1) * s_w, dil_w, xs_w, rlim,
                                                              cmask, VEC)
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
    _slab_store(0, TXB, a0, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(1, TXB, a1, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(2, TXB, a2, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(3, TXB, a3, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(4, TXB, a4, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(5, TXB, a5, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(6, TXB, a6, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)
    _slab_store(7, TXB, a7, fr, fr_ok, tap_offs, tx0, FX, TAPS, j, ch_offs, cmask, sid, GKC, out_ptr, ws_ptr,
                d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, ws_x, FINAL, OP, NUM_DS, USER_FN)


@dataclass(frozen=True)
class DwSlabConfig(DirectStyleConfig):
    """dwslab: block_r output rows x block_fy filter rows x block_ch result channels per tile, a
    window of block_x taps (0: min(FX, 8)), the column loop unrolled ``unroll`` times (0: the
    window's lifetime), the next window loaded one column early when ``prefetch`` is 1, the rows
    split in ``split`` chunks (0: automatic, :func:`auto_split`). Session 20 on an H100: 2-4
    channels per thread beat 8 (the 7x7 window's 128 registers halve the warps per SM)."""

    block_r: int
    block_fy: int
    block_ch: int
    block_x: int
    unroll: int
    prefetch: int
    num_warps: int
    split: int

    ALGORITHM: ClassVar[str] = "dwslab"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_r", "block_fy", "block_ch")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        if self.block_fy < 2:
            return f"block_fy={self.block_fy!r} must be at least 2 (one filter row per program is dwslide)"
        return window_config_reason(self.block_x, self.unroll, self.prefetch)


def auto_split(rows: int, base_programs: int, block_r: int, num_warps: int, sms: int) -> int:
    """Row chunks: ~32 warps per SM (the row walk is latency bound: on an H100, 2-warp programs ran
    small maps up to 1.25x faster at 16 per SM than at 8), each chunk at least one step of block_r rows."""
    return occupancy_split(base_programs, sms, max(1, 32 // num_warps), triton.cdiv(rows, block_r))


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "dwslab")
    block_r, block_fy, block_ch = int(cfg.block_r), int(cfg.block_fy), int(cfg.block_ch)
    num_warps, split = int(cfg.num_warps), int(cfg.split)
    fz, fy, fx = geo.filt3
    txb, shift, unroll = window_plan(fx, geo.stride3[2], geo.dil3[2], int(cfg.block_x), int(cfg.unroll))
    xblocks = triton.cdiv(fx, txb)
    slabs = triton.cdiv(fz * fy, block_fy)
    gkc = geo.G * geo.K * geo.C
    vec, xs_v, ys_v = strides_by_vec(geo.x_strides, geo.y_strides, gkc)
    Do, Ho, Wo = geo.out3
    rows = geo.N * Do * Ho
    base = slabs * xblocks * triton.cdiv(gkc, block_ch)
    if split <= 0:
        split = auto_split(rows, base, block_r, num_warps, sm_count(args.out.device))
    split, chunk = split_chunks(min(split, MAX_GRID_YZ), rows)
    taps = geo.taps
    total = taps * gkc
    use_int64 = force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT or rows + chunk >= INT32_LIMIT
    final = split == 1
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    main = BoundKernel(_dwslab_kernel, (base, split),
                       K=geo.K, C=geo.C, VEC=vec, TXB=txb, SHIFT=shift, UNROLL=unroll, PREFETCH=bool(cfg.prefetch),
                       BLOCK_R=block_r, BLOCK_FY=block_fy, BLOCK_CH=block_ch, FINAL=final, USE_INT64=use_int64,
                       num_warps=num_warps, **epi)
    sizes = (gkc // vec, rows, chunk, fz * fy, slabs, xblocks, *geo.out3, *geo.in3, fy, fx, taps,
             *geo.stride3, *geo.dil3, *geo.pad3, *xs_v, *geo.w_strides, *ys_v)
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, gkc, geo.K * geo.C, geo.C, fy, fx, *geo.w_strides)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


def decline(cfg: DwSlabConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    reason = depthwise_decline("dwslab", p, dtype)
    if reason:
        return reason
    if not layout.channels_last:
        # H100, held-out NGCHW layers: 0.166 ms vs 0.073 for relayout (a copy, then dwslab/dwslide)
        return ("dwslab loads channel vectors along a contiguous channel axis; channels-first tensors go "
                "through relayout (a channels-last copy first) instead")
    frows = math.prod(p.filter[:-1])
    if cfg.block_fy > triton.next_power_of_2(frows):
        return (f"block_fy={cfg.block_fy} is wider than the filter's {frows} rows (z, y) rounded up to a "
                f"power of two: a smaller slab does the same work")
    txb, regs = window_registers(p, cfg, cfg.block_r * cfg.block_fy * cfg.block_ch)
    if regs > _MAX_REGS_PER_THREAD:
        return (f"a window of {txb} taps x block_r={cfg.block_r} x block_fy={cfg.block_fy} x "
                f"block_ch={cfg.block_ch} needs {regs:g} fp32 registers per thread with num_warps={cfg.num_warps} "
                f"(more than {_MAX_REGS_PER_THREAD})")
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="dwslab", config=DwSlabConfig, decline=decline, bind=bind,
    description="depthwise wgrad over a slab of filter rows per program: [output rows, filter rows, channels] "
                "tiles, dy loaded once per slab, dwslide's sliding window of x columns along the row",
    kernels=(_dwslab_kernel, _dw_finalize_kernel),
))
