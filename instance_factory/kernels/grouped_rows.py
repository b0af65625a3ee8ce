"""Grouped wgrad with few channels per group on tensor cores, walking output rows ("bdrow").

The same block-diagonal tiles as ``blockdiag`` (GPT whole groups per program, the program's taps
side by side in the GEMM's N axis, only the diagonal blocks kept), with a different walk of the
reduction. ``blockdiag`` steps through the flattened (n, od, oh, ow) positions and decomposes
every position of every tile with runtime divisions: on an H100 its loop spent ~500 instructions
per thread per step on index math around two wgmma (SASS of G32 C8 56x56: 164 IMAD, 112 ISETP,
16 IABS + MUFU per step) and ran at a quarter of cuDNN's speed.

Here a step is a block of BLOCK_W positions of one output row (n, od, oh): the row's coordinates
are scalars carried from step to step (a block counter that wraps into oh, od, n), so a tile's
positions cost one add each, and a tap's rows (z, y) are in range or not for the whole tile
(a column mask). Per step:

    dw[(g, k), (tap, g, c)] += dy[row, ow0:ow0+BW, (g, k)]^T @ x[row*s + tap, ow0*s:..., (g, c)]

The reduction (N*Do*Ho rows times ceil(Wo / BLOCK_W) blocks) is split in chunks of steps with fp32
partials and the deterministic reduce the direct-style kernels share.
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
    MAX_SPLIT,
    WEIGHT_DTYPES,
    _dw_finalize_kernel,
    _tap_of,
    finalize_launcher,
    occupancy_split,
    require_contiguous,
    split_chunks,
    split_runner,
)
from .grouped_blockdiag import (
    _BlockdiagTile,
    _channels_ok,
    _decline_common,
    _packed,
    _precision,
    tile_groups,
)
from .host import INT32_LIMIT, PIPELINE_SMEM_BUDGET, pipeline_stages, sm_count

__all__ = ["ALGORITHM_BWD_WEIGHT", "BdrowWeightConfig", "program_taps", "row_split"]

_MAX_TAPS_PER_PROGRAM = 16


def _stage_bytes(bk: int, bn: int, taps: int, block_w: int, elem_bytes: int) -> int:
    """Shared memory of one pipeline stage: the dy tile (bk rows) and ``taps`` x tiles (bn rows each),
    block_w positions wide."""
    return (bk + taps * bn) * block_w * elem_bytes


def program_taps(taps: int, bk: int, bn: int, num_warps: int, block_w: int, elem_bytes: int) -> int:
    """Taps side by side in one program's columns: at most 64 fp32 accumulators per thread, 16 taps,
    and one pipeline stage of operand tiles ((bk + taps * bn) x block_w) within the shared-memory
    budget; a large filter is spread evenly over grid axis 1. 0 when not even one tap fits."""
    cap = max(1, (64 * 32 * num_warps) // (bk * bn))
    cap = min(1 << (cap.bit_length() - 1), _MAX_TAPS_PER_PROGRAM)
    while cap and _stage_bytes(bk, bn, cap, block_w, elem_bytes) > PIPELINE_SMEM_BUDGET:
        cap //= 2
    return triton.cdiv(taps, triton.cdiv(taps, cap)) if cap else 0


@triton.jit
def _bdrow_wgrad_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    G, STEPS, chunk,  # groups, reduction steps N*Do*Ho*WB, steps per split chunk
    WB, Do, Ho, Wo, Di, Hi, Wi,  # WB: position blocks per output row
    FY, FX, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # input strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr,
    ALIGN: tl.constexpr,  # ConvGeometry.channel_alignment: multiplied back below so loads vectorize
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NT: tl.constexpr, NTP: tl.constexpr,  # taps per program and its power of two
    PACKED_X: tl.constexpr, PACKED_Y: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_g = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_s = tl.program_id(2)
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_z, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_z * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_d, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_d * ALIGN, ys_h * ALIGN, ys_w * ALIGN
    g0 = pid_g * GPT
    t0 = pid_t * NT

    # ---- rows: (g, k) of the GPT groups -----------------------------------------------------
    jk = tl.arange(0, BLOCK_K)
    gl_k = jk // K
    k_ok = _channels_ok(jk, g0, G, K, GPT)
    if PACKED_Y:
        y_row = g0 * K + jk
    else:
        y_row = (g0 + gl_k) * ys_g + (jk % K) * ys_k

    # ---- columns: (tap, g, c), the program's taps side by side --------------------------------
    jb = tl.arange(0, NTP * BLOCK_N)
    tap_l = jb // BLOCK_N
    jn = jb % BLOCK_N
    gl_n = jn // C
    t = t0 + tap_l
    ch_ok = _channels_ok(jn, g0, G, C, GPT) & (tap_l < NT) & (t < TAPS)
    tz, ty, tx = _tap_of(t, FY, FX)
    tz_in = tz * dil_d  # the taps' input offsets from a position's tap-0 input position
    ty_in = ty * dil_h
    tx_in = tx * dil_w
    if PACKED_X:
        x_ch = g0 * C + jn
    else:  # runs of ALIGN channels are contiguous and start ALIGN-aligned (ALIGN > 1 only with unit channel
        # strides): said outright, since Triton could not see it through the two remainders and loaded a
        # group-major x tile 2 bytes at a time, outside the cp.async pipeline (session 38)
        x_ch = tl.max_contiguous(tl.multiple_of((g0 + gl_n) * xs_g + (jn % C) * xs_c, ALIGN), ALIGN)
    x_col = tz_in * xs_d + ty_in * xs_h + tx_in * xs_w + x_ch
    if USE_INT64:
        y_row = y_row.to(tl.int64)
        x_col = x_col.to(tl.int64)

    # ---- this program's steps [s_start, s_end); the row coordinates of its first step --------
    sid = pid_s
    if USE_INT64:
        sid = sid.to(tl.int64)
    s_start = sid * chunk
    s_end = tl.minimum(s_start + chunk, STEPS)
    wb = s_start % WB
    r = s_start // WB
    oh = r % Ho
    r = r // Ho
    od = r % Do
    n = r // Do
    wl = tl.arange(0, BLOCK_W)
    # loop-invariant tile offsets; a step adds scalars (its row and first column) to them
    y_tile = y_row[:, None] + (wl * ys_w)[None, :]
    x_tile = (wl * (s_w * xs_w))[:, None] + x_col[None, :]
    iw_tile = (wl * s_w)[:, None] + tx_in[None, :]  # input column minus the step's first one

    acc = tl.zeros((BLOCK_K, NTP * BLOCK_N), dtype=tl.float32)
    for _ in range(s_start, s_end):
        w0 = wb * BLOCK_W
        pm = wl < Wo - w0
        a = tl.load(dy_ptr + (n * ys_n + od * ys_d + oh * ys_h + w0 * ys_w) + y_tile,
                    mask=k_ok[:, None] & pm[None, :], other=0.0)
        b_d = od * s_d - pad_d  # the step's input position of tap 0 (scalars)
        b_h = oh * s_h - pad_h
        b_w = w0 * s_w - pad_w
        i_d = b_d + tz_in
        i_h = b_h + ty_in
        col_ok = ch_ok & (i_d >= 0) & (i_d < Di) & (i_h >= 0) & (i_h < Hi)
        b_mask = (pm[:, None] & col_ok[None, :]) & ((iw_tile >= -b_w) & (iw_tile < Wi - b_w))
        # through L1 (cp.async.ca): the taps of a row and the next rows' taps read the same lines
        b = tl.load(x_ptr + (n * xs_n + b_d * xs_d + b_h * xs_h + b_w * xs_w) + x_tile, mask=b_mask, other=0.0,
                    cache_modifier=".ca")
        if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        # next step: the block counter wraps into oh, oh into od, od into n
        wb += 1
        wrap = (wb == WB).to(tl.int32)
        wb -= wrap * WB
        oh += wrap
        wrap = (oh == Ho).to(tl.int32)
        oh -= wrap * Ho
        od += wrap
        wrap = (od == Do).to(tl.int32)
        od -= wrap * Do
        n += wrap

    # ---- keep the diagonal blocks: row group == column group ----------------------------------
    keep = k_ok[:, None] & ch_ok[None, :] & (gl_k[:, None] == gl_n[None, :])
    g = g0 + gl_k
    k = jk % K
    c = jn % C
    if FINAL:
        offs = (g * ws_g + k * ws_k)[:, None] + (c * ws_c + tz * ws_z + ty * ws_y + tx * ws_x)[None, :]
        acc = apply_epilogue(acc, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                             OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=keep)
    else:  # fp32 partials [split, taps, G*K*C], the layout of the shared reduce
        GKC = G * (K * C)
        offs = (sid * (TAPS * GKC) + g * (K * C) + k * C)[:, None] + (t * GKC + c)[None, :]
        tl.store(ws_ptr + offs, acc, mask=keep)


def row_split(steps: int, base_programs: int, sms: int) -> int:
    """Reduction chunks: ~8 programs per SM, each chunk at least 8 steps long."""
    return occupancy_split(base_programs, sms, 8, min(steps // 8, MAX_SPLIT))


def bind_bwd_weight(args: RunArgs, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once
    (``force_int64``: 64-bit offsets even where 32 bits hold them, for tests)."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "bdrow")
    block_w, num_warps, split = int(cfg.block_w), int(cfg.num_warps), int(cfg.split)
    gpt, bn, bk = tile_groups(geo.K, geo.C, int(cfg.block_n))
    taps = geo.taps
    nt = program_taps(taps, bk, bn, num_warps, block_w, args.a.element_size())
    assert nt > 0, "declined: one tap's operand tiles overflow shared memory"
    gblocks = triton.cdiv(geo.G, gpt)
    do, ho, wo = geo.out3
    wb = triton.cdiv(wo, block_w)
    steps = geo.N * do * ho * wb
    if split <= 0:
        split = row_split(steps, gblocks * triton.cdiv(taps, nt), sm_count(args.out.device))
    split, chunk = split_chunks(split, steps)
    gkc = geo.G * geo.K * geo.C
    total = taps * gkc
    use_int64 = force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT or steps + chunk >= INT32_LIMIT
    final = split == 1
    upcast, precision = _precision(args)
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    ntp = triton.next_power_of_2(nt)
    align = geo.channel_alignment()
    stages = pipeline_stages(_stage_bytes(bk, bn, ntp, block_w, args.a.element_size()), most=int(cfg.num_stages))
    main = BoundKernel(
        _bdrow_wgrad_kernel, (gblocks, triton.cdiv(taps, nt), split),
        K=geo.K, C=geo.C, GPT=gpt, ALIGN=align, BLOCK_W=block_w, BLOCK_N=bn, BLOCK_K=bk,
        NT=nt, NTP=ntp,
        PACKED_X=_packed(geo.x_strides, geo.C), PACKED_Y=_packed(geo.y_strides, geo.K),
        FINAL=final, USE_INT64=use_int64, UPCAST=upcast, PRECISION=precision,
        num_warps=num_warps, num_stages=stages, **epi,
    )
    sizes = (geo.G, steps, chunk, wb, do, ho, wo, *geo.in3, geo.filt3[1], geo.filt3[2], taps,
             *geo.stride3, *geo.dil3, *geo.pad3, *geo.strides_over(align))
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, gkc, geo.K * geo.C, geo.C, geo.filt3[1], geo.filt3[2], *geo.w_strides)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


@dataclass(frozen=True)
class BdrowWeightConfig(_BlockdiagTile):
    """bdrow wgrad: block_w positions of one output row x block_n columns per tap, a software
    pipeline of at most ``num_stages`` steps (fewer where shared memory runs out; shared memory not
    taken stays L1, which serves the taps' overlapping input rows), the reduction split in ``split``
    chunks of steps (0: automatic, :func:`row_split`)."""

    ALGORITHM: ClassVar[str] = "bdrow"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_w", "block_n")

    block_w: int
    block_n: int
    num_warps: int
    num_stages: int
    split: int

    def check(self) -> str | None:
        reason = super().check()
        if reason is None and self.num_stages not in (1, 2, 3, 4):
            return f"num_stages={self.num_stages!r} is not one of (1, 2, 3, 4)"
        return reason


def decline(cfg: BdrowWeightConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """blockdiag's declines, and depthwise: at C = K = 1 a 16-wide tile holds 16 groups and does 16
    times the useful work; on the H100 bdrow lost every depthwise layer to dwslide (1.05-1.9x
    slower, 12 layers), so the untuned path must not extrapolate it there."""
    if p.C == 1 and p.K == 1:
        return "depthwise (C = K = 1 per group) is dwslide's and dwstream's: bdrow's tiles would be 1/16 useful"
    reason = _decline_common(cfg, p, dtype, WEIGHT_DTYPES, "conv_bwd_weight")
    if reason:
        return reason
    _, bn, bk = tile_groups(p.K, p.C, cfg.block_n)
    taps = math.prod(p.filter)
    elem = dtype.data.itemsize
    nt = program_taps(taps, bk, bn, cfg.num_warps, cfg.block_w, elem)
    if nt == 0:
        need = _stage_bytes(bk, bn, 1, cfg.block_w, elem)
        return (f"block_w={cfg.block_w} x {bk}+{bn} operand columns of {dtype.name} need {need // 1024} KiB of "
                f"shared memory for one tap, over the {PIPELINE_SMEM_BUDGET // 1024} KiB pipeline budget")
    if triton.cdiv(taps, nt) > MAX_GRID_YZ:
        return f"the filter has {taps} taps: more than {MAX_GRID_YZ} tap blocks of {nt}"
    return None


ALGORITHM_BWD_WEIGHT = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="bdrow", config=BdrowWeightConfig, decline=decline,
    bind=bind_bwd_weight,
    description="grouped wgrad with few channels per group on tensor cores: blockdiag's tiles, the "
                "reduction walked by output-row blocks (scalar row coordinates, no per-position "
                "divisions), split reduction",
    kernels=(_bdrow_wgrad_kernel, _dw_finalize_kernel),
))
