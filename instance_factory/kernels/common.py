"""Kernel code and host helpers that several algorithms share.

Device side (``@triton.jit``): the split-chunk walk of a flattened (n, od, oh, ow) reduction, the
position and tap decompositions, the incremental (n, od, oh, ow) walk of the bwd-weight GEMM
(``_walk_start`` / ``_walk_advance``), the per-tap input bounds, the deterministic split reduce
kernel (fp32 partials [split, taps, G*K*C] summed in a fixed order, epilogue, convert), and the TMA
bwd-weight families' ``dot_tn`` (a^T b of two position-major tiles, fp32 tiles as three bf16 products). Their names
are part of the kernel identity of every algorithm that calls them (kernel_identity.py): renaming one
changes those algorithms' kernel hashes, moving one between modules does not.

Host side: the reduce's launcher and the split runner, ``dot_operands`` (dot_tn's mode for a
dtype), split clamping, the contiguity check and the config checks of the direct-style algorithms
(``DirectStyleConfig``: direct, depthwise, dwstream, blockdiag).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import triton
import triton.language as tl

from ..algorithms import RunArgs, Runner, interpreting
from ..dtypes import DataType
from ..epilogue import apply_epilogue, epilogue_args
from ..fast_launch import BoundKernel
from ..kernel_config import KernelConfig
from .host import INT32_LIMIT, is_pow2

__all__ = [
    "MAX_GRID_YZ",
    "MAX_SPLIT",
    "NUM_WARPS",
    "WEIGHT_DTYPES",
    "DirectStyleConfig",
    "dot_operands",
    "dot_tn",
    "finalize_launcher",
    "num_phases",
    "occupancy_split",
    "require_contiguous",
    "split_chunks",
    "split_runner",
]

NUM_WARPS = (1, 2, 4, 8)
MAX_GRID_YZ = 65535  # grid axes 1 and 2
MAX_SPLIT = 4096
_FINALIZE_BLOCK = 32  # elements per reduce program: many programs, BLOCK_S splits each step
WEIGHT_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16", "bf16_fp32w")  # bwd weight rows of the dtype table


# dot_tn's operand modes (its OPERANDS constexpr): how two loaded tiles become tensor-core operands
OPERANDS_NATIVE = tl.constexpr(0)  # 16-bit tiles as they are
OPERANDS_UPCAST = tl.constexpr(1)  # bf16 tiles upcast to fp32: the interpreter's bf16 tl.dot is wrong (#11584)
OPERANDS_SPLIT = tl.constexpr(2)  # fp32 tiles (the tf32 dtype) as bf16 hi + lo parts, three bf16 products
OPERANDS_SPLIT_UPCAST = tl.constexpr(3)  # the same, its parts upcast to fp32 (the interpreter)


@triton.jit
def dot_tn(a, b, acc, OPERANDS: tl.constexpr):
    """acc + a^T b for tiles a [BK, BM] and b [BK, BN] whose reduction axis (BK, the positions) is the
    strided one, as channels-last bwd weight loads them. wgmma reads such transposed tiles from
    shared memory for 16-bit data only. For fp32 (tf32 compute) Triton would copy every tile once
    more into K-major order and serialize that copy with the MMA (session 32 probe, H100: 47-59
    TFLOP/s). Instead each fp32 tile is split into bf16 hi = bf16(x) and lo = bf16(x - hi) and
    a^T b ~ hi_a^T hi_b + hi_a^T lo_b + lo_a^T hi_b: three 16-bit MMAs on transposed tiles, 150-177
    TFLOP/s, and ~16 mantissa bits per operand (relative error ~2e-5 against tf32's ~8e-4)."""
    if OPERANDS >= OPERANDS_SPLIT:
        ah = a.to(tl.bfloat16)
        al = (a - ah.to(tl.float32)).to(tl.bfloat16)
        bh = b.to(tl.bfloat16)
        bl = (b - bh.to(tl.float32)).to(tl.bfloat16)
        if OPERANDS == OPERANDS_SPLIT_UPCAST:
            ah = ah.to(tl.float32)
            al = al.to(tl.float32)
            bh = bh.to(tl.float32)
            bl = bl.to(tl.float32)
        acc = tl.dot(tl.trans(al), bh, acc, out_dtype=tl.float32)
        acc = tl.dot(tl.trans(ah), bl, acc, out_dtype=tl.float32)
        acc = tl.dot(tl.trans(ah), bh, acc, out_dtype=tl.float32)
    else:
        if OPERANDS == OPERANDS_UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(tl.trans(a), b, acc, out_dtype=tl.float32)
    return acc


def dot_operands(dtype: DataType) -> int:
    """dot_tn's OPERANDS for ``dtype``: fp32 tiles (tf32 compute) split into bf16 parts; in the
    interpreter bf16 operands go to tl.dot as fp32."""
    split = dtype.compute == "tf32"
    upcast = interpreting() and (split or dtype.data == torch.bfloat16)
    return (OPERANDS_SPLIT.value if split else OPERANDS_NATIVE.value) + (1 if upcast else 0)


@triton.jit
def _reduction_chunk(pid_s, chunk, P, BLOCK_P: tl.constexpr, USE_INT64: tl.constexpr):
    """This program's slice [p_start, p_end) of the flattened (n, od, oh, ow) reduction, its split
    index and the in-tile position offsets."""
    sid = pid_s
    if USE_INT64:
        sid = sid.to(tl.int64)
    p_start = sid * chunk
    p_end = tl.minimum(p_start + chunk, P)
    prow = tl.arange(0, BLOCK_P)
    if USE_INT64:
        prow = prow.to(tl.int64)
    return sid, p_start, p_end, prow


@triton.jit
def _split_position(p, Do, Ho, Wo):
    """Flattened output position -> (n, od, oh, ow)."""
    ow = p % Wo
    q = p // Wo
    oh = q % Ho
    q = q // Ho
    od = q % Do
    return q // Do, od, oh, ow


@triton.jit
def _tap_of(t, FY, FX):
    """Flat tap index -> (z, y, x)."""
    return t // (FY * FX), (t // FX) % FY, t % FX


@triton.jit
def _tap_input(t, b_d, b_h, b_w, pm, FY, FX, TAPS, dil_d, dil_h, dil_w, Di, Hi, Wi, xs_d, xs_h, xs_w):
    """For tap t: which positions read an in-range input element, and the tap's input offset."""
    tz, ty, tx = _tap_of(t, FY, FX)
    i_d = b_d + tz * dil_d
    i_h = b_h + ty * dil_h
    i_w = b_w + tx * dil_w
    # t < TAPS folded into an integer limit (a scalar-bool & vector-bool mask mistypes in the interpreter)
    lim_w = tl.where(t < TAPS, Wi, 0)
    xm = pm & (i_d >= 0) & (i_d < Di) & (i_h >= 0) & (i_h < Hi) & (i_w >= 0) & (i_w < lim_w)
    return xm, tz * dil_d * xs_d + ty * dil_h * xs_h + tx * dil_w * xs_w


@triton.jit
def _walk_start(r, Wo, Ho, Do):
    """Reduction index -> (n, od, oh, ow): the walk's state at its first block (divisions once)."""
    ow = r % Wo
    t = r // Wo
    oh = t % Ho
    t = t // Ho
    return t // Do, t % Do, oh, ow


@triton.jit
def _walk_advance(n, od, oh, ow, Wo, Ho, Do, STEP_W, STEP_H, STEP_D, STEP_N):
    """(n, od, oh, ow) of the reduction index block_k further on: the step is pre-split into
    (STEP_N, STEP_D, STEP_H, STEP_W) digits on the host, so each digit takes one add and at most one
    carry (no per-element division in the loop)."""
    ow += STEP_W
    carry = (ow >= Wo).to(ow.dtype)
    ow -= carry * Wo
    oh += STEP_H + carry
    carry = (oh >= Ho).to(oh.dtype)
    oh -= carry * Ho
    od += STEP_D + carry
    carry = (od >= Do).to(od.dtype)
    od -= carry * Do
    return n + STEP_N + carry, od, oh, ow


@triton.jit
def _dw_finalize_kernel(
    ws_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    total, split, GKC, KC, C, FY, FX,
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    BLOCK: tl.constexpr, BLOCK_S: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    """Sum the fp32 partials over the splits, BLOCK_S splits per step (a loop of one load per split
    is latency bound: 256 splits took 45 us), in a fixed order (deterministic); apply the epilogue,
    store."""
    e = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if USE_INT64:
        e = e.to(tl.int64)
    mask = e < total
    srow = tl.arange(0, BLOCK_S)
    if USE_INT64:
        srow = srow.to(tl.int64)
    acc = tl.zeros((BLOCK_S, BLOCK), dtype=tl.float32)
    for s0 in range(0, split, BLOCK_S):
        sp = s0 + srow
        acc += tl.load(ws_ptr + (sp * total)[:, None] + e[None, :], mask=(sp < split)[:, None] & mask[None, :],
                       other=0.0)
    res = tl.sum(acc, axis=0)
    t = e // GKC
    j = e % GKC
    g = j // KC
    kc = j % KC
    k = kc // C
    c = kc % C
    tz, ty, tx = _tap_of(t, FY, FX)
    offs = g * ws_g + k * ws_k + c * ws_c + tz * ws_z + ty * ws_y + tx * ws_x
    res = apply_epilogue(res, offs, mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                         OP, NUM_DS, USER_FN)
    tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=mask)


def finalize_launcher(split: int, total: int, use_int64: bool, epi: dict) -> BoundKernel:
    """The split reduce for ``split`` fp32 partial slices of ``total`` elements each."""
    block_s = min(64, triton.next_power_of_2(split))
    return BoundKernel(_dw_finalize_kernel, (triton.cdiv(total, _FINALIZE_BLOCK),), BLOCK=_FINALIZE_BLOCK,
                       BLOCK_S=block_s, USE_INT64=use_int64 or split * total >= INT32_LIMIT, num_warps=4, **epi)


_OPERAND_NAMES = {"conv_bwd_weight": ("input", "grad_out", "grad_wei"),
                  "conv_bwd_data": ("grad_out", "weight", "grad_in")}


def require_contiguous(args: RunArgs, algorithm: str, op: str = "conv_bwd_weight") -> None:
    """The direct kernels index their operands through flat strides of contiguous tensors."""
    a_name, b_name, out_name = _OPERAND_NAMES[op]
    for name, t in ((a_name, args.a), (b_name, args.b), (out_name, args.out), *(("a D", d) for d in args.ds)):
        if not t.is_contiguous():
            raise ValueError(f"{algorithm} {op} needs a contiguous {name} tensor")


def occupancy_split(base_programs: int, sms: int, per_sm: int, most: int) -> int:
    """The automatic split of a reduction: enough chunks for ~``per_sm`` programs per SM over the
    ``base_programs`` the grid has without splitting, at most ``most`` (the family's shortest useful
    chunk), at least 1."""
    return int(max(1, min(triton.cdiv(per_sm * sms, base_programs), most)))


def split_chunks(split: int, length: int) -> tuple[int, int]:
    """(splits, chunk) for a reduction of ``length`` in at most ``split`` chunks: clamped to
    [1, min(length, MAX_SPLIT)], and no empty trailing chunk."""
    split = max(1, min(split, length, MAX_SPLIT))
    chunk = triton.cdiv(length, split)
    return triton.cdiv(length, chunk), chunk


def split_runner(main: BoundKernel, finalize: BoundKernel | None, sizes: tuple, fin_sizes: tuple,
                 ws_numel: int, *, operands: Callable[[torch.Tensor, torch.Tensor], tuple] | None = None,
                 zeroed: bool = False) -> Runner:
    """The runner of a split reduction: one launch with the epilogue (``finalize`` None), else the
    main kernel into an fp32 workspace of ``ws_numel`` (``zeroed`` for kernels that add into it
    atomically) and the fixed-order reduce. ``operands(x, dy)``: the main kernel's leading arguments
    when they are not (x, dy) themselves (TMA descriptors, a padded or packed copy)."""
    make_ws = torch.zeros if zeroed else torch.empty

    def run(x: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        lead = (x, dy) if operands is None else operands(x, dy)
        d = epilogue_args(ds, out)
        if finalize is None:
            main(*lead, out, out, *d, alpha, beta, *sizes)
            return
        ws = make_ws(ws_numel, dtype=torch.float32, device=out.device)
        main(*lead, out, ws, *d, alpha, beta, *sizes)
        finalize(ws, out, *d, alpha, beta, *fin_sizes)

    return run


def num_phases(input_lens: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Stride phases that hold input positions: min(stride, in) per dim."""
    return math.prod(min(s, i) for s, i in zip(strides, input_lens))


@dataclass(frozen=True)
class DirectStyleConfig(KernelConfig):
    """The checks every direct-style algorithm's config shares (direct, depthwise, dwstream,
    blockdiag): ``num_warps``, the block sizes ``POW2_BLOCKS`` (powers of two up to 1024, checked in
    that order) and ``split`` where the algorithm has one (0 = auto, up to the cap). A subclass
    declares the fields (``num_warps`` among them) and names its ``ALGORITHM`` for the message of a
    config that lacks parameters."""

    ALGORITHM: ClassVar[str] = ""
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def missing_reason(cls, missing: list[str]) -> str:
        return f"config lacks {', '.join(missing)} ({cls.ALGORITHM} takes {', '.join(cls.param_names())})"

    def check(self) -> str | None:
        if self.num_warps not in NUM_WARPS:
            return f"num_warps={self.num_warps!r} is not one of {NUM_WARPS}"
        for name in self.POW2_BLOCKS:
            size = getattr(self, name)
            if not is_pow2(size) or size > 1024:
                return f"{name}={size!r} must be a power of two from 1 to 1024"
        split = getattr(self, "split", 0)  # a dgrad config has none
        if not isinstance(split, int) or isinstance(split, bool) or not 0 <= split <= MAX_SPLIT:
            return f"split={split!r} must be an int from 0 (auto) to {MAX_SPLIT}"
        return None
