"""conv_bwd_weight (dL/dW) as a per-tap GEMM whose operands arrive as one-row TMA boxes.

Per group g and filter tap t (M = K, N = C, reduced over the output positions, like ``igemm``):

    dw[g, k, t, c] = sum_{n, od, oh, ow} dy[n, od, oh, ow, g, k] * x[n, id, ih, ow + t_x*dil_w - pad_w, g, c]

with id = od*stride_d + t_z*dil_d - pad_d and ih likewise. The reduction walks the output rows
(n, od, oh) in chunks of block_k consecutive positions ow of one row. For one chunk, the grad_out
rows are one box [1, 1, block_k, 1, block_m] of the channels-last tensor seen as [N*Do, Ho, Wo, G, K],
and the input rows one box [1, 1, block_k, 1, block_n] of [N*Di, Hi, Wi, G, C]: consecutive in W
because the W stride is 1. TMA fills the parts of a box outside its tensor with zeros, which is the
padding halo along H and W and the end of a row (positions ow >= Wo read zeros from grad_out, so they
add nothing). The loop therefore has no masks and no per-element addresses: the pointer-based GEMM
(``igemm``) spends ~200 instructions per step on them (session 12's SASS count), its MMA 4 of them.

Costs and limits. A row of Wo positions fills ceil(Wo / block_k) chunks (Wo = 56 in one 64-wide box:
7/8 of the MMA work is useful, as for 28/32, 14/16); a program reduces ``rows`` chunks per pipelined
step. Rows whose input plane id falls outside the input (3-D padding) are pointed past the end of H,
so their box is zero. Only channels-last input and grad_out with unit channel stride and a W stride
of 1 run here, in fp16, bf16 (also with an fp32 weight gradient) and fp32 with tf32 compute. Both
operands arrive M/N-major (channels contiguous). wgmma reads such a transposed tile from shared memory
for 16-bit types but not for tf32, so fp32 tiles are split into bf16 hi + lo parts and multiplied as
three bf16 products (``common.dot_tn``, session 32): the B parts go back to shared memory, one extra
tile's worth (:func:`tf32_smem_reason`). True fp32 (ieee) has no tensor-core path and declines to ``igemm``.

Launches: the GEMM (the epilogue from the accumulator with one split, else fp32 slices per split)
and, with several splits, ``bwd_weight_igemm``'s fixed-order reduce + epilogue (deterministic). The
same two-level fp32 summation as the igemm kernels bounds the accumulation error of long reductions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple, layout_for
from ..problem import ConvParams
from .bwd_data_tma import TensorDescriptor, _dy_view, _with_base, channels_last_view, descriptor_template, tma_ready
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, chunk_iters, slice_reduce
from .bwd_weight_igemm_plan import auto_split, check_tensors
from .common import dot_operands, dot_tn, split_runner
from .host import (
    INT32_LIMIT,
    SMEM_PER_BLOCK,
    GemmTileConfig,
    check_split_k,
    even_split,
    is_pow2,
    merge_positions,
    operand_smem_bytes,
    sm_count,
)

__all__ = ["ALGORITHM", "TMA_WGRAD_DTYPES", "TMA_WGRAD_FAMILIES", "BwdWeightTmaConfig", "bind", "choose_split",
           "decline", "tf32_smem_reason", "tma_wgrad_reason"]

OP_NAME = "conv_bwd_weight"
# the dtypes of the TMA bwd-weight families: tensor-core dots (fp32 with tf32 compute as three bf16 products
# of hi / lo parts, common.dot_tn)
TMA_WGRAD_DTYPES = ("fp16", "bf16", "bf16_fp32w", "fp32_tf32")
# the families whose dots go through common.dot_tn (and tma_wgrad_reason): fp32_tf32 runs as the split there
TMA_WGRAD_FAMILIES = frozenset({"tma", "shift", "pointwise", "rowstack", "tapshare"})
_MODE_FUSED = 0  # one split: epilogue + final dtype from the accumulator
_MODE_SLICE = 2  # fp32 store into this split's workspace slice
_MAX_GRID = 2**31 - 1
_MAX_BOX = 256  # TMA: at most 256 elements per box dim
_MAX_STEP = 128  # rows * block_k: positions reduced per pipelined step
# Grouped layers run one group per tile: with fewer channels per group than a 64-wide tile most of
# it is padding. On the H100 (session 12) tma lost every grouped layer it was timed on (ResNeXt's
# G = 32, C = K = 8: all pruned), and served untuned it ran RegNetY's G = 5, C = K = 24 wgrad at
# 0.35-0.54x of bdrow, which packs several groups per tile.
MIN_GROUP_CHANNELS = 64


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
# The tile order (split, g, tap, group-M swizzled tile) repeats bwd_weight_igemm's kernel lines
# instead of calling a shared @triton.jit helper: moving them into one would change the kernel hash
# of every igemm / split-K / two_stage row in tuning_db/ (kernel_identity.py) and stale them.
@triton.jit
def _bwd_weight_tma_kernel(
    dy_desc, x_desc, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, TAPS, FY, FX,
    Di, Hi, Do, Ho, NDo,  # NDo = N*Do: grad_out's merged (n, d) extent; a row past it reads zeros
    sd, sh, off_z, off_y, dil_z, dil_y, dil_x, off_x,  # off_* = -padding per axis
    WCH, Q, STEPS_PER_SPLIT, TOTAL_STEPS, W_NUMEL,  # chunks per row, chunks, pipelined steps
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ROWS: tl.constexpr,
    GROUP_M: tl.constexpr, CHUNK_STEPS: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr,
    OPERANDS: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    # ---- (split, g, tap, tile), tile fastest: programs running together share (split, g, tap) and
    # with it the same grad_out and input rows in L2 --------------------------------------------
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(C, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    tile = pid % tiles
    rest = pid // tiles
    tap = rest % TAPS
    rest = rest // TAPS
    g = rest % G
    split = rest // G
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m
    pid_n = (tile % num_pid_in_group) // group_size_m
    k0 = pid_m * BLOCK_M
    c0 = pid_n * BLOCK_N

    tx = tap % FX
    ty = (tap // FX) % FY
    tz = tap // (FX * FY)
    zoff = tz * dil_z + off_z
    yoff = ty * dil_y + off_y
    xoff = tx * dil_x + off_x

    s_start = split * STEPS_PER_SPLIT
    s_end = tl.minimum(s_start + STEPS_PER_SPLIT, TOTAL_STEPS)
    q_end = tl.minimum(s_end * ROWS, Q)
    # the first chunk's (column chunk, oh, od, n); the walk then adds one chunk at a time
    q = s_start * ROWS
    wc = q % WCH
    t = q // WCH
    oh = t % Ho
    t = t // Ho
    od = t % Do
    n = t // Do

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c_lo in range(s_start, s_end, CHUNK_STEPS):
        c_hi = tl.minimum(c_lo + CHUNK_STEPS, s_end)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(c_lo, c_hi):
            for _j in tl.static_range(ROWS):
                # a chunk past this split's end reads a grad_out row past the tensor: zeros
                nd = tl.where(q < q_end, n * Do + od, NDo)
                id_ = od * sd + zoff
                ih = oh * sh + yoff
                ih = tl.where((id_ >= 0) & (id_ < Di), ih, Hi)  # input plane outside: a zero box
                ow0 = wc * BLOCK_K
                a = dy_desc.load([nd, oh, ow0, g, k0]).reshape(BLOCK_K, BLOCK_M)
                b = x_desc.load([n * Di + id_, ih, ow0 + xoff, g, c0]).reshape(BLOCK_K, BLOCK_N)
                part = dot_tn(a, b, part, OPERANDS)
                # next chunk: one carry per digit
                q += 1
                wc += 1
                cw = wc >= WCH
                wc = tl.where(cw, 0, wc)
                oh += cw.to(tl.int32)
                ch = oh >= Ho
                oh = tl.where(ch, 0, oh)
                od += ch.to(tl.int32)
                cd = od >= Do
                od = tl.where(cd, 0, od)
                n += cd.to(tl.int32)
        acc += part

    offs_m = k0 + tl.arange(0, BLOCK_M)
    offs_n = c0 + tl.arange(0, BLOCK_N)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
        g = g.to(tl.int64)
        split = split.to(tl.int64)
    w_offs = (g * ws_g + tz * ws_z + ty * ws_y + tx * ws_x) + offs_m[:, None] * ws_k + offs_n[None, :] * ws_c
    w_mask = (offs_m < K)[:, None] & (offs_n < C)[None, :]
    if MODE == 0:
        res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)
    else:
        tl.store(ws_ptr + split * W_NUMEL + w_offs, acc, mask=w_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightTmaConfig(GemmTileConfig):
    """A block_m (K) x block_n (C) tile of one tap's dW, reduced over chunks of block_k consecutive
    output positions of one row (one TMA box per operand), ``rows`` chunks per pipelined step, split
    over split_k programs (0: automatic, :func:`choose_split`)."""

    rows: int
    split_k: int

    def smem_bytes(self, elem_bytes: int) -> int:
        """The pipeline's operand boxes: num_stages x rows x (A: block_k x block_m, B: block_k x block_n)."""
        return operand_smem_bytes(self.num_stages * self.rows, self.block_m, self.block_n, self.block_k, elem_bytes)

    def check(self) -> str | None:
        for name in ("block_m", "block_n", "block_k", "rows"):
            v = getattr(self, name)
            if not is_pow2(v):
                return f"{name}={v!r} must be a power of two"
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not 16 <= v <= _MAX_BOX:
                return f"{name}={v} must be 16..{_MAX_BOX} (tl.dot's smallest tile, a TMA box dim)"
        if self.rows * self.block_k > _MAX_STEP:
            return f"rows*block_k={self.rows * self.block_k} positions per step is over {_MAX_STEP}"
        if (why := self.group_m_reason() or self.warpgroups_reason()) is not None:
            return why
        if (why := self.pipeline_stages_reason() or check_split_k(self.split_k)) is not None:
            return why
        return self.fit_reason(max_acc_regs=256)


