"""Grouped conv_bwd_weight for groups of 4-16 channels (C == K): "bdring", a Gluon kernel on mma.sync
whose every filter tap reads its operands from tiles already in shared memory.

dw[g, k, ty, tx, c] = sum_{n, oh, ow} dy[n, oh, ow, g, k] * x[n, oh + ty - pad_h, ow + tx - pad_w, g, c]   (stride 1)

Why Gluon (session 52): bdrow / bdwin / tapshare re-read a shifted input tile per tap from L2 (TMA and
cp.async.cg skip L1), and Triton's language cannot slice one shared-memory tile per tap. Gluon has explicit
shared memory, but a subslice must start on a multiple of its own length, so the one-position shifts of the
taps cannot be views either. They are in the copies instead: per output row, the dy row lands in shared memory
once per tap column tx, shifted right by tx (D_tx[u] = dy[u - tx]), and the input row lands once, unshifted,
into a ring of input rows. Then sum_u X[u] D_tx[u] = sum_w x[w + tx - pad_w] dy[w], so filter row ty is one
A = the input row [16 c, WX] (ldmatrix.trans) against each shifted dy copy B_tx [WX, 16 k], one mma.sync chain
per tap. A program is one warp: a block of 16 channels (16 / C groups) and a chunk of output rows; the 16 x 16
fp32 accumulator's diagonal C x C blocks are the groups' sums (block-diagonal waste at C < 16: the tensor cores
are not the bound, the tile copies are).

The ring has 2 x FY slots (a power of two) numbered per image, so an image's first output row loads its FY input
rows while the previous image's last row computes. ``rows`` 2 / 4 / 8 take the stacked walk instead: that many
output rows a step, each filter row's input rows and each tap column's dy rows stacked into one tile, for 7x7 /
14x14 planes where one 16-wide row a step leaves each program waiting on its copies. The device code is
bdstride's two one-warp walks at stride 1 (``bdstride_kernels``: one input phase, FX dy shifts); bdring is the
stride-1 family with its own configs, rows and cost-model terms (bdstride's several-warp programs lose at stride
1). Row chunks write fp32 slices [chunk, tap, g, k, c], and ``common``'s fixed-order reduce (several slices a
step) applies the epilogue and writes the weight's layout (deterministic; always two launches).

Session 54: bdring's own walks retired. They read each dy shift from shared memory once per filter row, reduced
through ``bwd_weight_igemm``'s one-slice-a-step pass, and offered a ``dy_read="regs"`` variant that won none of
the 26 H200 problems it was tuned on.

Gluon does not run in the Triton interpreter: there this family declines (not while a lookup emulates a GPU
from its rows, ``algorithms.gpu_emulated``), and the CPU tests compile it for sm_90 with the wheel's ptxas.
Channels-last NHWGC (and NWGC), 16-bit data, stride and dilation 1, filters up to 3 x 3, output rows up to 126
wide.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import triton

from ..algorithms import Algorithm, RunArgs, Runner, gpu_emulated, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bdring_kernels import gluon
from .bdstride_kernels import _bwd_weight_bdstride_kernel, _bwd_weight_bdstride_ring_kernel
from .bwd_weight_igemm_plan import check_tensors
from .common import _dw_finalize_kernel, finalize_launcher, split_runner
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "BwdWeightBdringConfig", "CHANNELS", "bind", "decline", "gluon_reason", "plan",
           "problem_reason", "ring_slots", "row_width", "tensor_reason", "walk_runner"]

OP_NAME = "conv_bwd_weight"
CHANNELS = (4, 8, 16)  # channels per group (C == K): 4, 2 or 1 groups per 16-wide mma tile
MAX_TAPS = 3  # per filter axis: the kernel's nine accumulators
MAX_ROW = 128  # WX, the padded output row plus FX - 1 columns, at most this
WAVES = (2, 4, 8, 16)
ROWS_PER_STEP = (1, 2, 4, 8)  # 1: the ring walk; 2, 4, 8: the stacked walk (narrow planes, <= MAX_ROW positions)

# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightBdringConfig(KernelConfig):
    """Programs of one warp: ~``waves`` x SMs of them over the 16-channel blocks and row chunks; ``rows`` output
    rows a step (1: the ring walk, 2 / 4 / 8: the stacked walk)."""

    waves: int
    rows: int

    def check(self) -> str | None:
        if self.waves not in WAVES:
            return f"waves={self.waves!r} is not one of {WAVES}"
        if self.rows not in ROWS_PER_STEP:
            return f"rows={self.rows!r} is not one of {ROWS_PER_STEP}"
        return None


def gluon_reason(family: str = "bdring") -> str | None:
    """Why the Gluon kernels of ``family`` cannot launch here, or None (also None while a lookup emulates a GPU
    from its rows: ``tuning.database.emulated``)."""
    if interpreting() and not gpu_emulated():
        return f"{family} is a Gluon kernel, and Gluon does not run in the Triton interpreter"
    if gluon is None:
        return f"{family} is a Gluon kernel: Triton {triton.__version__} has no triton.experimental.gluon"
    return None


def _plane(params: ConvParams) -> tuple[int, int, int, int, int, int, int]:
    """(H, W, Ho, Wo, FY, FX, pad_h) of a 1D or 2D problem (1D: one row, H = Ho = FY = 1)."""
    h, w = (1, *params.input)[-2:]
    ho, wo = (1, *params.output)[-2:]
    fy, fx = (1, *params.filter)[-2:]
    pad_h = params.left_pad[0] if params.ndim == 2 else 0
    return h, w, ho, wo, fy, fx, pad_h


def ring_slots(fy: int) -> int:
    """Input-row ring slots: FY rows in use while the next output row's (up to FY at an image's start) land."""
    return triton.next_power_of_2(2 * fy)


def row_width(params: ConvParams) -> int:
    """WX: the output row plus FX - 1 columns, padded to a power of two (the mma's reduction per row)."""
    _, _, _, wo, _, fx, _ = _plane(params)
    return max(16, triton.next_power_of_2(wo + fx - 1))


def problem_reason(params: ConvParams) -> str | None:
    """Why bdring declines this problem whatever the config, layout and dtype, or None."""
    if params.ndim == 3:
        return "bdring walks 1D and 2D planes; 3D layers go to bdrow / bdwin"
    if params.C != params.K or params.C not in CHANNELS:
        return (f"bdring packs groups of C == K in {CHANNELS} channels into 16-wide mma tiles, got C={params.C}, "
                f"K={params.K}")
    if any(s != 1 for s in params.stride) or any(d != 1 for d in params.dilation):
        return (f"bdring's ring holds consecutive input rows and its shifted copies single columns: stride and "
                f"dilation 1 only, got stride {params.stride}, dilation {params.dilation}")
    _, _, _, wo, fy, fx, _ = _plane(params)
    if fy > MAX_TAPS or fx > MAX_TAPS:
        return f"bdring holds up to {MAX_TAPS} x {MAX_TAPS} taps' accumulators, the filter is {params.filter}"
    if (wx := wo + fx - 1) > MAX_ROW:
        return f"bdring keeps one output row ({wo} + {fx - 1} columns = {wx}) in a tile of at most {MAX_ROW}"
    return None


@functools.lru_cache(maxsize=1024)
def _strides(params: ConvParams, layout: LayoutTriple, family: str = "bdring") -> tuple | str:
    """(x's n / h / w strides, dy's) in elements, or why the layout does not fit ``family`` (bdring, bdstride).
    Cached: every config of a problem asks (decline), then bind."""
    geo = ConvGeometry.build(params, layout)
    gx, nx, cx, _, hx, wx = geo.x_strides
    gy, ny, ky, _, hy, wy = geo.y_strides
    if cx != 1 or ky != 1 or gx != params.C or gy != params.K:
        return (f"{family} reads 16 packed channels of consecutive groups per position (NHWGC / NWGC); layout "
                f"{layout.name} does not pack G and C that way")
    strides = (nx, hx, wx, ny, hy, wy)
    if any(s % 8 for s in strides):
        return (f"{family} copies 16-byte rows: G*C = {params.G * params.C} must be a multiple of 8 (the "
                f"position strides are {strides})")
    return strides


def tensor_reason(family: str, params: ConvParams, layout: LayoutTriple, dtype: DataType) -> str | None:
    """Why ``family``'s kernels (bdring, bdstride: 16-bit mma.sync on packed 16-channel rows) cannot read these
    tensors, or None: the data type, the layout's rank, the packed NHWGC / NWGC strides."""
    if dtype.data.itemsize != 2 or dtype.compute != "native":
        return f"{family} runs 16-bit data on fp16 / bf16 tensor cores, got {dtype.name}"
    if layout.ndim != params.ndim:
        return f"layout {layout.name} is {layout.ndim}D but the problem is {params.ndim}D"
    strides = _strides(params, layout, family)
    return strides if isinstance(strides, str) else None


def decline(cfg: BwdWeightBdringConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := cfg.check() or gluon_reason() or problem_reason(params)
            or tensor_reason("bdring", params, layout, dtype)) is not None:
        return why
    if cfg.rows * row_width(params) > MAX_ROW:
        return (f"rows={cfg.rows} stacked rows of {row_width(params)} columns are over {MAX_ROW} positions a step: "
                f"rows=1 takes this plane")
    if params.numel("input") >= INT32_LIMIT or params.numel("output") >= INT32_LIMIT:
        return "bdring addresses input and grad_out in int32: a tensor has 2^31 or more elements"
    return None


def plan(params: ConvParams, waves: int, sms: int, step: int = 1) -> tuple[int, int, int]:
    """(16-channel blocks, rows per chunk, chunks): about ``waves`` x ``sms`` one-warp programs, chunks of a
    multiple of ``step`` output rows (the rows a step takes)."""
    _, _, ho, _, _, _, _ = _plane(params)
    rows = params.N * ho
    blocks = triton.cdiv(params.G * params.C, 16)
    chunks = max(1, min(triton.cdiv(rows, step), triton.cdiv(sms * waves, blocks)))
    chunk = triton.cdiv(triton.cdiv(rows, chunks), step) * step
    return blocks, chunk, triton.cdiv(rows, chunk)


def walk_runner(args: RunArgs, family: str, kernel: Any, grid: tuple[int, int], chunk: int, chunks: int,
                **constexprs: Any) -> Runner:
    """The runner of a Gluon walk (bdring, bdstride): ``kernel`` writes one fp32 slice per row chunk in the order
    (tap, g, k, c), and ``common``'s reduce sums BLOCK_S slices a step (the igemm reduce's 1024-element programs,
    one slice a step, took ~16 us of a 63 us call, session 53) and writes the weight's layout."""
    p, geo = args.params, args.geo
    h, w, ho, wo, fy, fx, pad_h = _plane(p)
    w_numel = geo.w_numel
    if chunks * w_numel >= INT32_LIMIT:
        raise ValueError(f"bwd-weight {family}: {chunks} fp32 slices of {w_numel} elements need 64-bit offsets")
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    gemm = BoundKernel(kernel, grid, **constexprs)
    gkc = p.G * p.K * p.C
    sizes = (p.G, p.N * ho, chunk, ho, h, w, wo, pad_h, p.left_pad[-1],
             *(s // 8 for s in _strides(p, args.layout, family)), p.K * p.C, p.C, 1, fx * gkc, gkc, w_numel)
    fin_sizes = (w_numel, chunks, gkc, p.K * p.C, p.C, fy, fx, *geo.w_strides)
    return split_runner(gemm, finalize_launcher(chunks, w_numel, False, epi), sizes, fin_sizes, chunks * w_numel)


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner launches bdstride's walk at stride 1 and the fixed-order reduce."""
    cfg, p = args.cfg, args.params
    require_runnable(decline(cfg, p, args.layout, args.dtype, args.fused), "bwd-weight bdring", p)
    dev = check_tensors(args).device
    _, _, _, _, fy, fx, _ = _plane(p)
    blocks, chunk, chunks = plan(p, cfg.waves, sm_count(dev), cfg.rows)
    # stride 1: one input phase, a dy copy per tap column
    shape = dict(C=p.C, FY=fy, FX=fx, SH=1, SW=1, NP=1, NQ=fx, WX=row_width(p), num_warps=1)
    if cfg.rows == 1:
        return walk_runner(args, "bdring", _bwd_weight_bdstride_ring_kernel, (blocks, chunks), chunk, chunks,
                           R=ring_slots(fy), **shape)
    return walk_runner(args, "bdring", _bwd_weight_bdstride_kernel, (blocks, chunks), chunk, chunks,
                       RPS=cfg.rows, **shape)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="bdring", config=BwdWeightBdringConfig, decline=decline, bind=bind,
    description="Gluon grouped dL/dW for 4-16 channels per group: per output row the input row in a shared-memory "
                "ring and dy's row once per tap column (shifted), one mma.sync chain per tap on block-diagonal "
                "16 x 16 tiles; fp32 slices per row chunk, fixed-order multi-slice reduce",
    kernels=tuple(k for k in (_bwd_weight_bdstride_ring_kernel, _bwd_weight_bdstride_kernel,
                              _dw_finalize_kernel) if k is not None)))
