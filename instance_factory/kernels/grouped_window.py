"""Grouped wgrad with few channels per group on tensor cores, a window of input rows in registers ("bdwin").

bdrow's block-diagonal tiles (GPT whole groups per program, only the diagonal blocks kept), walked so
that every input element is fetched once per filter column instead of once per tap. A program owns
GPT groups and one depth tap tz, and walks units (n, od, block of BLOCK_W output columns); within a
unit it steps down the output rows oh. Per row it holds the input rows of all FY filter rows as a
window of register tiles x_ty = x[ih(oh, ty), iw(ow, tx), (g, c)] with the FX column taps stacked in
the tile's rows, and one grad_out tile dy[oh, ow, (g, k)]:

    dw[ty][(tx, g, c), (g, k)] += x_ty[(tx, g, c), ow] @ dy[ow, (g, k)]      for ty in 0 .. FY-1

Moving to the next output row, the window moves by SHIFT = s_h / dil_h filter rows: with stride 1
two of three 3x3 rows are already in registers and only one new input row is loaded (stride 2: one
of three is reused). bdrow (one step per output row, the taps spread over programs) loads every
input element once per tap (9x for 3x3) and grad_out once per tap block; on the H100 it was bound by
those loads' per-element address and mask instructions (session 22, docs/BENCHMARKS.md).

The x tile is the MMA's A operand (M = FX' * GPT*C taps x channels rows, so wgmma's M >= 64 for
3-wide filters), grad_out the B operand (N = GPT*K, 16 and more). The column masks and pointers of a
unit are loop invariants; a row costs one scalar offset and its in-range test. The reduction (units)
is split in chunks with fp32 partials and the deterministic reduce the direct-style kernels share.
"""

from __future__ import annotations

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
    _dw_finalize_kernel,
    finalize_launcher,
    occupancy_split,
    require_contiguous,
    split_chunks,
    split_runner,
)
from .grouped_blockdiag import _BlockdiagTile, _channels_ok, _decline_common, _packed, _precision, tile_groups
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM_BWD_WEIGHT", "BdwinWeightConfig", "WindowPlan", "column_taps", "register_bytes",
           "unit_split", "window_plan", "window_shift"]

#: the MMA's rows: the window's (taps x channels: 64+ rows, wgmma) or grad_out's channels (under 64
#: rows Triton takes mma.sync). Either way the SASS passes every window tile through shared memory
#: for each MMA that reads it (Triton 3.6); dy is the faster one on some 14x14-28x28 layers.
MMA_ROWS = ("x", "dy")
MAX_FILTER_ROWS = 3  # the window's register tiles are named variables (x0, x1, x2)
_REGISTER_BUDGET = 160 * 4  # bytes per thread for the window, the grad_out tile and the accumulators