def tma_wgrad_reason(family: str, dtype: DataType) -> str | None:
    """Why the TMA bwd-weight families (tma, shift, pointwise, rowstack, tapshare) cannot run ``dtype`` here, or
    None: they need Triton's host tensor descriptors and a tensor-core dtype."""
    if TensorDescriptor is None:
        return f"{family} needs Triton's host tensor descriptors (triton.tools.tensor_descriptor, Triton >= 3.4)"
    if dtype.name not in TMA_WGRAD_DTYPES:
        return (f"{family} bwd weight has no {dtype.name!r} variant ({dtype.label}): its dots run on tensor "
                f"cores in 16-bit data or tf32 ({', '.join(TMA_WGRAD_DTYPES)}); igemm and the split-K "
                f"families run the rest")
    return None


def tf32_smem_reason(family: str, cfg: GemmTileConfig, dtype: DataType) -> str | None:
    """Why ``cfg``'s 4-byte tiles do not fit a Hopper SM's shared memory, or None (always None for
    16-bit data, which the configs' own check covers). A tf32 config keeps the pipeline's fp32 boxes
    plus one more tile's worth: dot_tn's bf16 hi and lo parts of the B tile (Triton 3.6, sm_90 compiles:
    m128 n128 k32 with 3 stages uses 80 KiB = 2 stages of boxes + one 128x32 fp32 tile); counted here
    with all num_stages, as Triton versions differ in the buffers they keep."""
    if dtype.data.itemsize == 2:
        return None
    need = cfg.smem_bytes(4) + max(cfg.block_m, cfg.block_n) * cfg.block_k * 4
    if need > SMEM_PER_BLOCK:
        return (f"{family} m{cfg.block_m} n{cfg.block_n} k{cfg.block_k} with num_stages={cfg.num_stages} needs "
                f"{need // 1024} KiB of shared memory for fp32 tiles (tf32 compute: the pipeline's boxes plus "
                f"the bf16 hi / lo parts of a tile), over {SMEM_PER_BLOCK // 1024} KiB")
    return None


