"""Grouped conv_bwd_weight for strided layers with groups of 4-16 channels (C == K): "bdstride", bdring's Gluon
walk (mma.sync on tiles in shared memory) for the stride-2 layers that open a ResNeXt / RegNet stage.

dw[g, k, ty, tx, c] = sum_{n, oh, ow} dy[n, oh, ow, g, k] * x[n, oh * SH + ty - pad_h, ow * SW + tx - pad_w, g, c]

bdring shifts dy's row per tap column so that every tap reads the input row as copied. At stride SW the taps of
one filter row read every SW-th input column from tx on, so the input row is copied once per phase p (X_p[u] =
x[u * SW + p - pad_w]) and dy once per shift q (D_q[u] = dy[u - q]); tap tx = SW * q + p is then one mma.sync
chain of X_p against D_q (``bdstride_kernels``). A warp takes a 16-channel block (16 / C groups, the
accumulator's diagonal C x C blocks are their sums) and a chunk of output rows. ``rows`` 1 walks one output row a
step with its input rows' phase tiles in a ring (each input row copied in once: SH new rows a step, all FY at an
image's start); ``rows`` 2 / 4 / 8 stack that many output rows a step, each filter row's input rows and each dy
shift in one [rows * WX, 16] tile (every filter row copies its rows again: for narrow planes). ``warps`` 2 / 4
give a ring program that many consecutive blocks, a warp each, so its copies move 64 / 128 contiguous bytes a
position (programs reading 32 bytes a position stream at most ~2 TB/s on an H200: session 53's probe). Row chunks write
fp32 slices [chunk, tap, g, k, c], and ``common``'s fixed-order reduce (several slices a step) applies the
epilogue and writes the weight's layout (deterministic; two launches).

Session 53: ResNeXt's and RegNet's stride-2 grouped wgrad sat at 0.68-0.97x cuDNN on bdrow / bdwin (every tap
re-reads its input tile from L2). Gluon does not run in the Triton interpreter: there this family declines (not
while a lookup emulates a GPU from its rows), and the CPU tests compile it for sm_90 with the wheel's ptxas.
Channels-last NHWGC (and NWGC), 16-bit data, a stride over 1 on some axis, dilation 1, filters up to 3 x 3, output
rows up to 128 positions with their shifts. Stride 1 is bdring's: at stride 1 the wide programs ran 10-20% slower
than bdring's one-warp ring on all 13 H200 layers (session 53), while at stride 2 they won.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bdstride_kernels import (
    _bwd_weight_bdstride_kernel,
    _bwd_weight_bdstride_ring_kernel,
    _bwd_weight_bdstride_wide_kernel,
)
from .bwd_weight_bdring import (
    CHANNELS,
    MAX_ROW,
    MAX_TAPS,
    WAVES,
    _plane,
    gluon_reason,
    plan,
    tensor_reason,
    walk_runner,
)
from .bwd_weight_igemm_plan import check_tensors
from .common import _dw_finalize_kernel
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "BwdWeightBdstrideConfig", "bind", "copies", "decline", "problem_reason", "ring_slots",
           "row_width"]

OP_NAME = "conv_bwd_weight"
ROWS_PER_STEP = (1, 2, 4, 8)  # 1: the ring walk; 2, 4, 8: stacked rows
WARPS = (1, 2, 4)  # 16-channel blocks a program of the ring walk, one warp each


@dataclass(frozen=True)
class BwdWeightBdstrideConfig(KernelConfig):
    """~``waves`` x SMs warps over the 16-channel blocks and row chunks; ``rows`` output rows a step (1: the ring
    walk, 2 / 4 / 8: stacked); ``warps`` 16-channel blocks a ring program, one warp each."""

    waves: int
    rows: int
    warps: int

    def check(self) -> str | None:
        if self.waves not in WAVES:
            return f"waves={self.waves!r} is not one of {WAVES}"
        if self.rows not in ROWS_PER_STEP:
            return f"rows={self.rows!r} is not one of {ROWS_PER_STEP}"
        if self.warps not in WARPS:
            return f"warps={self.warps!r} is not one of {WARPS}"
        if self.warps > 1 and self.rows != 1:
            return f"warps={self.warps} (several 16-channel blocks a program) is the ring walk's: rows must be 1"
        return None


def copies(params: ConvParams) -> tuple[int, int, int]:
    """(input phases NP, dy shifts NQ, largest shift) along W: tap tx = SW * q + p reads phase p against shift q."""
    fx, sw = (1, *params.filter)[-1], params.stride[-1]
    return min(sw, fx), (fx - 1) // sw + 1, (fx - 1) // sw


def ring_slots(params: ConvParams) -> int:
    """Input rows the ring holds: the FY in use while the next output row's land (SH of them, FY at an image's
    start), a power of two."""
    fy, sh = (1, *params.filter)[-2], (1, *params.stride)[-2]
    return triton.next_power_of_2(max(2 * fy, fy + sh))


def row_width(params: ConvParams) -> int:
    """WX: the output row plus its largest dy shift, padded to a power of two (the mma's reduction per row)."""
    wo = params.output[-1]
    return max(16, triton.next_power_of_2(wo + copies(params)[2]))


def problem_reason(params: ConvParams) -> str | None:
    """Why bdstride declines this problem whatever the config, layout and dtype, or None."""
    if params.ndim == 3:
        return "bdstride walks 1D and 2D planes; 3D layers go to bdrow / bdwin"
    if params.C != params.K or params.C not in CHANNELS:
        return (f"bdstride packs groups of C == K in {CHANNELS} channels into 16-wide mma tiles, got C={params.C}, "
                f"K={params.K}")
    if all(s == 1 for s in params.stride):
        return ("bdstride runs strided layers; stride 1 is bdring's (the same ring walk, and its one-warp programs "
                "beat bdstride's wide ones there)")
    if any(d != 1 for d in params.dilation):
        return f"bdstride's phase copies take consecutive taps: dilation 1 only, got {params.dilation}"
    _, _, _, wo, fy, fx, _ = _plane(params)
    if fy > MAX_TAPS or fx > MAX_TAPS:
        return f"bdstride holds up to {MAX_TAPS} x {MAX_TAPS} taps' accumulators, the filter is {params.filter}"
    if (wx := wo + copies(params)[2]) > MAX_ROW:
        return f"bdstride keeps one output row ({wo} + its dy shifts = {wx}) in a tile of at most {MAX_ROW}"
    return None


def decline(cfg: BwdWeightBdstrideConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := cfg.check() or gluon_reason("bdstride") or problem_reason(params)
            or tensor_reason("bdstride", params, layout, dtype)) is not None:
        return why
    if cfg.rows * row_width(params) > MAX_ROW:
        return (f"rows={cfg.rows} stacked rows of {row_width(params)} columns are over {MAX_ROW} positions a step: "
                f"fewer rows take this plane")
    if params.numel("input") >= INT32_LIMIT or params.numel("output") >= INT32_LIMIT:
        return "bdstride addresses input and grad_out in int32: a tensor has 2^31 or more elements"
    return None


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner launches the kernel and the fixed-order reduce."""
    cfg, p = args.cfg, args.params
    require_runnable(decline(cfg, p, args.layout, args.dtype, args.fused), "bwd-weight bdstride", p)
    dev = check_tensors(args).device
    _, _, _, _, fy, fx, _ = _plane(p)
    sh, sw = (1, *p.stride)[-2:]
    blocks, chunk, chunks = plan(p, cfg.waves, sm_count(dev), cfg.rows)
    n_phases, n_shifts, _ = copies(p)
    shape = dict(C=p.C, FY=fy, FX=fx, SH=sh, SW=sw, NP=n_phases, NQ=n_shifts, WX=row_width(p), num_warps=1)
    if cfg.warps > 1:
        grid = (triton.cdiv(p.G * p.C, 16 * cfg.warps), chunks)
        return walk_runner(args, "bdstride", _bwd_weight_bdstride_wide_kernel, grid, chunk, chunks,
                           R=ring_slots(p), NB=cfg.warps, **dict(shape, num_warps=cfg.warps))
    if cfg.rows == 1:
        return walk_runner(args, "bdstride", _bwd_weight_bdstride_ring_kernel, (blocks, chunks), chunk, chunks,
                           R=ring_slots(p), **shape)
    return walk_runner(args, "bdstride", _bwd_weight_bdstride_kernel, (blocks, chunks), chunk, chunks,
                       RPS=cfg.rows, **shape)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="bdstride", config=BwdWeightBdstrideConfig, decline=decline, bind=bind,
    description="Gluon grouped dL/dW for strided layers of 4-16 channels per group: the input rows once per stride "
                "phase (in a ring, or stacked) and dy's rows once per shift, one mma.sync chain per tap on "
                "block-diagonal 16 x 16 tiles; fp32 slices per row chunk, fixed-order multi-slice reduce",
    kernels=tuple(k for k in (_bwd_weight_bdstride_ring_kernel, _bwd_weight_bdstride_kernel,
                              _bwd_weight_bdstride_wide_kernel, _dw_finalize_kernel) if k is not None)))
