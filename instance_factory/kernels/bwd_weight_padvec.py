"""conv_bwd_weight (dL/dW) as padx's GEMM over a zero-padded channels-last copy of the input, with the
input gathered in 16-byte vectors: dense layers of 16-32 channels and filters of many taps (3-D U-Net /
V-Net levels, 2-D segmentation and super-resolution layers), and padx's own stems.

Per group g, like ``padx`` (M = K, N = C * taps with the tap folded into the columns, K_gemm = R =
N * prod(out)), over the padded copy ``xp`` [N, Dp, Hp, Wp, G, C]:

    dw[g, k, tap, c] = sum_{n, o} dy[n, o, g, k] * xp[n, o*stride + tap*dil, g, c]

What differs from padx's GEMM (a kernel of its own: editing padx's would change its kernel hash and
stale every shipped padx row on every GPU, session 43):

* the gather of a tile's columns is ALIGN-element runs of one tap's channels, contiguous and aligned in
  ``xp`` (C a multiple of ALIGN, ALIGN the 16 bytes' worth of channels that divides C), declared to
  Triton with ``multiple_of`` / ``max_contiguous``: one 16-byte load per run where padx issues one 2-byte
  load per element (padx lost most layers with C >= 16 to its scalar gathers, session 11);
* no column mask: columns past the last tap read the last tap's (valid) data and are dropped at the
  store. The mask was a per-element predicate, and where C is not a multiple of 16 it split the
  vectors. ``COL_MASK`` keeps it where one tile is wider than all the columns (wav2vec2's C = 1, 10-tap
  stem: 10 of 32 columns), which would otherwise load 3x the data.

Session 43 (H100, bf16, best config each; tools/wgrad_probe.py): V-Net 5x5x5 C16 0.39 ms (two_stage 0.55,
cuDNN 0.48), C32 0.41 (two_stage 0.62, cuDNN 0.41), 3D U-Net 3x3x3 C32 -> 64 0.26 (split-K 0.46, cuDNN
0.34), a 2D 5x5 C32 layer 1.24x two_stage, ResNet-50's 7x7 stem 0.19 ms (padx 0.23); at parity with
two_stage on a 2D 3x3 C32 and a 1D k7 C32 layer, behind it on grouped C16 layers (0.76-0.80x: declined).

Launches: padx's pad copy, this GEMM, and with several splits two_stage's fixed-order reduce +
epilogue (deterministic), all bound by :func:`bwd_weight_padx.bind_padded_gemm`.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_weight_igemm import _bwd_weight_finalize_kernel
from .bwd_weight_igemm_plan import SplitKConfig
from .bwd_weight_padx import MAX_C, MIN_K, _pad_copy_kernel, bind_padded_gemm, config_decline
from .common import _walk_advance, _walk_start

__all__ = ["ALGORITHM", "MAX_VECTOR_C", "bind", "channel_align", "decline", "vector_domain"]

OP_NAME = "conv_bwd_weight"
ALGORITHM = "padvec"
# Wider C where the gather loads 16-byte runs of one tap's channels (C a multiple of 8 in 16-bit data,
# 4 in fp32): dense layers of several taps, up to 32 channels (C = 64 3x3x3 ran at split-K's speed,
# 0.63x cuDNN, where rowstack / shift serve).
MAX_VECTOR_C = 32


@triton.jit
def _padvec_gemm_kernel(
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
    ALIGN: tl.constexpr, COL_MASK: tl.constexpr,
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
    # columns past the last tap read the last tap's (valid) data and are dropped at the store: the
    # gather then needs no column mask (a per-element predicate, which also splits the vectors where C
    # is not a multiple of 16). COL_MASK keeps it where one tile is wider than all the columns.
    col_tap = tl.minimum(offs_n // C, TAPS - 1)
    col_x = col_tap % FX
    col_y = (col_tap // FX) % FY
    col_z = col_tap // (FX * FY)
    x_col = g * C + col_c + col_z * xc_z + col_y * xc_y + col_x * xc_x
    if ALIGN > 1:  # runs of ALIGN channels of one tap, contiguous and aligned in xp: vector loads
        x_col = tl.max_contiguous(tl.multiple_of(x_col, ALIGN), ALIGN)
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
            if ALIGN > 1:  # every row offset is a multiple of G*C (the copy's position stride)
                x_r = tl.multiple_of(x_r, ALIGN)
            a = tl.load(dy_base + dy_row[:, None] + dy_r[None, :],
                        mask=mask_m[:, None] & mask_r[None, :], other=0.0)
            if COL_MASK:
                b = tl.load(xp_ptr + x_r[:, None] + x_col[None, :], mask=mask_r[:, None] & mask_n[None, :],
                            other=0.0)
            else:
                b = tl.load(xp_ptr + x_r[:, None] + x_col[None, :], mask=mask_r[:, None], other=0.0)
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
def channel_align(c: int, itemsize: int) -> int:
    """Elements per vector load of the gather: the largest power of two dividing C (its lowest set bit),
    at most 16 bytes."""
    return min(c & -c, 16 // itemsize)


def vector_domain(params: ConvParams, dtype: DataType) -> bool:
    """A dense layer of several taps whose C (up to MAX_VECTOR_C) the gather reads in 16-byte runs."""
    size = dtype.data.itemsize
    return (params.G == 1 and params.C <= MAX_VECTOR_C and channel_align(params.C, size) * size >= 16
            and math.prod(params.filter) > 1)


def decline(cfg: SplitKConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when a padvec instance with ``cfg`` can run the problem, else why not: padx's problems, and
    dense layers of several taps with C <= MAX_VECTOR_C a multiple of 16 bytes."""
    if params.K < MIN_K or (params.C > MAX_C and not vector_domain(params, dtype)):
        return (f"padvec serves few input channels: C <= {MAX_C} and K >= {MIN_K} per group (padx's stems), or "
                f"dense layers (G = 1) of several taps with C <= {MAX_VECTOR_C} a multiple of 16 bytes, got "
                f"G={params.G}, C={params.C}, K={params.K}, {math.prod(params.filter)} taps; wider C gathers "
                f"faster per tap (igemm, split-K, rowstack), and K < {MIN_K} wastes most of a tensor-core tile")
    return config_decline(cfg, params, layout, dtype, fused, ALGORITHM)


def bind(args: RunArgs) -> Runner:
    """A runner: padx's pad copy, this GEMM, and (with several splits) the fixed-order reduce + epilogue."""
    cfg, p, dt = args.cfg, args.params, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight padvec", p)
    return bind_padded_gemm(args, _padvec_gemm_kernel, ALIGN=channel_align(p.C, dt.data.itemsize),
                            COL_MASK=p.C * args.geo.taps < cfg.block_n)


ALG = register_algorithm(Algorithm(
    op=OP_NAME, name=ALGORITHM, config=SplitKConfig, decline=decline, bind=bind,
    description="padx's GEMM with the input gathered in 16-byte runs of one tap's channels and no column "
                "mask: dense few-channel (C <= 32) many-tap layers and stems; pad copy, GEMM, fixed-order reduce",
    kernels=(_pad_copy_kernel, _padvec_gemm_kernel, _bwd_weight_finalize_kernel)))
