"""Depthwise conv_bwd_data (C = K = 1) at stride 1 on channels-last tensors, all taps in flight: "dwtile".

dx[n, i, g] = sum over taps t with o = i + p - t*dil in range: dy[n, o, g] * w[g, t]

The walks (dwroll, dwtaps) load each grad_out row once per W tap and roll accumulator slots along H;
every step waits for its loads before the next row's are issued, so only a row's W taps are in
flight: Nsight Compute found dwtaps latency bound at 42% DRAM on MobileNetV2's 3x3 56x56 layer where
cuDNN's channels-last kernel runs at 60% (docs/BENCHMARKS.md, session 41). ``direct`` walks its taps
in a runtime loop, one load at a time.

Here a program owns a TH x TW tile of input positions of one (n, i_d) slice and BLOCK_CH channels (the
contiguous g axis), and the taps are compile-time loops: every tap's shifted [TH*TW, BLOCK_CH] grad_out
tile is an independent 16-byte-vector load, so the compiler issues them back to back and a thread has
all of them in flight at once. The taps re-read the tile's halo from L1 / L2 (a 2D tile keeps that
re-read to (TH + FY - 1)(TW + FX - 1) / (TH*TW) of the tile from L2, against (FY)(TW + FX - 1) / TW
for one row). The weight goes through dwroll's fp32 [tap, G] table (one tiny launch), so a tap's
weights for a channel block are one contiguous vector instead of a gather at the filter's stride.
With every tap unrolled a thread holds every tap's loaded tile at once (144 registers at 16 elements per
thread on a 3x3, 19% occupancy: latency bound again, session 46). ``row_stages`` 1 walks the filter rows in a
runtime loop around the unrolled W taps, so one row's loads are live (72 registers there): more warps stay
resident, 1.16-1.23x on 112x112 planes, 7x7 and 3D layers (session 47). Its build with ``row_stages`` 0 is
session 46's code (the same PTX).

Stride 1 only: then every tap meets every input position and no program idles on a stride phase
(strided layers keep the walks, which skip the taps a phase lacks). Strides other than the channel
one travel divided by VEC (as in ``dwstream``) so the 16-byte channel runs are provable.

Grid = ((n, i_d, tile row, tile column, channel block),), channel block fastest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import DirectStyleConfig, require_contiguous
from .depthwise_roll import _tap_major_kernel, tap_major_table
from .depthwise_stream import strides_by_vec
from .host import INT32_LIMIT

__all__ = ["ALGORITHM", "MAX_TAPS", "DwTileConfig", "TilePlan", "bind", "decline"]

MAX_TAPS = 64  # taps unrolled into one program (7x7 = 49, a 31-tap 1D filter, 3x3x3 = 27)
_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")
_MAX_GRID_X = 2**31 - 1
_MAX_PER_THREAD = 32  # grad_in elements per thread: the fp32 accumulators plus the loads in flight


@triton.jit
def _row_taps(acc, dy_row, wt_row, ch, GP, wi, h_ok, cmask, Wo, pad_w, tx_step, dil_w,
              FX: tl.constexpr, VEC: tl.constexpr, MASKED: tl.constexpr):
    """acc + one filter row's taps: ``dy_row`` points at each position's tap (row, 0) element, ``wt_row`` at
    the row's first weight-table row."""
    for x in tl.static_range(FX):
        ptrs = dy_row - x * tx_step * VEC
        if MASKED:
            o_w = wi + pad_w - x * dil_w
            m = h_ok & (o_w >= 0) & (o_w < Wo)
            v = tl.load(ptrs, mask=m[:, None] & cmask[None, :], other=0.0)
        else:
            v = tl.load(ptrs)
        # rows padded to GP: no mask (lanes past G are never stored)
        wv = tl.load(wt_row + x * GP + ch)
        acc += v.to(tl.float32) * wv[None, :]
    return acc


