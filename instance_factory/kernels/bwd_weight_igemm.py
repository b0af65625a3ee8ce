"""conv_bwd_weight (dL/dW) as an implicit GEMM per group, with split-K over the long reduction.

Per group g: M = K (rows of dW), N_gemm = C * taps (columns), K_gemm = R = N * prod(out):

    dw[g, k, tap, c] = sum_{n, o} dy[n, o, g, k] * x[n, o*stride - lpad + tap*dil, g, c]

(the x term is zero where the input position falls outside the tensor).

One set of ``@triton.jit`` kernels serves ndim 1/2/3 (geometry padded to 3D), every G, every
layout (only per-logical-index strides reach the kernel), any stride / dilation / padding.

Tiling. A program owns (split, group, tap, k-tile, c-tile): the tap is a per-program constant, so
the gather of x in the inner loop only needs the reduction index r = (n, od, oh, ow) decomposed once
per row of the tile, and the tile columns are contiguous channels (C is the contiguous axis of x in
the channels-last layouts). ``two_stage`` instead folds the tap into the columns (column j = tap*C
+ c), which keeps small-C problems (depthwise-ish, ResNeXt groups of 4) from wasting most of a tile.
Program ids are ordered tile-fastest, so programs running together share (split, group, tap) and
with it the same reduction slab of dy and x in L2.

Algorithms (each registered on its own, all sharing the GEMM kernel):

* ``igemm``         split_k = 1; the fused epilogue runs on the accumulator and the final dtype is
                    stored directly (one launch).
* ``splitk_atomic`` fp32 ``atomic_add`` of each split's partial into a zeroed fp32 workspace, then
                    one finalize kernel (convert + fused epilogue). Zeroing is part of the launch.
* ``splitk_reduce`` deterministic: each split stores its own fp32 workspace slice, then one
                    reduce+finalize kernel sums the slices in a fixed order (same bits every run).
* ``two_stage``     CK's TwoStage: the GEMM (tap folded into the columns, small tiles) writes the
                    whole weight gradient as fp32 slices, then ONE elementwise pass reduces them
                    in fixed order, converts and applies the epilogue. Deterministic.

The reduction is split in whole block_k iterations: split s owns iterations
[s*ceil(I/S), min((s+1)*ceil(I/S), I)) of I = ceil(R / block_k); a split left with no iterations
contributes an exact zero, so no remainder is ever dropped. ``split_k = 0`` means automatic
(:func:`choose_split_k`).

Accuracy of long reductions: each program sums its iterations in two levels. An inner fp32
accumulator takes the MMA partials of at most CHUNK_ELEMS reduction elements (a nested loop of
:func:`chunk_iters` iterations, which Triton software-pipelines as before), and is added to the
outer fp32 accumulator at each chunk boundary. A single accumulator over N*prod(out) = 2.8e8
elements lost 8% on an H200 with split 4 (0.5% with split 64): far more than round-to-nearest
would, consistent with the tensor cores' truncating accumulation shrinking a sum over ~1e6 sequential
MMA adds. The blocked sum bounds the sequential adds per accumulator to ~1e3 (inner, in MMA k=16
steps) and R / (split * CHUNK_ELEMS) (outer, round-to-nearest fp32 adds).
Chunks start at each split's first iteration and the order is fixed, so the deterministic modes
stay bitwise reproducible. The finalize pass adds one slice per split (at most MAX_AUTO_SPLIT = 64
with the automatic split) and is left a plain sum.

``spec = "1x1s1p0"`` is a plain GEMM for 1x1 filters with stride 1 and no padding: the reduction
index maps to x and dy through (n, flat spatial position), or through one linear stride when n and
the spatial axes are adjacent (NHWGC, GNHWC), with no bounds masks beyond the GEMM edges.

Data types: fp32 (``input_precision="ieee"``), fp32_tf32 (``"tf32"``), fp16, bf16, bf16_fp32w
(fp32 weight gradient), fp16_fp8 (tiles scaled per row / per column by powers of two into e4m3 and
multiplied on fp8 tensor cores, fp32 accumulation; sm_89+ GPUs only). In the interpreter bf16 tiles
are upcast to fp32 before ``tl.dot`` (triton#11584).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import MAX_DS, FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_weight_igemm_plan import (
    ALGORITHM_NAMES,
    CONFIGS,
    MIN_ITERS_PER_SPLIT,
    PARAM_NAMES,
    SPECS,
    BwdWeightIgemmConfig,
    SplitKConfig,
    check_tensors,
    choose_split_k,
    fp8_reason,
    tiles_of,
    walk_step,
)
from .common import _walk_advance, _walk_start
from .host import SMEM_PER_BLOCK, sm_count

__all__ = ["ALGORITHM_NAMES", "CONFIGS", "MIN_ITERS_PER_SPLIT", "PARAM_NAMES", "SPECS", "BwdWeightIgemmConfig",
           "SplitKConfig", "bind", "choose_split_k", "chunk_iters", "decline", "slice_reduce", "sm_count"]

OP_NAME = "conv_bwd_weight"
FINALIZE_BLOCK = 1024
# Blocked summation of the reduction: an inner fp32 accumulator sums at most this many reduction
# elements (CHUNK_ELEMS // block_k iterations of the pipelined MMA loop) before it is folded into the
# outer one. 16384 elements = 1024 k=16 MMA steps per inner sum (relative loss ~1e-4 even with
# Hopper's truncating tensor-core accumulation), 256 iterations at block_k=64.
CHUNK_ELEMS = 16384

# GEMM store modes
_MODE_FUSED = 0  # epilogue + final dtype straight from the accumulator
_MODE_ATOMIC = 1  # fp32 atomic add into one zeroed workspace
_MODE_SLICE = 2  # fp32 store into this split's workspace slice

# test hooks (never set in production): force the int64 offset path on small problems, and run the
# fp8 path in the interpreter (which emulates fp8 dot) to check its scaling math on CPU.
_FORCE_INT64 = False
_FP8_IN_INTERPRETER = False
# test hook: block_k iterations per inner sum (0 = CHUNK_ELEMS // block_k). Tiny values cross many
# chunk boundaries on small problems; a huge one (>= the iterations of a split) is the plain,
# single-accumulator summation.
_CHUNK_ITERS = 0


def chunk_iters(block_k: int) -> int:
    """block_k iterations per inner (chunk) sum of the GEMM's two-level reduction."""
    if _CHUNK_ITERS:
        return int(_CHUNK_ITERS)
    return max(1, CHUNK_ELEMS // block_k)


# ------------------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------------------
@triton.jit
def _pow2_scale(amax):
    """Power-of-two scale putting amax at or below the e4m3 maximum (exact to apply and undo)."""
    e = tl.floor(tl.log2(448.0 / tl.maximum(amax, 1e-30)))
    e = tl.minimum(tl.maximum(e, -60.0), 60.0)
    return tl.exp2(e)


@triton.jit
def _round_to_e4m3_grid(v):
    """Veltkamp split: v rounded to 4 significant bits, so the fp8 cast after it is exact. Used only
    in the interpreter, whose fp32->fp8 conversion loses the carry when rounding up a mantissa."""
    t = v * 1048577.0  # 2**20 + 1
    return t - (t - v)


@triton.jit
def _bwd_weight_gemm_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, TAPS,
    Di, Hi, Wi, Do, Ho, Wo, FY, FX,
    sd, sh, sw, dd, dh, dw, pd, ph, pw,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,
    R, P, ITERS_PER_SPLIT, TOTAL_ITERS, W_NUMEL,
    STEP_W, STEP_H, STEP_D, STEP_N,  # block_k as (n, od, oh, ow) digits (spec 1x1 unflattened: (n, p))
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    CHUNK_ITERS: tl.constexpr,
    MODE: tl.constexpr, FLAT_TAPS: tl.constexpr, SPEC_1X1: tl.constexpr, FLAT_R: tl.constexpr,
    INT64: tl.constexpr, UPCAST_F32: tl.constexpr, FP8: tl.constexpr, FP8_PREROUND: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid = tl.program_id(0)
    if FLAT_TAPS:
        n_cols = C * TAPS
    else:
        n_cols = C
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(n_cols, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    tile = pid % tiles
    rest = pid // tiles
    if FLAT_TAPS:
        tap = 0
    else:
        tap = rest % TAPS
        rest = rest // TAPS
    g = rest % G
    split = rest // G

    # grouped ordering of the (k, c) tiles: GROUP_M row tiles share each column sweep
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m
    pid_n = (tile % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # k (output channel)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # column: c, or tap*C + c when FLAT_TAPS
    offs_kk = tl.arange(0, BLOCK_K)
    it_start = split * ITERS_PER_SPLIT  # this split's block_k iterations (int32 loop bounds)
    it_end = tl.minimum(it_start + ITERS_PER_SPLIT, TOTAL_ITERS)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
        g = g.to(tl.int64)
        split = split.to(tl.int64)
    mask_m = offs_m < K
    mask_n = offs_n < n_cols

    if FLAT_TAPS:
        col_c = offs_n % C
        col_tap = offs_n // C
        col_x = col_tap % FX
        col_y = (col_tap // FX) % FY
        col_z = col_tap // (FX * FY)
        # input displacement of each column's tap, per spatial axis
        cz = col_z * dd - pd
        cy = col_y * dh - ph
        cx = col_x * dw - pw
        x_col = col_c * xs_c
        w_col = col_c * ws_c + col_z * ws_z + col_y * ws_y + col_x * ws_x
    else:
        tx = tap % FX
        ty = (tap // FX) % FY
        tz = tap // (FX * FY)
        tzd = tz * dd - pd
        tyd = ty * dh - ph
        txd = tx * dw - pw
        x_col = offs_n * xs_c
        w_col = offs_n * ws_c + (tz * ws_z + ty * ws_y + tx * ws_x)

    x_base = x_ptr + g * xs_g
    dy_base = dy_ptr + g * ys_g
    dy_row = offs_m * ys_k

    # Two-level (blocked) summation: ``part`` sums at most CHUNK_ITERS block_k iterations (the
    # pipelined MMA loop), then folds into ``acc`` with one fp32 add per chunk. A single fp32
    # accumulator fed ~1e6 partial dots loses accuracy (on Hopper the tensor cores appear to add into
    # it with truncation: a systematic shrink of ~ MMA steps * 2**-24 relative). The fold is a plain
    # fp32 add; the inner loop has no branches, so it pipelines exactly like a flat loop.
    # the reduction positions of the tile walk incrementally: (n, od, oh, ow) of each row, carried
    # from block to block (runtime divisions per element and step cost ~250 of ~380 instructions
    # per step of an H100 loop); the 1x1 spec without a flat axis walks (n, p) as (n, 0, 0, p)
    r0 = it_start * BLOCK_K + offs_kk
    if INT64:
        r0 = r0.to(tl.int64)
    if SPEC_1X1:
        n, od, oh, ow = _walk_start(r0, P, 1, 1)
    else:
        n, od, oh, ow = _walk_start(r0, Wo, Ho, Do)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(it_start, it_end, CHUNK_ITERS):
        c1 = tl.minimum(c0 + CHUNK_ITERS, it_end)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for it in range(c0, c1):
            r = it * BLOCK_K + offs_kk
            if INT64:
                r = r.to(tl.int64)
            mask_r = r < R
            if SPEC_1X1:
                if FLAT_R:
                    dy_r = r * ys_w
                    x_r = r * xs_w
                else:
                    dy_r = n * ys_n + ow * ys_w
                    x_r = n * xs_n + ow * xs_w
                b_mask = mask_r[:, None] & mask_n[None, :]
                b_offs = x_r[:, None] + x_col[None, :]
            else:
                dy_r = n * ys_n + od * ys_d + oh * ys_h + ow * ys_w
                if FLAT_TAPS:
                    id_ = (od * sd)[:, None] + cz[None, :]
                    ih = (oh * sh)[:, None] + cy[None, :]
                    iw = (ow * sw)[:, None] + cx[None, :]
                    b_mask = (mask_r[:, None] & mask_n[None, :]
                              & (id_ >= 0) & (id_ < Di) & (ih >= 0) & (ih < Hi) & (iw >= 0) & (iw < Wi))
                    b_offs = (n * xs_n)[:, None] + id_ * xs_d + ih * xs_h + iw * xs_w + x_col[None, :]
                else:
                    id_ = od * sd + tzd
                    ih = oh * sh + tyd
                    iw = ow * sw + txd
                    row_ok = (mask_r & (id_ >= 0) & (id_ < Di) & (ih >= 0) & (ih < Hi)
                              & (iw >= 0) & (iw < Wi))
                    x_r = n * xs_n + id_ * xs_d + ih * xs_h + iw * xs_w
                    b_mask = row_ok[:, None] & mask_n[None, :]
                    b_offs = x_r[:, None] + x_col[None, :]
            a = tl.load(dy_base + dy_row[:, None] + dy_r[None, :],
                        mask=mask_m[:, None] & mask_r[None, :], other=0.0)
            b = tl.load(x_base + b_offs, mask=b_mask, other=0.0)
            if FP8:
                a32 = a.to(tl.float32)
                b32 = b.to(tl.float32)
                sa = _pow2_scale(tl.max(tl.abs(a32), axis=1))  # per row of dy (per k)
                sb = _pow2_scale(tl.max(tl.abs(b32), axis=0))  # per column of x (per c)
                a32 = a32 * sa[:, None]
                b32 = b32 * sb[None, :]
                if FP8_PREROUND:
                    a32 = _round_to_e4m3_grid(a32)
                    b32 = _round_to_e4m3_grid(b32)
                a8 = a32.to(tl.float8e4nv)
                b8 = b32.to(tl.float8e4nv)
                dot8 = tl.dot(a8, b8, out_dtype=tl.float32)
                part += dot8 * ((1.0 / sa)[:, None] * (1.0 / sb)[None, :])
            else:
                if UPCAST_F32:
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                part = tl.dot(a, b, acc=part, input_precision=INPUT_PRECISION, out_dtype=tl.float32)
            if SPEC_1X1:
                if not FLAT_R:
                    n, od, oh, ow = _walk_advance(n, od, oh, ow, P, 1, 1, STEP_W, STEP_H, STEP_D, STEP_N)
            else:
                n, od, oh, ow = _walk_advance(n, od, oh, ow, Wo, Ho, Do, STEP_W, STEP_H, STEP_D, STEP_N)
        acc += part

    w_offs = g * ws_g + offs_m[:, None] * ws_k + w_col[None, :]
    w_mask = mask_m[:, None] & mask_n[None, :]
    if MODE == 0:
        res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)
    elif MODE == 1:
        tl.atomic_add(ws_ptr + w_offs, acc, mask=w_mask, sem="relaxed")
    else:
        tl.store(ws_ptr + split * W_NUMEL + w_offs, acc, mask=w_mask)


@triton.jit
def _bwd_weight_finalize_kernel(
    ws_ptr, out_ptr, d0, d1, d2, d3, alpha, beta, NUMEL, SLICES,
    BLOCK: tl.constexpr, INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    """out = epilogue(sum_s ws[s]) elementwise; slices are summed in the fixed order 0, 1, ..."""
    pid = tl.program_id(0)
    if INT64:
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < NUMEL
    ptrs = ws_ptr + offs
    acc = tl.load(ptrs, mask=mask, other=0.0)
    for _ in range(1, SLICES):
        ptrs += NUMEL  # pointer arithmetic is 64-bit: slice bases never overflow
        acc += tl.load(ptrs, mask=mask, other=0.0)
    res = apply_epilogue(acc, offs, mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
    tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
def slice_reduce(w_numel: int, int64: bool, epi: dict) -> BoundKernel:
    """The fixed-order reduce + epilogue over ``split`` fp32 weight slices of ``w_numel`` elements, bound for
    a split family's runner (``common.split_runner``; ``epi``: the fused op's constexprs)."""
    return BoundKernel(_bwd_weight_finalize_kernel, (triton.cdiv(w_numel, FINALIZE_BLOCK),),
                       BLOCK=FINALIZE_BLOCK, INT64=int64, num_warps=4, **epi)


def _decline(algorithm: str, cfg: SplitKConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
             fused: FusedOp) -> str | None:
    bad = CONFIGS[algorithm].validate(cfg)
    if bad is not None:
        return bad
    if layout.ndim != params.ndim:
        return f"layout {layout.name} is {layout.ndim}D but the problem is {params.ndim}D"
    if cfg.spec == "1x1s1p0" and not params.is_1x1_stride1_pad0:
        return ("spec 1x1s1p0 needs a 1x1 filter, stride 1 and no padding; the problem has filter "
                f"{params.filter}, stride {params.stride}, pads {params.left_pad}/{params.right_pad}")
    if dtype.compute == "fp8":
        why = fp8_reason(allow_interpreter=_FP8_IN_INTERPRETER)
        if why is not None:
            return why
        if cfg.block_k < 32:
            return f"fp8 tl.dot needs block_k >= 32, got {cfg.block_k}"
    elem = 4 if dtype.data.itemsize >= 4 else 2
    smem = cfg.smem_bytes(elem)
    if smem > SMEM_PER_BLOCK:
        return (f"{dtype.name} operand tiles need {smem // 1024} KiB of shared memory "
                f"(limit {SMEM_PER_BLOCK // 1024} KiB)")
    if fused.max_ds > MAX_DS:
        return f"fused op {fused.name} takes more than {MAX_DS} D tensors"
    return None


def decline(cfg: SplitKConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp,
            algorithm: str = "splitk_reduce") -> str | None:
    """None when an instance of ``algorithm`` with ``cfg`` can run the problem, else why not."""
    return _decline(algorithm, cfg, params, layout, dtype, fused)


def flattenable(strides: tuple[int, ...], sizes: tuple[int, int, int]) -> bool:
    """(d, h, w) strides (in the kernel's logical order, index 3..5) form one linear spatial axis."""
    _, hh, ww = sizes
    sd, sh, sw = strides[3], strides[4], strides[5]
    return (sizes[1] == 1 or sh == ww * sw) and (sizes[0] == 1 or sd == hh * ww * sw)


def bind(args: RunArgs, algorithm: str = "splitk_reduce") -> Runner:
    """A runner filling grad_wei with ``algorithm`` (igemm, splitk_atomic, ...); every size is fixed here once."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(_decline(algorithm, cfg, p, args.layout, dt, args.fused), f"bwd-weight {algorithm}", p)
    out = check_tensors(args)
    dev = out.device

    spec_1x1 = cfg.spec == "1x1s1p0"
    flat_taps = algorithm == "two_stage" and not spec_1x1
    if algorithm == "igemm":
        split = 1
    else:
        split = int(cfg.split_k) or choose_split_k(p, cfg, sm_count(dev), algorithm)

    R = p.N * math.prod(p.output)
    P = math.prod(p.output)
    total_iters = triton.cdiv(R, cfg.block_k)
    iters_per_split = triton.cdiv(total_iters, split)
    tiles = tiles_of(p, cfg, flat_taps)
    grid = (tiles * split,)

    flat_r = False
    if spec_1x1:
        if not (flattenable(geo.x_strides, geo.in3) and flattenable(geo.y_strides, geo.out3)):
            raise ValueError("spec 1x1s1p0 needs the spatial axes of input and grad_out to be one "
                             "linear axis (true for every contract layout)")
        flat_r = geo.x_strides[1] == P * geo.x_strides[5] and geo.y_strides[1] == P * geo.y_strides[5]

    if algorithm == "igemm":
        mode, slices = _MODE_FUSED, 0
    elif algorithm == "splitk_atomic" and split > 1:
        mode, slices = _MODE_ATOMIC, 1
    else:  # splitk_reduce, two_stage, and atomic with one split (a plain store suffices)
        mode, slices = _MODE_SLICE, split
    int64 = bool(_FORCE_INT64 or geo.needs_int64 or max(slices, 1) * geo.w_numel >= 2**31 - 1)

    fp8 = dt.compute == "fp8"
    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "tf32" if dt.compute == "tf32" or dt.data != torch.float32 else "ieee"
    if upcast:
        precision = "ieee"
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))

    Di, Hi, Wi = geo.in3
    Do, Ho, Wo = geo.out3
    _, FY, FX = geo.filt3
    sizes = (geo.G, geo.K, geo.C, geo.taps, Di, Hi, Wi, Do, Ho, Wo, FY, FX,
             *geo.stride3, *geo.dil3, *geo.pad3, *geo.x_strides, *geo.w_strides, *geo.y_strides,
             R, P, iters_per_split, total_iters, geo.w_numel, *walk_step(cfg.block_k, geo.out3, spec_1x1))
    gemm = BoundKernel(
        _bwd_weight_gemm_kernel, grid,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        CHUNK_ITERS=chunk_iters(cfg.block_k),
        MODE=mode, FLAT_TAPS=flat_taps, SPEC_1X1=spec_1x1, FLAT_R=flat_r,
        INT64=int64, UPCAST_F32=upcast, FP8=fp8, FP8_PREROUND=fp8 and interpreting(),
        INPUT_PRECISION=precision,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi,
    )
    if mode == _MODE_FUSED:
        def run_fused(x: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float,
                      beta: float) -> None:
            gemm(x, dy, out, out, *epilogue_args(ds, out), alpha, beta, *sizes)

        return run_fused

    finalize = slice_reduce(geo.w_numel, int64, epi)
    ws_numel, w_numel = max(slices, 1) * geo.w_numel, geo.w_numel
    make_ws = torch.zeros if mode == _MODE_ATOMIC else torch.empty  # atomics add into zeros

    def run_split(x: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float,
                  beta: float) -> None:
        ws = make_ws(ws_numel, dtype=torch.float32, device=out.device)
        d = epilogue_args(ds, out)
        gemm(x, dy, out, ws, *d, alpha, beta, *sizes)
        finalize(ws, out, *d, alpha, beta, w_numel, slices)

    return run_split


# ------------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------------
_DESCRIPTIONS = {
    "igemm": "implicit GEMM (M=K, N=C*taps, K=N*prod(out)), one program per (group, tap, tile), "
             "no split-K, epilogue fused, final dtype stored directly",
    "splitk_atomic": "implicit GEMM with split-K: fp32 atomics into a zeroed fp32 workspace, then a "
                     "finalize kernel (convert + epilogue); fast, not bitwise reproducible",
    "splitk_reduce": "implicit GEMM with deterministic split-K: per-split fp32 workspace slices, "
                     "then a reduce+finalize kernel summing them in fixed order",
    "two_stage": "CK TwoStage: GEMM with the tap folded into the columns (small C or K, small tiles) "
                 "writing an fp32 workspace (deterministic split-K slices), then one elementwise "
                 "convert + epilogue pass",
}


def _make(algorithm: str) -> Algorithm:
    def _dec(cfg: SplitKConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
             fused: FusedOp) -> str | None:
        return _decline(algorithm, cfg, params, layout, dtype, fused)

    def _bind(args: RunArgs) -> Runner:
        return bind(args, algorithm)

    return Algorithm(op=OP_NAME, name=algorithm, config=CONFIGS[algorithm],
                     decline=_dec, bind=_bind, description=_DESCRIPTIONS[algorithm],
                     kernels=(_bwd_weight_gemm_kernel, _bwd_weight_finalize_kernel))


ALGS: dict[str, Algorithm] = {f: register_algorithm(_make(f)) for f in ALGORITHM_NAMES}

