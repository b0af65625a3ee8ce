"""Depthwise conv_bwd_weight on planar layouts, on tensor cores: "dwplane".

dw[g, 0, 0, z, y, x] = sum over output positions o of dy[o, g] * x[o*s - p + (z, y, x)*dil, g]

In channels-first (NGCHW) and, for one channel per group, group-major (GNHWC) tensors each (n, g)
plane is contiguous along W. The channels-last kernels (dwslide, dwslab, ...) put channels on the
vector lanes; on a plane that axis is H*W elements apart, so every lane reads its own sector, and
relayout (two copies and the channels-last kernel) was the best these layouts had.

Here the lanes run along W, and the taps along x become a matrix product. Cut each output row into
column blocks of TW columns. For block m (one (n, od, oh, column block) of group g) let
B[m, i] = dy[n, g, od, oh, ow0 + i] (i < TW) and, for filter row ty,
A[m, ty*J + j] = x[n, g, od*s_d - p_d + tz*dil_d, oh*s_h - p_h + ty*dil_h, c0 + j] (j < J), where the
block's first column c0 = ow0*s_w - p_w - OFF is p_w rounded up to VEC left of its first tap (so the
row loads are aligned VEC-element vectors). Then C = A^T B summed over the blocks holds every tap of
the program's filter rows on a diagonal: dw[tz, ty, tx] = sum over i of C[ty*J + OFF + s_w*i + dil_w*tx, i].
The products run as one tensor-core dot per BLOCK_M column blocks, and dy is loaded once for all filter
rows of a tz. The dot spends J*J*FYP products on TW*FX*FY useful ones; tensor cores have that headroom.
What bounds the kernel is issuing the loads: x's addresses and masks are built per (block, filter row)
and per (block, column) on a [BLOCK_M, FYP, J] tile, one add and one and per element (a flat index cost
a dozen integer operations per element and half the speed, docs/BENCHMARKS.md, session 37).

Small planes at stride 1 along H are cut into blocks of whole rows instead (session 39,
:func:`block_plan`): dy is the flat run of the block's rows and x one tile of every input row its filter
rows reach, so each input row is loaded once for all filter rows; the taps are read off the product in
:mod:`.depthwise_plane_rows`.

Grid = (G * FZ, row chunks), tz fastest (the programs of one group read the same dy). One chunk:
the epilogue is applied here; otherwise fp32 partials [chunk, taps, G] go through the
deterministic split reduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import (
    MAX_GRID_YZ,
    DirectStyleConfig,
    _dw_finalize_kernel,
    dot_operands,
    dot_tn,
    finalize_launcher,
    occupancy_split,
    require_contiguous,
    split_chunks,
    split_runner,
)
from .depthwise_plane_rows import _row_taps_out, gathers_taps
from .depthwise_stream import vector_width
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "DTYPES", "DwPlaneConfig", "PlaneBlocks", "bind", "block_columns", "block_plan", "decline",
           "geometry_plan", "model_plan", "model_work", "problem_plan", "split_plan",
           "planar_depthwise_reason", "planar_reason", "plane_tile_reason", "plane_vector"]

DTYPES = ("fp16", "bf16", "bf16_fp32w", "fp32_tf32")  # tensor-core products (tf32: three bf16 parts)
_MAX_ACC_PER_THREAD = 64  # fp32 accumulators of the [FYP*J, J] product per thread: 128 spilled (H100)


@triton.jit
def _plane_tiles(x_ptr, dy_ptr, m0, m_end, rows, g, tz, XB, TW_V, Do, Ho, Di, Hi, WI_V, WO_V, PADA_V,
                 s_d, s_h, s_w, dil_d, dil_h, pad_d, pad_h, xs_g, xs_n, xs_d, xs_h, ys_g, ys_n, ys_d, ys_h,
                 FY, BLOCK_M: tl.constexpr, J: tl.constexpr, FYP: tl.constexpr, VEC: tl.constexpr,
                 ROWS: tl.constexpr, XRP: tl.constexpr, WP: tl.constexpr):
    """The x block [BLOCK_M, FYP*J] (row blocks: [BLOCK_M, XRP*WP]) and the dy block [BLOCK_M, J] of blocks m0 + rows.

    x is gathered as [BLOCK_M, FYP, J]: the row offsets and row tests are computed per (block,
    filter row) and the column tests per (block, column), so each element costs one add and one
    and (a flat [BLOCK_M, FYP*J] index spent a dozen integer operations per element).
    Row blocks (ROWS > 0): XB counts a plane's row blocks and TW_V is ROWS*WO_V; dy is the flat run of
    the block's rows (the planes' rows are contiguous) and x holds every input row any filter row reaches
    from them, XRP rows of WP columns (padding masked), gathered like the column blocks' tiles."""
    m = m0 + rows
    live = m < m_end
    xb = m % XB
    r = m // XB
    if ROWS > 0:
        oh = xb * ROWS
        q = r
    else:
        oh = r % Ho
        q = r // Ho
    od = q % Do
    n = q // Do
    i = tl.arange(0, J)
    iv = i // VEC  # constant over aligned runs of VEC: the loads and their masks vectorize
    if ROWS > 0:  # dy: the flat run of rows oh.. (i < ROWS*Wo)
        ow_v = (oh * WO_V)[:, None] + iv[None, :]
        ym = live[:, None] & (iv < TW_V)[None, :] & (ow_v < Ho * WO_V)
        y_row = g * ys_g + n * ys_n + od * ys_d + oh * ys_h
    else:  # dy: columns ow0 + i, i < TW
        ow0_v = xb * TW_V
        ow_v = ow0_v[:, None] + iv[None, :]
        ym = live[:, None] & (iv < TW_V)[None, :] & (ow_v < WO_V)
        y_row = g * ys_g + n * ys_n + od * ys_d + oh * ys_h + ow0_v
    b = tl.load(dy_ptr + (y_row * VEC)[:, None] + i[None, :], mask=ym, other=0.0)
    # x: rows oh*s_h - p_h + ty*dil_h, columns ow0*s_w - PADA + j (row blocks: every input row they reach)
    i_d = od * s_d - pad_d + tz * dil_d
    d_ok = live & (i_d >= 0) & (i_d < Di)
    if ROWS > 0:  # input rows oh - p_h + xr (rows past the last reached one: in the product, never read off it)
        xr = tl.arange(0, XRP)[None, :, None]
        i_h = (oh * s_h - pad_h)[:, None, None] + xr  # [BLOCK_M, XRP, 1]
        row_ok = d_ok[:, None, None] & (i_h >= 0) & (i_h < Hi)
        row_off = ((g * xs_g + n * xs_n + i_d * xs_d)[:, None, None] + i_h * xs_h) * VEC
        c = tl.arange(0, WP)[None, None, :]
        a = tl.load(x_ptr + row_off + c, mask=row_ok & (c // VEC < WI_V), other=0.0)
        return tl.reshape(a, (BLOCK_M, XRP * WP)), b
    else:
        ty = tl.arange(0, FYP)[None, :, None]
        i_h = (oh * s_h - pad_h)[:, None, None] + ty * dil_h  # [BLOCK_M, FYP, 1]
        row_ok = d_ok[:, None, None] & (i_h >= 0) & (i_h < Hi) & (ty < FY)
        c0_v = ow0_v * s_w - PADA_V
        row_off = ((g * xs_g + n * xs_n + i_d * xs_d + c0_v)[:, None, None] + i_h * xs_h) * VEC
        j = tl.arange(0, J)[None, None, :]
        cv = c0_v[:, None, None] + j // VEC  # [BLOCK_M, 1, J]
        col_ok = (cv >= 0) & (cv < WI_V)
        a = tl.load(x_ptr + row_off + j, mask=row_ok & col_ok, other=0.0)
        return tl.reshape(a, (BLOCK_M, FYP * J)), b


@triton.jit
def _dwplane_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G, FZ, M, chunk, XB, TW_V,  # blocks per group M = N*Do*Ho*XB, per chunk, per row; columns per block / VEC
    Do, Ho, Di, Hi, WI_V, WO_V, PADA_V, OFF,  # widths / VEC; the blocks' first input column is ow0*s_w - PADA_V*VEC
    # (row blocks: M = N*Do*XB, XB row blocks per plane, TW_V = ROWS*WO_V, OFF = pad_w)
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h,
    xs_g, xs_n, xs_d, xs_h,  # x strides / VEC (w: 1)
    ws_g, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_d, ys_h,  # dy strides / VEC (w: 1)
    BLOCK_M: tl.constexpr, J: tl.constexpr, FYP: tl.constexpr, VEC: tl.constexpr, PREFETCH: tl.constexpr,
    ROWS: tl.constexpr, XRP: tl.constexpr, WP: tl.constexpr,  # ROWS 0: column blocks; else blocks of ROWS
    # whole rows with their XRP input rows of WP columns (small planes, s_h = 1; block_plan)
    TP: tl.constexpr, GATHER: tl.constexpr,  # FY*FX taps rounded up to a power of two; row blocks' read-off
    OPERANDS: tl.constexpr, FINAL: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_a = tl.program_id(0)  # (group, tz), tz fastest
    sid = tl.program_id(1)  # chunk of column blocks
    tz = pid_a % FZ
    g = pid_a // FZ
    if USE_INT64:
        g = g.to(tl.int64)
        sid = sid.to(tl.int64)
    m_start = sid * chunk
    m_end = tl.minimum(m_start + chunk, M)

    i = tl.arange(0, J)  # B's columns: output column i of the block (i < TW)
    iv = i // VEC
    rows = tl.arange(0, BLOCK_M)
    if ROWS > 0:
        acc = tl.zeros((XRP * WP, J), dtype=tl.float32)
    else:
        acc = tl.zeros((FYP * J, J), dtype=tl.float32)
    if PREFETCH:  # the next blocks' loads are in flight during this block's product
        a, b = _plane_tiles(x_ptr, dy_ptr, m_start, m_end, rows, g, tz, XB, TW_V, Do, Ho, Di, Hi, WI_V, WO_V,
                            PADA_V, s_d, s_h, s_w, dil_d, dil_h, pad_d, pad_h, xs_g, xs_n, xs_d, xs_h,
                            ys_g, ys_n, ys_d, ys_h, FY, BLOCK_M, J, FYP, VEC, ROWS, XRP, WP)
        for m0 in range(m_start, m_end, BLOCK_M):
            an, bn = _plane_tiles(x_ptr, dy_ptr, m0 + BLOCK_M, m_end, rows, g, tz, XB, TW_V, Do, Ho, Di, Hi, WI_V, WO_V,
                                  PADA_V, s_d, s_h, s_w, dil_d, dil_h, pad_d, pad_h, xs_g, xs_n, xs_d, xs_h,
                                  ys_g, ys_n, ys_d, ys_h, FY, BLOCK_M, J, FYP, VEC, ROWS, XRP, WP)
            acc = dot_tn(a, b, acc, OPERANDS)
            a = an
            b = bn
    else:
        for m0 in range(m_start, m_end, BLOCK_M):
            a, b = _plane_tiles(x_ptr, dy_ptr, m0, m_end, rows, g, tz, XB, TW_V, Do, Ho, Di, Hi, WI_V, WO_V, PADA_V,
                                s_d, s_h, s_w, dil_d, dil_h, pad_d, pad_h, xs_g, xs_n, xs_d, xs_h,
                                ys_g, ys_n, ys_d, ys_h, FY, BLOCK_M, J, FYP, VEC, ROWS, XRP, WP)
            acc = dot_tn(a, b, acc, OPERANDS)

    if ROWS > 0:
        _row_taps_out(acc, i, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, G, FY, FX,
                      TAPS, WI_V * VEC, WO_V * VEC, OFF, s_w, dil_h, dil_w, ws_g, ws_z, ws_y, ws_x,
                      ROWS, XRP, WP, J, FYP, TP, GATHER, FINAL, OP, NUM_DS, USER_FN)
    else:
        # dw[tz, ty, tx] = sum over i < TW of acc[ty*J + OFF + s_w*i + dil_w*tx, i]
        acc3 = tl.reshape(acc, (FYP, J, J))
        diag = tl.arange(0, J)[:, None] - s_w * i[None, :] - OFF  # [J, J]
        i_ok = (iv < TW_V)[None, :]
        tyv = tl.arange(0, FYP)
        keep_y = tyv < FY
        for tx in range(FX):
            sel = (diag == dil_w * tx) & i_ok
            res = tl.sum(tl.sum(tl.where(sel[None, :, :], acc3, 0.0), axis=2), axis=1)  # [FYP]
            # stored inline: through _store_taps this build compiles to other PTX than its rows were timed with
            if FINAL:
                offs = g * ws_g + tz * ws_z + tyv * ws_y + tx * ws_x
                res = apply_epilogue(res, offs, keep_y, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                                     OP, NUM_DS, USER_FN)
                tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep_y)
            else:  # fp32 partials [chunk, taps, G], the layout of the split reduce
                tap = (tz * FY + tyv) * FX + tx
                tl.store(ws_ptr + (sid * TAPS + tap) * G + g, res, mask=keep_y)


@dataclass(frozen=True)
class DwPlaneConfig(DirectStyleConfig):
    """dwplane: block_m column blocks per dot (its K); j input columns per block and filter row (the
    block holds up to j - dil*(FX-1) output columns at stride 1, :func:`block_columns`); the next
    blocks loaded during this block's product when ``prefetch`` is 1; num_stages of the load pipeline;
    the column blocks split in ``split`` chunks (0: automatic, ~8 programs per SM)."""

    block_m: int
    j: int
    prefetch: int
    num_warps: int
    num_stages: int
    split: int

    ALGORITHM: ClassVar[str] = "dwplane"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_m", "j")

    def check(self) -> str | None:
        return super().check() or plane_tile_reason(self)


def plane_vector(geo: ConvGeometry) -> int:
    """The largest power of two <= 8 dividing every plane stride and both widths: the kernel's
    loads along W are VEC-element vectors (16 bytes at 8) when the blocks start VEC-aligned."""
    xs, ys = geo.x_strides, geo.y_strides
    return vector_width((xs[0], xs[1], xs[3], xs[4], ys[0], ys[1], ys[3], ys[4], geo.in3[2]), geo.out3[2])


def block_columns(j: int, fx: int, stride_w: int, dil_w: int, pad_w: int = 0, vec: int = 1) -> tuple[int, int]:
    """(output columns per block, a multiple of ``vec``; the offset of the first tap's column in the
    block): the block's j input columns start ``vec``-aligned, pad rounded up to ``vec`` left of its
    first output column, and hold every tap of its columns. 0 columns: j is too narrow."""
    off = -pad_w % vec
    tw = (j - 1 - off - dil_w * (fx - 1)) // stride_w + 1
    return max(0, min(j, tw) // vec * vec), off


class PlaneBlocks(NamedTuple):
    """How the output planes are cut into blocks: column blocks of ``tw`` output columns (``rows`` 0;
    ``off``: the first tap's column in the block) or blocks of ``rows`` whole rows (``tw`` = rows*Wo,
    ``off`` = pad_w) whose x tile holds every input row their filter rows reach, ``xrp`` rows (a power of
    two) of ``wp`` columns (Wi rounded up to one); loads of ``vec``-element vectors."""

    rows: int
    tw: int
    off: int
    vec: int
    xrp: int = 0
    wp: int = 0

    def blocks(self, ho: int, wo: int) -> int:
        """Blocks per (n, od) plane."""
        return triton.cdiv(ho, self.rows) if self.rows else ho * triton.cdiv(wo, max(self.tw, 1))

    def x_columns(self, fy: int, j: int) -> int:
        """x elements a block loads, the rows of its [x, j] product: FYP slabs of j, or the row tile."""
        return self.xrp * self.wp if self.rows else _filter_rows_padded(fy) * j


def block_plan(j: int, fx: int, stride_w: int, dil_w: int, pad_w: int, vec: int, wi: int = 0, wo: int = 0,
               ho: int = 1, stride_h: int = 0, fy: int = 1, dil_h: int = 1, max_x: int = 0) -> PlaneBlocks:
    """Column blocks: :func:`block_columns` at ``vec``, or unvectorized when aligned blocks leave no room
    for a column. Small planes at stride 1 along H (``wi``, ``wo``, ``ho`` given): blocks of whole rows,
    as many as j output columns hold, whose x tile (rows + dil_h*(fy - 1) input rows rounded up to a power
    of two, of Wi columns rounded up to one; no halo: padding columns are simply never read off the
    product) holds at most ``max_x`` elements, when that loads fewer elements per plane (FYP*j + j a
    column block, xrp*wp + j a row block: the kernel is bound by issuing loads)."""
    tw, off = block_columns(j, fx, stride_w, dil_w, pad_w, vec)
    best = PlaneBlocks(0, tw, off, vec)
    if tw == 0:
        tw, off = block_columns(j, fx, stride_w, dil_w, pad_w, 1)
        best = PlaneBlocks(0, tw, off, 1)
    if stride_h != 1 or wi <= 0 or wo <= 0 or tw == 0:
        return best
    best_loads = best.blocks(ho, wo) * (best.x_columns(fy, j) + j)
    for rows in range(1, min(j // wo, ho) + 1):
        xrp = triton.next_power_of_2(rows + dil_h * (fy - 1))
        wp = max(triton.next_power_of_2(wi), 16 // xrp)  # the product's rows: at least the dot's 16
        if xrp * wp > max_x:
            break
        plan = PlaneBlocks(rows, rows * wo, pad_w, vec, xrp, wp)
        loads = plan.blocks(ho, wo) * (plan.x_columns(fy, j) + j)
        if loads < best_loads:
            best, best_loads = plan, loads
    return best


def geometry_plan(geo: ConvGeometry, j: int, num_warps: int) -> PlaneBlocks:
    """The blocks a launch on these tensors uses (row blocks need each plane's rows back to back)."""
    (_, ho, wo), (_, hi, wi) = geo.out3, geo.in3
    # (W stride 1: planar_reason); a 1D plane is one row
    rows_contiguous = (ho == hi == 1) or (geo.x_strides[4] == wi and geo.y_strides[4] == wo)
    return block_plan(j, geo.filt3[2], geo.stride3[2], geo.dil3[2], geo.pad3[2], plane_vector(geo), wi, wo, ho,
                      geo.stride3[1] if rows_contiguous else 0, geo.filt3[1], geo.dil3[1], _max_x(j, num_warps))


def _max_x(j: int, num_warps: int) -> int:
    """The largest x tile whose [x, j] fp32 product stays within the accumulators a thread may hold."""
    return _MAX_ACC_PER_THREAD * 32 * num_warps // j


def problem_plan(p: ConvParams, j: int, vec: int, num_warps: int = 4) -> PlaneBlocks:
    """The blocks a launch with j columns and num_warps takes on this problem (``vec``-element vectors)."""
    fy, dh, ho, sh = (p.filter[-2], p.dilation[-2], p.output[-2], p.stride[-2]) if p.ndim >= 2 else (1, 1, 1, 1)
    return block_plan(j, p.filter[-1], p.stride[-1], p.dilation[-1], p.left_pad[-1], vec, p.input[-1],
                      p.output[-1], ho, sh, fy, dh, _max_x(j, num_warps))


def planar_reason(geo: ConvGeometry) -> str | None:
    """Why the operands are not planar (each (n, g) plane contiguous along W), or None."""
    if geo.x_strides[5] != 1 or geo.y_strides[5] != 1:
        return ("dwplane reads (n, g) planes contiguous along W: channels-first layouts, or group-major "
                "with one channel per group; this layout's W stride is "
                f"{geo.x_strides[5]} (channels-last kernels fit it)")
    return None


def plane_tile_reason(cfg: DwPlaneConfig) -> str | None:
    """What is wrong with a dwplane config's tile (either pass): block_m and j at least the dot's
    smallest tile, prefetch 0 or 1, num_stages 1 to 4."""
    if cfg.block_m < 16 or cfg.j < 16:
        return f"block_m={cfg.block_m} and j={cfg.j} must be at least 16 (the dot's smallest tile)"
    if cfg.prefetch not in (0, 1):
        return f"prefetch={cfg.prefetch!r} must be 0 or 1"
    if cfg.num_stages not in (1, 2, 3, 4):
        return f"num_stages={cfg.num_stages!r} must be 1 to 4"
    return None


def planar_depthwise_reason(p: ConvParams, layout: LayoutTriple, dtype: DataType, dtypes: tuple[str, ...],
                            true_fp32: str) -> str | None:
    """Why a dwplane family (either pass; it runs ``dtypes``) declines the problem before its tile is
    considered: a dtype off the tensor cores (``true_fp32`` names the kernels that run it), channels per
    group other than one, a channels-last layout, or operands that are not planar; else None."""
    if dtype.name not in dtypes:
        return (f"dwplane multiplies on tensor cores: it takes {', '.join(dtypes)}, not {dtype.name} "
                f"({true_fp32} run true fp32)")
    if p.C != 1 or p.K != 1:
        return f"dwplane serves depthwise groups (C = K = 1); this problem has C={p.C}, K={p.K}"
    if layout.layout_family == "nhwgc":  # relayout's twins: dwplane never serves them (its rows stay apart)
        return "dwplane reads planar layouts (channels-first, group-major); channels-last kernels fit NHWGC"
    return planar_reason(ConvGeometry.build(p, layout))


def _filter_rows_padded(fy: int) -> int:
    return triton.next_power_of_2(fy)


def model_work(p: ConvParams, j: int, num_warps: int = 4) -> tuple[int, int, int]:
    """(x and dy tile elements loaded, products of the dots, load vector width) of one call with
    j-column blocks, for the cost model (tuning/roofline.py). The layout is not known there: the
    vector width is taken from the plane widths alone (planar strides are multiples of them)."""
    fz, fy, _ = (1, 1, *p.filter)[-3:]
    do, ho, wo = (1, 1, *p.output)[-3:]
    plan = model_plan(p, j, num_warps)
    x_cols = plan.x_columns(fy, j)
    blocks = p.G * fz * p.N * do * plan.blocks(ho, wo)
    return blocks * (x_cols + j), blocks * x_cols * j, plan.vec


def model_plan(p: ConvParams, j: int, num_warps: int = 4) -> PlaneBlocks:
    """The blocks the cost model prices (tuning/roofline.py): the layout is not known there, so the vector
    width is taken from the plane widths alone (planar strides are multiples of them)."""
    return problem_plan(p, j, vector_width((p.input[-1],), p.output[-1]), num_warps)


def auto_split(blocks: int, base_programs: int, block_m: int, sms: int) -> int:
    """Chunks of column blocks: ~8 programs per SM, each chunk at least two dots."""
    return occupancy_split(base_programs, sms, 8, max(1, blocks // (2 * block_m)))


def split_plan(blocks: int, base_programs: int, block_m: int, split: int, sms: int) -> tuple[int, int]:
    """(chunks, blocks per chunk) of a launch over ``blocks`` per group: ``split`` chunks, or
    :func:`auto_split`'s where it is 0. More than one chunk adds the split reduce's launch."""
    if split <= 0:
        split = auto_split(blocks, base_programs, block_m, sms)
    return split_chunks(min(split, MAX_GRID_YZ), blocks)


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "dwplane")
    block_m, j = int(cfg.block_m), int(cfg.j)
    fz, fy, fx = geo.filt3
    Do, Ho, Wo = geo.out3
    Wi = geo.in3[2]
    xs, ys, wst = geo.x_strides, geo.y_strides, geo.w_strides
    plan = geometry_plan(geo, j, int(cfg.num_warps))
    tw, off, vec = plan.tw, plan.off, plan.vec
    xb = triton.cdiv(Ho, plan.rows) if plan.rows else triton.cdiv(Wo, tw)  # blocks per plane / per row
    blocks = geo.N * Do * plan.blocks(Ho, Wo)
    base = geo.G * fz
    split, chunk = split_plan(blocks, base, block_m, int(cfg.split), sm_count(args.out.device))
    taps = geo.taps
    total = taps * geo.G
    use_int64 = force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT or blocks + chunk >= INT32_LIMIT
    final = split == 1
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    main = BoundKernel(_dwplane_kernel, (base, split),
                       BLOCK_M=block_m, J=j, FYP=_filter_rows_padded(fy), VEC=vec, PREFETCH=bool(cfg.prefetch),
                       ROWS=plan.rows, XRP=plan.xrp, WP=plan.wp, TP=triton.next_power_of_2(fy * fx),
                       GATHER=gathers_taps(plan.rows, plan.x_columns(fy, j), j),
                       OPERANDS=dot_operands(args.dtype), FINAL=final, USE_INT64=use_int64,
                       num_warps=int(cfg.num_warps), num_stages=int(cfg.num_stages), **epi)
    pada = geo.pad3[2] + (0 if plan.rows else off)
    sizes = (geo.G, fz, blocks, chunk, xb, tw // vec, Do, Ho, geo.in3[0], geo.in3[1], Wi // vec,
             Wo // vec, pada // vec, off, fy, fx, taps, *geo.stride3, *geo.dil3, geo.pad3[0], geo.pad3[1],
             xs[0] // vec, xs[1] // vec, xs[3] // vec, xs[4] // vec, wst[0], wst[3], wst[4], wst[5],
             ys[0] // vec, ys[1] // vec, ys[3] // vec, ys[4] // vec)
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, geo.G, 1, 1, fy, fx, *wst)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


def decline(cfg: DwPlaneConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    reason = planar_depthwise_reason(p, layout, dtype, DTYPES, "dwslide / dwstream")
    if reason:
        return reason
    fx, sw, dw = p.filter[-1], p.stride[-1], p.dilation[-1]
    if block_columns(cfg.j, fx, sw, dw)[0] < 1:
        return (f"j={cfg.j} input columns hold no output column of a {fx}-tap row at stride {sw}, "
                f"dilation {dw}")
    if geometry_plan(ConvGeometry.build(p, layout), cfg.j, cfg.num_warps).rows:
        return None  # row blocks: their x tile was sized to the accumulators
    fyp = _filter_rows_padded(p.filter[-2] if p.ndim >= 2 else 1)
    per_thread = fyp * cfg.j * cfg.j / (32 * cfg.num_warps)
    if per_thread > _MAX_ACC_PER_THREAD:
        return (f"{fyp} filter rows x j={cfg.j} x j needs {per_thread:g} fp32 accumulators per thread "
                f"with num_warps={cfg.num_warps} (more than {_MAX_ACC_PER_THREAD})")
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="dwplane", config=DwPlaneConfig, decline=decline, bind=bind,
    description="depthwise wgrad on planar layouts (channels-first, group-major C = 1): taps along x as a "
                "tensor-core product of input and grad_out row blocks, read off its diagonals",
    kernels=(_dwplane_kernel, _dw_finalize_kernel),
))