@triton.jit
def _tap_sum(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
             tz_step, ty_step, tx_step, dil_d, dil_h, dil_w,
             FZ: tl.constexpr, FY: tl.constexpr, FX: tl.constexpr, VEC: tl.constexpr,
             TP: tl.constexpr, BLOCK_CH: tl.constexpr, MASKED: tl.constexpr):
    """sum over taps of w[tap] * the tile's grad_out shifted by the tap. ``dy_base`` points at each
    position's tap (0, 0, 0) element; a tap moves every pointer by one scalar (``t*_step``: the dilated
    tap's grad_out offset). MASKED tests each tap's rows, columns and planes (tiles at the edges).
    Its x loop repeats ``_row_taps`` on purpose: this is session 46's code, which the renamed row_stages 0 rows
    measured; calling ``_row_taps`` per row compiles to other PTX (sm_90, four builds diffed, session 48)."""
    acc = tl.zeros((TP, BLOCK_CH), dtype=tl.float32)
    for z in tl.static_range(FZ):
        if MASKED:
            o_d = i_d + pad_d - z * dil_d
            # a select, not `pos_ok & scalar`: the interpreter turns a vector & a scalar bool into int32
            d_ok = tl.where((o_d >= 0) & (o_d < Do), pos_ok, False)
        for y in tl.static_range(FY):
            if MASKED:
                o_h = hi + pad_h - y * dil_h
                h_ok = d_ok & (o_h >= 0) & (o_h < Ho)
            for x in tl.static_range(FX):
                ptrs = dy_base - (z * tz_step + y * ty_step + x * tx_step) * VEC
                if MASKED:
                    o_w = wi + pad_w - x * dil_w
                    m = h_ok & (o_w >= 0) & (o_w < Wo)
                    v = tl.load(ptrs, mask=m[:, None] & cmask[None, :], other=0.0)
                else:
                    v = tl.load(ptrs)
                # rows padded to GP: no mask (lanes past G are never stored)
                wv = tl.load(wt_ptr + ((z * FY + y) * FX + x) * GP + ch)
                acc += v.to(tl.float32) * wv[None, :]
    return acc


@triton.jit
def _tap_rows_sum(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
                  tz_step, ty_step, tx_step, dil_d, dil_h, dil_w,
                  FZ: tl.constexpr, FY: tl.constexpr, FX: tl.constexpr, VEC: tl.constexpr,
                  TP: tl.constexpr, BLOCK_CH: tl.constexpr, MASKED: tl.constexpr):
    """``_tap_sum`` with the filter rows in a runtime loop: only one row's taps hold registers (72 rather than
    128 at 16 elements per thread on a 3x3, 114 rather than 188 on a 7x7; session 47), so more warps
    stay resident."""
    acc = tl.zeros((TP, BLOCK_CH), dtype=tl.float32)
    for z in tl.static_range(FZ):
        d_ok = pos_ok
        if MASKED:
            o_d = i_d + pad_d - z * dil_d
            d_ok = tl.where((o_d >= 0) & (o_d < Do), pos_ok, False)
        for y in tl.range(0, FY):
            h_ok = d_ok
            if MASKED:
                o_h = hi + pad_h - y * dil_h
                h_ok = d_ok & (o_h >= 0) & (o_h < Ho)
            acc = _row_taps(acc, dy_base - (z * tz_step + y * ty_step) * VEC, wt_ptr + (z * FY + y) * FX * GP,
                            ch, GP, wi, h_ok, cmask, Wo, pad_w, tx_step, dil_w, FX, VEC, MASKED)
    return acc


@triton.jit
def _taps(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
          tz_step, ty_step, tx_step, dil_d, dil_h, dil_w,
          FZ: tl.constexpr, FY: tl.constexpr, FX: tl.constexpr, VEC: tl.constexpr,
          TP: tl.constexpr, BLOCK_CH: tl.constexpr, MASKED: tl.constexpr, ROW_STAGES: tl.constexpr):
    if ROW_STAGES == 0:
        acc = _tap_sum(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
                       tz_step, ty_step, tx_step, dil_d, dil_h, dil_w, FZ, FY, FX, VEC, TP, BLOCK_CH, MASKED)
    else:
        acc = _tap_rows_sum(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
                            tz_step, ty_step, tx_step, dil_d, dil_h, dil_w, FZ, FY, FX, VEC, TP, BLOCK_CH, MASKED)
    return acc


