"""Depthwise conv_bwd_weight (C = 1, depth multiplier K <= 4) on tensor cores: "dwmma".

dw[g, k, 0, z, y, x] = sum over output positions o of dy[o, g, k] * x[o*s - p + (z, y, x)*dil, g, 0]

The CUDA-core families (dwslide, dwslab) spend one FMA per tap and output position, plus loads,
conversions and address math: session 25's SASS of dwslab on ConvNeXt-T's 7x7 layer ran 424
instructions per 196 FMAs, and the best of them stayed at ~18% of the H100's fp32 FMA rate. Here,
per channel, the taps become a small matrix product. Walk the *input* rows: for input row
(n, i_d, i_h) and a block of output columns ow,

    A[(z, y), ow] = dy[n, od, oh, ow] with od * s_d = i_d + p_d - z * dil_d, oh * s_h = i_h + p_h - y * dil_h
    B[ow, x]      = x[n, i_d, i_h, ow * s_w - p_w + x * dil_w]
    dw[(z, y), x] += A @ B     (a sum over (input row, ow): the GEMM's K)

A row of A is grad_out's row that the filter row (z, y) pairs with this input row (zeros where no
output row does, e.g. the other stride phase); B is the Toeplitz (sliding-window) view of the input
row. M = FZ*FY filter rows and N = FX taps, padded to 16 (tl.dot's smallest tile), K = block_r input
rows x block_w columns. The channels are the batch axis of a 3D tl.dot: each channel is its own tiny
GEMM, so the padded MMAs cost little next to the loads, which are 16-byte vectors along the
contiguous channel axis. The products are exact (16-bit inputs), the sums fp32 as on the FMA path.

Grid = (channel blocks, input-row chunks). One chunk: the epilogue is applied here; otherwise fp32
partials [chunk, taps, G*K] go through the deterministic split reduce. Channels-last layouts only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm
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
from .depthwise_stream import depthwise_decline
from .host import INT32_LIMIT, pipeline_stages, sm_count

__all__ = ["ALGORITHM", "MAX_SIDE", "DwMmaConfig", "auto_split", "bind", "decline"]

MAX_SIDE = 16  # filter rows (z, y) and taps along x: one tl.dot tile side each
_MIN_DOT = 16  # tl.dot's smallest tile side (the GEMM's K here)
_DTYPES = ("fp32_tf32", "fp16", "bf16", "bf16_fp32w")  # true fp32 would need ieee dots: dwslide serves it


@triton.jit
def _dwmma_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    GKC, IROWS, chunk,  # result channels G*K, input rows N*Di*Hi, input rows per chunk
    Do, Ho, Wo, Di, Hi, Wi,
    FY, FX, FROWS, TAPS,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_d, xs_h, xs_w,
    ws_g, ws_k, ws_z, ws_y, ws_x,  # result (and every D) strides
    ys_g, ys_k, ys_n, ys_d, ys_h, ys_w,
    K: tl.constexpr, FM: tl.constexpr, FN: tl.constexpr,
    BLOCK_CH: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
    FINAL: tl.constexpr, USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_c = tl.program_id(0)  # channel block
    pid_s = tl.program_id(1)  # input-row chunk
    j = pid_c * BLOCK_CH + tl.arange(0, BLOCK_CH)  # result channel (g, k)
    cmask = j < GKC
    g = j // K
    k = j % K
    x_ch = g * xs_g
    y_ch = g * ys_g + k * ys_k
    if USE_INT64:
        x_ch = x_ch.to(tl.int64)
        y_ch = y_ch.to(tl.int64)

    fr = tl.arange(0, FM)  # flattened filter row (z, y)
    fr_ok = fr < FROWS
    tz = fr // FY
    ty = fr % FY
    tx = tl.arange(0, FN)
    tx_ok = tx < FX
    kk = tl.arange(0, BLOCK_R * BLOCK_W)  # the GEMM's K: (input row, output column) of one step
    rr = kk // BLOCK_W
    ww = kk % BLOCK_W

    sid = pid_s
    if USE_INT64:
        sid = sid.to(tl.int64)
    r_start = sid * chunk
    r_end = tl.minimum(r_start + chunk, IROWS)
    acc = tl.zeros((BLOCK_CH, FM, FN), dtype=tl.float32)
    for r0 in range(r_start, r_end, BLOCK_R):
        ir = r0 + rr
        live = ir < r_end
        ih = ir % Hi
        q = ir // Hi
        i_d = q % Di
        n = q // Di
        # grad_out row of filter row (z, y) at this input row: od * s_d = a_d, oh * s_h = a_h
        a_d = (i_d + pad_d)[None, :] - (tz * dil_d)[:, None]  # [FM, K]
        a_h = (ih + pad_h)[None, :] - (ty * dil_h)[:, None]
        od = a_d // s_d
        oh = a_h // s_h
        pair_ok = (fr_ok[:, None] & live[None, :] & (a_d >= 0) & (a_h >= 0) & (od * s_d == a_d)
                   & (oh * s_h == a_h) & (od < Do) & (oh < Ho))
        y_row = n[None, :] * ys_n + od * ys_d + oh * ys_h  # [FM, K]
        x_row = n * xs_n + i_d * xs_d + ih * xs_h  # [K]
        for w0 in range(0, Wo, BLOCK_W):
            ow = w0 + ww
            col_ok = live & (ow < Wo)
            a_ok = pair_ok & col_ok[None, :]
            a = tl.load(dy_ptr + y_ch[:, None, None] + (y_row + ow[None, :] * ys_w)[None, :, :],
                        mask=cmask[:, None, None] & a_ok[None, :, :], other=0.0)
            iw = (ow * s_w - pad_w)[:, None] + (tx * dil_w)[None, :]  # [K, FN]
            b_ok = col_ok[:, None] & tx_ok[None, :] & (iw >= 0) & (iw < Wi)
            b = tl.load(x_ptr + x_ch[:, None, None] + (x_row[:, None] + iw * xs_w)[None, :, :],
                        mask=cmask[:, None, None] & b_ok[None, :, :], other=0.0)
            if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)

    keep = cmask[:, None, None] & (fr_ok[:, None] & tx_ok[None, :])[None, :, :]
    if FINAL:
        offs = ((g * ws_g + k * ws_k)[:, None, None]
                + (tz * ws_z + ty * ws_y)[None, :, None] + (tx * ws_x)[None, None, :])
        res = apply_epilogue(acc, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)
    else:
        tap = fr[:, None] * FX + tx[None, :]  # [FM, FN]
        tl.store(ws_ptr + ((sid * TAPS + tap) * GKC)[None, :, :] + j[:, None, None], acc, mask=keep)


@dataclass(frozen=True)
class DwMmaConfig(DirectStyleConfig):
    """dwmma: block_ch channels (the dot's batch) x block_r input rows x block_w output columns per
    step (the dot's K = block_r * block_w, at least 16), loads pipelined ``num_stages`` steps deep
    (fewer where shared memory runs out), the input rows split in ``split`` chunks (0: automatic,
    :func:`auto_split`)."""

    block_ch: int
    block_r: int
    block_w: int
    num_warps: int
    num_stages: int
    split: int

    ALGORITHM: ClassVar[str] = "dwmma"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_ch", "block_r", "block_w")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        if self.block_r * self.block_w < _MIN_DOT:
            return f"block_r*block_w={self.block_r * self.block_w} must be at least {_MIN_DOT} (tl.dot's smallest K)"
        if self.num_stages not in (1, 2, 3, 4):
            return f"num_stages={self.num_stages!r} must be 1 to 4"
        return None


def auto_split(irows: int, base_programs: int, block_r: int, num_warps: int, sms: int) -> int:
    """Input-row chunks: ~16 warps per SM, each chunk at least four steps of block_r rows."""
    return occupancy_split(base_programs, sms, max(1, 16 // num_warps), max(1, irows // (4 * block_r)))


def _precision(args: RunArgs) -> tuple[bool, str]:
    """(upcast bf16 operands to fp32 before tl.dot, tl.dot's input_precision)."""
    upcast = interpreting() and args.dtype.data == torch.bfloat16  # bf16 tl.dot is wrong there (triton#11584)
    return upcast, "ieee" if (args.dtype.compute == "ieee" or upcast) else "tf32"


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_wei (final dtype) from input and grad_out; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "dwmma")
    block_ch, block_r, block_w = int(cfg.block_ch), int(cfg.block_r), int(cfg.block_w)
    num_warps, split = int(cfg.num_warps), int(cfg.split)
    fz, fy, fx = geo.filt3
    gkc = geo.G * geo.K
    Di, Hi, _ = geo.in3
    irows = geo.N * Di * Hi
    base = triton.cdiv(gkc, block_ch)
    if split <= 0:
        split = auto_split(irows, base, block_r, num_warps, sm_count(args.out.device))
    split, chunk = split_chunks(min(split, MAX_GRID_YZ), irows)
    taps = geo.taps
    total = taps * gkc
    use_int64 = force_int64 or geo.needs_int64 or split * total >= INT32_LIMIT or irows + chunk >= INT32_LIMIT
    final = split == 1
    upcast, precision = _precision(args)
    fm = max(_MIN_DOT, triton.next_power_of_2(fz * fy))
    fn = max(_MIN_DOT, triton.next_power_of_2(fx))
    stage_bytes = block_ch * block_r * block_w * (fm + fn) * args.a.element_size()  # A and B tiles of a step
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    main = BoundKernel(_dwmma_kernel, (base, split),
                       K=geo.K, FM=fm, FN=fn, BLOCK_CH=block_ch, BLOCK_R=block_r, BLOCK_W=block_w, FINAL=final, USE_INT64=use_int64,
                       UPCAST=upcast, PRECISION=precision, num_warps=num_warps,
                       num_stages=pipeline_stages(stage_bytes, most=int(cfg.num_stages)), **epi)
    xs, ys, wst = geo.x_strides, geo.y_strides, geo.w_strides  # (g, n, c|k, d, h, w); result (g, k, c, z, y, x)
    sizes = (gkc, irows, chunk, *geo.out3, *geo.in3, fy, fx, fz * fy, taps,
             *geo.stride3, *geo.dil3, *geo.pad3,
             xs[0], xs[1], xs[3], xs[4], xs[5], wst[0], wst[1], wst[3], wst[4], wst[5],
             ys[0], ys[2], ys[1], ys[3], ys[4], ys[5])
    finalize = None if final else finalize_launcher(split, total, use_int64, epi)
    fin_sizes = (total, split, gkc, geo.K * geo.C, geo.C, fy, fx, *wst)
    return split_runner(main, finalize, sizes, fin_sizes, split * total)


def decline(cfg: DwMmaConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp) -> str | None:
    reason = depthwise_decline("dwmma", p, dtype)
    if reason:
        return reason
    if dtype.name not in _DTYPES:
        return (f"dwmma runs on tensor cores: it takes {', '.join(_DTYPES)}, not {dtype.name} "
                f"(ieee fp32 goes to dwslide / dwslab)")
    if not layout.channels_last:
        return ("dwmma loads channel vectors along a contiguous channel axis; channels-first tensors go "
                "through relayout (a channels-last copy first) instead")
    frows, fx = math.prod(p.filter[:-1]), p.filter[-1]
    if frows > MAX_SIDE or fx > MAX_SIDE:
        return (f"dwmma holds the filter as one [{MAX_SIDE} x {MAX_SIDE}] tile of (z, y) rows x x taps; this "
                f"filter has {frows} rows and {fx} taps along x")
    wo = p.output[-1]
    if cfg.block_w > max(_MIN_DOT, triton.next_power_of_2(wo)):
        return (f"block_w={cfg.block_w} is wider than the {wo} output columns rounded up to a power of two: "
                f"a narrower block does the same work")
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_weight", name="dwmma", config=DwMmaConfig, decline=decline, bind=bind,
    description="depthwise wgrad on tensor cores: per channel, grad_out rows of the filter rows x the input "
                "row's sliding-window (Toeplitz) view as a batched tl.dot over (input rows, output columns)",
    kernels=(_dwmma_kernel, _dw_finalize_kernel),
))
