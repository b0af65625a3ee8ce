"""Grouped dgrad with few channels per group on block-diagonal tiles, one pipelined tap loop ("bdtap").

``blockdiag`` walks a stride phase's taps in three nested loops with a branch per tap (does it hit
the phase?), so Triton's software pipeliner sees at most the innermost filter row: each tap's dy
tile is loaded, converted and multiplied before the next load starts. Here the taps that hit the
program's stride phase are enumerated up front, per dimension an arithmetic progression

    x hits phase r  <=>  (r + pad - x*dil) % s == 0  <=>  x = first + j * s / gcd(s, dil),

and walked as one flat ``tl.range`` loop with ``num_stages`` operand tiles in flight (cp.async),
so the loads of the next taps overlap the current tap's tensor-core step. Tiles, operands and the
epilogue are blockdiag's: GPT whole groups per program, the weight as a block-diagonal
[GPT*K x GPT*C] tile, one stride phase per program (grid axis 2).
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
from .common import num_phases, require_contiguous
from .grouped_blockdiag import (
    BlockdiagDataConfig,
    _channels_ok,
    _packed,
    _precision,
    tile_groups,
)
from .grouped_blockdiag import decline_bwd_data as blockdiag_decline_bwd_data
from .host import INT32_LIMIT, PIPELINE_SMEM_BUDGET, check_num_stages, pipeline_stages

__all__ = ["ALGORITHM_BWD_DATA", "BdtapDataConfig", "tap_step"]


def tap_step(stride: int, dilation: int) -> int:
    """Distance between consecutive taps of one dimension that hit the same stride phase."""
    return stride // math.gcd(stride, dilation)


@triton.jit
def _phase_taps(r, pad, dil, s, F, STEP):
    """(first tap, number of taps, dy offset of the first tap, its decrement per tap) of one
    dimension for phase residue r: taps first, first + STEP, ... < F hit it; a hitting tap x reads
    dy at input index // s + (r + pad - x*dil) // s (exact division)."""
    base = r + pad + s * dil * (F - 1)  # shifted by s*dil*(F-1) so that the tested value stays >= 0
    first = 0
    found = 0
    for j in range(0, STEP):
        hit = ((base - j * dil) % s == 0) & (found == 0)
        first = tl.where(hit, j, first)
        found = tl.where(hit, 1, found)
    count = tl.where((found == 1) & (first < F), (F - 1 - first) // STEP + 1, 0)
    off0 = (base - first * dil) // s - dil * (F - 1)
    return first, count, off0, (STEP * dil) // s


@triton.jit
def _bdtap_dgrad_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    N, G,
    Di, Hi, Wi, Do, Ho, Wo,
    FZ, FY, FX,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    st_d, st_h, st_w,  # tap_step per dim
    MD, MH, MW,  # the largest phase's position counts per dim: ceil(in / stride)
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # result (and every D) strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # weight strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr,  # per group, groups per tile
    ALIGN: tl.constexpr,  # ConvGeometry.channel_alignment: multiplied back below so loads vectorize
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
    PACKED_X: tl.constexpr, PACKED_Y: tl.constexpr,  # (g, c) / (g, k) contiguous: flat offsets
    USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_g = tl.program_id(1)
    phase = tl.program_id(2)
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_z, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_z * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_d, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_d * ALIGN, ys_h * ALIGN, ys_w * ALIGN

    # ---- the stride phase (r_d, r_h, r_w) and the taps hitting it ------------------------------
    nr_w = tl.minimum(s_w, Wi)
    nr_h = tl.minimum(s_h, Hi)
    r_w = phase % nr_w
    r_h = (phase // nr_w) % nr_h
    r_d = phase // (nr_w * nr_h)
    cnt_d = (Di - r_d + s_d - 1) // s_d
    cnt_h = (Hi - r_h + s_h - 1) // s_h
    cnt_w = (Wi - r_w + s_w - 1) // s_w
    fz, nz, ez, dez = _phase_taps(r_d, pad_d, dil_d, s_d, FZ, st_d)
    fy, ny, ey, dey = _phase_taps(r_h, pad_h, dil_h, s_h, FY, st_h)
    fx, nx, ex, dex = _phase_taps(r_w, pad_w, dil_w, s_w, FX, st_w)
    w_first = fz * ws_z + fy * ws_y + fx * ws_x

    # ---- input positions of this phase: flattened (n, i_d, i_h, i_w), hi = r + s*i ----------
    if USE_INT64:
        pid_m = pid_m.to(tl.int64)
    pos = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    b_w = pos % MW
    q = pos // MW
    b_h = q % MH
    q = q // MH
    b_d = q % MD
    n = q // MD
    pmask = (n < N) & (b_d < cnt_d) & (b_h < cnt_h) & (b_w < cnt_w)
    y_n = n * ys_n

    # ---- the GPT groups of this program: columns (g, c), rows (g, k) ---------------------------
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
    b_off = ((g0 + gl_k) * ws_g + (jk % K) * ws_k)[:, None] + ((jn % C) * ws_c)[None, :]
    b_mask = k_ok[:, None] & n_ok[None, :] & (gl_k[:, None] == gl_n[None, :])

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    nyx = ny * nx
    for i in tl.range(0, nz * nyx, num_stages=NUM_STAGES):
        iz = i // nyx
        iy = (i // nx) % ny
        ix = i % nx
        o_d = b_d + (ez - iz * dez)
        o_h = b_h + (ey - iy * dey)
        o_w = b_w + (ex - ix * dex)
        m = pmask & (o_d >= 0) & (o_d < Do) & (o_h >= 0) & (o_h < Ho) & (o_w >= 0) & (o_w < Wo)
        y_pos = y_n + o_d * ys_d + o_h * ys_h + o_w * ys_w
        a = tl.load(dy_ptr + (y_pos[:, None] + a_col[None, :]), mask=m[:, None] & k_ok[None, :], other=0.0)
        w_tap = w_first + (iz * st_d) * ws_z + (iy * st_h) * ws_y + (ix * st_w) * ws_x
        b = tl.load(w_ptr + w_tap + b_off, mask=b_mask, other=0.0)
        if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    x_pos = (n * xs_n + (r_d + s_d * b_d) * xs_d + (r_h + s_h * b_h) * xs_h
             + (r_w + s_w * b_w) * xs_w)
    if PACKED_X:
        x_col = g0 * C + jn
    else:
        x_col = (g0 + gl_n) * xs_g + (jn % C) * xs_c
    offs = x_pos[:, None] + x_col[None, :]
    mask = pmask[:, None] & n_ok[None, :]
    acc = apply_epilogue(acc, offs, mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                         OP, NUM_DS, USER_FN)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _stage_bytes(bm: int, bn: int, bk: int, elem_bytes: int) -> int:
    """Shared memory of one pipeline stage: the dy tile (bm x bk) and the weight tile (bk x bn)."""
    return (bm + bn) * bk * elem_bytes


def bind_bwd_data(args: RunArgs) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "bdtap", "conv_bwd_data")
    gpt, bn, bk = tile_groups(geo.K, geo.C, int(cfg.block_n))
    bm = int(cfg.block_m)
    md, mh, mw = (triton.cdiv(i, s) for i, s in zip(geo.in3, geo.stride3))
    n_pos = geo.N * md * mh * mw
    use_int64 = geo.needs_int64 or n_pos + bm >= INT32_LIMIT
    upcast, precision = _precision(args)
    align = geo.channel_alignment()
    stages = pipeline_stages(_stage_bytes(bm, bn, bk, args.a.element_size()), most=int(cfg.num_stages))
    grid = (triton.cdiv(n_pos, bm), triton.cdiv(geo.G, gpt), num_phases(geo.in3, geo.stride3))
    kernel = BoundKernel(
        _bdtap_dgrad_kernel, grid,
        K=geo.K, C=geo.C, GPT=gpt, ALIGN=align, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, NUM_STAGES=stages,
        PACKED_X=_packed(geo.x_strides, geo.C), PACKED_Y=_packed(geo.y_strides, geo.K),
        USE_INT64=use_int64, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=int(cfg.num_warps),
    )
    steps = tuple(tap_step(s, d) for s, d in zip(geo.stride3, geo.dil3))
    sizes = (geo.N, geo.G, *geo.in3, *geo.out3, *geo.filt3, *geo.stride3, *geo.dil3, *geo.pad3, *steps,
             md, mh, mw, *geo.strides_over(align))

    def run(dy, w, out, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


@dataclass(frozen=True)
class BdtapDataConfig(BlockdiagDataConfig):
    """bdtap dgrad: blockdiag's block_m x block_n tile, the taps walked with at most ``num_stages``
    operand tiles in flight (fewer where shared memory runs out)."""

    ALGORITHM: ClassVar[str] = "bdtap"

    num_stages: int

    def check(self) -> str | None:
        return super().check() or check_num_stages(self.num_stages)


def decline_bwd_data(cfg: BdtapDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
                     fused: FusedOp) -> str | None:
    reason = blockdiag_decline_bwd_data(cfg, p, layout, dtype, fused)  # same tiles, grid and messages
    if reason:
        return reason
    _, bn, bk = tile_groups(p.K, p.C, cfg.block_n)
    need = _stage_bytes(cfg.block_m, bn, bk, dtype.data.itemsize)
    if need > PIPELINE_SMEM_BUDGET:
        return (f"one stage of block_m={cfg.block_m} x {bk} dy and {bk} x {bn} weight tiles in {dtype.name} "
                f"needs {need // 1024} KiB of shared memory, over the {PIPELINE_SMEM_BUDGET // 1024} KiB budget")
    return None


ALGORITHM_BWD_DATA = register_algorithm(Algorithm(
    op="conv_bwd_data", name="bdtap", config=BdtapDataConfig, decline=decline_bwd_data, bind=bind_bwd_data,
    description="grouped dgrad with few channels per group on tensor cores: blockdiag's tiles, the taps "
                "hitting the stride phase walked as one software-pipelined loop, fused epilogue",
    kernels=(_bdtap_dgrad_kernel,),
))