def group_tile_reason(family: str, params: ConvParams) -> str | None:
    """Why a family that tiles one group at a time (tma, shift, rowstack) declines a grouped layer with
    few channels per group, or None."""
    if params.G > 1 and min(params.C, params.K) < MIN_GROUP_CHANNELS:
        return (f"{family} tiles one group at a time: grouped layers need C and K >= {MIN_GROUP_CHANNELS} per "
                f"group, got C={params.C}, K={params.K} (bdrow and blockdiag pack several small groups per tile)")
    return None


def _pointwise_walk(geo: ConvGeometry) -> tuple[list, list, tuple[int, ...]] | None:
    """For a pointwise filter: grad_out and the input (its strided positions) as [A, B, W, G, ch]
    views over the same position index, merged as far as their strides allow (packed channels-last
    stride-1 tensors become one row of N*D*H*W positions, so every box is full), plus the walk's
    (N, Di, Hi, Do, Ho, Wo, stride_d, stride_h) in those axes; None when more than three position axes remain or a
    channel axis is not unit-stride."""
    gy, ny, ky, dy_, hy, wy = geo.y_strides
    gx, nx, cx, dx, hx, wx = geo.x_strides
    if ky != 1 or cx != 1:
        return None
    sd, sh, sw = geo.stride3
    axes = merge_positions((geo.N, *geo.out3), (ny, dy_, hy, wy), (nx, dx * sd, hx * sh, wx * sw))
    if len(axes) > 3:
        return None
    axes = [(1, 0, 0)] * (3 - len(axes)) + axes
    (a, ya, xa), (b, yb, xb), (w, yw, xw) = axes
    dy_view = [a, b, w, geo.G, geo.K], [ya, yb, yw, gy, 1]
    x_view = [a, b, w, geo.G, geo.C], [xa, xb, xw, gx, 1]
    return dy_view, x_view, (a, 1, b, 1, b, w, 1, 1)


