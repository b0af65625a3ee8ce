"""Direct (no tl.dot) kernels for depthwise and few-channel grouped convolutions, both backward passes.

With C and K per group <= 8 (depthwise C = K = 1, ResNeXt 4 per group) a GEMM padded to tensor-core
tiles wastes most of its work; these problems are memory bound. Both kernels vectorize across the
flattened channel axis, which is the contiguous one for channels-last NHWGC, read each operand
(nearly) once from HBM and accumulate in fp32 registers. Every layout works through the per-logical
index strides of ``ConvGeometry`` (padded to 3D, so one kernel serves ndim 1/2/3).

conv_bwd_weight ("direct"): dw[g,k,tap,c] = sum over (n, out pos) dy[n,o,g,k] * x[n, o*s-lp+tap*dil, g, c].
    Grid = (channel blocks, tap blocks, split chunks). A program owns NT taps (all of them unless the
    filter is large; unrolled) and one chunk of the flattened (n, od, oh, ow) reduction, walked in
    tiles of BLOCK_P positions whose (n, od, oh, ow) decomposition is computed once per tile. Per
    tile it loads the dy tile once and, per tap, the shifted x tile (masked at the borders; the
    neighbouring taps' rows are L1 hits), reduces dy*x over the tile's positions and adds the result
    to that tap's row of a [taps x channels] fp32 accumulator.
    * depthwise (C = K = 1, ``_dw_direct_kernel``): the tiles are [BLOCK_P, BLOCK_CH] with BLOCK_CH
      contiguous groups: 16-byte loads for bf16/fp16 (ld.global.v4) in NHWGC.
    * few-channel groups (K*C > 1, ``_dw_grouped_kernel``): BLOCK_CH // (K*C) whole groups; dy is
      read as [BLOCK_P, groups, K] and each tap's x as [BLOCK_P, groups, C] (each element once, the
      k / c runs contiguous), and their per-group outer product [BLOCK_P, groups, K, C] is reduced.
    split == 1 applies the fused epilogue and stores; split > 1 writes fp32 partials that the
    deterministic reduce of ``common.py`` sums, applies the epilogue to and converts.

conv_bwd_data ("direct"): dx[n,i,g,c] = sum over k, taps with integer in-range ho: dy[n,ho,g,k]*w[g,k,tap,c].
    The vector axes are (BLOCK_P input positions) x (BLOCK_CH of the flattened (g, c) axis). The
    input positions of a program all lie in one stride phase (hi = r + s*i, phase = program id 2), so
    whether a tap hits is one scalar test per tap: taps that never hit this phase are skipped by a
    branch instead of being masked element by element. Phases with no taps still store f(0, D...).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import (
    MAX_GRID_YZ,
    WEIGHT_DTYPES,
    _dw_finalize_kernel,
    _reduction_chunk,
    _split_position,
    _tap_input,
    _tap_of,
    finalize_launcher,
    num_phases,
    require_contiguous,
    split_chunks,
    split_runner,
)
from .direct_grouped_plan import DirectDataConfig, DirectWeightConfig, auto_split, taps_per_program
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM_BWD_DATA", "ALGORITHM_BWD_WEIGHT", "MAX_CHANNELS_PER_GROUP", "DirectDataConfig",
           "DirectWeightConfig", "auto_split", "decline_bwd_data", "decline_bwd_weight", "bind_bwd_data",
           "bind_bwd_weight", "taps_per_program"]

MAX_CHANNELS_PER_GROUP = 8
_DATA_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")


# ------------------------------------------------------------------------------------------------
# conv_bwd_weight
# ------------------------------------------------------------------------------------------------
@triton.jit
def _dw_direct_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GKC, KC, C,  # flattened result-channel count, K*C, C
    P, chunk,  # reduction length N*Do*Ho*Wo and positions per chunk
    Do, Ho, Wo, Di, Hi, Wi,
    FY, FX, TAPS,  # filter H/W lengths (D is implied by TAPS) and taps = FZ*FY*FX
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # input strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides
    BLOCK_P: tl.constexpr, BLOCK_CH: tl.constexpr,
    NT: tl.constexpr, BLOCK_T: tl.constexpr,  # taps per program (unrolled) and its power of two
    FINAL: tl.constexpr,  # True: epilogue + store the result; False: store fp32 partials
    USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_c = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_s = tl.program_id(2)

    # ---- the channel block: flattened (g, k, c) of the result ----------------------------------
    j = pid_c * BLOCK_CH + tl.arange(0, BLOCK_CH)
    if USE_INT64:
        j = j.to(tl.int64)
    cmask = j < GKC
    g = j // KC
    kc = j % KC
    k = kc // C
    c = kc % C
    x_ch = g * xs_g + c * xs_c
    y_ch = g * ys_g + k * ys_k

    # ---- the taps of this program: t0 .. t0+NT-1 (scalars, unrolled below) --------------------
    t0 = pid_t * NT
    trow = tl.arange(0, BLOCK_T)

    # ---- the reduction chunk, walked in tiles of BLOCK_P positions ------------------------------
    sid, p_start, p_end, prow = _reduction_chunk(pid_s, chunk, P, BLOCK_P, USE_INT64)

    acc = tl.zeros((BLOCK_T, BLOCK_CH), dtype=tl.float32)
    for p0 in range(p_start, p_end, BLOCK_P):
        # position decomposition once per tile (vector over the tile's positions)
        p = p0 + prow
        pm = p < p_end
        n, od, oh, ow = _split_position(p, Do, Ho, Wo)
        ymask = pm[:, None] & cmask[None, :]
        y_pos = n * ys_n + od * ys_d + oh * ys_h + ow * ys_w
        dyv = tl.load(dy_ptr + (y_pos[:, None] + y_ch[None, :]), mask=ymask, other=0.0).to(tl.float32)
        b_d = od * s_d - pad_d  # input position of tap 0
        b_h = oh * s_h - pad_h
        b_w = ow * s_w - pad_w
        x_pos = n * xs_n + b_d * xs_d + b_h * xs_h + b_w * xs_w
        for tt in tl.static_range(NT):
            t = t0 + tt
            xm, x_tap = _tap_input(t, b_d, b_h, b_w, pm, FY, FX, TAPS, dil_d, dil_h, dil_w, Di, Hi, Wi,
                                   xs_d, xs_h, xs_w)
            xv = tl.load(x_ptr + ((x_pos + x_tap)[:, None] + x_ch[None, :]),
                         mask=xm[:, None] & cmask[None, :], other=0.0).to(tl.float32)
            part = tl.sum(xv * dyv, axis=0)
            acc = tl.where((trow == tt)[:, None], acc + part[None, :], acc)

    t = t0 + trow
    tmask = (trow < NT) & (t < TAPS)
    if FINAL:
        tz, ty, tx = _tap_of(t, FY, FX)
        w_ch = g * ws_g + k * ws_k + c * ws_c
        w_tap = tz * ws_z + ty * ws_y + tx * ws_x
        offs = w_tap[:, None] + w_ch[None, :]
        mask = tmask[:, None] & cmask[None, :]
        acc = apply_epilogue(acc, offs, mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                             OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        total = TAPS * GKC
        offs = sid * total + t[:, None] * GKC + j[None, :]
        tl.store(ws_ptr + offs, acc, mask=tmask[:, None] & cmask[None, :])


@triton.jit
def _dw_grouped_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G, P, chunk,
    Do, Ho, Wo, Di, Hi, Wi,
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,
    K: tl.constexpr, C: tl.constexpr, KP: tl.constexpr, CP: tl.constexpr,  # per group, and pow2
    BLOCK_P: tl.constexpr, BLOCK_G: tl.constexpr,
    NT: tl.constexpr, BLOCK_T: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    """Few-channel groups (K*C > 1): vectorized over BLOCK_G groups; the dy tile [P, G, K] and
    every tap's x tile [P, G, C] are read once (contiguous k / c runs) and their per-group outer
    product [P, G, K, C] is reduced over the tile's positions."""
    pid_c = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_s = tl.program_id(2)

    gi = pid_c * BLOCK_G + tl.arange(0, BLOCK_G)
    if USE_INT64:
        gi = gi.to(tl.int64)
    kk = tl.arange(0, KP)
    cc = tl.arange(0, CP)
    gk_mask = (gi < G)[:, None] & (kk < K)[None, :]  # [BG, KP]
    gc_mask = (gi < G)[:, None] & (cc < C)[None, :]  # [BG, CP]
    y_gk = gi[:, None] * ys_g + kk[None, :] * ys_k
    x_gc = gi[:, None] * xs_g + cc[None, :] * xs_c

    t0 = pid_t * NT
    trow = tl.arange(0, BLOCK_T)
    t4 = trow[:, None, None, None]

    sid, p_start, p_end, prow = _reduction_chunk(pid_s, chunk, P, BLOCK_P, USE_INT64)

    acc = tl.zeros((BLOCK_T, BLOCK_G, KP, CP), dtype=tl.float32)
    for p0 in range(p_start, p_end, BLOCK_P):
        p = p0 + prow
        pm = p < p_end
        n, od, oh, ow = _split_position(p, Do, Ho, Wo)
        y_pos = n * ys_n + od * ys_d + oh * ys_h + ow * ys_w
        dyv = tl.load(dy_ptr + (y_pos[:, None, None] + y_gk[None, :, :]),
                      mask=pm[:, None, None] & gk_mask[None, :, :], other=0.0).to(tl.float32)
        dy4 = dyv[:, :, :, None]
        b_d = od * s_d - pad_d
        b_h = oh * s_h - pad_h
        b_w = ow * s_w - pad_w
        x_pos = n * xs_n + b_d * xs_d + b_h * xs_h + b_w * xs_w
        for tt in tl.static_range(NT):
            t = t0 + tt
            xm, x_tap = _tap_input(t, b_d, b_h, b_w, pm, FY, FX, TAPS, dil_d, dil_h, dil_w, Di, Hi, Wi,
                                   xs_d, xs_h, xs_w)
            xv = tl.load(x_ptr + ((x_pos + x_tap)[:, None, None] + x_gc[None, :, :]),
                         mask=xm[:, None, None] & gc_mask[None, :, :], other=0.0).to(tl.float32)
            part = tl.sum(dy4 * xv[:, :, None, :], axis=0)  # [BG, KP, CP]
            acc = tl.where(t4 == tt, acc + part[None, :, :, :], acc)

    t = t0 + trow
    tmask = (trow < NT) & (t < TAPS)
    g4 = gi[None, :, None, None]
    k4 = kk[None, None, :, None]
    c4 = cc[None, None, None, :]
    mask = tmask[:, None, None, None] & (g4 < G) & (k4 < K) & (c4 < C)
    if FINAL:
        tz, ty, tx = _tap_of(t, FY, FX)
        w_tap = (tz * ws_z + ty * ws_y + tx * ws_x)[:, None, None, None]
        offs = w_tap + g4 * ws_g + k4 * ws_k + c4 * ws_c
        acc = apply_epilogue(acc, offs, mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                             OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        GKC = G * (K * C)
        offs = sid * (TAPS * GKC) + t[:, None, None, None] * GKC + g4 * (K * C) + k4 * C + c4
        tl.store(ws_ptr + offs, acc, mask=mask)


def bind_bwd_weight(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    block_p, block_ch = int(cfg.block_p), int(cfg.block_ch)
    num_warps, split = int(cfg.num_warps), int(cfg.split)
    require_contiguous(args, "direct")
    taps = geo.taps
    gkc = geo.G * geo.K * geo.C
    P = geo.N * math.prod(geo.out3)
    nt = taps_per_program(taps, block_ch, num_warps)
    if split <= 0:
        split = auto_split(p, block_p, block_ch, num_warps, args.a.element_size(), sm_count(args.out.device))
    split, chunk = split_chunks(split, P)
    total = taps * gkc
    use_int64 = (force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT
                 or P + chunk + block_p >= INT32_LIMIT)
    final = split == 1
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    geo_args = (*geo.out3, *geo.in3, geo.filt3[1], geo.filt3[2], taps, *geo.stride3, *geo.dil3, *geo.pad3,
                *geo.x_strides, *geo.w_strides, *geo.y_strides)
    kc = geo.K * geo.C
    common = dict(BLOCK_P=block_p, NT=nt, BLOCK_T=triton.next_power_of_2(nt), FINAL=final, USE_INT64=use_int64,
                  num_warps=num_warps, **epi)
    if kc > 1:
        # few-channel groups: block_ch flattened (g, k, c) channels = block_g whole groups
        kp, cp = triton.next_power_of_2(geo.K), triton.next_power_of_2(geo.C)
        block_g = max(1, block_ch // (kp * cp))
        main = BoundKernel(_dw_grouped_kernel, (triton.cdiv(geo.G, block_g), triton.cdiv(taps, nt), split),
                           K=geo.K, C=geo.C, KP=kp, CP=cp, BLOCK_G=block_g, **common)
        sizes = (geo.G, P, chunk, *geo_args)
    else:  # depthwise (C = K = 1): the flattened channel is g, contiguous rows
        main = BoundKernel(_dw_direct_kernel, (triton.cdiv(gkc, block_ch), triton.cdiv(taps, nt), split),
                           BLOCK_CH=block_ch, **common)
        sizes = (gkc, kc, geo.C, P, chunk, *geo_args)
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, gkc, geo.K * geo.C, geo.C, geo.filt3[1], geo.filt3[2], *geo.w_strides)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


# ------------------------------------------------------------------------------------------------
# conv_bwd_data
# ------------------------------------------------------------------------------------------------
@triton.jit
def _dx_direct_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    N, GC, C,
    Di, Hi, Wi, Do, Ho, Wo,
    FZ, FY, FX,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    MD, MH, MW,  # the largest phase's position counts per dim: ceil(in / stride)
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # result (and every D) strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # weight strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides
    K: tl.constexpr,  # output channels per group (<= 8)
    BLOCK_P: tl.constexpr, BLOCK_CH: tl.constexpr,
    USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_p = tl.program_id(0)
    pid_c = tl.program_id(1)
    phase = tl.program_id(2)

    # ---- the stride phase (r_d, r_h, r_w) and its position counts ---------------------------
    # only residues below the input length hold positions: min(s, in) phases per dim
    nr_w = tl.minimum(s_w, Wi)
    nr_h = tl.minimum(s_h, Hi)
    r_w = phase % nr_w
    r_h = (phase // nr_w) % nr_h
    r_d = phase // (nr_w * nr_h)
    cnt_d = (Di - r_d + s_d - 1) // s_d
    cnt_h = (Hi - r_h + s_h - 1) // s_h
    cnt_w = (Wi - r_w + s_w - 1) // s_w

    # ---- input positions of this phase: flattened (n, i_d, i_h, i_w), hi = r + s*i ---------
    if USE_INT64:
        pid_p = pid_p.to(tl.int64)
    pos = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    b_w = pos % MW
    q = pos // MW
    b_h = q % MH
    q = q // MH
    b_d = q % MD
    n = q // MD
    pmask = (n < N) & (b_d < cnt_d) & (b_h < cnt_h) & (b_w < cnt_w)
    y_n = n * ys_n

    # ---- channels: flattened (g, c) -------------------------------------------------------
    j = pid_c * BLOCK_CH + tl.arange(0, BLOCK_CH)
    if USE_INT64:
        j = j.to(tl.int64)
    cmask = j < GC
    g = j // C
    c = j % C
    y_ch = g * ys_g
    w_ch = g * ws_g + c * ws_c

    acc = tl.zeros((BLOCK_P, BLOCK_CH), dtype=tl.float32)
    # tap z hits phase r iff (r + pad - z*dil) % s == 0; shifted by s*dil*(F-1) to stay >= 0
    for z in range(FZ):
        a_d = r_d + pad_d + s_d * dil_d * (FZ - 1) - z * dil_d
        if a_d % s_d == 0:
            o_d = b_d + (a_d // s_d - dil_d * (FZ - 1))
            m_d = pmask & (o_d >= 0) & (o_d < Do)
            for y in range(FY):
                a_h = r_h + pad_h + s_h * dil_h * (FY - 1) - y * dil_h
                if a_h % s_h == 0:
                    o_h = b_h + (a_h // s_h - dil_h * (FY - 1))
                    m_h = m_d & (o_h >= 0) & (o_h < Ho)
                    for x in range(FX):
                        a_w = r_w + pad_w + s_w * dil_w * (FX - 1) - x * dil_w
                        if a_w % s_w == 0:
                            o_w = b_w + (a_w // s_w - dil_w * (FX - 1))
                            m = m_h & (o_w >= 0) & (o_w < Wo)
                            y_pos = y_n + o_d * ys_d + o_h * ys_h + o_w * ys_w
                            w_tap = z * ws_z + y * ws_y + x * ws_x
                            lmask = m[:, None] & cmask[None, :]
                            for kk in range(K):  # not unrolled: K=8 unrolled doubles the registers
                                dyv = tl.load(dy_ptr + y_pos[:, None] + (y_ch + kk * ys_k)[None, :],
                                              mask=lmask, other=0.0).to(tl.float32)
                                wv = tl.load(w_ptr + w_ch + (kk * ws_k + w_tap), mask=cmask,
                                             other=0.0).to(tl.float32)
                                acc += dyv * wv[None, :]

    x_pos = (n * xs_n + (r_d + s_d * b_d) * xs_d + (r_h + s_h * b_h) * xs_h
             + (r_w + s_w * b_w) * xs_w)
    offs = x_pos[:, None] + (g * xs_g + c * xs_c)[None, :]
    mask = pmask[:, None] & cmask[None, :]
    acc = apply_epilogue(acc, offs, mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                         OP, NUM_DS, USER_FN)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def bind_bwd_data(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    block_p, block_ch, num_warps = int(cfg.block_p), int(cfg.block_ch), int(cfg.num_warps)
    require_contiguous(args, "direct", "conv_bwd_data")
    md, mh, mw = (triton.cdiv(i, s) for i, s in zip(geo.in3, geo.stride3))
    n_pos = geo.N * md * mh * mw
    gc = geo.G * geo.C
    use_int64 = force_int64 or geo.needs_int64 or n_pos + block_p >= INT32_LIMIT
    grid = (triton.cdiv(n_pos, block_p), triton.cdiv(gc, block_ch), num_phases(geo.in3, geo.stride3))
    kernel = BoundKernel(
        _dx_direct_kernel, grid,
        K=geo.K, BLOCK_P=block_p, BLOCK_CH=block_ch, USE_INT64=use_int64,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=num_warps,
    )
    sizes = (geo.N, gc, geo.C, *geo.in3, *geo.out3, *geo.filt3, *geo.stride3, *geo.dil3, *geo.pad3,
             md, mh, mw, *geo.x_strides, *geo.w_strides, *geo.y_strides)

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


# ------------------------------------------------------------------------------------------------
# declines (the configs and their tile checks: direct_grouped_plan.py)
# ------------------------------------------------------------------------------------------------
def _decline_common(p: ConvParams, dtype: DataType, allowed: tuple[str, ...], op: str) -> str | None:
    if dtype.name == "fp16_fp8":
        return "the direct kernel computes in fp32 FMA; it has no fp8 compute (fp16_fp8)"
    if dtype.name not in allowed:
        return f"direct {op} takes the dtypes {', '.join(allowed)}, not {dtype.name}"
    if p.C > MAX_CHANNELS_PER_GROUP or p.K > MAX_CHANNELS_PER_GROUP:
        return (f"direct kernel serves C,K per group <= {MAX_CHANNELS_PER_GROUP}; "
                f"this problem has C={p.C}, K={p.K}")
    return None


def decline_bwd_data(cfg: DirectDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
                     fused: FusedOp) -> str | None:
    reason = _decline_common(p, dtype, _DATA_DTYPES, "conv_bwd_data")
    if reason:
        return reason
    if triton.cdiv(p.G * p.C, cfg.block_ch) > MAX_GRID_YZ:
        return f"G*C={p.G * p.C} needs more than {MAX_GRID_YZ} channel blocks of {cfg.block_ch}"
    phases = num_phases(p.input, p.stride)
    if phases > MAX_GRID_YZ:
        return f"{phases} stride phases exceed the grid's {MAX_GRID_YZ}"
    return None


def decline_bwd_weight(cfg: DirectWeightConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
                       fused: FusedOp) -> str | None:
    reason = _decline_common(p, dtype, WEIGHT_DTYPES, "conv_bwd_weight")
    if reason:
        return reason
    taps = math.prod(p.filter)
    nt = taps_per_program(taps, cfg.block_ch, cfg.num_warps)
    if triton.cdiv(taps, nt) > MAX_GRID_YZ:
        return (f"the filter has {taps} taps: more than {MAX_GRID_YZ} tap blocks of {nt} "
                f"(block_ch={cfg.block_ch}, num_warps={cfg.num_warps})")
    return None


ALGORITHM_BWD_DATA = register_algorithm(Algorithm(
    op="conv_bwd_data", name="direct", config=DirectDataConfig, decline=decline_bwd_data, bind=bind_bwd_data,
    description="direct (no tensor cores) depthwise / few-channel grouped dgrad: vectorized over "
                "the flattened (g, c) axis, one stride phase per program, fused epilogue",
    kernels=(_dx_direct_kernel,),
))

ALGORITHM_BWD_WEIGHT = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="direct", config=DirectWeightConfig, decline=decline_bwd_weight,
    bind=bind_bwd_weight,
    description="direct (no tensor cores) depthwise / few-channel grouped wgrad: [taps x channels] "
                "fp32 accumulators per program, split reduction with a deterministic fp32 reduce",
    kernels=(_dw_direct_kernel, _dw_grouped_kernel, _dw_finalize_kernel),
))
