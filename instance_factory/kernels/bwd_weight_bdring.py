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

The ring has 2 x FY slots (a power of two) numbered per image (input row ih of image n is row
v = n * (Ho + FY - 1) + ih + pad_h), so an image's first output row loads its FY input rows while the
previous image's last row computes. dy's copies go by cp.async (``dy_read="async"``, each from L2) or through
registers (``"regs"``: the second and third shifted reads hit L1), a per-layer choice. ``rows`` 2 / 4 take the
stacked walk instead (``bdring_kernels``): that many output rows a step, each filter row's input rows and each
tap column's dy rows stacked into one tile, for 7x7 / 14x14 planes where one 16-wide row a step leaves each
program waiting on its copies. Row chunks write fp32 slices [chunk, dW] in the weight's layout, and
``bwd_weight_igemm``'s fixed-order reduce applies the epilogue (deterministic; always two launches).

Gluon does not run in the Triton interpreter: there this family declines (not while a lookup emulates a GPU
from its rows, ``algorithms.gpu_emulated``), and the CPU tests compile it for sm_90 with the wheel's ptxas.
Channels-last NHWGC (and NWGC), 16-bit data, stride and dilation 1, filters up to 3 x 3, output rows up to 126
wide.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import triton

from ..algorithms import Algorithm, RunArgs, Runner, gpu_emulated, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bdring_kernels import _bwd_weight_bdring_kernel, _bwd_weight_bdring_stack_kernel, gluon
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, slice_reduce
from .bwd_weight_igemm_plan import check_tensors
from .common import split_runner
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "BwdWeightBdringConfig", "CHANNELS", "bind", "decline", "gluon_reason", "plan",
           "problem_reason", "ring_slots", "row_width", "tensor_reason"]

OP_NAME = "conv_bwd_weight"
CHANNELS = (4, 8, 16)  # channels per group (C == K): 4, 2 or 1 groups per 16-wide mma tile
MAX_TAPS = 3  # per filter axis: the kernel's nine accumulators
MAX_ROW = 128  # WX, the padded output row plus FX - 1 columns, at most this
WAVES = (2, 4, 8, 16)
DY_READS = ("async", "regs")
ROWS_PER_STEP = (1, 2, 4)  # 1: the ring walk; 2, 4: the stacked walk (narrow planes)

# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightBdringConfig(KernelConfig):
    """Programs of one warp: ~``waves`` x SMs of them over the 16-channel blocks and row chunks; dy's
    shifted copies by cp.async or through registers (``dy_read``); ``rows`` output rows a step (1: the ring
    walk, 2 / 4: the stacked walk, cp.async only)."""

    waves: int
    dy_read: str
    rows: int

    def check(self) -> str | None:
        if self.waves not in WAVES:
            return f"waves={self.waves!r} is not one of {WAVES}"
        if self.dy_read not in DY_READS:
            return f"dy_read={self.dy_read!r} is not one of {DY_READS}"
        if self.rows not in ROWS_PER_STEP:
            return f"rows={self.rows!r} is not one of {ROWS_PER_STEP}"
        if self.rows > 1 and self.dy_read != "async":
            return f"rows={self.rows} (the stacked walk) copies dy by cp.async only: dy_read='regs' is the ring's"
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


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner launches the kernel and the fixed-order reduce."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight bdring", p)
    dev = check_tensors(args).device
    h, w, ho, wo, fy, fx, pad_h = _plane(p)
    blocks, chunk, chunks = plan(p, cfg.waves, sm_count(dev), cfg.rows)
    w_numel = geo.w_numel
    if chunks * w_numel >= INT32_LIMIT:
        raise ValueError(f"bwd-weight bdring: {chunks} fp32 slices of {w_numel} elements need 64-bit offsets")
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    if cfg.rows == 1:
        gemm = BoundKernel(_bwd_weight_bdring_kernel, (blocks, chunks), C=p.C, FY=fy, FX=fx, WX=row_width(p),
                           R=ring_slots(fy), DY_REGS=cfg.dy_read == "regs", num_warps=1)
    else:
        gemm = BoundKernel(_bwd_weight_bdring_stack_kernel, (blocks, chunks), C=p.C, FY=fy, FX=fx,
                           WX=row_width(p), RPS=cfg.rows, num_warps=1)
    ws_g, ws_k, ws_c, _, ws_y, ws_x = geo.w_strides
    sizes = (p.G, p.N * ho, chunk, ho, h, w, wo, pad_h, p.left_pad[-1],
             *(s // 8 for s in _strides(p, args.layout)), ws_g, ws_k, ws_c, ws_y, ws_x, w_numel)
    return split_runner(gemm, slice_reduce(w_numel, False, epi), sizes, (w_numel, chunks), chunks * w_numel)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="bdring", config=BwdWeightBdringConfig, decline=decline, bind=bind,
    description="Gluon grouped dL/dW for 4-16 channels per group: per output row the input row in a shared-memory "
                "ring and dy's row once per tap column (shifted), one mma.sync chain per tap on block-diagonal "
                "16 x 16 tiles; fp32 slices per row chunk, fixed-order reduce",
    kernels=tuple(k for k in (_bwd_weight_bdring_kernel, _bwd_weight_bdring_stack_kernel,
                              _bwd_weight_finalize_kernel) if k is not None)))