@functools.lru_cache(maxsize=4096)
def walk_width(params: ConvParams) -> int:
    """Positions per walked row with packed channels-last (NHWGC) tensors: the boxes' row (the cost
    model rounds the reduction to whole block_k-wide boxes of it). Cached: the cost model asks for
    every tma candidate it ranks."""
    if params.is_1x1_pad0:
        walk = _pointwise_walk(ConvGeometry.build(params, layout_for("nhwgc", params.ndim)))
        if walk is not None:
            return walk[2][5]
    return params.output[-1]


@functools.lru_cache(maxsize=1024)
def _tma_views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """((dy shape, strides), (x shape, strides), walk) ready for TMA descriptors, or why not. walk is
    (N, Di, Hi, Do, Ho, Wo, stride_d, stride_h) of the index space the kernel walks: the problem's own, or for a
    pointwise filter the merged positions of :func:`_pointwise_walk`. Cached: every tma config of a
    problem asks (decline), then bind."""
    geo = ConvGeometry.build(params, layout)
    pointwise = _pointwise_walk(geo) if params.is_1x1_pad0 else None
    if pointwise is not None:
        dy, x, walk = pointwise
    elif params.stride[-1] != 1:
        return (f"tma needs a W stride of 1 (an input row is one box) or a 1x1 filter without padding, got "
                f"stride {params.stride}")
    else:
        dy, x = _dy_view(geo), channels_last_view(geo.x_strides, geo.in3, geo.N, geo.G, geo.C)
        walk = (geo.N, *geo.in3[:2], *geo.out3, *geo.stride3[:2])
    if dy is None or x is None:
        return (f"tma needs channels-last input and grad_out (unit C and K strides: the NHWGC / GNHWC "
                f"families); layout {layout.name} has neither or one")
    ready = tma_ready((dy, x), elem, params, dtype_name)
    return ready if isinstance(ready, str) else (*ready, walk)


