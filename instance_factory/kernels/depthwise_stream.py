"""Depthwise conv_bwd_weight (C = 1, depth multiplier K <= 4) as one stream over the output: "dwstream".

dw[g, k, 0, t] = sum over output positions o of dy[o, g, k] * x[o*s - p + t*dil, g, 0]

``depthwise`` gives each filter row its own program, so dy is read once per filter row and a 7x7
filter reads it seven times; ``direct`` decomposes every position of a tile with integer divisions.
Here one program owns a block of result channels (the flattened (g, k) axis, contiguous in the
channels-last layouts), a block of taps (by default all of them, flattened over (z, y, x)) and one
column tile, and walks a chunk of output rows. The column tile's offsets and masks are loop
invariants, the row state advances by carries (no divisions in the loop), taps past the filter read
in-bounds inputs and are dropped at the store, and dy is loaded broadcast over the taps in x's
register layout (no exchange through shared memory). Products accumulate elementwise in fp32; the
column axis is reduced once, at the end. With ``prefetch`` the next row's tiles are loaded before
the current row's products.

Operand strides other than the channel one are passed divided by VEC (the largest power of two
<= 8 that divides all of them and G*K) and multiplied back by the constexpr VEC in the kernel, so
Triton can prove 16-byte alignment of every channel run and vectorize the loads even when G is
not a multiple of 16 (Triton only specializes integers divisible by 16).

Grid = (channel blocks x column tiles, tap blocks, row chunks). One program in all applies the
epilogue and stores; otherwise each stores fp32 partials [row chunk x column tile, taps, G*K] that
``direct``'s deterministic reduce sums in a fixed order, applies the epilogue to and converts.
The kernel keeps the general (g, k, c) channel indexing; ``decline`` limits it to C = 1, where it
was measured (docs/BENCHMARKS.md, session 6).
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
    WEIGHT_DTYPES,
    DirectStyleConfig,
    _dw_finalize_kernel,
    _tap_of,
    finalize_launcher,
    occupancy_split,
    require_contiguous,
    split_chunks,
    split_runner,
)
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "MAX_CHANNELS_PER_GROUP", "DwStreamConfig", "auto_split", "bind", "decline",
           "depthwise_decline", "strides_by_vec", "vector_width"]

_MAX_ACC_PER_THREAD = 64  # fp32 accumulators per thread (as many again for the x tile): no spills
MAX_CHANNELS_PER_GROUP = 4  # K per group (depth multiplier); C must be 1. Measured on an H100: C = K = 4-8
# through this kernel ran 3-20x slower than blockdiag (docs/BENCHMARKS.md, session 6)


@triton.jit
def _dws_tiles(x_ptr, dy_ptr, n, od, oh, live, Di, Hi, s_d, s_h,
               xs_n, xs_d, xs_h, ys_n, ys_d, ys_h, off_d, off_h, x_inv3, y_inv3, xm3, ym3, VEC: tl.constexpr):
    """The x gather [T, W, CH] and the dy tile (broadcast over T: the same register layout as x, so
    no exchange through shared memory) of output row (n, od, oh). The program's column tile is
    fixed, so its offsets and column masks are loop invariants; only the [T] row test is new."""
    i_d = od * s_d + off_d  # [T]
    i_h = oh * s_h + off_h
    lim_h = tl.where(live, Hi, 0)  # an int limit: scalar & vector bools mistype in the interpreter
    r_ok = (i_d >= 0) & (i_d < Di) & (i_h >= 0) & (i_h < lim_h)
    x_base = (n * xs_n + od * s_d * xs_d + oh * s_h * xs_h) * VEC
    xv = tl.load(x_ptr + x_base + x_inv3, mask=r_ok[:, None, None] & xm3, other=0.0)
    y_base = (n * ys_n + od * ys_d + oh * ys_h) * VEC
    live_t = (off_h * 0 + lim_h) > 0  # [T]: live as a vector
    dyv = tl.load(dy_ptr + y_base + y_inv3, mask=ym3 & live_t[:, None, None], other=0.0)
    return xv, dyv


@triton.jit
def _dws_next(n, od, oh, Ho, Do):
    """The walk's next output row, with carries (no divisions in the loop)."""
    oh += 1
    wrap = oh == Ho
    oh = tl.where(wrap, 0, oh)
    od += wrap.to(od.dtype)
    wrap = od == Do
    od = tl.where(wrap, 0, od)
    n += wrap.to(n.dtype)
    return n, od, oh


