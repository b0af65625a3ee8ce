"""Depthwise conv_bwd_data (C = K = 1) with rolling row accumulators: "dwroll".

dx[n, i, g] = sum over taps t with an integer, in-range output position o: dy[n, o, g] * w[g, t]

``direct`` loads a shifted dy tile and a weight vector for every tap of every input position: a 7x7
filter reads each dy element 49 times from L1 and converts it 49 times, and its 7x7 ConvNeXt layers
ran at ~300 GB/s. Here a program owns a column tile of one stride phase (input columns
wi = rw + sw*i), a block of channels (the contiguous g axis of the channels-last layouts) and a strip
of input rows of one phase along H (hi = rh + sh*m), and walks the grad_out rows that strip needs,
once each. Along H the taps of a phase read consecutive grad_out rows when the dilation divides the
stride (tap y_j = y_first + j*sh/dh reads row o_first - j + m), so one grad_out row feeds TY input
rows at once: the program keeps TY accumulator slots, slot j holding input row u + j at step u; a
step loads the grad_out row for every W (and D) tap of the phase once, adds it times the tap's
weight into every slot, stores slot 0 (finished) and rolls the slots. Each dy element is loaded and
converted once per W tap instead of once per tap, and the FMAs only ever touch registers.

The weight is first copied to an fp32 [taps, G] table (one tiny launch) so a tap's weights for a
channel block are one contiguous vector instead of a gather at the filter's stride. Rows at the
strip's edges skip the slots outside the strip (no wasted FMAs); grad_out rows outside [0, Ho) are
skipped by a scalar branch. Strides other than the channel one travel divided by VEC (as in
``dwstream``) so the 16-byte channel runs are provable.

Grid = (row strips: (n, i_d, H phase, strip), channel blocks x column tiles x W phases).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import MAX_GRID_YZ, DirectStyleConfig, require_contiguous
from .depthwise_stream import strides_by_vec
from .host import INT32_LIMIT

__all__ = ["ALGORITHM", "MAX_SLOTS", "DwRollConfig", "RollWalk", "bind", "decline", "row_slots", "strip_rows_reason",
           "tap_major_table", "walk_decline"]

MAX_SLOTS = 8  # accumulator slots: taps of one H phase
_MAX_REGS_PER_THREAD = 128  # fp32 slots + the loaded grad_out tile per thread: no spills
_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")


@triton.jit
def _tap_major_kernel(w_ptr, wt_ptr, G, GP, TAPS, FY, FX, ws_g, ws_z, ws_y, ws_x, BLOCK: tl.constexpr):
    """wt[tap, g] = float(w[g, 0, z, y, x, 0]): the weight as an fp32 table contiguous along g, rows
    GP >= G apart (a multiple of 16, so the kernel's loads of a row vectorize)."""
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < TAPS * G
    g = idx % G
    tap = idx // G
    x = tap % FX
    y = (tap // FX) % FY
    z = tap // (FX * FY)
    v = tl.load(w_ptr + g * ws_g + z * ws_z + y * ws_y + x * ws_x, mask=live, other=0.0)
    tl.store(wt_ptr + tap * GP + g, v.to(tl.float32), mask=live)


def tap_major_table(geo: ConvGeometry, gp: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function making :func:`_tap_major_kernel`'s fp32 [tap, gp] table of a weight (one tiny launch); its
    rows past G are left unwritten (the kernels reading it never store those lanes)."""
    taps, G = geo.taps, geo.G
    table_block = 1024
    table = BoundKernel(_tap_major_kernel, (triton.cdiv(taps * G, table_block),), BLOCK=table_block, num_warps=4)
    _, fy, fx = geo.filt3
    ws = geo.w_strides
    sizes = (G, gp, taps, fy, fx, ws[0], ws[3], ws[4], ws[5])

    def make(w: torch.Tensor) -> torch.Tensor:
        wt = torch.empty(taps * gp, dtype=torch.float32, device=w.device)
        table(w, wt, *sizes)
        return wt

    return make


@triton.jit
def _slot_fma(J: tl.constexpr, TY: tl.constexpr, VEC: tl.constexpr, acc, v, wt_ptr, wtap, tap_step, GP, ch, glim):
    """Slot J += v * the weights of its tap (row wtap + J * tap_step of the table). A slot past the
    phase's taps reads zeros (glim 0): no branch, so the compiler issues every slot's loads at once."""
    if J < TY:
        wv = tl.load(wt_ptr + (wtap + J * tap_step) * GP + ch, mask=(ch // VEC) < glim, other=0.0)
        acc += v * wv[None, :]
    return acc


@triton.jit
def _dwroll_kernel(
    dy_ptr, wt_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GP, G_V,  # the weight table's row length (G rounded up to 16), channels / VEC
    Di, Hi, Wi, Do, Ho, Wo,
    FZ, FY, FX,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    NR_H, STRIPS, ROWS, CH_BLOCKS, COL_TILES,
    XSTEP, OWSTEP,  # W taps of one phase step by XSTEP; their grad_out column by -OWSTEP
    xs_n, xs_d, xs_h, xs_w, xs_g,  # grad_in (and every D) strides: n, d, h, w divided by VEC
    ys_n, ys_d, ys_h, ys_w, ys_g,  # grad_out strides: n, d, h, w divided by VEC
    VEC: tl.constexpr, TY: tl.constexpr, UNROLL: tl.constexpr, PREFETCH: tl.constexpr,
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
    # taps along H that hit this phase: y_j = yf + j*tstep (the dilation divides the stride), reading
    # grad_out row o_first - j + m; shifted by s_h*dil_h*FY to keep the dividend >= 0
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
    ch = cb * BLOCK_CH + tl.arange(0, BLOCK_CH)
    cmask = (ch // VEC) < G_V  # constant over aligned runs of VEC: the accesses vectorize
    x_cols = ((r_w + s_w * i) * xs_w * VEC)[:, None] + (ch * xs_g)[None, :]
    y_ch = ch * ys_g
    smask = col_ok[:, None] & cmask[None, :]
    x_plane = (n * xs_n + i_d * xs_d) * VEC

    # W taps that hit this phase: x_t = xf + t*XSTEP, reading grad_out column i + ow0 - t*OWSTEP
    xf = FX
    for x in range(XSTEP):
        a_w = r_w + pad_w + s_w * dil_w * FX - x * dil_w
        if (a_w % s_w == 0) & (x < xf):
            xf = x
    txr = tl.where(xf < FX, (FX - xf + XSTEP - 1) // XSTEP, 0)
    ow0 = (r_w + pad_w + s_w * dil_w * FX - xf * dil_w) // s_w - dil_w * FX
    # channel limit per slot: zero weights for the slots past this phase's taps
    gl = G_V
    g0 = tl.where(0 < ty, gl, 0)
    g1 = tl.where(1 < ty, gl, 0)
    g2 = tl.where(2 < ty, gl, 0)
    g3 = tl.where(3 < ty, gl, 0)
    g4 = tl.where(4 < ty, gl, 0)
    g5 = tl.where(5 < ty, gl, 0)
    g6 = tl.where(6 < ty, gl, 0)
    g7 = tl.where(7 < ty, gl, 0)
    tap_step = tstep * FX

    a0 = tl.zeros((BLOCK_W, BLOCK_CH), dtype=tl.float32)
    a1 = a0
    a2 = a0
    a3 = a0
    a4 = a0
    a5 = a0
    a6 = a0
    a7 = a0
    zero = a0
    u0 = m0 - (tyc - 1)
    # PREFETCH (FZ == 1): the first W tap's grad_out tile of the next step is loaded one step ahead, so
    # the step's only HBM miss overlaps the current step's FMAs (the other taps' tiles are L1 hits)
    a_d0 = i_d + pad_d + s_d * dil_d * FZ
    o_d0 = a_d0 // s_d - dil_d * FZ
    plane_ok = (a_d0 % s_d == 0) & (o_d0 >= 0) & (o_d0 < Do) & (ty > 0) & (txr > 0)
    o_w0 = i + ow0
    y_cols0 = (o_w0 * ys_w * VEC)[:, None] + y_ch[None, :]
    y_plane0 = (n * ys_n + o_d0 * ys_d) * VEC
    ok0 = col_ok & (o_w0 >= 0)
    lim0 = tl.where(plane_ok & (o_first + u0 >= 0) & (o_first + u0 < Ho), Wo, 0)
    v_next = tl.load(dy_ptr + y_plane0 + (o_first + u0) * ys_h * VEC + y_cols0,
                     mask=(ok0 & (o_w0 < lim0))[:, None] & cmask[None, :], other=0.0)
    for u in tl.range(u0, m1, loop_unroll_factor=UNROLL):
        # step u: grad_out row o_first + u feeds slot j (input row u + j) through tap y_j; slots whose
        # row lies outside the strip are never stored (slot 0 is stored from u = m0 on, up to m1 - 1)
        o_h = o_first + u
        v_first = v_next
        if PREFETCH:
            o_hn = o_h + 1
            lim = tl.where(plane_ok & (o_hn >= 0) & (o_hn < Ho), Wo, 0)
            v_next = tl.load(dy_ptr + y_plane0 + o_hn * ys_h * VEC + y_cols0,
                             mask=(ok0 & (o_w0 < lim))[:, None] & cmask[None, :], other=0.0)
        if (o_h >= 0) & (o_h < Ho) & (ty > 0):
            for z in range(FZ):
                a_d = i_d + pad_d + s_d * dil_d * FZ - z * dil_d
                o_d = a_d // s_d - dil_d * FZ
                if (a_d % s_d == 0) & (o_d >= 0) & (o_d < Do):
                    y_row = (n * ys_n + o_d * ys_d + o_h * ys_h) * VEC
                    for t in range(txr):
                        o_w = i + (ow0 - t * OWSTEP)
                        if PREFETCH:  # tap t = 0 was loaded a step ahead
                            lim_t = tl.where(t > 0, Wo, 0)
                            lm = (col_ok & (o_w >= 0) & (o_w < lim_t))[:, None] & cmask[None, :]
                            v = tl.load(dy_ptr + y_row + (o_w * ys_w * VEC)[:, None] + y_ch[None, :],
                                        mask=lm, other=0.0)
                            v = tl.where(t > 0, v, v_first).to(tl.float32)
                        else:
                            lm = (col_ok & (o_w >= 0) & (o_w < Wo))[:, None] & cmask[None, :]
                            v = tl.load(dy_ptr + y_row + (o_w * ys_w * VEC)[:, None] + y_ch[None, :],
                                        mask=lm, other=0.0).to(tl.float32)
                        wtap = (z * FY + yf) * FX + xf + t * XSTEP
                        a0 = _slot_fma(0, TY, VEC, a0, v, wt_ptr, wtap, tap_step, GP, ch, g0)
                        a1 = _slot_fma(1, TY, VEC, a1, v, wt_ptr, wtap, tap_step, GP, ch, g1)
                        a2 = _slot_fma(2, TY, VEC, a2, v, wt_ptr, wtap, tap_step, GP, ch, g2)
                        a3 = _slot_fma(3, TY, VEC, a3, v, wt_ptr, wtap, tap_step, GP, ch, g3)
                        a4 = _slot_fma(4, TY, VEC, a4, v, wt_ptr, wtap, tap_step, GP, ch, g4)
                        a5 = _slot_fma(5, TY, VEC, a5, v, wt_ptr, wtap, tap_step, GP, ch, g5)
                        a6 = _slot_fma(6, TY, VEC, a6, v, wt_ptr, wtap, tap_step, GP, ch, g6)
                        a7 = _slot_fma(7, TY, VEC, a7, v, wt_ptr, wtap, tap_step, GP, ch, g7)
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
class DwRollConfig(DirectStyleConfig):
    """dwroll: block_w columns (of one stride phase) x block_ch channels per program, strips of
    ``rows`` input rows of one H phase (0: the whole phase), the row loop unrolled ``unroll`` times
    (0: by the slot count, so rolling the slots renames registers instead of moving them), with
    ``prefetch`` 1 the next step's first grad_out tile loaded a step ahead (filters one tap deep in D)."""

    block_w: int
    block_ch: int
    rows: int
    unroll: int
    prefetch: int
    num_warps: int

    ALGORITHM: ClassVar[str] = "dwroll"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_w", "block_ch")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        reason = strip_rows_reason(self.rows)
        if reason:
            return reason
        un = self.unroll
        if not isinstance(un, int) or isinstance(un, bool) or not 0 <= un <= 8:
            return f"unroll={un!r} must be 0 (the slot count) or a factor from 1 to 8"
        if self.prefetch not in (0, 1):
            return f"prefetch={self.prefetch!r} must be 0 or 1"
        return None


def strip_rows_reason(rows: object) -> str | None:
    """Why ``rows`` (input rows of one H phase per program; 0: the whole phase) is not a valid strip."""
    if not isinstance(rows, int) or isinstance(rows, bool) or not 0 <= rows <= 4096:
        return f"rows={rows!r} must be 0 (the whole phase) or a row count from 1 to 4096"
    return None


def row_slots(fy: int, stride_h: int, dil_h: int) -> int | None:
    """Accumulator slots: the most taps along H that one stride phase holds; None when the dilation
    does not divide the stride (a phase's taps would not read consecutive grad_out rows)."""
    if stride_h % dil_h:
        return None
    return triton.cdiv(fy, stride_h // dil_h)


@dataclass(frozen=True)
class RollWalk:
    """The grid of a rolling-row walk (dwroll, dwtaps) on one problem: ``slots`` accumulator slots (the
    most H taps of a phase; None where the dilation does not divide the stride), W taps of a phase
    stepping by ``xstep``, the H / W stride phases, strips of ``rows`` input rows per H phase, column
    tiles and channel blocks. Shared by the kernels' bind and decline and the cost model's walk term."""

    slots: int | None
    xstep: int
    w_taps: int
    nr_h: int
    nr_w: int
    rows: int
    strips: int
    col_tiles: int
    ch_blocks: int

    @classmethod
    def plan(cls, p: ConvParams, block_w: int, block_ch: int, rows: int) -> RollWalk:
        in3, s3, d3, f3 = (p.spatial3(name) for name in ("input", "stride", "dilation", "filter"))
        xstep = s3[2] // math.gcd(s3[2], d3[2])
        phase_rows = triton.cdiv(in3[1], s3[1])  # the largest H phase
        rows = rows or phase_rows
        return cls(row_slots(f3[1], s3[1], d3[1]), xstep, triton.cdiv(f3[2], xstep), min(s3[1], in3[1]),
                   min(s3[2], in3[2]), rows, triton.cdiv(phase_rows, rows),
                   triton.cdiv(triton.cdiv(in3[2], s3[2]), block_w), triton.cdiv(p.G, block_ch))

    def programs(self, p: ConvParams) -> int:
        """Programs of the launch: (n, d, H phase, strip) x (channel block, column tile, W phase)."""
        return p.N * p.spatial3("input")[0] * self.nr_h * self.strips * self.ch_blocks * self.col_tiles * self.nr_w


def walk_decline(name: str, cfg: DwRollConfig, p: ConvParams, dtype: DataType,
                 max_w_taps: int | None = None) -> str | None:
    """The declines dwroll and dwtaps share (``name``: the family in the messages); ``max_w_taps``:
    the most W taps of a phase the family unrolls (None: a runtime loop, no limit)."""
    owner = name + ("'" if name.endswith("s") else "'s")  # dwroll's, dwtaps'
    if dtype.name not in _DTYPES:
        return f"{name} conv_bwd_data takes the dtypes {', '.join(_DTYPES)}, not {dtype.name}"
    if p.C != 1 or p.K != 1:
        return (f"{name} serves depthwise groups (C = K = 1 per group); this problem has C={p.C}, K={p.K}: "
                "direct / blockdiag / igemm fit it")
    walk = RollWalk.plan(p, cfg.block_w, cfg.block_ch, cfg.rows)
    slots = walk.slots
    if slots is None:
        return (f"{name} needs the dilation along H to divide the stride (dilation {p.dilation[-2]}, "
                f"stride {p.stride[-2]}): the taps of a phase must read consecutive grad_out rows")
    if slots > MAX_SLOTS:
        return f"a stride phase holds {slots} filter taps along H: more than {owner} {MAX_SLOTS} accumulator slots"
    if max_w_taps is not None and walk.w_taps > max_w_taps:
        return f"a stride phase holds {walk.w_taps} filter taps along W: more than {owner} {max_w_taps} unrolled W taps"
    if walk.ch_blocks * walk.col_tiles * walk.nr_w > MAX_GRID_YZ:
        return (f"{walk.ch_blocks} channel blocks x {walk.col_tiles} column tiles x {walk.nr_w} W phases exceed "
                f"the grid's {MAX_GRID_YZ}")
    per_thread = cfg.block_w * cfg.block_ch / (32 * cfg.num_warps)
    regs = (slots + 1) * per_thread
    if regs > _MAX_REGS_PER_THREAD:
        return (f"{slots} accumulator slots x block_w={cfg.block_w} x block_ch={cfg.block_ch} need {regs:g} "
                f"fp32 registers per thread with num_warps={cfg.num_warps} (more than {_MAX_REGS_PER_THREAD})")
    return None


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "dwroll", "conv_bwd_data")
    block_w, block_ch, num_warps = int(cfg.block_w), int(cfg.block_ch), int(cfg.num_warps)
    walk = RollWalk.plan(args.params, block_w, block_ch, int(cfg.rows))
    slots = walk.slots
    unroll = int(cfg.unroll) or slots
    G = geo.G
    vec, xs_v, ys_v = strides_by_vec(geo.x_strides, geo.y_strides, G)
    rows_grid = geo.N * geo.in3[0] * walk.nr_h * walk.strips
    use_int64 = force_int64 or geo.needs_int64 or rows_grid >= INT32_LIMIT
    grid = (rows_grid, walk.ch_blocks * walk.col_tiles * walk.nr_w)
    main = BoundKernel(_dwroll_kernel, grid, VEC=vec, TY=slots, UNROLL=unroll,
                       PREFETCH=bool(cfg.prefetch) and geo.filt3[0] == 1, BLOCK_W=block_w,
                       BLOCK_CH=block_ch, USE_INT64=use_int64, OP=args.fused.code, NUM_DS=len(args.ds),
                       USER_FN=user_fn_or_noop(args.user_fn), num_warps=num_warps)
    gp = triton.cdiv(G, 16) * 16
    sizes = (gp, G // vec, *geo.in3, *geo.out3, *geo.filt3, *geo.stride3, *geo.dil3, *geo.pad3,
             walk.nr_h, walk.strips, walk.rows, walk.ch_blocks, walk.col_tiles, walk.xstep,
             walk.xstep * geo.dil3[2] // geo.stride3[2],
             xs_v[1], xs_v[3], xs_v[4], xs_v[5], xs_v[0], ys_v[1], ys_v[3], ys_v[4], ys_v[5], ys_v[0])
    weight_table = tap_major_table(geo, gp)

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        main(dy, weight_table(w), out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline(cfg: DwRollConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    return walk_decline("dwroll", cfg, p, dtype)


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data", name="dwroll", config=DwRollConfig, decline=decline, bind=bind,
    description="depthwise dgrad with rolling row accumulators: a program walks the grad_out rows of a strip "
                "of input rows once, each row feeding every tap along H, fused epilogue",
    kernels=(_dwroll_kernel, _tap_major_kernel),
))
