"""conv_bwd_weight (dL/dW) of 1x1 layers in channels-first layouts: one GEMM over position runs.

For a 1x1(x1) filter with stride 1 and no padding, per group g (M = K, N = C):

    dw[g, k, c] = sum_{n, s} dy[n, g, k, s] * x[n, g, c, s]

with s the flat position of one image. In NGC{spatial} tensors s is the contiguous axis, i.e. the
GEMM's reduction axis: a grad_out tile [block_m channels, block_k positions] is block_m runs of
block_k consecutive elements (K-major, the operand order wgmma wants), and so is the input tile
[block_n, block_k]. With 16-byte aligned runs (positions per image a multiple of 8; Triton sees it
when the count is a multiple of 16) both loads are pipelined cp.async copies. The pointer GEMMs
tile channels along the fast axis instead, a whole plane apart in these layouts, and ``relayout``
pays two transposes before its channels-last GEMM.

Why 1x1 only (session 17, H100): a general version (per-tap shifted input runs for stride-1 "same"
layers, gathered positions otherwise) verified but ran 0.2-0.5x cuDNN on 3x3 layers: a tap's
shift leaves the input run without 16-byte alignment, so those loads are plain 2-byte loads outside
the software pipeline (TTGIR: one ``tt.load`` left beside the async copies). ``relayout`` runs them.

Launches: the GEMM (the epilogue from the accumulator with one split, else fp32 slices per split)
and, with several splits, ``bwd_weight_igemm``'s fixed-order reduce + epilogue (deterministic). The
same two-level fp32 summation as the igemm kernels bounds the accumulation error of long reductions.
Only channels-first layouts (NGCW/NGCHW/NGCDHW, both weight layouts) run here; fp8 compute does not.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, chunk_iters, flattenable, slice_reduce
from .bwd_weight_igemm_plan import auto_split, check_tensors
from .common import split_runner
from .host import INT32_LIMIT, SMEM_PER_BLOCK, GemmTileConfig, check_split_k, even_split, sm_count

__all__ = ["ALGORITHM", "BwdWeightCfirstConfig", "bind", "decline", "is_pointwise_run"]

OP_NAME = "conv_bwd_weight"
_MODE_FUSED = 0  # one split: epilogue + final dtype from the accumulator
_MODE_SLICE = 2  # fp32 store into this split's workspace slice
_MAX_GRID = 2**31 - 1


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _bwd_weight_cfirst_kernel(
    x_ptr, dy_ptr, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, S, SCH,  # S: positions per image; SCH: block_k chunks per image (ceil(S / BLOCK_K))
    xs_g, xs_n, xs_c, ys_g, ys_n, ys_k,
    STEPS_PER_SPLIT, TOTAL_STEPS, W_NUMEL, ws_g, ws_k, ws_c,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    CHUNK_STEPS: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr,
    UPCAST: tl.constexpr, INPUT_PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    # ---- (split, g, group-M swizzled tile), tile fastest: programs running together read the same
    # grad_out and input positions (L2) ---------------------------------------------------------------
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(C, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    tile = pid % tiles
    rest = pid // tiles
    g = rest % G
    split = rest // G
    per_group = GROUP_M * num_pid_n
    first_m = (tile // per_group) * GROUP_M
    rows_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % rows_m
    pid_n = (tile % per_group) // rows_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < K
    n_ok = offs_n < C
    if INT64:
        g = g.to(tl.int64)
        split = split.to(tl.int64)
        dy_rows = dy_ptr + g * ys_g + offs_m.to(tl.int64) * ys_k
        x_rows = x_ptr + g * xs_g + offs_n.to(tl.int64) * xs_c
    else:
        dy_rows = dy_ptr + g * ys_g + offs_m * ys_k
        x_rows = x_ptr + g * xs_g + offs_n * xs_c

    q_start = split * STEPS_PER_SPLIT
    q_end = tl.minimum(q_start + STEPS_PER_SPLIT, TOTAL_STEPS)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for c_lo in range(q_start, q_end, CHUNK_STEPS):
        c_hi = tl.minimum(c_lo + CHUNK_STEPS, q_end)
        part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for q in range(c_lo, c_hi):
            n = q // SCH
            s = (q - n * SCH) * BLOCK_K + tl.arange(0, BLOCK_K)
            if INT64:
                n = n.to(tl.int64)
            valid = s < S
            a = tl.load(dy_rows[:, None] + n * ys_n + s[None, :], mask=m_ok[:, None] & valid[None, :], other=0.0)
            b = tl.load(x_rows[:, None] + n * xs_n + s[None, :], mask=n_ok[:, None] & valid[None, :], other=0.0)
            if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            part = tl.dot(a, tl.trans(b), part, input_precision=INPUT_PRECISION, out_dtype=tl.float32)
        acc += part

    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    w_offs = g * ws_g + offs_m[:, None] * ws_k + offs_n[None, :] * ws_c
    w_mask = m_ok[:, None] & n_ok[None, :]
    if MODE == 0:
        res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)
    else:
        tl.store(ws_ptr + split * W_NUMEL + w_offs, acc, mask=w_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightCfirstConfig(GemmTileConfig):
    """A block_m (K) x block_n (C) tile of one tap's dW, reduced over chunks of block_k consecutive
    output positions of one image, split over split_k programs (0: automatic)."""

    split_k: int

    def check(self) -> str | None:
        why = (self.blocks_reason(256, "tl.dot's smallest tile is 16") or self.group_m_reason()
               or self.warpgroups_reason())
        if why is not None:
            return why
        if (why := self.pipeline_stages_reason() or check_split_k(self.split_k)) is not None:
            return why
        return self.fit_reason(max_acc_regs=256)


@functools.lru_cache(maxsize=1024)
def is_pointwise_run(params: ConvParams, layout: LayoutTriple) -> bool:
    """A 1x1(x1) filter, stride 1, no padding, in a layout whose positions of one (n, g, channel) are
    one packed run in both input and grad_out: the GEMM's operands are runs of one index s. Cached:
    every cfirst config of a problem asks (decline), then bind."""
    if any(f != 1 for f in params.filter) or any(st != 1 for st in params.stride):
        return False
    if any(params.left_pad) or any(params.right_pad):
        return False
    geo = ConvGeometry.build(params, layout)
    return all(strides[5] == 1 and flattenable(strides, dhw)
               for strides, dhw in ((geo.x_strides, geo.in3), (geo.y_strides, geo.out3)))


def decline(cfg: BwdWeightCfirstConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if layout.channels_last:
        return (f"cfirst walks position-contiguous (channels-first) tensors; {layout.name} is channels-last "
                "(tma, shift and the igemm families run it)")
    if dtype.compute == "fp8":
        return f"cfirst has no fp8 compute ({dtype.name}); the igemm families run it"
    if layout.ndim != params.ndim:
        return f"layout {layout.name} is {layout.ndim}D but the problem is {params.ndim}D"
    need = cfg.smem_bytes(dtype.data.itemsize)
    if need > SMEM_PER_BLOCK:
        return (f"its {cfg.num_stages}-stage pipeline needs {need // 1024} KiB of shared memory with "
                f"{dtype.data.itemsize}-byte operands, over the {SMEM_PER_BLOCK // 1024} KiB of a Hopper SM")
    if not is_pointwise_run(params, layout):
        return (f"cfirst runs 1x1 filters with stride 1 and no padding (input and grad_out positions are "
                f"the same run); got filter {params.filter}, stride {params.stride}, padding "
                f"{params.left_pad}/{params.right_pad} (relayout runs the rest: a tap's shifted input run is "
                "not 16-byte aligned, so its loads cannot be pipelined)")
    return None


def _tiles(params: ConvParams, cfg: BwdWeightCfirstConfig) -> int:
    """Output tiles of one split: block_m x block_n of each group's K x C."""
    return params.G * triton.cdiv(params.K, cfg.block_m) * triton.cdiv(params.C, cfg.block_n)


