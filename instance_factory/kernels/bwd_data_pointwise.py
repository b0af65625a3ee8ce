"""conv_bwd_data (dL/dIn) of a pointwise layer (1x1(x1) filter, no padding, any stride) as a persistent
TMA GEMM over the merged positions.

Per group g, with p running over every position (n, d, h, w) of grad_out, which are grad_in's:

    dx[p, g, c] = sum_k dy[p, g, k] * w[g, k, c]

When both activations store their positions as one packed run (the channels-last families,
NHWGC and GNHWC), p is a single axis of N*D*H*W positions: grad_out is the 3-D TMA view [G, P, K]
and the weight [G, K, C]. The tiles are block_m positions x block_n channels and never waste a row
on a plane's edge (``tma`` dgrad covers a 7x7 plane with an 8x8 patch: 49/64 useful rows; igemm has
no TMA). TMA zero fill handles every tail (P, K and C need not divide the tile); the result and the
D tensors go through pointers once per tile.

Persistent: one program per SM (two for the smaller tiles) walks the tiles in group-M order
(``tl.range(..., flatten=True)`` lets the software pipeline fetch the next tile's first boxes while
the current tile's epilogue runs), so a layer of 2-4 waves pays the pipeline fill once per program
instead of once per tile.

Strided (a ResNet downsample shortcut): grad_out's positions are still one packed run, and each maps to
grad_in's position (n, d*sd, h*sh, w*sw), so the GEMM is the same and only the epilogue's row offsets
change (decomposed per row). The grad_in positions no grad_out position reads (3 of 4 at stride 2x2)
get E = f(0, D...) in a second loop of the same launch: a program whose GEMM tiles ran out starts on
them while the others finish their last tile. The rest (other filters, padding, channels-first
grad_out) declines to ``igemm`` / ``tma``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_data_tma import TensorDescriptor, _with_base, descriptor_template, kmajor_weight, tma_ready
from .host import SMEM_PER_BLOCK, GemmTileConfig, check_num_stages, merge_positions, sm_count

__all__ = ["ALGORITHM", "BwdDataPointwiseConfig", "bind", "decline", "programs_per_sm"]

_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")
_MAX_BOX = 256  # TMA: at most 256 elements per box dim
_MAX_GRID = 2**31 - 1


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _tile_coords(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(g, position tile, channel tile) of a linear tile id; group-M order within a group: programs
    running together share grad_out rows and weight columns in L2."""
    per_g = tiles_m * tiles_n
    g = tile // per_g
    t = tile % per_g
    in_group = GROUP_M * tiles_n
    first_m = (t // in_group) * GROUP_M
    size_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % in_group) % size_m
    pid_n = (t % in_group) // size_m
    return g, pid_m, pid_n


