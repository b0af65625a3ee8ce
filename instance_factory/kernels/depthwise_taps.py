"""Depthwise conv_bwd_data (C = K = 1) with compile-time taps: "dwtaps".

The walk of ``dwroll`` (a program owns a column tile of one W stride phase, a channel block and a
strip of input rows of one H phase; each grad_out row is loaded once per W tap and feeds every H
tap through rolling accumulator slots), with the instruction overhead taken out of its inner loop.
Session 24's Nsight Compute run of dwroll on ConvNeXt-T's 7x7 layer: 116.6 M issued instructions for
29.5 M warp FMAs (a quarter), issue slots 53% busy, ALU the busiest pipe. Its SASS per W tap: 169
instructions for 56 FMAs, the rest per-slot weight addresses (runtime tap rows), the masks of the
weight loads (slots past a phase's taps) and zero-fills of the masked loads.

Here the taps per phase are constexprs (TY slots along H, TX taps along W) and both tap loops are
unrolled, so every weight sits at a compile-time offset from one per-program base: the weight goes
through a table [channel block, H phase, W phase, z, slot, W tap, BLOCK_CH] (fp32, one tiny launch per
call) that holds zeros where a phase has fewer taps than TY x TX or the channel block runs past G,
so the weight loads need no mask, no zero-fill and no address arithmetic. Which filter tap each
table entry holds depends only on the problem, so the host builds that map once per bind. The
padded taps still multiply a grad_out value by a zero weight (as dwroll's branch-free slots do), so
an infinite grad_out value can turn a neighbouring input gradient into NaN where a direct sum would
not touch it; finite inputs give the exact sum.

Grid = (row strips: (n, i_d, H phase, strip), channel blocks x column tiles x W phases).
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
from .depthwise_roll import RollWalk, strip_rows_reason, walk_decline
from .depthwise_stream import strides_by_vec
from .host import INT32_LIMIT

__all__ = ["ALGORITHM", "MAX_W_TAPS", "DwTapsConfig", "bind", "decline", "tap_map"]

MAX_W_TAPS = 8  # W taps of one phase (unrolled)


@triton.jit
def _tap_table_kernel(w_ptr, map_ptr, wt_ptr, G, ENTRIES, TOTAL, FY, FX, ws_g, ws_z, ws_y, ws_x,
                      BLOCK_CH: tl.constexpr, BLOCK: tl.constexpr):
    """wt[cb, entry, lane] = float(w[g, tap]) with g = cb * BLOCK_CH + lane and tap = map[entry] (a flat
    filter tap, -1 for none): zeros where the entry has no tap or g >= G."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < TOTAL
    lane = idx % BLOCK_CH
    q = idx // BLOCK_CH
    entry = q % ENTRIES
    g = (q // ENTRIES) * BLOCK_CH + lane
    tap = tl.load(map_ptr + entry, mask=live, other=-1)
    ok = live & (tap >= 0) & (g < G)
    x = tap % FX
    y = (tap // FX) % FY
    z = tap // (FX * FY)
    v = tl.load(w_ptr + g * ws_g + z * ws_z + y * ws_y + x * ws_x, mask=ok, other=0.0)
    tl.store(wt_ptr + idx, v.to(tl.float32), mask=live)


@triton.jit
def _slot(J: tl.constexpr, TY: tl.constexpr, acc, v, w_row, lane):
    """Slot J += v * its weight vector (table row w_row + J * TX, a compile-time offset)."""
    if J < TY:
        acc += v * tl.load(w_row + lane)[None, :]
    return acc


@triton.jit
def _dwtaps_kernel(
    dy_ptr, wt_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G_V,  # channels / VEC
    Di, Hi, Wi, Do, Ho, Wo,
    FZ, FY, FX,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    NR_H, NR_W, STRIPS, ROWS, CH_BLOCKS, COL_TILES,
    XSTEP, OWSTEP,  # W taps of one phase step by XSTEP; their grad_out column by -OWSTEP
    xs_n, xs_d, xs_h, xs_w, xs_g,  # grad_in (and every D) strides: n, d, h, w divided by VEC
    ys_n, ys_d, ys_h, ys_w, ys_g,  # grad_out strides: n, d, h, w divided by VEC
    VEC: tl.constexpr, TY: tl.constexpr, TX: tl.constexpr,
    BLOCK_W: tl.constexpr, BLOCK_CH: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_r = tl.program_id(0)  # (n, i_d, H phase, strip), strip fastest: neighbours share halo rows in L2
    pid_c = tl.program_id(1)  # (channel block, column tile, W phase)
    strip = pid_r % STRIPS
    q = pid_r // STRIPS
    r_h = q % NR_H
    q = q // NR_H
    i_d = q % Di
    n = q // Di
    cb = pid_c % CH_BLOCKS
    q2 = pid_c // CH_BLOCKS
    wt = q2 % COL_TILES
    r_w = q2 // COL_TILES
    if USE_INT64:
        n = n.to(tl.int64)

    # ---- the strip: input rows hi = r_h + s_h*m, m in [m0, m1) ---------------------------------
    cnt_h = (Hi - r_h + s_h - 1) // s_h
    m0 = strip * ROWS
    m1 = tl.minimum(m0 + ROWS, cnt_h)
    # the phase's first H tap yf reads grad_out row o_first - j + m through slot j (dwroll's walk)
    tstep = s_h // dil_h
    yf = FY
    for y in range(tstep):
        a_h = r_h + pad_h + s_h * dil_h * FY - y * dil_h
        if (a_h % s_h == 0) & (y < yf):
            yf = y
    ty = tl.where(yf < FY, (FY - yf + tstep - 1) // tstep, 0)
    o_first = (r_h + pad_h + s_h * dil_h * FY - yf * dil_h) // s_h - dil_h * FY
    tyc = tl.maximum(ty, 1)

    # ---- columns wi = r_w + s_w*i of the tile, channels -------------------------------------------
    cnt_w = (Wi - r_w + s_w - 1) // s_w
    i = wt * BLOCK_W + tl.arange(0, BLOCK_W)
    col_ok = i < cnt_w
    lane = tl.arange(0, BLOCK_CH)
    ch = cb * BLOCK_CH + lane
    cmask = (ch // VEC) < G_V  # constant over aligned runs of VEC: the accesses vectorize
    x_cols = ((r_w + s_w * i) * xs_w * VEC)[:, None] + (ch * xs_g)[None, :]
    smask = col_ok[:, None] & cmask[None, :]
    x_plane = (n * xs_n + i_d * xs_d) * VEC
    xf = FX
    for x in range(XSTEP):
        a_w = r_w + pad_w + s_w * dil_w * FX - x * dil_w
        if (a_w % s_w == 0) & (x < xf):
            xf = x
    ow0 = (r_w + pad_w + s_w * dil_w * FX - xf * dil_w) // s_w - dil_w * FX
    o_w0 = i + ow0
    y_cols0 = (o_w0 * ys_w * VEC)[:, None] + (ch * ys_g)[None, :]
    col_step = OWSTEP * ys_w * VEC  # grad_out offset between consecutive W taps of the phase
    # this program's table rows: [z, slot, W tap] x BLOCK_CH, zeros for taps the phase lacks
    w_phase = wt_ptr + ((cb * NR_H + r_h) * NR_W + r_w) * FZ * (TY * TX * BLOCK_CH)

    a0 = tl.zeros((BLOCK_W, BLOCK_CH), dtype=tl.float32)
    a1 = a0
    a2 = a0
    a3 = a0
    a4 = a0
    a5 = a0
    a6 = a0
    a7 = a0
    zero = a0
    for u in tl.range(m0 - (tyc - 1), m1):
        # step u: grad_out row o_first + u feeds slot j (input row u + j) through tap y_j; slots whose
        # row lies outside the strip are never stored (slot 0 is stored from u = m0 on, up to m1 - 1)
        o_h = o_first + u
        if (o_h >= 0) & (o_h < Ho) & (ty > 0):
            for z in range(FZ):
                a_d = i_d + pad_d + s_d * dil_d * FZ - z * dil_d
                o_d = a_d // s_d - dil_d * FZ
                if (a_d % s_d == 0) & (o_d >= 0) & (o_d < Do):
                    dy_row = dy_ptr + (n * ys_n + o_d * ys_d + o_h * ys_h) * VEC + y_cols0
                    w_z = w_phase + z * (TY * TX * BLOCK_CH)
                    for t in tl.static_range(TX):
                        o_w = o_w0 - t * OWSTEP
                        lm = (col_ok & (o_w >= 0) & (o_w < Wo))[:, None] & cmask[None, :]
                        v = tl.load(dy_row - t * col_step, mask=lm, other=0.0).to(tl.float32)
                        w_t = w_z + t * BLOCK_CH
                        a0 = _slot(0, TY, a0, v, w_t, lane)
                        a1 = _slot(1, TY, a1, v, w_t + 1 * TX * BLOCK_CH, lane)
                        a2 = _slot(2, TY, a2, v, w_t + 2 * TX * BLOCK_CH, lane)
                        a3 = _slot(3, TY, a3, v, w_t + 3 * TX * BLOCK_CH, lane)
                        a4 = _slot(4, TY, a4, v, w_t + 4 * TX * BLOCK_CH, lane)
                        a5 = _slot(5, TY, a5, v, w_t + 5 * TX * BLOCK_CH, lane)
                        a6 = _slot(6, TY, a6, v, w_t + 6 * TX * BLOCK_CH, lane)
                        a7 = _slot(7, TY, a7, v, w_t + 7 * TX * BLOCK_CH, lane)
        if u >= m0:  # slot 0 is input row u, finished: every later grad_out row lies past its taps
            offs = x_plane + (r_h + s_h * u) * xs_h * VEC + x_cols
            res = apply_epilogue(a0, offs, smask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
            tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=smask)
        a0 = a1
        a1 = a2
        a2 = a3
        a3 = a4
        a4 = a5
        a5 = a6
        a6 = a7
        a7 = zero  # slots from TY on are never added to: the roll keeps them zero


@dataclass(frozen=True)
class DwTapsConfig(DirectStyleConfig):
    """dwtaps: block_w columns (of one stride phase) x block_ch channels per program, strips of
    ``rows`` input rows of one H phase (0: the whole phase)."""

    block_w: int
    block_ch: int
    rows: int
    num_warps: int

    ALGORITHM: ClassVar[str] = "dwtaps"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_w", "block_ch")

    def check(self) -> str | None:
        return super().check() or strip_rows_reason(self.rows)


def _first_tap(phase: int, pad: int, stride: int, dil: int, taps: int, step: int) -> int:
    """The first filter tap that stride phase ``phase`` meets (the kernel's search): ``taps`` if none."""
    for k in range(step):
        if (phase + pad + stride * dil * taps - k * dil) % stride == 0:
            return k
    return taps


def tap_map(p: ConvParams) -> list[int]:
    """The flat filter tap of every table entry [H phase, W phase, z, slot, W tap] (-1: none); the
    phases are those of the kernel's walk (dwroll's)."""
    s3, d3, f3 = (p.spatial3(name) for name in ("stride", "dilation", "filter"))
    pads = p.spatial3("left_pad")
    fz, fy, fx = f3
    walk = RollWalk.plan(p, 1, 1, 0)
    ty_max, xstep, tx_max = walk.slots, walk.xstep, walk.w_taps
    tstep = s3[1] // d3[1]
    out = []
    for r_h in range(walk.nr_h):
        yf = _first_tap(r_h, pads[1], s3[1], d3[1], fy, tstep)
        for r_w in range(walk.nr_w):
            xf = _first_tap(r_w, pads[2], s3[2], d3[2], fx, xstep)
            for z in range(fz):
                for j in range(ty_max):
                    y = yf + j * tstep
                    for t in range(tx_max):
                        x = xf + t * xstep
                        out.append((z * fy + y) * fx + x if y < fy and x < fx else -1)
    return out


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    require_runnable(decline(cfg, p, args.layout, args.dtype, args.fused), "dwtaps", p)
    require_contiguous(args, "dwtaps", "conv_bwd_data")
    block_w, block_ch, num_warps = int(cfg.block_w), int(cfg.block_ch), int(cfg.num_warps)
    walk = RollWalk.plan(p, block_w, block_ch, int(cfg.rows))
    G = geo.G
    vec, xs_v, ys_v = strides_by_vec(geo.x_strides, geo.y_strides, G)
    rows_grid = geo.N * geo.in3[0] * walk.nr_h * walk.strips
    use_int64 = force_int64 or geo.needs_int64 or rows_grid >= INT32_LIMIT
    grid = (rows_grid, walk.ch_blocks * walk.col_tiles * walk.nr_w)
    main = BoundKernel(_dwtaps_kernel, grid, VEC=vec, TY=walk.slots, TX=walk.w_taps, BLOCK_W=block_w,
                       BLOCK_CH=block_ch, USE_INT64=use_int64, OP=args.fused.code, NUM_DS=len(args.ds),
                       USER_FN=user_fn_or_noop(args.user_fn), num_warps=num_warps)
    sizes = (G // vec, *geo.in3, *geo.out3, *geo.filt3, *geo.stride3, *geo.dil3, *geo.pad3,
             walk.nr_h, walk.nr_w, walk.strips, walk.rows, walk.ch_blocks, walk.col_tiles, walk.xstep,
             walk.xstep * geo.dil3[2] // geo.stride3[2],
             xs_v[1], xs_v[3], xs_v[4], xs_v[5], xs_v[0], ys_v[1], ys_v[3], ys_v[4], ys_v[5], ys_v[0])
    entries = tap_map(p)
    dev = args.out.device
    entry_map = torch.tensor(entries, dtype=torch.int32, device=dev)
    total = walk.ch_blocks * len(entries) * block_ch
    table_block = 1024
    table = BoundKernel(_tap_table_kernel, (triton.cdiv(total, table_block),), BLOCK_CH=block_ch,
                        BLOCK=table_block, num_warps=4)
    fz, fy, fx = geo.filt3
    ws = geo.w_strides
    table_sizes = (G, len(entries), total, fy, fx, ws[0], ws[3], ws[4], ws[5])

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        wt = torch.empty(total, dtype=torch.float32, device=out.device)
        table(w, entry_map, wt, *table_sizes)
        main(dy, wt, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline(cfg: DwTapsConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    return walk_decline("dwtaps", cfg, p, dtype, max_w_taps=MAX_W_TAPS)


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data", name="dwtaps", config=DwTapsConfig, decline=decline, bind=bind,
    description="depthwise dgrad with rolling row accumulators and compile-time taps: a program walks the "
                "grad_out rows of a strip once, every weight at a fixed offset of a per-phase table, fused epilogue",
    kernels=(_dwtaps_kernel, _tap_table_kernel),
))
