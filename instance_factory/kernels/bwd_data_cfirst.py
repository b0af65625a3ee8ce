"""conv_bwd_data (dL/dIn) of 1x1 layers in channels-first layouts: per image, one GEMM over position runs.

For a 1x1(x1) filter with stride 1 and no padding, per group g and image n (M = positions, N = C,
reduction over K):

    dx[n, g, c, s] = sum_k dy[n, g, k, s] * w[g, k, c]

with s the flat position of one image. In NGK{spatial} grad_out, s is the contiguous axis: a tile
[block_m positions, block_k channels] is block_k runs of block_m consecutive elements, and the
grad_in tile is stored the same way, so loads and stores are vector accesses along s and the loads
are pipelined cp.async copies when the runs are 16-byte aligned. igemm tiles grad_in as
(flattened n*positions) x C, which crosses image boundaries and so never proves a run contiguous:
the H100 rows of session 17 had it 1.2-3x slower on these layers than on their channels-last twins.

Alignment: positions per image S sets how far a run is aligned (NGKHW: every row starts at a
multiple of S). Triton only sees divisors of 16 in integer arguments, so S is passed divided by its
largest power-of-two divisor (at most 16), which the kernel multiplies back as a constexpr
(CUTLASS's "alignment", as igemm does for channel counts): 14x14 images (S = 196) get 8-byte runs.

Tiles stay inside one image (block_m rows of one image's positions), so a 7x7 image wastes the rows
past 49 of a 64-row tile; the tuner weighs that against ``relayout`` and igemm.
Only channels-first layouts (NGCW/NGCHW/NGCDHW, both weight layouts: for a 1x1 filter GKYXC and GKCYX
hold the same [G, K, C] matrix) run here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_weight_cfirst import is_pointwise_run
from .common import MAX_GRID_YZ
from .host import SMEM_PER_BLOCK, GemmTileConfig, check_num_stages

__all__ = ["ALGORITHM", "BwdDataCfirstConfig", "bind", "decline", "run_alignment"]

OP_NAME = "conv_bwd_data"
_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")  # the bwd-data rows of the dtype table
_MAX_GRID = 2**31 - 1
_MAX_ALIGN = 16


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _bwd_data_cfirst_kernel(
    dy_ptr, w_ptr, out_ptr, d0, d1, d2, d3, alpha, beta,
    G, K, C, S_OVER_ALIGN, S_TILES,  # positions per image / ALIGN; block_m tiles per image
    tiles_m, tiles_n,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    ALIGN: tl.constexpr, EVEN_K: tl.constexpr, INT64: tl.constexpr, UPCAST: tl.constexpr,
    PRECISION: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    """Tile (pid_m = image * S_TILES + position tile, pid_n = C tile) of group program_id(1); tiles
    in groups of GROUP_M along M, so the C tiles of one grad_out tile run together (L2)."""
    pid = tl.program_id(0)
    g = tl.program_id(1)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_m = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_m
    pid_n = (pid % per_group) // rows_m
    n = pid_m // S_TILES
    S = S_OVER_ALIGN * ALIGN  # a multiple of ALIGN: the runs' alignment, visible to Triton

    offs_s = (pid_m - n * S_TILES) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_c = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    s_ok = offs_s < S
    c_ok = offs_c < C
    if INT64:
        n = n.to(tl.int64)
        g = g.to(tl.int64)
        offs_s = offs_s.to(tl.int64)
        offs_c = offs_c.to(tl.int64)
    # NGK{s}: row (n, g, k) starts at ((n * G + g) * K + k) * S; weight [G, K, C] with C contiguous
    dy_rows = dy_ptr + (n * G + g) * K * S + offs_s
    a_ptrs = dy_rows[:, None] + offs_k[None, :] * S
    b_ptrs = w_ptr + g * K * C + offs_k[:, None] * C + offs_c[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=s_ok[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=c_ok[None, :], other=0.0)
        else:
            k_ok = offs_k < K - k0
            a = tl.load(a_ptrs, mask=s_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & c_ok[None, :], other=0.0)
        if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=tl.float32)
        a_ptrs += BLOCK_K * S
        b_ptrs += BLOCK_K * C

    # NGC{s}: grad_in (and every D) row (n, g, c) starts at ((n * G + g) * C + c) * S
    x_offs = ((n * G + g) * C + offs_c[None, :]) * S + offs_s[:, None]
    x_mask = s_ok[:, None] & c_ok[None, :]
    res = apply_epilogue(acc, x_offs, x_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
    tl.store(out_ptr + x_offs, res.to(out_ptr.dtype.element_ty), mask=x_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdDataCfirstConfig(GemmTileConfig):
    """A block_m (positions of one image) x block_n (C) tile of one group's grad_in, reduced over
    block_k-wide chunks of K; tiles in groups of group_m along the positions."""

    def check(self) -> str | None:
        return (self.blocks_reason(256, "tl.dot's smallest tile is 16") or self.group_m_reason()
                or self.warpgroups_reason() or check_num_stages(self.num_stages)
                or self.fit_reason(max_acc_regs=256))


def run_alignment(positions: int) -> int:
    """The largest power of two (at most 16) dividing the positions per image: every grad_out and
    grad_in run starts at a multiple of it."""
    align = _MAX_ALIGN
    while positions % align:
        align //= 2
    return align


def decline(cfg: BwdDataCfirstConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if layout.channels_last:
        return (f"cfirst walks position-contiguous (channels-first) tensors; {layout.name} is channels-last "
                "(pointwise, tma and igemm run it)")
    if dtype.name not in _DTYPES:
        return f"cfirst bwd data has no {dtype.name!r} variant ({dtype.label}); it supports {', '.join(_DTYPES)}"
    if layout.ndim != params.ndim:
        return f"layout {layout.name} is {layout.ndim}D but the problem is {params.ndim}D"
    if params.G > MAX_GRID_YZ:
        return f"G={params.G} is over the {MAX_GRID_YZ} groups the launch grid's y axis holds"
    need = cfg.smem_bytes(dtype.data.itemsize)
    if need > SMEM_PER_BLOCK:
        return (f"its {cfg.num_stages}-stage pipeline needs {need // 1024} KiB of shared memory with "
                f"{dtype.data.itemsize}-byte operands, over the {SMEM_PER_BLOCK // 1024} KiB of a Hopper SM")
    if not is_pointwise_run(params, layout):
        return (f"cfirst runs 1x1 filters with stride 1 and no padding (grad_in and grad_out positions are "
                f"the same run); got filter {params.filter}, stride {params.stride}, padding "
                f"{params.left_pad}/{params.right_pad} (relayout and igemm run the rest)")
    return None


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner is one launch."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-data cfirst", p)
    s = math.prod(geo.in3)
    align = run_alignment(s)
    s_tiles = triton.cdiv(s, cfg.block_m)
    tiles_m, tiles_n = geo.N * s_tiles, triton.cdiv(geo.C, cfg.block_n)
    if tiles_m * tiles_n > _MAX_GRID:
        raise ValueError(f"bwd-data cfirst: {tiles_m * tiles_n} tiles per group are over the launch grid's {_MAX_GRID}")
    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "ieee" if (dt.compute == "ieee" or upcast) else "tf32"
    kernel = BoundKernel(
        _bwd_data_cfirst_kernel, (tiles_m * tiles_n, geo.G),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        ALIGN=align, EVEN_K=geo.K % cfg.block_k == 0, INT64=geo.needs_int64, UPCAST=upcast,
        PRECISION=precision, OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    scalars = (geo.G, geo.K, geo.C, s // align, s_tiles, tiles_m, tiles_n)

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), alpha, beta, *scalars)

    return run


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="cfirst", config=BwdDataCfirstConfig, decline=decline, bind=bind,
    description="channels-first 1x1 / stride-1 / pad-0 dL/dIn as a GEMM per image over position runs "
                "(vector loads and stores along the contiguous positions), fused multiple-D epilogue",
    kernels=(_bwd_data_cfirst_kernel,)))