def decline(cfg: BwdWeightTmaConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := tma_wgrad_reason("tma", dtype)) is not None:
        return why
    if (why := group_tile_reason("tma", params) or tf32_smem_reason("tma", cfg, dtype)) is not None:
        return why
    views = _tma_views(params, layout, dtype.data.itemsize, dtype.name)
    if isinstance(views, str):
        return views
    wo = views[2][5]
    if cfg.block_k > 2 * wo:
        return (f"block_k={cfg.block_k} positions per box is over twice the walked row's {wo} positions: "
                "most of each box would be past the row's end")
    return None


def _tiles(params: ConvParams, cfg: BwdWeightTmaConfig) -> int:
    """Output tiles of one split: block_m x block_n of each group's and tap's K x C."""
    return params.G * math.prod(params.filter) * triton.cdiv(params.K, cfg.block_m) * triton.cdiv(params.C, cfg.block_n)


def choose_split(params: ConvParams, cfg: BwdWeightTmaConfig, sms: int, width: int | None = None) -> int:
    """Automatic split: the GEMM families' rule (:func:`auto_split`) over this family's tiles and
    pipelined steps (``rows`` row chunks each); ``width``: the walked row's positions (default:
    :func:`walk_width`, bind passes its own walk's)."""
    width = width or walk_width(params)
    chunks = params.N * math.prod(params.output) // width * triton.cdiv(width, cfg.block_k)
    return auto_split(_tiles(params, cfg), triton.cdiv(chunks, cfg.rows), sms, params.numel("weight"))


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner moves the two descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight tma", p)
    dev = check_tensors(args).device
    dy_view, x_view, walk = _tma_views(p, args.layout, dt.data.itemsize, dt.name)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k

    N, Di, Hi, Do, Ho, Wo, sd, sh = walk
    _, FY, FX = geo.filt3
    pd, ph, pw = geo.pad3
    taps = geo.taps
    wch = triton.cdiv(Wo, bk)
    q_total = N * Do * Ho * wch
    total_steps = triton.cdiv(q_total, cfg.rows)
    split = int(cfg.split_k) or choose_split(p, cfg, sm_count(dev), Wo)
    split, steps_per_split = even_split(split, total_steps)
    tiles = _tiles(p, cfg)
    if tiles * split > _MAX_GRID:
        raise ValueError(f"bwd-weight tma: {tiles * split} programs are over the launch grid's {_MAX_GRID}")
    mode = _MODE_FUSED if split == 1 else _MODE_SLICE
    w_numel = geo.w_numel
    int64 = bool(split * w_numel >= INT32_LIMIT)
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))

    gemm = BoundKernel(
        _bwd_weight_tma_kernel, (tiles * split,),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, ROWS=cfg.rows, GROUP_M=cfg.group_m,
        CHUNK_STEPS=chunk_iters(bk * cfg.rows), MODE=mode, INT64=int64, OPERANDS=dot_operands(dt),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi,
    )
    dd, dh, dw = geo.dil3
    sizes = (geo.G, geo.K, geo.C, taps, FY, FX, Di, Hi, Do, Ho, N * Do,
             sd, sh, -pd, -ph, dd, dh, dw, -pw, wch, q_total, steps_per_split, total_steps, w_numel,
             *geo.w_strides)
    dy_template = descriptor_template(args.b, dy_view, [1, 1, bk, 1, bm])
    x_template = descriptor_template(args.a, x_view, [1, 1, bk, 1, bn])

    def descriptors(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        return _with_base(dy_template, dy), _with_base(x_template, x)

    finalize = None if mode == _MODE_FUSED else slice_reduce(w_numel, int64, epi)
    return split_runner(gemm, finalize, sizes, (w_numel, split), split * w_numel, operands=descriptors)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="tma", config=BwdWeightTmaConfig, decline=decline, bind=bind,
    description="per-tap GEMM dL/dW whose operands are one-row TMA boxes of channels-last grad_out and "
                "input (zero fill = padding and row ends: no masks in the loop); fp32 slices per split, "
                "fixed-order reduce",
    kernels=(_bwd_weight_tma_kernel, _bwd_weight_finalize_kernel)))
