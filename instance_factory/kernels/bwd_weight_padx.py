"""conv_bwd_weight (dL/dW) as two_stage's GEMM over a zero-padded channels-last copy of the input.

Per group g, like ``two_stage`` (M = K, N = C * taps with the tap folded into the columns, K_gemm =
R = N * prod(out)):

    dw[g, k, tap, c] = sum_{n, o} dy[n, o, g, k] * xp[n, o*stride + tap*dil, g, c]

where ``xp`` is the input with its padding halo written out as zeros ([N, Dp, Hp, Wp, G, C],
contiguous). Every position that the GEMM gathers then lies inside ``xp``, so the gather offset
separates into a per-row part (n, o*stride) and a per-column part (tap*dil, g, c): one add and the
GEMM-edge masks per element, where ``two_stage`` computes three input coordinates and six bounds
tests for each element of the tile. That address work is what bounds ``two_stage`` on few-channel
layers with large filters (a 7x7 stem over C = 3: 147 columns, 2-byte gathers, ~0.8 ms at batch 64
on an H100 where cuDNN takes ~0.3 ms); the padded copy costs one pass over the input, which is
small there (C = 3 against the K = 64 channels of grad_out).

Launches: the pad copy, the GEMM (fp32 slices per split, or the epilogue and the final dtype
directly when there is one split) and, with more than one split, the fixed-order reduce + epilogue
of ``two_stage`` (deterministic). Same blocked (two-level) fp32 summation as the igemm kernels.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams, padded_extent
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, chunk_iters, slice_reduce
from .bwd_weight_igemm import decline as igemm_decline
from .bwd_weight_igemm_plan import SplitKConfig, check_tensors, choose_split_k, walk_step
from .common import _walk_advance, _walk_start, split_runner
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "MAX_C", "MIN_K", "bind", "bind_padded_gemm", "config_decline", "decline", "padded_extent"]

OP_NAME = "conv_bwd_weight"
ALGORITHM = "padx"
_MODE_FUSED = 0  # one split: epilogue + final dtype from the accumulator
_MODE_SLICE = 2  # fp32 store into this split's workspace slice
_PAD_ELEMS = 2048  # elements per pad-copy program
# The domain where padx is the right kernel (H100, session 11): it won the stems (C = 3, K = 32/64:
# 1.2-3.9x over two_stage) and 1D wav2vec's C = 1, K = 512 (1.3x), and lost most layers with C >= 16
# (scalar 2-byte gathers of C * taps columns) and every K < 16 one. Served elsewhere, the cost model
# (no evidence there) picked it for held-out dense and grouped layers at 0.06-0.6x of their best.
MAX_C = 8
MIN_K = 16


@triton.jit
def _pad_copy_kernel(
    x_ptr, xp_ptr,
    GC, C, Dp, Hp, Wp, Di, Hi, Wi, pd, ph, pw, P_PAD,
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, INT64: tl.constexpr,
):
    """xp[n, dp, hp, wp, g, c] = x[n, dp - pd, hp - ph, wp - pw, g, c], zero outside x: every
    element of the padded copy written once (no separate zero fill)."""
    offs_p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)  # (n, dp, hp, wp) of the copy
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)  # (g, c) flattened
    if INT64:
        offs_p = offs_p.to(tl.int64)
    wp = offs_p % Wp
    t = offs_p // Wp
    hp = t % Hp
    t = t // Hp
    dp = t % Dp
    n = t // Dp
    id_ = dp - pd
    ih = hp - ph
    iw = wp - pw
    in_p = offs_p < P_PAD
    in_c = offs_c < GC
    inside = in_p & (id_ >= 0) & (id_ < Di) & (ih >= 0) & (ih < Hi) & (iw >= 0) & (iw < Wi)
    src = (n * xs_n + id_ * xs_d + ih * xs_h + iw * xs_w)[:, None] + ((offs_c // C) * xs_g
                                                                   + (offs_c % C) * xs_c)[None, :]
    v = tl.load(x_ptr + src, mask=inside[:, None] & in_c[None, :], other=0.0)
    tl.store(xp_ptr + offs_p[:, None] * GC + offs_c[None, :], v, mask=in_p[:, None] & in_c[None, :])


# Its own kernel, not a mode of bwd_weight_igemm's: the tile order and the blocked sum repeat that
# kernel's lines, but editing it would change the kernel hash of every igemm / split-K / two_stage
# row in tuning_db/ (kernel_identity.py) and stale them.
@triton.jit
def _padx_gemm_kernel(
    xp_ptr, dy_ptr, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, TAPS, FY, FX,
    xr_n, xr_d, xr_h, xr_w,  # per-row offsets into xp: n, and od/oh/ow times stride
    xc_z, xc_y, xc_x,  # per-column offsets into xp: filter z/y/x times dilation
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,
    Do, Ho, Wo, R, ITERS_PER_SPLIT, TOTAL_ITERS, W_NUMEL,
    STEP_W, STEP_H, STEP_D, STEP_N,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    CHUNK_ITERS: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr, UPCAST_F32: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid = tl.program_id(0)
    n_cols = C * TAPS
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(n_cols, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    tile = pid % tiles
    rest = pid // tiles
    g = rest % G
    split = rest // G
    # grouped ordering of the (k, column) tiles: GROUP_M row tiles share each column sweep
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m
    pid_n = (tile % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # k
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # column tap*C + c
    offs_kk = tl.arange(0, BLOCK_K)
    it_start = split * ITERS_PER_SPLIT
    it_end = tl.minimum(it_start + ITERS_PER_SPLIT, TOTAL_ITERS)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
        g = g.to(tl.int64)
        split = split.to(tl.int64)
    mask_m = offs_m < K
    mask_n = offs_n < n_cols
    col_c = offs_n % C
    col_tap = offs_n // C
    col_x = col_tap % FX
    col_y = (col_tap // FX) % FY
    col_z = col_tap // (FX * FY)
    x_col = g * C + col_c + col_z * xc_z + col_y * xc_y + col_x * xc_x
    w_col = col_c * ws_c + col_z * ws_z + col_y * ws_y + col_x * ws_x
    dy_base = dy_ptr + g * ys_g
    dy_row = offs_m * ys_k

    r0 = it_start * BLOCK_K + offs_kk
    if INT64:
        r0 = r0.to(tl.int64)
    n, od, oh, ow = _walk_start(r0, Wo, Ho, Do)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c0 in range(it_start, it_end, CHUNK_ITERS):
        c1 = tl.minimum(c0 + CHUNK_ITERS, it_end)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for it in range(c0, c1):
            r = it * BLOCK_K + offs_kk
            mask_r = r < R
            dy_r = n * ys_n + od * ys_d + oh * ys_h + ow * ys_w
            x_r = n * xr_n + od * xr_d + oh * xr_h + ow * xr_w
            a = tl.load(dy_base + dy_row[:, None] + dy_r[None, :],
                        mask=mask_m[:, None] & mask_r[None, :], other=0.0)
            b = tl.load(xp_ptr + x_r[:, None] + x_col[None, :],
                        mask=mask_r[:, None] & mask_n[None, :], other=0.0)
            if UPCAST_F32:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a, b, acc=part, input_precision=INPUT_PRECISION, out_dtype=tl.float32)
            n, od, oh, ow = _walk_advance(n, od, oh, ow, Wo, Ho, Do, STEP_W, STEP_H, STEP_D, STEP_N)
        acc += part

    w_offs = g * ws_g + offs_m[:, None] * ws_k + w_col[None, :]
    w_mask = mask_m[:, None] & mask_n[None, :]
    if MODE == 0:
        res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)
    else:
        tl.store(ws_ptr + split * W_NUMEL + w_offs, acc, mask=w_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
def decline(cfg: SplitKConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when a padx instance with ``cfg`` can run the problem, else why not."""
    if params.C > MAX_C or params.K < MIN_K:
        return (f"padx serves few input channels: C <= {MAX_C} and K >= {MIN_K} per group (stems), got C={params.C}, "
                f"K={params.K}; wider C gathers faster per tap with vector loads (igemm, split-K), and K < {MIN_K} "
                "wastes most of a tensor-core tile (depthwise: dwslide, dwstream)")
    return config_decline(cfg, params, layout, dtype, fused)


