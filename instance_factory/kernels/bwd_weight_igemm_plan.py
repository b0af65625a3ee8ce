"""The igemm bwd-weight algorithms' tile checks and split planning (host only, no device code).

Split from ``bwd_weight_igemm.py``, which keeps the kernels, the problem declines and ``bind``;
also the fp8 availability check the declines use.
"""

from __future__ import annotations

import math

import torch
import triton

from ..algorithms import interpreting
from ..problem import ConvParams
from .host import SMEM_PER_BLOCK, check_num_stages, is_pow2

__all__ = ["ALGORITHM_NAMES", "MIN_ITERS_PER_SPLIT", "PARAM_NAMES", "SPECS", "check_config",
           "check_algorithm_config", "choose_split_k", "fp8_reason", "smem_bytes", "tiles_of"]

PARAM_NAMES = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "split_k", "spec")
SPECS = ("default", "1x1s1p0")
ALGORITHM_NAMES = ("igemm", "splitk_atomic", "splitk_reduce", "two_stage")

MAX_ACC_REGS = 256  # fp32 accumulator registers per thread beyond which a tile cannot fit
MIN_ITERS_PER_SPLIT = 4  # auto split keeps at least this many block_k iterations per split
MAX_AUTO_SPLIT = 64
WORKSPACE_CAP_BYTES = 2 << 30  # auto split keeps the fp32 slices of reduce modes under this


def smem_bytes(cfg: dict, elem_bytes: int) -> int:
    """Operand tiles kept in shared memory by the software pipeline (A: BMxBK, B: BKxBN)."""
    stages = max(1, int(cfg["num_stages"]))
    return stages * (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * elem_bytes


def check_algorithm_config(algorithm: str, cfg: dict) -> str | None:
    missing = [p for p in PARAM_NAMES if p not in cfg]
    if missing:
        return f"config lacks {', '.join(missing)}"
    for name in ("block_m", "block_n", "block_k"):
        v = cfg[name]
        if not is_pow2(v):
            return f"{name}={v!r} must be a power of two"
        if v < 16:
            return f"{name}={v} is below 16, the smallest tl.dot tile"
        if v > 256:
            return f"{name}={v} is above 256"
    gm = cfg["group_m"]
    if not isinstance(gm, int) or isinstance(gm, bool) or gm < 1:
        return f"group_m={gm!r} must be a positive int"
    nw = cfg["num_warps"]
    if nw not in (1, 2, 4, 8, 16):
        return f"num_warps={nw!r} must be one of 1, 2, 4, 8, 16"
    if (why := check_num_stages(cfg["num_stages"])) is not None:
        return why
    sk = cfg["split_k"]
    if not isinstance(sk, int) or isinstance(sk, bool) or sk < 0:
        return f"split_k={sk!r} must be an int >= 0 (0 = automatic)"
    if algorithm == "igemm" and sk != 1:
        return f"igemm has no split-K: split_k must be 1, got {sk}"
    if cfg["spec"] not in SPECS:
        return f"spec={cfg['spec']!r} must be one of {', '.join(SPECS)}"
    smem = smem_bytes(cfg, 2)
    if smem > SMEM_PER_BLOCK:
        return (f"operand tiles need {smem // 1024} KiB of shared memory even at 2 bytes/element "
                f"(limit {SMEM_PER_BLOCK // 1024} KiB)")
    regs = cfg["block_m"] * cfg["block_n"] // (32 * nw)
    if regs > MAX_ACC_REGS:
        return (f"a {cfg['block_m']}x{cfg['block_n']} fp32 accumulator over {nw} warps needs {regs} "
                f"registers per thread (limit {MAX_ACC_REGS})")
    return None


def check_config(cfg: dict, algorithm: str = "splitk_reduce") -> str | None:
    """None, or why ``cfg`` is an impossible instance of ``algorithm``."""
    if algorithm not in ALGORITHM_NAMES:
        return f"unknown bwd-weight igemm family {algorithm!r}"
    return check_algorithm_config(algorithm, cfg)


def tiles_of(params: ConvParams, cfg: dict, flat_taps: bool) -> int:
    taps = math.prod(params.filter)
    m_tiles = triton.cdiv(params.K, cfg["block_m"])
    if flat_taps:
        return params.G * m_tiles * triton.cdiv(params.C * taps, cfg["block_n"])
    return params.G * taps * m_tiles * triton.cdiv(params.C, cfg["block_n"])


def choose_split_k(params: ConvParams, cfg: dict, sm_count: int, algorithm: str = "splitk_reduce") -> int:
    """Automatic split factor: programs (tiles * split) ~ 3 waves of ``sm_count``, never fewer than
    MIN_ITERS_PER_SPLIT block_k iterations per split, and the fp32 slices of the deterministic modes
    within WORKSPACE_CAP_BYTES. Returns 1 for igemm or when the tiles alone fill two waves."""
    if algorithm == "igemm":
        return 1
    flat = algorithm == "two_stage" and cfg.get("spec", "default") != "1x1s1p0"
    tiles = tiles_of(params, cfg, flat)
    iters = triton.cdiv(params.N * math.prod(params.output), cfg["block_k"])
    if tiles >= 2 * sm_count:
        return 1
    split = triton.cdiv(3 * sm_count, tiles)
    split = min(split, max(1, iters // MIN_ITERS_PER_SPLIT), MAX_AUTO_SPLIT)
    if algorithm in ("splitk_reduce", "two_stage"):
        split = min(split, max(1, WORKSPACE_CAP_BYTES // (4 * params.numel("weight"))))
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