def _steps(params: ConvParams, block_k: int) -> int:
    """Reduction steps: block_k-position chunks of every image's output positions."""
    return params.N * triton.cdiv(math.prod(params.output), block_k)


def choose_split(params: ConvParams, cfg: BwdWeightCfirstConfig, sms: int) -> int:
    """Automatic split: the GEMM families' rule over this family's tiles and reduction steps."""
    return auto_split(_tiles(params, cfg), _steps(params, cfg.block_k), sms, params.numel("weight"))


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner launches the GEMM (and the reduce with several splits)."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight cfirst", p)
    dev = check_tensors(args).device
    bk = cfg.block_k
    s_out = math.prod(geo.out3)
    sch = triton.cdiv(s_out, bk)
    total_steps = _steps(p, bk)
    split, steps_per_split = even_split(int(cfg.split_k) or choose_split(p, cfg, sm_count(dev)), total_steps)
    tiles = _tiles(p, cfg)
    if tiles * split > _MAX_GRID:
        raise ValueError(f"bwd-weight cfirst: {tiles * split} programs are over the launch grid's {_MAX_GRID}")
    mode = _MODE_FUSED if split == 1 else _MODE_SLICE
    w_numel = geo.w_numel
    int64 = bool(geo.needs_int64 or split * w_numel >= INT32_LIMIT or total_steps * bk >= INT32_LIMIT)
    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "tf32" if dt.compute == "tf32" or dt.data != torch.float32 else "ieee"
    if upcast:
        precision = "ieee"
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    gemm = BoundKernel(
        _bwd_weight_cfirst_kernel, (tiles * split,),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=bk, GROUP_M=cfg.group_m,
        CHUNK_STEPS=chunk_iters(bk), MODE=mode, INT64=int64, UPCAST=upcast,
        INPUT_PRECISION=precision, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi,
    )
    sizes = (geo.G, geo.K, geo.C, s_out, sch, *geo.x_strides[:3], *geo.y_strides[:3],
             steps_per_split, total_steps, w_numel, *geo.w_strides[:3])
    finalize = None if mode == _MODE_FUSED else slice_reduce(w_numel, int64, epi)
    return split_runner(gemm, finalize, sizes, (w_numel, split), split * w_numel)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="cfirst", config=BwdWeightCfirstConfig, decline=decline, bind=bind,
    description="channels-first per-tap GEMM dL/dW over position-contiguous tiles (K-major operands, "
                "masked shifted input runs); fp32 slices per split, fixed-order reduce",
    kernels=(_bwd_weight_cfirst_kernel, _bwd_weight_finalize_kernel)))