@triton.jit
def _dwtile_kernel(
    dy_ptr, wt_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GP, G_V,  # the weight table's row length, channels / VEC
    Di, Hi, Wi, Do, Ho, Wo,
    dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    TILES_H, TILES_W, CH_BLOCKS,
    xs_n, xs_d, xs_h, xs_w,  # grad_in (and every D) strides divided by VEC
    ys_n, ys_d, ys_h, ys_w,  # grad_out strides divided by VEC
    FZ: tl.constexpr, FY: tl.constexpr, FX: tl.constexpr, VEC: tl.constexpr,
    TH: tl.constexpr, TW: tl.constexpr, BLOCK_CH: tl.constexpr, ROW_STAGES: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    # channel block fastest: the programs in flight read whole position rows (G144 56x56: 0.88-0.91x the time
    # of channel blocks on the grid's second axis, session 46; elsewhere within 5% either way)
    cb = tl.program_id(0) % CH_BLOCKS
    pid = tl.program_id(0) // CH_BLOCKS
    tw = pid % TILES_W
    q = pid // TILES_W
    th = q % TILES_H
    q = q // TILES_H
    i_d = q % Di
    n = q // Di
    if USE_INT64:
        n = n.to(tl.int64)

    h0 = th * TH
    w0 = tw * TW
    r = tl.arange(0, TH * TW)
    hi = h0 + r // TW  # TW is a power of two: a shift and a mask
    wi = w0 + r % TW
    pos_ok = (hi < Hi) & (wi < Wi)
    ch = cb * BLOCK_CH + tl.arange(0, BLOCK_CH)
    cmask = (ch // VEC) < G_V  # constant over aligned runs of VEC: the accesses vectorize
    dy_base = dy_ptr + (((n * ys_n + (i_d + pad_d) * ys_d + (hi + pad_h) * ys_h + (wi + pad_w) * ys_w) * VEC)[:, None]
                        + ch[None, :])
    offs = ((n * xs_n + i_d * xs_d + hi * xs_h + wi * xs_w) * VEC)[:, None] + ch[None, :]
    # interior tiles (every tap of every position in range, a whole channel block) load without masks
    inside = ((h0 + TH <= Hi) & (w0 + TW <= Wi) & ((cb + 1) * BLOCK_CH <= G_V * VEC)
              & (i_d + pad_d - (FZ - 1) * dil_d >= 0) & (i_d + pad_d < Do)
              & (h0 + pad_h - (FY - 1) * dil_h >= 0) & (h0 + TH - 1 + pad_h < Ho)
              & (w0 + pad_w - (FX - 1) * dil_w >= 0) & (w0 + TW - 1 + pad_w < Wo))
    if inside:
        acc = _taps(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
                    dil_d * ys_d, dil_h * ys_h, dil_w * ys_w, dil_d, dil_h, dil_w,
                    FZ, FY, FX, VEC, TH * TW, BLOCK_CH, False, ROW_STAGES)
        full = tl.full((TH * TW, BLOCK_CH), 1, tl.int1)
        acc = apply_epilogue(acc, offs, full, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty))
    else:
        acc = _taps(dy_base, wt_ptr, ch, GP, hi, wi, i_d, pos_ok, cmask, Do, Ho, Wo, pad_d, pad_h, pad_w,
                    dil_d * ys_d, dil_h * ys_h, dil_w * ys_w, dil_d, dil_h, dil_w,
                    FZ, FY, FX, VEC, TH * TW, BLOCK_CH, True, ROW_STAGES)
        smask = pos_ok[:, None] & cmask[None, :]
        acc = apply_epilogue(acc, offs, smask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=smask)


@dataclass(frozen=True)
class DwTileConfig(DirectStyleConfig):
    """dwtile: a block_h x block_w tile of input positions x block_ch channels per program."""

    block_h: int
    block_w: int
    block_ch: int
    row_stages: int  # 0: every tap unrolled; 1: the filter rows in a runtime loop (one row's taps live)
    num_warps: int

    ALGORITHM: ClassVar[str] = "dwtile"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_h", "block_w", "block_ch")

    def check(self) -> str | None:
        if self.row_stages not in (0, 1):
            return (f"row_stages={self.row_stages!r} must be 0 (every tap unrolled) or 1 (a runtime loop over "
                    "filter rows)")
        return super().check()


@dataclass(frozen=True)
class TilePlan:
    """The grid of a dwtile launch on one problem."""

    tiles_h: int
    tiles_w: int
    ch_blocks: int

    @classmethod
    def plan(cls, p: ConvParams, block_h: int, block_w: int, block_ch: int) -> TilePlan:
        _, hi, wi = p.spatial3("input")
        return cls(triton.cdiv(hi, block_h), triton.cdiv(wi, block_w), triton.cdiv(p.G, block_ch))

    def programs(self, p: ConvParams) -> int:
        return p.N * p.spatial3("input")[0] * self.tiles_h * self.tiles_w * self.ch_blocks


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    require_runnable(decline(cfg, p, args.layout, args.dtype, args.fused), "dwtile", p)
    require_contiguous(args, "dwtile", "conv_bwd_data")
    block_h, block_w, block_ch = int(cfg.block_h), int(cfg.block_w), int(cfg.block_ch)
    plan = TilePlan.plan(p, block_h, block_w, block_ch)
    G = geo.G
    vec, xs_v, ys_v = strides_by_vec(geo.x_strides, geo.y_strides, G)
    tiles = geo.N * geo.in3[0] * plan.tiles_h * plan.tiles_w
    use_int64 = force_int64 or geo.needs_int64 or tiles * plan.ch_blocks >= INT32_LIMIT
    fz, fy, fx = geo.filt3
    main = BoundKernel(_dwtile_kernel, (tiles * plan.ch_blocks,), FZ=fz, FY=fy, FX=fx, VEC=vec, TH=block_h, TW=block_w,
                       BLOCK_CH=block_ch, ROW_STAGES=int(cfg.row_stages), USE_INT64=use_int64, OP=args.fused.code,
                       NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn), num_warps=int(cfg.num_warps))
    gp = triton.cdiv(G, block_ch) * block_ch  # every channel block reads a whole row of the table
    sizes = (gp, G // vec, *geo.in3, *geo.out3, *geo.dil3, *geo.pad3, plan.tiles_h, plan.tiles_w, plan.ch_blocks,
             xs_v[1], xs_v[3], xs_v[4], xs_v[5], ys_v[1], ys_v[3], ys_v[4], ys_v[5])
    weight_table = tap_major_table(geo, gp)

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        main(dy, weight_table(w), out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline(cfg: DwTileConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    if dtype.name not in _DTYPES:
        return f"dwtile conv_bwd_data takes the dtypes {', '.join(_DTYPES)}, not {dtype.name}"
    if p.C != 1 or p.K != 1:
        return (f"dwtile serves depthwise groups (C = K = 1 per group); this problem has C={p.C}, K={p.K}: "
                "direct / blockdiag / igemm fit it")
    if any(s != 1 for s in p.stride):
        return (f"dwtile serves stride 1 (every tap meets every input position); stride {tuple(p.stride)}: "
                "dwtaps / dwroll walk the stride phases")
    taps = p.spatial3("filter")
    if taps[0] * taps[1] * taps[2] > MAX_TAPS:
        return f"the filter has {taps[0] * taps[1] * taps[2]} taps: more than dwtile's {MAX_TAPS} unrolled taps"
    if not (layout.input.endswith("GC") and layout.output.endswith("GK")):  # g next to the unit C: stride 1
        return (f"dwtile puts the channels on the vector lanes, which {layout.input} and {layout.output} do not "
                "keep contiguous: dwplane serves planar depthwise layers")
    _, hi, wi = p.spatial3("input")
    if cfg.block_h > triton.next_power_of_2(hi) or cfg.block_w > triton.next_power_of_2(wi):
        return (f"a {cfg.block_h}x{cfg.block_w} tile is larger than the {hi}x{wi} input rounded up to powers of two: "
                "a smaller tile covers it with fewer idle lanes")
    per_thread = cfg.block_h * cfg.block_w * cfg.block_ch / (32 * cfg.num_warps)
    if per_thread > _MAX_PER_THREAD:
        return (f"a {cfg.block_h}x{cfg.block_w} x {cfg.block_ch}-channel tile holds {per_thread:g} grad_in elements "
                f"per thread with num_warps={cfg.num_warps} (more than {_MAX_PER_THREAD})")
    programs = TilePlan.plan(p, cfg.block_h, cfg.block_w, cfg.block_ch).programs(p)
    if programs >= _MAX_GRID_X:
        return f"{programs} programs exceed the grid's {_MAX_GRID_X - 1} along its one axis: a larger tile fits"
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data", name="dwtile", config=DwTileConfig, decline=decline, bind=bind,
    description="depthwise dgrad at stride 1 on channels-last tensors: a 2D tile of input positions x channels "
                "per program, every tap's shifted grad_out tile loaded at once, fused epilogue",
    kernels=(_dwtile_kernel, _tap_major_kernel),
))