@triton.jit
def _dwstream_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GKC_V, ROWS, WT, chunk,  # channels / VEC, output rows N*Do*Ho, column tiles, rows per chunk
    Do, Ho, Wo, Di, Hi, Wi,
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # x strides (n, d, h, w divided by VEC)
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # dy strides (n, d, h, w divided by VEC)
    K: tl.constexpr, C: tl.constexpr, VEC: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_CH: tl.constexpr, PREFETCH: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_cw = tl.program_id(0)  # (channel block, column tile), column tile fastest: halos shared in L2
    pid_t = tl.program_id(1)
    pid_s = tl.program_id(2)
    pid_c = pid_cw // WT
    ow0 = (pid_cw - pid_c * WT) * BLOCK_W  # this program's column tile

    # ---- channels: flattened (g, k, c) of the result ----------------------------------------
    j = pid_c * BLOCK_CH + tl.arange(0, BLOCK_CH)
    cmask = (j // VEC) < GKC_V  # constant over aligned runs of VEC: the loads vectorize
    g = j // (K * C)
    k = (j // C) % K
    c = j % C
    x_ch = g * xs_g + c * xs_c
    y_ch = g * ys_g + k * ys_k

    # ---- taps: a block of the flattened (z, y, x). Taps past the filter read tap TAPS-1's inputs
    # (in bounds, so no per-step test) and are dropped at the store ----------------------------
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < TAPS
    tz, ty, tx = _tap_of(tl.minimum(t, TAPS - 1), FY, FX)
    off_d = tz * dil_d - pad_d
    off_h = ty * dil_h - pad_h
    wl = tl.arange(0, BLOCK_W)
    i_w = (tx * dil_w - pad_w)[:, None] + ((ow0 + wl) * s_w)[None, :]  # [T, W]
    w_ok = wl < Wo - ow0
    xm3 = ((i_w >= 0) & (i_w < Wi) & w_ok[None, :])[:, :, None] & cmask[None, None, :]
    ym3 = (w_ok[None, :] & t_ok[:, None])[:, :, None] & cmask[None, None, :]  # [T, W, CH] like x
    x_inv = ((off_d * xs_d + off_h * xs_h)[:, None] + i_w * xs_w) * VEC
    y_inv = ((ow0 + wl) * ys_w * VEC)[None, :] + (t * 0)[:, None]  # [T, W]: broadcast to x's shape on purpose
    if USE_INT64:
        x_inv = x_inv.to(tl.int64)
        y_inv = y_inv.to(tl.int64)
        x_ch = x_ch.to(tl.int64)
        y_ch = y_ch.to(tl.int64)
    x_inv3 = x_inv[:, :, None] + x_ch[None, None, :]
    y_inv3 = y_inv[:, :, None] + y_ch[None, None, :]

    # ---- the walk: rows [r_start, r_end), state (n, od, oh) advanced by carries ----------------
    r_start = pid_s * chunk
    if USE_INT64:
        r_start = r_start.to(tl.int64)
    r_end = tl.minimum(r_start + chunk, ROWS)
    oh = r_start % Ho
    q = r_start // Ho
    od = q % Do
    n = q // Do
    acc = tl.zeros((BLOCK_T, BLOCK_W, BLOCK_CH), dtype=tl.float32)
    if PREFETCH:  # the next row's loads are issued before this row's products
        xv, dyv = _dws_tiles(x_ptr, dy_ptr, n, od, oh, r_start < r_end, Di, Hi, s_d, s_h,
                             xs_n, xs_d, xs_h, ys_n, ys_d, ys_h, off_d, off_h, x_inv3, y_inv3, xm3, ym3, VEC)
        for r in range(r_start, r_end):
            n, od, oh = _dws_next(n, od, oh, Ho, Do)
            xn, dyn = _dws_tiles(x_ptr, dy_ptr, n, od, oh, r + 1 < r_end, Di, Hi, s_d, s_h,
                                 xs_n, xs_d, xs_h, ys_n, ys_d, ys_h, off_d, off_h, x_inv3, y_inv3, xm3, ym3, VEC)
            acc += xv.to(tl.float32) * dyv.to(tl.float32)
            xv = xn
            dyv = dyn
    else:
        for r in range(r_start, r_end):
            xv, dyv = _dws_tiles(x_ptr, dy_ptr, n, od, oh, r < r_end, Di, Hi, s_d, s_h,
                                 xs_n, xs_d, xs_h, ys_n, ys_d, ys_h, off_d, off_h, x_inv3, y_inv3, xm3, ym3, VEC)
            acc += xv.to(tl.float32) * dyv.to(tl.float32)
            n, od, oh = _dws_next(n, od, oh, Ho, Do)

    res = tl.sum(acc, axis=1)  # [T, CH]
    keep = t_ok[:, None] & cmask[None, :]
    if FINAL:
        offs = (tz * ws_z + ty * ws_y + tx * ws_x)[:, None] + (g * ws_g + k * ws_k + c * ws_c)[None, :]
        res = apply_epilogue(res, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                             OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)
    else:  # fp32 partials [split x column tiles, taps, G*K*C], the layout of direct's reduce
        GKC = GKC_V * VEC
        sid = pid_s * WT + (pid_cw - pid_c * WT)
        if USE_INT64:
            sid = sid.to(tl.int64)
        offs = (sid * TAPS + t)[:, None] * GKC + j[None, :]
        tl.store(ws_ptr + offs, res, mask=keep)


@dataclass(frozen=True)
class DwStreamConfig(DirectStyleConfig):
    """dwstream: block_t taps (0: all, padded to a power of two) x block_w output columns x block_ch
    result channels per program, the next row's tiles loaded ahead when ``prefetch`` is 1, the
    rows split in ``split`` chunks (0: automatic, :func:`auto_split`)."""

    block_t: int
    block_w: int
    block_ch: int
    prefetch: int
    num_warps: int
    split: int

    ALGORITHM: ClassVar[str] = "dwstream"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_w", "block_ch")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        bt = self.block_t
        if not isinstance(bt, int) or isinstance(bt, bool) or not (bt == 0 or (bt & (bt - 1) == 0 and bt <= 64)):
            return f"block_t={bt!r} must be 0 (all taps) or a power of two up to 64"
        if self.prefetch not in (0, 1):
            return f"prefetch={self.prefetch!r} must be 0 or 1"
        return None


def vector_width(strides: tuple[int, ...], channels: int) -> int:
    """The largest power of two <= 8 dividing every stride given and the channel count."""
    vec = 8
    while vec > 1 and any(s % vec for s in (*strides, channels)):
        vec //= 2
    return vec


def strides_by_vec(xs: tuple[int, ...], ys: tuple[int, ...], channels: int) -> tuple[int, tuple, tuple]:
    """(VEC, x strides, dy strides) with the n, d, h, w strides (indices 1, 3, 4, 5) divided by VEC,
    the largest vector width dividing them all and the channel count (the kernels multiply back by
    the constexpr VEC, which proves the 16-byte alignment of every channel run)."""
    spatial = (1, 3, 4, 5)
    vec = vector_width(tuple(xs[i] for i in spatial) + tuple(ys[i] for i in spatial), channels)
    return (vec, tuple(s // vec if i in spatial else s for i, s in enumerate(xs)),
            tuple(s // vec if i in spatial else s for i, s in enumerate(ys)))


def depthwise_decline(algorithm: str, p: ConvParams, dtype: DataType) -> str | None:
    """The dtype and group-shape declines of the depthwise-only wgrad algorithms (dwstream, dwslide)."""
    if dtype.name not in WEIGHT_DTYPES:
        return f"{algorithm} conv_bwd_weight takes the dtypes {', '.join(WEIGHT_DTYPES)}, not {dtype.name}"
    if p.C != 1 or p.K > MAX_CHANNELS_PER_GROUP:
        return (f"{algorithm} serves depthwise groups (C = 1, K <= {MAX_CHANNELS_PER_GROUP} per group); this "
                f"problem has C={p.C}, K={p.K}: blockdiag / direct / igemm fit it")
    return None


def _taps_per_program(taps: int, block_t: int) -> int:
    """block_t 0 means all taps in one program (padded to a power of two)."""
    return triton.next_power_of_2(taps) if block_t == 0 else min(block_t, triton.next_power_of_2(taps))


def auto_split(rows: int, base_programs: int, sms: int) -> int:
    """Row chunks: ~16 programs per SM, each chunk at least 4 output rows."""
    return occupancy_split(base_programs, sms, 16, rows // 4)


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "dwstream")
    block_w, block_ch = int(cfg.block_w), int(cfg.block_ch)
    num_warps, split = int(cfg.num_warps), int(cfg.split)
    taps = geo.taps
    block_t = _taps_per_program(taps, int(cfg.block_t))
    gkc = geo.G * geo.K * geo.C
    vec, xs_v, ys_v = strides_by_vec(geo.x_strides, geo.y_strides, gkc)
    Do, Ho, Wo = geo.out3
    wt = triton.cdiv(Wo, block_w)
    rows = geo.N * Do * Ho
    cblocks, tblocks = triton.cdiv(gkc, block_ch), triton.cdiv(taps, block_t)
    if split <= 0:
        split = auto_split(rows, cblocks * wt * tblocks, sm_count(args.out.device))
    split, chunk = split_chunks(split, rows)
    slices = split * wt  # fp32 partial slices: one per (row chunk, column tile)
    total = taps * gkc
    use_int64 = force_int64 or geo.needs_int64 or slices * total >= INT32_LIMIT or rows + chunk >= INT32_LIMIT
    final = slices == 1
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    main = BoundKernel(_dwstream_kernel, (cblocks * wt, tblocks, split),
                       K=geo.K, C=geo.C, VEC=vec, BLOCK_T=block_t, BLOCK_W=block_w, BLOCK_CH=block_ch,
                       PREFETCH=bool(cfg.prefetch), FINAL=final, USE_INT64=use_int64,
                       num_warps=num_warps, **epi)
    sizes = (gkc // vec, rows, wt, chunk, *geo.out3, *geo.in3, geo.filt3[1], geo.filt3[2], taps,
             *geo.stride3, *geo.dil3, *geo.pad3, *xs_v, *geo.w_strides, *ys_v)
    finalize = None if final else finalize_launcher(slices, total, use_int64, epi)
    fin_sizes = (total, slices, gkc, geo.K * geo.C, geo.C, geo.filt3[1], geo.filt3[2], *geo.w_strides)
    return split_runner(main, finalize, sizes, fin_sizes, slices * total)


def decline(cfg: DwStreamConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    reason = depthwise_decline("dwstream", p, dtype)
    if reason:
        return reason
    taps = math.prod(p.filter)
    bt = _taps_per_program(taps, cfg.block_t)
    per_thread = bt * cfg.block_w * cfg.block_ch / (32 * cfg.num_warps)
    if per_thread > _MAX_ACC_PER_THREAD:
        return (f"{bt} taps x block_w={cfg.block_w} x block_ch={cfg.block_ch} needs {per_thread:g} fp32 "
                f"accumulators per thread with num_warps={cfg.num_warps} (more than {_MAX_ACC_PER_THREAD})")
    if triton.cdiv(taps, bt) > MAX_GRID_YZ:
        return f"{taps} taps need more than {MAX_GRID_YZ} tap blocks of {bt}"
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="dwstream", config=DwStreamConfig, decline=decline, bind=bind,
    description="depthwise wgrad as one stream over the output rows: all taps of a channel block and one "
                "column tile per program, loop-invariant offsets, optional prefetch, deterministic split reduce",
    kernels=(_dwstream_kernel, _dw_finalize_kernel),
))