@triton.jit
def _dx_offsets(offs_m, Wn, Hn, Dn, xs_n, xs_d, xs_h, xs_w):
    """grad_in offsets of merged positions over (n, d, h, w) lengths (Dn, Hn, Wn); the strides carry
    the conv stride where the positions are grad_out's."""
    w = offs_m % Wn
    t = offs_m // Wn
    h = t % Hn
    t = t // Hn
    return (t // Dn) * xs_n + (t % Dn) * xs_d + h * xs_h + w * xs_w


@triton.jit
def _bwd_data_pointwise_kernel(
    dy_desc, w_desc, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    P, K, C,  # merged positions, channels of grad_out and grad_in per group
    xs_p, xs_g, xs_c,  # grad_in (and every D) strides, xs_p and xs_g divided by ALIGN
    tiles_m, tiles_n, num_tiles, num_programs,
    # STRIDED only: grad_in's position count, grad_out's (Do, Ho, Wo), grad_in's (Di, Hi, Wi) and
    # per-dim strides (divided by ALIGN), the conv strides
    PX, Do, Ho, Wo, Di, Hi, Wi, xs_n, xs_d, xs_h, xs_w, sd, sh, sw,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    USE_INT64: tl.constexpr, ALIGN: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr, STRIDED: tl.constexpr,
    W_KMAJOR: tl.constexpr,
):
    pid = tl.program_id(0)
    k_tiles = tl.cdiv(K, BLOCK_K)
    xs_p = xs_p * ALIGN
    xs_g = xs_g * ALIGN
    if STRIDED:
        xs_n = xs_n * ALIGN
        xs_d = xs_d * ALIGN
        xs_h = xs_h * ALIGN
        xs_w = xs_w * ALIGN
    # the epilogue recomputes its tile from its own counter: the flattened loop's prologue and
    # epilogue then share no value (the persistent-matmul pattern of Triton's tutorials)
    tile_e = pid - num_programs
    for tile in tl.range(pid, num_tiles, num_programs, flatten=True):
        g, pid_m, pid_n = _tile_coords(tile, tiles_m, tiles_n, GROUP_M)
        p0 = pid_m * BLOCK_M
        c0 = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(0, k_tiles):
            a = dy_desc.load([g, p0, kt * BLOCK_K]).reshape(BLOCK_M, BLOCK_K)
            if W_KMAJOR:  # tf32: the weight's [G, C, K] copy (tf32 wgmma reads K-major tiles only)
                b = tl.trans(w_desc.load([g, c0, kt * BLOCK_K]).reshape(BLOCK_N, BLOCK_K))
            else:
                b = w_desc.load([g, kt * BLOCK_K, c0]).reshape(BLOCK_K, BLOCK_N)
            if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)

        tile_e += num_programs
        ge, em, en = _tile_coords(tile_e, tiles_m, tiles_n, GROUP_M)
        offs_m = em * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = en * BLOCK_N + tl.arange(0, BLOCK_N)
        o_mask = (offs_m < P)[:, None] & (offs_n < C)[None, :]
        if USE_INT64:
            ge = ge.to(tl.int64)
            offs_m = offs_m.to(tl.int64)
            offs_n = offs_n.to(tl.int64)
        if STRIDED:
            rows = _dx_offsets(offs_m, Wo, Ho, Do, xs_n, xs_d * sd, xs_h * sh, xs_w * sw)
        else:
            rows = offs_m * xs_p
        o_offs = ge * xs_g + rows[:, None] + offs_n[None, :] * xs_c
        res = apply_epilogue(acc, o_offs, o_mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                             OP, NUM_DS, USER_FN)
        tl.store(out_ptr + o_offs, res.to(out_ptr.dtype.element_ty), mask=o_mask)

    if STRIDED:  # grad_in positions between the strided ones: E = f(0, D...)
        fill_m = tl.cdiv(PX, BLOCK_M)
        for t in range(pid, (num_tiles // (tiles_m * tiles_n)) * fill_m * tiles_n, num_programs):
            g = t // (fill_m * tiles_n)
            r = t % (fill_m * tiles_n)
            offs_m = (r // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = (r % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
            w = offs_m % Wi
            h = (offs_m // Wi) % Hi
            d = (offs_m // (Wi * Hi)) % Di
            skipped = (offs_m < PX) & ((w % sw != 0) | (h % sh != 0) | (d % sd != 0))
            f_mask = skipped[:, None] & (offs_n < C)[None, :]
            if USE_INT64:
                g = g.to(tl.int64)
                offs_m = offs_m.to(tl.int64)
                offs_n = offs_n.to(tl.int64)
            f_offs = g * xs_g + _dx_offsets(offs_m, Wi, Hi, Di, xs_n, xs_d, xs_h, xs_w)[:, None] \
                + offs_n[None, :] * xs_c
            zero = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            res = apply_epilogue(zero, f_offs, f_mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                                 OP, NUM_DS, USER_FN)
            tl.store(out_ptr + f_offs, res.to(out_ptr.dtype.element_ty), mask=f_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdDataPointwiseConfig(GemmTileConfig):
    """A block_m (positions) x block_n (C) tile of one group's grad_in, reduced over block_k-wide
    chunks of K, tiles in groups of group_m, num_stages-deep pipeline of TMA boxes."""

    def check(self) -> str | None:
        if (why := self.blocks_reason(_MAX_BOX, "tl.dot's smallest tile, a TMA box dim")) is not None:
            return why
        if self.block_m < 64:
            return f"block_m={self.block_m} must be >= 64 (one warpgroup MMA's rows)"
        return (self.group_m_reason() or self.warpgroups_reason() or check_num_stages(self.num_stages)
                or self.fit_reason(max_acc_regs=128))


def programs_per_sm(cfg: BwdDataPointwiseConfig, dtype: DataType) -> int:
    """Persistent programs per SM: two when two fit in shared memory and the accumulator leaves
    room in the register file (64x128 tiles and smaller), else one."""
    small = cfg.block_m * cfg.block_n <= 8192
    return 2 if small and 2 * _smem_bytes(cfg, dtype) <= SMEM_PER_BLOCK else 1


@functools.lru_cache(maxsize=1024)
def _views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """((dy shape, strides), (w shape, strides)) ready for TMA descriptors, the merged position count,
    grad_in's (position, group, channel) strides and its per-dim (n, d, h, w) strides; or why not.
    Strided layers need only grad_out's positions packed (grad_in's are addressed per dim; position
    stride 0). Cached: every config of a problem asks (decline), then bind."""
    geo = ConvGeometry.build(params, layout)
    gy, ny, ky, dy_, hy, wy = geo.y_strides
    gx, nx, cx, dx, hx, wx = geo.x_strides
    gw, kw, cw = geo.w_strides[:3]
    if ky != 1 or cw != 1:
        return (f"pointwise needs grad_out with unit K stride and a weight with unit C stride (the NHWGC / "
                f"GNHWC families); layout {layout.name} has neither or one")
    strided = any(s > 1 for s in geo.stride3)
    tensors = ((ny, dy_, hy, wy),) if strided else ((ny, dy_, hy, wy), (nx, dx, hx, wx))
    axes = merge_positions((geo.N, *geo.out3), *tensors)
    if len(axes) > 1:
        whose = "grad_out" if strided else "grad_out and grad_in"
        return f"pointwise needs the positions of {whose} as one packed run; {layout.name} has {len(axes)}"
    positions, ys_p, *xs = axes[0] if axes else (1, geo.G * geo.K, geo.G * geo.C)
    xs_p = 0 if strided else xs[0]
    # unit box dims lead (group first): a reshape that drops them folds into the shared-memory
    # view, where a unit dim between positions and channels made Triton 3.6 feed wgmma from registers
    dy = [geo.G, positions, geo.K], [gy, ys_p, 1]
    w = [geo.G, geo.K, geo.C], [gw, kw, 1]
    ready = tma_ready((dy, w), elem, params, dtype_name)
    return ready if isinstance(ready, str) else (*ready, positions, (xs_p, gx, cx), (nx, dx, hx, wx))


def decline(cfg: BwdDataPointwiseConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if TensorDescriptor is None:
        return "pointwise needs Triton's host tensor descriptors (triton.tools.tensor_descriptor, Triton >= 3.4)"
    if dtype.name not in _DTYPES:
        return f"pointwise bwd data has no {dtype.name!r} variant ({dtype.label}); it supports {', '.join(_DTYPES)}"
    if not params.is_1x1_pad0:
        return (f"pointwise is the GEMM of a 1x1 filter with no padding; the problem has filter "
                f"{params.filter}, padding {params.left_pad}/{params.right_pad}")
    views = _views(params, layout, dtype.data.itemsize, dtype.name)
    if isinstance(views, str):
        return views
    need = _smem_bytes(cfg, dtype)
    if need > SMEM_PER_BLOCK:
        return (f"m{cfg.block_m} n{cfg.block_n} k{cfg.block_k} with num_stages={cfg.num_stages} needs "
                f"{need // 1024} KiB of shared memory for {dtype.name} (operand pipeline and epilogue), "
                f"over {SMEM_PER_BLOCK // 1024} KiB")
    return None


def _smem_bytes(cfg: BwdDataPointwiseConfig, dtype: DataType) -> int:
    """A program's shared memory: the operand pipeline and the epilogue's buffer."""
    return cfg.smem_bytes(dtype.data.itemsize) + _epilogue_smem_bytes(cfg, dtype)


def _epilogue_smem_bytes(cfg: BwdDataPointwiseConfig, dtype: DataType) -> int:
    """Shared memory of the epilogue's layout conversion, beside the operand pipeline (the persistent
    loop keeps both alive): the accumulator goes through shared memory 16 rows a warp at a time, the
    whole tile when 8 warps share BN <= 64 columns. An upper bound of 20 sm_90 builds (Triton 3.6, session
    33): tf32's m128 n256 k32 s3 needed 144 KiB of operands + 128 KiB of epilogue and failed with
    OutOfResources. fp32 (ieee) issues no wgmma and keeps fewer operand buffers than the estimate."""
    if dtype.compute == "ieee":
        return 0
    whole = cfg.block_n <= 64 and cfg.num_warps >= 8
    rows = cfg.block_m if whole else min(cfg.block_m, 16 * cfg.num_warps)
    return rows * cfg.block_n * (4 if dtype.compute == "tf32" else 2)


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner moves the two descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-data pointwise", p)
    dy_view, w_view, positions, (xs_p, xs_g, xs_c), (xs_n, xs_d, xs_h, xs_w) = _views(
        p, args.layout, dt.data.itemsize, dt.name)
    strided = any(s > 1 for s in geo.stride3)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n = triton.cdiv(positions, bm), triton.cdiv(geo.C, bn)
    num_tiles = geo.G * tiles_m * tiles_n
    if num_tiles > _MAX_GRID:
        raise ValueError(f"bwd-data pointwise: {num_tiles} tiles are over the {_MAX_GRID} a tile id holds")
    programs = min(num_tiles, programs_per_sm(cfg, dt) * sm_count(args.out.device))
    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "ieee" if (dt.compute == "ieee" or upcast) else "tf32"
    align = geo.channel_alignment()
    w_kmajor = kmajor_weight(dt, geo.K)
    kernel = BoundKernel(
        _bwd_data_pointwise_kernel, (programs,),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m,
        USE_INT64=geo.needs_int64, ALIGN=align, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn), STRIDED=strided,
        W_KMAJOR=w_kmajor, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    # per-dim strides of length-1 dims may not divide by the alignment: their index is always 0
    per_dim = [s // align if n > 1 else 0 for s, n in zip((xs_n, xs_d, xs_h, xs_w), (geo.N, *geo.in3))]
    strided_args = (geo.N * geo.in3[0] * geo.in3[1] * geo.in3[2], *geo.out3, *geo.in3, *per_dim, *geo.stride3)
    scalars = (positions, geo.K, geo.C, xs_p // align, xs_g // align, xs_c, tiles_m, tiles_n, num_tiles, programs,
               *strided_args)
    dy_template = descriptor_template(args.a, dy_view, [1, bm, bk])
    kmajor_copy = None
    if w_kmajor:
        (G, K, C), w_strides = w_view
        w_template = descriptor_template(args.b, ([G, C, K], [C * K, K, 1]), [1, bn, bk])

        def kmajor_copy(w: torch.Tensor) -> torch.Tensor:
            """One small copy a call: the weight is K*C, the GEMM's operands N*P*(K + C)."""
            return torch.as_strided(w, (G, K, C), w_strides).transpose(1, 2).contiguous()
    else:
        w_template = descriptor_template(args.b, w_view, [1, bk, bn])

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        if kmajor_copy is not None:
            w = kmajor_copy(w)
        kernel(_with_base(dy_template, dy), _with_base(w_template, w), out, *epilogue_args(ds, out),
               alpha, beta, *scalars)

    return run


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data",
    name="pointwise",
    config=BwdDataPointwiseConfig,
    decline=decline,
    bind=bind,
    description=(
        "1x1 / pad-0 dL/dIn as a persistent TMA GEMM over grad_out's merged positions (grad_out "
        "[G, P, K] and weight [G, K, C] boxes, zero-filled tails, no plane-edge waste; strided layers "
        "write the positions between in the same launch); channels-last"
    ),
    kernels=(_bwd_data_pointwise_kernel,),
))