def window_shift(stride_h: int, dil_h: int, rows: int) -> int:
    """Filter rows the window moves per output row: row(oh + 1, ty) == row(oh, ty + s / dil) when the
    dilation divides the stride; ``rows`` (nothing reused) otherwise."""
    return min(stride_h // dil_h, rows) if stride_h % dil_h == 0 else rows


def register_bytes(rows: int, shift: int, txp: int, bn: int, bk: int, block_w: int, elem_bytes: int,
                   prefetch: bool) -> int:
    """Bytes of one program's live tiles: ``rows`` fp32 accumulators [txp*bn, bk], ``rows`` window
    tiles [txp*bn, block_w] and one grad_out tile [block_w, bk]; with ``prefetch`` the next row's
    ``shift`` fresh tiles and grad_out tile too."""
    tiles = rows + (shift if prefetch else 0)
    return rows * txp * bn * bk * 4 + (tiles * txp * bn + (1 + prefetch) * bk) * block_w * elem_bytes


def column_taps(fx: int, taps_x: int) -> int:
    """Column taps one program stacks: all ``fx`` (taps_x 0) or ``taps_x`` of them; programs take
    the filter's columns in blocks of that many (fewer taps: more groups per tile fit the registers,
    and their channel runs coalesce into longer loads, at one more read of the inputs per block)."""
    return fx if taps_x <= 0 else min(taps_x, fx)


@triton.jit
def _x_row(x_unit, x_mask, oh, ty, s_h, pad_h, dil_h, h_lim, xs_h, wl):
    """The window tile of filter row ty at output row oh: zeros where the input row is padding
    (h_lim: Hi, or 0 where the unit's input plane is)."""
    ih = oh * s_h - pad_h + ty * dil_h
    # the row test as a vector (a scalar-bool & tensor-bool mask mistypes in the interpreter)
    row_ok = ((wl * 0 + ih) >= 0) & ((wl * 0 + ih) < h_lim)
    return tl.load(x_unit + ih * xs_h, mask=x_mask & row_ok[None, :], other=0.0, cache_modifier=".ca")


@triton.jit
def _fresh_row(x_unit, x_mask, oh, ty: tl.constexpr, s_h, pad_h, dil_h, h_lim, xs_h, wl,
               ROWS: tl.constexpr, SHIFT: tl.constexpr):
    """Filter row ty's tile at output row oh if the window loads it there (it is not one the last
    row held); else zeros, which the window never reads."""
    tile = tl.zeros((x_mask.shape[0], x_mask.shape[1]), dtype=x_unit.dtype.element_ty)
    if ty < ROWS and ty >= ROWS - SHIFT:
        tile = _x_row(x_unit, x_mask, oh, ty, s_h, pad_h, dil_h, h_lim, xs_h, wl)
    return tile


@triton.jit
def _mma(x, b, acc, X_AS_B: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """acc += x @ b, or with X_AS_B its transpose b^T @ x^T (grad_out's channels as the MMA's rows:
    mma.sync under 64 of them instead of wgmma; see MMA_ROWS)."""
    if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
        x = x.to(tl.float32)
        b = b.to(tl.float32)
    if X_AS_B:
        acc = tl.dot(tl.trans(b), tl.trans(x), acc, input_precision=PRECISION)
    else:
        acc = tl.dot(x, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _store_row(acc, ty, sid, g0, G, FY, FX, TAPS, tz, tx0, TXB, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
               K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TXP: tl.constexpr, FINAL: tl.constexpr,
               X_AS_B: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """The diagonal blocks (row group == column group) of filter row ty's accumulator [(tx, g, c), (g, k)]
    (X_AS_B: its transpose)."""
    if X_AS_B:
        acc = tl.trans(acc)
    jb = tl.arange(0, TXP * BLOCK_N)
    tx = tx0 + jb // BLOCK_N
    jn = jb % BLOCK_N
    jk = tl.arange(0, BLOCK_K)
    rows_ok = _channels_ok(jn, g0, G, C, GPT) & (jb // BLOCK_N < TXB) & (tx < FX)
    keep = rows_ok[:, None] & _channels_ok(jk, g0, G, K, GPT)[None, :] & ((jn // C)[:, None] == (jk // K)[None, :])
    g = g0 + jk // K
    k = jk % K
    c = jn % C
    if FINAL:
        offs = (c * ws_c + tz * ws_z + ty * ws_y + tx * ws_x)[:, None] + (g * ws_g + k * ws_k)[None, :]
        acc = apply_epilogue(acc, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=keep)
    else:  # fp32 partials [split, taps, G*K*C], the layout of the shared reduce
        GKC = G * (K * C)
        t = (tz * FY + ty) * FX + tx
        offs = (sid * (TAPS * GKC) + t * GKC + c)[:, None] + (g * (K * C) + k * C)[None, :]
        tl.store(ws_ptr + offs, acc, mask=keep)


@triton.jit
def _bdwin_wgrad_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G, UNITS, chunk,  # groups, units N*Do*WB, units per split chunk
    WB, Do, Ho, Wo, Di, Hi, Wi,  # WB: column blocks per output row
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # input strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    TXB, NTB,  # column taps per program, programs per filter row (grid axis 1: depth tap x NTB)
    K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr,
    ALIGN: tl.constexpr,  # ConvGeometry.channel_alignment: multiplied back below so loads vectorize
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    TXP: tl.constexpr,  # next_pow2(TXB): the program's column taps stacked in the x tile's rows
    ROWS: tl.constexpr, SHIFT: tl.constexpr,  # filter rows (the window) and its move per output row
    PREFETCH: tl.constexpr,  # load the next row's tiles before this row's dots (registers for latency)
    X_AS_B: tl.constexpr,  # the MMA's orientation (see _mma)
    PACKED_X: tl.constexpr, PACKED_Y: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_g = tl.program_id(0)
    tz = tl.program_id(1) // NTB
    tx0 = (tl.program_id(1) % NTB) * TXB
    pid_s = tl.program_id(2)
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_z, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_z * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_d, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_d * ALIGN, ys_h * ALIGN, ys_w * ALIGN
    if USE_INT64:  # the row offsets oh * stride come from an int32 loop counter
        xs_h = xs_h.to(tl.int64)
        ys_h = ys_h.to(tl.int64)
    g0 = pid_g * GPT

    # ---- x tile rows: (tx, g, c), the column taps stacked; columns: BLOCK_W output positions --------
    jb = tl.arange(0, TXP * BLOCK_N)
    tx = tx0 + jb // BLOCK_N
    jn = jb % BLOCK_N
    x_rows_ok = _channels_ok(jn, g0, G, C, GPT) & (jb // BLOCK_N < TXB) & (tx < FX)
    if PACKED_X:
        x_ch = g0 * C + jn
    else:  # runs of ALIGN channels are contiguous and ALIGN-aligned: said outright, as in bdrow (session 38),
        # or the group-major x tile loads 2 bytes at a time (session 39)
        x_ch = tl.max_contiguous(tl.multiple_of((g0 + jn // C) * xs_g + (jn % C) * xs_c, ALIGN), ALIGN)
    tx_in = tx * dil_w
    # ---- grad_out tile columns: (g, k) ---------------------------------------------------------
    jk = tl.arange(0, BLOCK_K)
    k_ok = _channels_ok(jk, g0, G, K, GPT)
    if PACKED_Y:
        y_col = g0 * K + jk
    else:
        y_col = (g0 + jk // K) * ys_g + (jk % K) * ys_k
    wl = tl.arange(0, BLOCK_W)
    x_tile = (tx_in * xs_w + x_ch)[:, None] + (wl * (s_w * xs_w))[None, :]
    y_tile = (wl * ys_w)[:, None] + y_col[None, :]
    iw_tile = tx_in[:, None] + (wl * s_w)[None, :]  # input column minus the unit's first one
    if USE_INT64:
        x_tile = x_tile.to(tl.int64)
        y_tile = y_tile.to(tl.int64)

    sid = pid_s
    if USE_INT64:
        sid = sid.to(tl.int64)
    u_start = sid * chunk
    u_end = tl.minimum(u_start + chunk, UNITS)

    if X_AS_B:
        acc0 = tl.zeros((BLOCK_K, TXP * BLOCK_N), dtype=tl.float32)
    else:
        acc0 = tl.zeros((TXP * BLOCK_N, BLOCK_K), dtype=tl.float32)
    acc1 = acc0
    acc2 = acc0
    x0 = tl.zeros((TXP * BLOCK_N, BLOCK_W), dtype=x_ptr.dtype.element_ty)
    x1 = tl.zeros((TXP * BLOCK_N, BLOCK_W), dtype=x_ptr.dtype.element_ty)
    x2 = tl.zeros((TXP * BLOCK_N, BLOCK_W), dtype=x_ptr.dtype.element_ty)
    q0, q1, q2 = x0, x1, x2  # the next row's fresh window tiles and grad_out tile (PREFETCH)
    pb = tl.zeros((BLOCK_W, BLOCK_K), dtype=dy_ptr.dtype.element_ty)
    for u in range(u_start, u_end):
        wb = u % WB
        r = u // WB
        od = r % Do
        n = r // Do
        w0 = wb * BLOCK_W
        pm = wl < Wo - w0
        b_w = w0 * s_w - pad_w
        x_mask = x_rows_ok[:, None] & pm[None, :] & (iw_tile >= -b_w) & (iw_tile < Wi - b_w)
        y_mask = pm[:, None] & k_ok[None, :]
        i_d = od * s_d - pad_d + tz * dil_d
        h_lim = tl.where((i_d >= 0) & (i_d < Di), Hi, 0)
        x_unit = x_ptr + (n * xs_n + i_d * xs_d + b_w * xs_w) + x_tile
        y_unit = dy_ptr + (n * ys_n + od * ys_d + w0 * ys_w) + y_tile
        # the window as the step before output row 0 leaves it (rows it will reuse)
        if ROWS == 3:
            if SHIFT == 1:
                x1 = _x_row(x_unit, x_mask, -1, 1, s_h, pad_h, dil_h, h_lim, xs_h, wl)
                x2 = _x_row(x_unit, x_mask, -1, 2, s_h, pad_h, dil_h, h_lim, xs_h, wl)
            elif SHIFT == 2:
                x2 = _x_row(x_unit, x_mask, -1, 2, s_h, pad_h, dil_h, h_lim, xs_h, wl)
        elif ROWS == 2:
            if SHIFT == 1:
                x1 = _x_row(x_unit, x_mask, -1, 1, s_h, pad_h, dil_h, h_lim, xs_h, wl)
        if PREFETCH:  # row 0's loads; each row then issues the next row's before its dots
            pb = tl.load(y_unit, mask=y_mask, other=0.0)
            q0 = _fresh_row(x_unit, x_mask, 0, 0, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
            q1 = _fresh_row(x_unit, x_mask, 0, 1, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
            q2 = _fresh_row(x_unit, x_mask, 0, 2, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
        for oh in range(0, Ho):
            if PREFETCH:
                b, f0, f1, f2 = pb, q0, q1, q2
                nxt = tl.minimum(oh + 1, Ho - 1)  # the last row re-reads itself (unused) instead of a mask
                pb = tl.load(y_unit + nxt * ys_h, mask=y_mask, other=0.0)
                q0 = _fresh_row(x_unit, x_mask, nxt, 0, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
                q1 = _fresh_row(x_unit, x_mask, nxt, 1, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
                q2 = _fresh_row(x_unit, x_mask, nxt, 2, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
            else:
                b = tl.load(y_unit + oh * ys_h, mask=y_mask, other=0.0)
                f0 = _fresh_row(x_unit, x_mask, oh, 0, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
                f1 = _fresh_row(x_unit, x_mask, oh, 1, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
                f2 = _fresh_row(x_unit, x_mask, oh, 2, s_h, pad_h, dil_h, h_lim, xs_h, wl, ROWS, SHIFT)
            # move the window: the rows the last output row already holds move up, fresh ones fill in
            if ROWS == 1:
                x0 = f0
            elif ROWS == 2:
                if SHIFT == 1:
                    x0 = x1
                else:
                    x0 = f0
                x1 = f1
            else:
                if SHIFT == 1:
                    x0 = x1
                    x1 = x2
                elif SHIFT == 2:
                    x0 = x2
                    x1 = f1
                else:
                    x0 = f0
                    x1 = f1
                x2 = f2
            acc0 = _mma(x0, b, acc0, X_AS_B, UPCAST, PRECISION)
            if ROWS > 1:
                acc1 = _mma(x1, b, acc1, X_AS_B, UPCAST, PRECISION)
            if ROWS > 2:
                acc2 = _mma(x2, b, acc2, X_AS_B, UPCAST, PRECISION)

    _store_row(acc0, 0, sid, g0, G, FY, FX, TAPS, tz, tx0, TXB, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
               K, C, GPT, BLOCK_N, BLOCK_K, TXP, FINAL, X_AS_B, OP, NUM_DS, USER_FN)
    if ROWS > 1:
        _store_row(acc1, 1, sid, g0, G, FY, FX, TAPS, tz, tx0, TXB, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
                   out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                   K, C, GPT, BLOCK_N, BLOCK_K, TXP, FINAL, X_AS_B, OP, NUM_DS, USER_FN)
    if ROWS > 2:
        _store_row(acc2, 2, sid, g0, G, FY, FX, TAPS, tz, tx0, TXB, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
                   out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                   K, C, GPT, BLOCK_N, BLOCK_K, TXP, FINAL, X_AS_B, OP, NUM_DS, USER_FN)


def unit_split(units: int, base_programs: int, sms: int) -> int:
    """Reduction chunks: ~8 programs per SM, at most one per unit (a unit is a column of Ho rows).
    Capping the fp32 partial slices at the operands' bytes (7x7, N 64: one slice per unit is 3x
    them) made G46 C8 7x7 slower on the H100 (0.0203 -> 0.0247 ms): the slices stay in L2."""
    return occupancy_split(base_programs, sms, 8, units)


@dataclass(frozen=True)
class WindowPlan:
    """One problem's bdwin tiling, derived once for bind, decline and the cost model."""

    gpt: int  # groups per tile
    bn: int  # tile channels per column tap (next_pow2(gpt * C), at least 16)
    bk: int  # tile grad_out channels (next_pow2(gpt * K), at least 16)
    fz: int  # filter depth (a grid axis)
    rows: int  # filter rows: the window
    fx: int  # filter columns
    txb: int  # column taps per program
    ntb: int  # column-tap blocks per filter row
    shift: int  # filter rows the window moves per output row
    ho: int  # output rows a unit walks
    wb: int  # column blocks per output row
    units: int  # N * Do * wb
    base: int  # programs before the split: group blocks x depth taps x column-tap blocks

    @property
    def txp(self) -> int:
        """The column taps stacked in the tile: txb to a power of two."""
        return triton.next_power_of_2(self.txb)


def window_plan(p: ConvParams, block_w: int, block_n: int, taps_x: int) -> WindowPlan:
    """The tiling of a config's ``block_w``, ``block_n`` and ``taps_x`` on ``p``."""
    gpt, bn, bk = tile_groups(p.K, p.C, block_n)
    fz, fy, fx = p.spatial3("filter")
    txb = column_taps(fx, taps_x)
    ntb = triton.cdiv(fx, txb)
    do, ho, wo = p.spatial3("output")
    wb = triton.cdiv(wo, block_w)
    return WindowPlan(gpt, bn, bk, fz, fy, fx, txb, ntb,
                      window_shift(p.spatial3("stride")[1], p.spatial3("dilation")[1], fy), ho, wb,
                      p.N * do * wb, triton.cdiv(p.G, gpt) * fz * ntb)


def bind_bwd_weight(args: RunArgs, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once
    (``force_int64``: 64-bit offsets even where 32 bits hold them, for tests)."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "bdwin")
    block_w, num_warps, split = int(cfg.block_w), int(cfg.num_warps), int(cfg.split)
    plan = window_plan(args.params, block_w, int(cfg.block_n), int(cfg.taps_x))
    assert plan.rows <= MAX_FILTER_ROWS, f"declined: {plan.rows} filter rows"
    do, ho, wo = geo.out3
    gkc = geo.G * geo.K * geo.C
    total = geo.taps * gkc
    if split <= 0:
        split = unit_split(plan.units, plan.base, sm_count(args.out.device))
    split, chunk = split_chunks(split, plan.units)
    use_int64 = (force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT
                 or plan.units + chunk >= INT32_LIMIT)
    final = split == 1
    upcast, precision = _precision(args)
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    align = geo.channel_alignment()
    main = BoundKernel(
        _bdwin_wgrad_kernel, (triton.cdiv(geo.G, plan.gpt), plan.fz * plan.ntb, split),
        K=geo.K, C=geo.C, GPT=plan.gpt, ALIGN=align, BLOCK_W=block_w, BLOCK_N=plan.bn, BLOCK_K=plan.bk,
        TXP=plan.txp, ROWS=plan.rows, SHIFT=plan.shift,
        PREFETCH=bool(cfg.prefetch), X_AS_B=cfg.mma_rows == "dy",
        PACKED_X=_packed(geo.x_strides, geo.C), PACKED_Y=_packed(geo.y_strides, geo.K),
        FINAL=final, USE_INT64=use_int64, UPCAST=upcast, PRECISION=precision,
        num_warps=num_warps, num_stages=2 if do * ho == 1 else 1, **epi,
    )
    sizes = (geo.G, plan.units, chunk, plan.wb, do, ho, wo, *geo.in3, plan.rows, plan.fx, geo.taps,
             *geo.stride3, *geo.dil3, *geo.pad3, *geo.strides_over(align), plan.txb, plan.ntb)
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, gkc, geo.K * geo.C, geo.C, plan.rows, plan.fx, *geo.w_strides)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


@dataclass(frozen=True)
class BdwinWeightConfig(_BlockdiagTile):
    """bdwin wgrad: block_w output columns per unit x block_n channels per column tap, ``taps_x``
    column taps per program (:func:`column_taps`), the units' output rows walked with a window of
    filter-row input tiles in registers, ``prefetch`` (1: the next row's tiles loaded before this
    row's dots), ``mma_rows`` (:data:`MMA_ROWS`), the units split in ``split`` chunks (0: automatic,
    :func:`unit_split`). Triton pipelines only 1-D problems' units (a column of one row): bind sets
    num_stages 2 there (1-D G64 C8 on the H100: 0.059 ms, 0.082 with 1), 1 elsewhere."""

    ALGORITHM: ClassVar[str] = "bdwin"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_w", "block_n")

    block_w: int
    block_n: int
    taps_x: int
    prefetch: int
    mma_rows: str
    num_warps: int
    split: int

    def check(self) -> str | None:
        reason = super().check()
        if reason is None and (not isinstance(self.taps_x, int) or not 0 <= self.taps_x <= 8):
            return f"taps_x={self.taps_x!r} must be an int from 0 (all the filter's columns) to 8"
        if reason is None and self.prefetch not in (0, 1):
            return f"prefetch={self.prefetch!r} is not 0 or 1"
        if reason is None and self.mma_rows not in MMA_ROWS:
            return f"mma_rows={self.mma_rows!r} is not one of {MMA_ROWS}"
        return reason


def decline(cfg: BdwinWeightConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """blockdiag's declines, depthwise (dwslide's), filters taller than the window, and tiles whose
    window, grad_out tile and accumulators overflow the register budget."""
    if p.C == 1 and p.K == 1:
        return "depthwise (C = K = 1 per group) is dwslide's and dwstream's: bdwin's tiles would be 1/16 useful"
    reason = _decline_common(cfg, p, dtype, WEIGHT_DTYPES, "conv_bwd_weight")
    if reason:
        return reason
    plan = window_plan(p, cfg.block_w, cfg.block_n, cfg.taps_x)
    if plan.rows > MAX_FILTER_ROWS:
        return (f"the filter has {plan.rows} rows: bdwin's window holds at most {MAX_FILTER_ROWS} "
                "(bdrow walks taller filters)")
    if plan.fz * plan.ntb > MAX_GRID_YZ:
        return f"the filter's {plan.fz} depth taps x column blocks exceed the grid's {MAX_GRID_YZ}"
    need = register_bytes(plan.rows, plan.shift, plan.txp, plan.bn, plan.bk, cfg.block_w, dtype.data.itemsize,
                          bool(cfg.prefetch))
    budget = _REGISTER_BUDGET * 32 * cfg.num_warps
    if need > budget:
        return (f"{plan.rows} filter rows of {plan.fx} taps x {plan.bn} channels x block_w={cfg.block_w} need "
                f"{need // 1024} KiB of registers, over {budget // 1024} KiB for {cfg.num_warps} warps")
    return None


ALGORITHM_BWD_WEIGHT = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="bdwin", config=BdwinWeightConfig, decline=decline,
    bind=bind_bwd_weight,
    description="grouped wgrad with few channels per group on tensor cores: blockdiag's tiles, the "
                "output rows walked with the filter rows' input tiles held in registers (each input "
                "element loaded once per filter column), split reduction",
    kernels=(_bdwin_wgrad_kernel, _dw_finalize_kernel),
))
