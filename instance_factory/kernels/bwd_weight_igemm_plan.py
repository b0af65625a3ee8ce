"""The igemm bwd-weight algorithms' configs (with their tile checks), split planning and the binds'
tensor checks (host only, no device code).

Split from ``bwd_weight_igemm.py``, which keeps the kernels, the problem declines and ``bind``;
also the fp8 availability check the declines use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from ..algorithms import RunArgs, interpreting
from ..problem import ConvParams
from .host import SMEM_PER_BLOCK, GemmTileConfig, check_num_stages, check_split_k, is_pow2

__all__ = ["ALGORITHM_NAMES", "CONFIGS", "MIN_ITERS_PER_SPLIT", "PARAM_NAMES", "SPECS", "BwdWeightIgemmConfig",
           "SplitKConfig", "auto_split", "check_tensors", "choose_split_k", "fp8_reason", "tiles_of", "walk_step"]

SPECS = ("default", "1x1s1p0")
ALGORITHM_NAMES = ("igemm", "splitk_atomic", "splitk_reduce", "two_stage")

MAX_ACC_REGS = 256  # fp32 accumulator registers per thread beyond which a tile cannot fit
MIN_ITERS_PER_SPLIT = 4  # auto split keeps at least this many block_k iterations per split
MAX_AUTO_SPLIT = 64
WORKSPACE_CAP_BYTES = 2 << 30  # auto split keeps the fp32 slices of reduce modes under this


@dataclass(frozen=True)
class SplitKConfig(GemmTileConfig):
    """The GEMM tile of the split-K algorithms (splitk_atomic, splitk_reduce, two_stage): block_m x
    block_n of dW (K x C, or K x C*taps for two_stage) reduced over block_k-wide chunks of N*prod(out),
    split over split_k programs (0: automatic, :func:`choose_split_k`)."""

    split_k: int
    spec: str  # "default", or "1x1s1p0": the plain GEMM of a 1x1, stride-1, pad-0 filter

    def split_rule(self) -> str | None:
        """Why this algorithm cannot take ``split_k`` (past its type check), or None."""
        return None

    def check(self) -> str | None:
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not is_pow2(v):
                return f"{name}={v!r} must be a power of two"
            if v < 16:
                return f"{name}={v} is below 16, the smallest tl.dot tile"
            if v > 256:
                return f"{name}={v} is above 256"
        if (why := self.group_m_reason()) is not None:
            return why
        nw = self.num_warps
        if nw not in (1, 2, 4, 8, 16):
            return f"num_warps={nw!r} must be one of 1, 2, 4, 8, 16"
        if (why := check_num_stages(self.num_stages)) is not None:
            return why
        if (why := check_split_k(self.split_k)) is not None:
            return why
        if (why := self.split_rule()) is not None:
            return why
        if self.spec not in SPECS:
            return f"spec={self.spec!r} must be one of {', '.join(SPECS)}"
        smem = self.smem_bytes(2)
        if smem > SMEM_PER_BLOCK:
            return (f"operand tiles need {smem // 1024} KiB of shared memory even at 2 bytes/element "
                    f"(limit {SMEM_PER_BLOCK // 1024} KiB)")
        regs = self.block_m * self.block_n // (32 * nw)
        if regs > MAX_ACC_REGS:
            return (f"a {self.block_m}x{self.block_n} fp32 accumulator over {nw} warps needs {regs} "
                    f"registers per thread (limit {MAX_ACC_REGS})")
        return None


@dataclass(frozen=True)
class BwdWeightIgemmConfig(SplitKConfig):
    """igemm's tile: the same parameters, with no split-K (split_k must be 1)."""

    def split_rule(self) -> str | None:
        if self.split_k != 1:
            return f"igemm has no split-K: split_k must be 1, got {self.split_k}"
        return None


PARAM_NAMES = SplitKConfig.param_names()
CONFIGS: dict[str, type[SplitKConfig]] = {"igemm": BwdWeightIgemmConfig, "splitk_atomic": SplitKConfig,
                                          "splitk_reduce": SplitKConfig, "two_stage": SplitKConfig}


def tiles_of(params: ConvParams, cfg: SplitKConfig, flat_taps: bool) -> int:
    taps = math.prod(params.filter)
    m_tiles = triton.cdiv(params.K, cfg.block_m)
    if flat_taps:
        return params.G * m_tiles * triton.cdiv(params.C * taps, cfg.block_n)
    return params.G * taps * m_tiles * triton.cdiv(params.C, cfg.block_n)


