"""Host-side helpers every kernel family's launcher and checks share (no device code here)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from ..kernel_config import KernelConfig

__all__ = ["DEFAULT_SM_COUNT", "INT32_LIMIT", "SMEM_PER_BLOCK", "GemmTileConfig", "check_num_stages", "even_split",
           "is_pow2", "merge_positions", "operand_smem_bytes", "pipeline_stages", "sm_count"]

DEFAULT_SM_COUNT = 132  # H100 / H200 SXM: what a CPU (interpreter) launch plans for
INT32_LIMIT = 2**31 - 1  # past this, offsets are computed in int64
SMEM_PER_BLOCK = 227 * 1024  # Hopper's opt-in shared memory per block (bytes)
# What pipelined operand tiles may take of it when the launcher picks the depth: the rest is left
# for the epilogue's layout conversions.
PIPELINE_SMEM_BUDGET = 200 * 1024


def is_pow2(v: Any) -> bool:
    """A positive int (not a bool) that is a power of two."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


@functools.cache
def _sm_count_of(device: str) -> int:
    return torch.cuda.get_device_properties(torch.device(device)).multi_processor_count


def sm_count(device: torch.device | str | None) -> int:
    """Streaming multiprocessors of ``device``; DEFAULT_SM_COUNT when it is not a CUDA device."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda" and torch.cuda.is_available():
        return _sm_count_of(str(dev))
    return DEFAULT_SM_COUNT


def check_num_stages(ns: Any) -> str | None:
    """Why a config's ``num_stages`` is invalid (an int in 1..8), or None."""
    if not isinstance(ns, int) or isinstance(ns, bool) or not 1 <= ns <= 8:
        return f"num_stages={ns!r} must be an int in 1..8"
    return None


def even_split(split: int, steps: int) -> tuple[int, int]:
    """(splits, steps per split) for ``split`` requested splits of ``steps`` pipelined steps: at least one,
    at most one a step, and none left without steps (the last may be shorter)."""
    per_split = -(-steps // max(1, min(split, steps)))
    return -(-steps // per_split), per_split


def check_split_k(sk: Any) -> str | None:
    """Why a config's ``split_k`` is invalid (an int >= 0, 0 = automatic), or None."""
    if not isinstance(sk, int) or isinstance(sk, bool) or sk < 0:
        return f"split_k={sk!r} must be an int >= 0 (0 = automatic)"
    return None


@dataclass(frozen=True)
class GemmTileConfig(KernelConfig):
    """The parameters both igemm families start with: a block_m x block_n output tile reduced over
    block_k-wide chunks, tiles rasterized in groups of group_m, num_warps, and a software pipeline
    num_stages deep (a subclass adds its own parameters after these)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def smem_bytes(self, elem_bytes: int) -> int:
        """Operand tiles kept in shared memory by the software pipeline (A: BMxBK, B: BKxBN)."""
        return operand_smem_bytes(self.num_stages, self.block_m, self.block_n, self.block_k, elem_bytes)

    def blocks_reason(self, most: int, note: str) -> str | None:
        """Why block_m / block_n / block_k are not powers of two in 16..``most``, or None (``note``
        says where the bounds come from)."""
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not is_pow2(v) or not 16 <= v <= most:
                return f"{name}={v!r} must be a power of two in 16..{most} ({note})"
        return None

    def group_m_reason(self) -> str | None:
        """Why group_m is invalid (a positive int), or None."""
        gm = self.group_m
        if not isinstance(gm, int) or isinstance(gm, bool) or gm < 1:
            return f"group_m={gm!r} must be a positive int"
        return None

    def pipeline_stages_reason(self) -> str | None:
        """Why num_stages is not an int in 2..6 (the TMA / wgmma families' software pipelines), or None."""
        ns = self.num_stages
        if not isinstance(ns, int) or isinstance(ns, bool) or not 2 <= ns <= 6:
            return f"num_stages={ns!r} must be an int in 2..6"
        return None

    def warpgroups_reason(self) -> str | None:
        """Why num_warps is not one or two warpgroups (wgmma tiles), or None."""
        if self.num_warps not in (4, 8):
            return f"num_warps={self.num_warps!r} must be 4 or 8 (one or two warpgroups)"
        return None

    def fit_reason(self, max_acc_regs: int) -> str | None:
        """Why the fp32 accumulator (over ``max_acc_regs`` registers a thread) or the pipeline's 2-byte
        operand tiles (over a Hopper SM's shared memory) do not fit, or None."""
        if self.block_m * self.block_n // (32 * self.num_warps) > max_acc_regs:
            return f"a {self.block_m}x{self.block_n} fp32 accumulator does not fit in {self.num_warps} warps' registers"
        need = self.smem_bytes(2)
        if need > SMEM_PER_BLOCK:
            return (f"needs {need // 1024} KiB of shared memory with 2-byte operands, over the "
                    f"{SMEM_PER_BLOCK // 1024} KiB of a Hopper SM")
        return None


def operand_smem_bytes(num_stages: int, block_m: int, block_n: int, block_k: int, elem_bytes: int) -> int:
    """Shared memory of a GEMM's pipelined operand tiles: num_stages copies of A (BMxBK) and B (BKxBN)."""
    return max(1, int(num_stages)) * (block_m + block_n) * block_k * elem_bytes


def pipeline_stages(bytes_per_stage: int, most: int = 3) -> int:
    """Software-pipeline depth (Triton's num_stages) whose operand buffers fit PIPELINE_SMEM_BUDGET;
    at least 1. A deeper pipeline than fits fails to compile with OutOfResources."""
    return max(1, min(most, PIPELINE_SMEM_BUDGET // max(1, bytes_per_stage)))


def merge_positions(sizes: tuple[int, ...], *strides: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The position axes (n, d, h, w) as few axes as the tensors' ``strides`` allow: an axis folds
    into the next inner one when every tensor steps over it as one run. Size-1 axes are dropped.
    Returns [(size, stride of each tensor)], outer to inner."""
    axes = [(n, *(s[i] for s in strides)) for i, n in enumerate(sizes) if n > 1]
    merged: list[tuple[int, ...]] = []
    for axis in reversed(axes):
        if merged and all(axis[t] == merged[-1][t] * merged[-1][0] for t in range(1, len(axis))):
            merged[-1] = (axis[0] * merged[-1][0], *merged[-1][1:])
        else:
            merged.append(axis)
    return merged[::-1]