def config_decline(cfg: SplitKConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType, fused: FusedOp,
                   algorithm: str = ALGORITHM) -> str | None:
    """What a GEMM over the padded copy (padx, padvec) declines whatever the channels, else None."""
    if cfg.spec != "default":
        return f"{algorithm} has only the default spec, got spec={cfg.spec!r}"
    if dtype.compute == "fp8":
        return f"{algorithm} has no fp8 path (two_stage and the split-K families have one)"
    return igemm_decline(cfg, params, layout, dtype, fused, "two_stage")  # config, ndim, smem, Ds


def bind(args: RunArgs) -> Runner:
    """A runner: pad copy, GEMM, and (with several splits) the fixed-order reduce + epilogue."""
    require_runnable(decline(args.cfg, args.params, args.layout, args.dtype, args.fused), "bwd-weight padx",
                     args.params)
    return bind_padded_gemm(args, _padx_gemm_kernel)


def bind_padded_gemm(args: RunArgs, gemm_kernel: Any, **constexprs: Any) -> Runner:
    """The runner of a GEMM over the padded copy (this module's, or padvec's with its ``constexprs``):
    pad copy, GEMM, and (with several splits) the fixed-order reduce + epilogue. The caller has checked
    that its instance runs the problem."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    dev = check_tensors(args).device
    split = int(cfg.split_k) or choose_split_k(p, cfg, sm_count(dev), "two_stage")

    Di, Hi, Wi = geo.in3
    Do, Ho, Wo = geo.out3
    FZ, FY, FX = geo.filt3
    sd, sh, sw = geo.stride3
    dd, dh, dw = geo.dil3
    Dp, Hp, Wp = (padded_extent(o, s, f, d) for o, s, f, d in zip(geo.out3, geo.stride3, geo.filt3, geo.dil3))
    GC = geo.G * geo.C
    xs_w = GC  # the copy's strides, in elements: [N, Dp, Hp, Wp, G, C] contiguous
    xs_h = Wp * xs_w
    xs_d = Hp * xs_h
    xs_n = Dp * xs_d
    p_pad = geo.N * Dp * Hp * Wp
    xp_numel = p_pad * GC

    R = geo.N * Do * Ho * Wo
    total_iters = triton.cdiv(R, cfg.block_k)
    iters_per_split = triton.cdiv(total_iters, split)
    tiles = geo.G * triton.cdiv(geo.K, cfg.block_m) * triton.cdiv(geo.C * geo.taps, cfg.block_n)
    mode = _MODE_FUSED if split == 1 else _MODE_SLICE
    int64 = bool(geo.needs_int64 or xp_numel >= INT32_LIMIT or split * geo.w_numel >= INT32_LIMIT)

    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "tf32" if dt.compute == "tf32" or dt.data != torch.float32 else "ieee"
    if upcast:
        precision = "ieee"
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))

    block_c = min(64, triton.next_power_of_2(GC))
    block_p = max(16, _PAD_ELEMS // block_c)
    pad = BoundKernel(_pad_copy_kernel, (triton.cdiv(p_pad, block_p), triton.cdiv(GC, block_c)),
                      BLOCK_P=block_p, BLOCK_C=block_c, INT64=int64, num_warps=4)
    pad_sizes = (GC, geo.C, Dp, Hp, Wp, Di, Hi, Wi, *geo.pad3, p_pad, *geo.x_strides)

    gemm = BoundKernel(
        gemm_kernel, (tiles * split,),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        CHUNK_ITERS=chunk_iters(cfg.block_k), MODE=mode, INT64=int64, UPCAST_F32=upcast,
        INPUT_PRECISION=precision, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi, **constexprs,
    )
    sizes = (geo.G, geo.K, geo.C, geo.taps, FY, FX,
             xs_n, sd * xs_d, sh * xs_h, sw * xs_w, dd * xs_d, dh * xs_h, dw * xs_w,
             *geo.w_strides, *geo.y_strides, Do, Ho, Wo, R, iters_per_split, total_iters, geo.w_numel,
             *walk_step(cfg.block_k, geo.out3, False))
    w_numel = geo.w_numel

    def padded(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        xp = torch.empty(xp_numel, dtype=x.dtype, device=x.device)
        pad(x, xp, *pad_sizes)
        return xp, dy

    finalize = None if mode == _MODE_FUSED else slice_reduce(w_numel, int64, epi)
    return split_runner(gemm, finalize, sizes, (w_numel, split), split * w_numel, operands=padded)


ALG = register_algorithm(Algorithm(
    op=OP_NAME, name=ALGORITHM, config=SplitKConfig, decline=decline, bind=bind,
    description="two_stage's GEMM (taps folded into the columns) over a zero-padded channels-last copy "
                "of the input: gathers without bounds tests; pad copy, GEMM, fixed-order reduce",
    kernels=(_pad_copy_kernel, _padx_gemm_kernel, _bwd_weight_finalize_kernel)))