def check_tensors(args: RunArgs) -> torch.Tensor:
    """args.out, after checking it is the contiguous weight gradient and the dtypes match the instance's."""
    out, geo, dt = args.out, args.geo, args.dtype
    if not out.is_contiguous() or out.numel() != geo.w_numel:
        raise ValueError(f"args.out must be a contiguous tensor of {geo.w_numel} elements, "
                         f"got shape {tuple(out.shape)}")
    want = dt.result or dt.data
    if out.dtype != want or args.a.dtype != dt.data or args.b.dtype != dt.data:
        raise ValueError(f"{dt.name} needs {dt.data} input/grad_out and a {want} result, got "
                         f"{args.a.dtype}/{args.b.dtype} -> {out.dtype}")
    return out


def choose_split_k(params: ConvParams, cfg: SplitKConfig, sm_count: int, algorithm: str = "splitk_reduce") -> int:
    """Automatic split factor: programs (tiles * split) ~ 3 waves of ``sm_count``, never fewer than
    MIN_ITERS_PER_SPLIT block_k iterations per split, and the fp32 slices of the deterministic modes
    within WORKSPACE_CAP_BYTES. Returns 1 for igemm or when the tiles alone fill two waves."""
    if algorithm == "igemm":
        return 1
    flat = algorithm == "two_stage" and cfg.spec != "1x1s1p0"
    iters = triton.cdiv(params.N * math.prod(params.output), cfg.block_k)
    slices = algorithm in ("splitk_reduce", "two_stage")
    return auto_split(tiles_of(params, cfg, flat), iters, sm_count, params.numel("weight") if slices else 0)


def auto_split(tiles: int, iters: int, sm_count: int, weight_numel: int = 0) -> int:
    """The automatic split rule of the bwd-weight GEMMs: 1 when the tiles alone fill two waves of
    ``sm_count``, else programs (tiles * split) ~ 3 waves, at least MIN_ITERS_PER_SPLIT of the
    ``iters`` reduction steps per split, at most MAX_AUTO_SPLIT, and, for the modes that keep one
    fp32 slice of the ``weight_numel``-element gradient per split (0: none), the slices within
    WORKSPACE_CAP_BYTES."""
    if tiles >= 2 * sm_count:
        return 1
    split = min(triton.cdiv(3 * sm_count, tiles), max(1, iters // MIN_ITERS_PER_SPLIT), MAX_AUTO_SPLIT)
    if weight_numel:
        split = min(split, max(1, WORKSPACE_CAP_BYTES // (4 * weight_numel)))
    return max(1, split)


def fp8_reason(device: torch.device | None = None, allow_interpreter: bool = False) -> str | None:
    """Why fp8 tensor-core compute cannot run here (None: it can). ``allow_interpreter`` is the
    tests' hook: the interpreter emulates fp8 dot well enough to check the scaling math."""
    if interpreting():
        if allow_interpreter:
            return None
        return ("fp8 compute needs an sm_89+ GPU: the Triton interpreter (TRITON_INTERPRET=1) has "
                "no fp8 tensor cores")
    if device is not None and device.type != "cuda":
        return f"fp8 compute needs an sm_89+ GPU, tensors are on {device}"
    if not torch.cuda.is_available():
        return "fp8 compute needs an sm_89+ GPU, and no CUDA GPU is available"
    cc = torch.cuda.get_device_capability(device)
    if cc < (8, 9):
        return f"fp8 compute needs an sm_89+ GPU, this one is sm_{cc[0]}{cc[1]}"
    return None


def walk_step(block_k: int, out3: tuple[int, int, int], spec_1x1: bool) -> tuple[int, int, int, int]:
    """block_k as digits (w, h, d, n) of the reduction index's mixed radix (Wo, Ho, Do, -), the
    kernel's per-step increments; spec 1x1 walks (n, p) with p of radix Do*Ho*Wo."""
    do, ho, wo = (1, 1, math.prod(out3)) if spec_1x1 else out3
    rows, step_w = divmod(block_k, wo)
    planes, step_h = divmod(rows, ho)
    step_n, step_d = divmod(planes, do)
    return step_w, step_h, step_d, step_n
