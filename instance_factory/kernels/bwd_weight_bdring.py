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
previous image's last row computes. dy's
copies go by cp.async (``dy_read="async"``, each from L2) or through registers (``"regs"``: the second and
third shifted reads hit L1), a per-layer choice. Row chunks write fp32 slices [chunk, dW] in the weight's
layout, and ``bwd_weight_igemm``'s fixed-order reduce applies the epilogue (deterministic; always two launches).

Gluon does not run in the Triton interpreter: there this family declines, and the CPU tests compile it for
sm_90 with the wheel's ptxas. Channels-last NHWGC (and NWGC), 16-bit data, stride and dilation 1, filters up to
3 x 3, output rows up to 126 wide.
"""

from __future__ import annotations

from collections.abc import Mapping
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
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, slice_reduce
from .bwd_weight_igemm_plan import check_tensors
from .common import split_runner
from .host import INT32_LIMIT, sm_count

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
except ImportError:  # a Triton without Gluon (before 3.5): the family declines
    gluon = None

__all__ = ["ALGORITHM", "BwdWeightBdringConfig", "CHANNELS", "bind", "decline", "gluon_reason", "plan",
           "problem_reason", "reduction_positions", "ring_slots", "row_width"]

OP_NAME = "conv_bwd_weight"
CHANNELS = (4, 8, 16)  # channels per group (C == K): 4, 2 or 1 groups per 16-wide mma tile
MAX_TAPS = 3  # per filter axis: the kernel's nine accumulators
MAX_ROW = 128  # WX, the padded output row plus FX - 1 columns, at most this
WAVES = (2, 4, 8, 16)
DY_READS = ("async", "regs")

if gluon is not None:
    # Triton 3.9 renamed two Gluon builtins; one name for both
    _async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier

    @gluon.jit
    def _issue_dy(dy_ptr, dy_s, stage, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w,
                  FX: gl.constexpr, WX: gl.constexpr, LOAD: gl.constexpr):
        """dy row (n, oh) once per tap column tx, shifted right by tx, by cp.async (each copy from L2)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        cok = (ch0 + cols) < GC
        for tx in gl.static_range(FX):
            ow = pos - tx
            m = ((ow >= 0) & (ow < Wo))[:, None] & cok[None, :]
            p = dy_ptr + (n * ys_n + oh * ys_h + ow[:, None] * ys_w) * 8 + (ch0 + cols)[None, :]
            _async_load(dy_s.index(stage * FX + tx), p, mask=m)

    @gluon.jit
    def _load_dy(dy_ptr, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, tx: gl.constexpr, WX: gl.constexpr,
                 LOAD: gl.constexpr):
        """dy row (n, oh) shifted right by tx, in registers (zero outside the row)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        ow = pos - tx
        m = ((ow >= 0) & (ow < Wo))[:, None] & ((ch0 + cols) < GC)[None, :]
        p = dy_ptr + (n * ys_n + oh * ys_h + ow[:, None] * ys_w) * 8 + (ch0 + cols)[None, :]
        return gl.load(p, mask=m, other=0.0)

    @gluon.jit
    def _issue_x(x_ptr, x_s, n, ih, slot, ch0, GC, H, W, pad_w, xs_n, xs_h, xs_w,
                 WX: gl.constexpr, LOAD: gl.constexpr):
        """Input row (n, ih) from column -pad_w into ring slot ``slot``, zero outside the plane."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        iw = pos - pad_w
        ok = (ih >= 0) & (ih < H)
        m = ((iw >= 0) & (iw < W) & ok)[:, None] & ((ch0 + cols) < GC)[None, :]
        p = x_ptr + (n * xs_n + ih * xs_h + iw[:, None] * xs_w) * 8 + (ch0 + cols)[None, :]
        _async_load(x_s.index(slot), p, mask=m)

    @gluon.jit
    def _row_taps(a0, a1, a2, x_s, dy_s, slot, stage, FX: gl.constexpr, A_L: gl.constexpr, B_L: gl.constexpr):
        """One filter row's taps: its input row (A, loaded once) against the FX shifted dy copies."""
        a = x_s.index(slot).permute((1, 0)).load(A_L)
        a0 = mma_v2(a, dy_s.index(stage * FX).load(B_L), a0)
        if FX > 1:
            a1 = mma_v2(a, dy_s.index(stage * FX + 1).load(B_L), a1)
        if FX > 2:
            a2 = mma_v2(a, dy_s.index(stage * FX + 2).load(B_L), a2)
        return a0, a1, a2

    @gluon.jit
    def _store_tap(acc, ws_ptr, base, blk, G, ty: gl.constexpr, tx: gl.constexpr, C: gl.constexpr,
                   ws_g, ws_k, ws_c, ws_y, ws_x, MMA: gl.constexpr):
        """Tap (ty, tx): the accumulator's diagonal C x C blocks into this chunk's fp32 slice."""
        i = gl.arange(0, 16, layout=gl.SliceLayout(1, MMA))  # input channel in the block: group i // C
        j = gl.arange(0, 16, layout=gl.SliceLayout(0, MMA))  # grad_out channel in the block
        g = blk * (16 // C) + i // C
        keep = ((i // C)[:, None] == (j // C)[None, :]) & (g < G)[:, None]
        off = (base + g[:, None] * ws_g + (j % C)[None, :] * ws_k + (i % C)[:, None] * ws_c
               + ty * ws_y + tx * ws_x)
        gl.store(ws_ptr + off, acc, mask=keep)

    @gluon.jit
    def _bwd_weight_bdring_kernel(
        x_ptr, dy_ptr, out_ptr, ws_ptr, d0, d1, d2, d3, alpha, beta,
        G, ROWS, CHUNK, Ho, H, W, Wo, pad_h, pad_w,
        xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,  # n / h / w strides in units of 8 elements: 16-byte rows
        ws_g, ws_k, ws_c, ws_y, ws_x, W_NUMEL,
        C: gl.constexpr, FY: gl.constexpr, FX: gl.constexpr, WX: gl.constexpr, R: gl.constexpr,
        DY_REGS: gl.constexpr,
    ):
        blk = gl.program_id(0)  # 16-channel block
        chunk = gl.program_id(1)  # chunk of output rows (n, oh)
        ch0 = blk * 16
        GC = G * C
        LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [16, 2], [1, 1], [1, 0])
        SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        dy_s = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [2 * FX, WX, 16], SMEM)
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [R, WX, 16], SMEM)

        r0 = chunk * CHUNK
        r1 = gl.minimum(r0 + CHUNK, ROWS)
        zero = gl.zeros([16, 16], gl.float32, MMA)
        a00 = zero
        a01 = zero
        a02 = zero
        a10 = zero
        a11 = zero
        a12 = zero
        a20 = zero
        a21 = zero
        a22 = zero
        VR = Ho + FY - 1  # ring rows per image
        n = r0 // Ho
        oh = r0 % Ho
        if DY_REGS:
            for tx in gl.static_range(FX):
                dy_s.index(tx).store(_load_dy(dy_ptr, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, tx, WX, LOAD))
        else:
            _issue_dy(dy_ptr, dy_s, 0, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, FX, WX, LOAD)
        for ty in gl.static_range(FY):
            _issue_x(x_ptr, x_s, n, oh + ty - pad_h, (n * VR + oh + ty) % R, ch0, GC, H, W, pad_w,
                     xs_n, xs_h, xs_w, WX, LOAD)
        async_copy.commit_group()
        for r in range(r0, r1):
            stage = (r - r0) % 2
            n = r // Ho
            oh = r % Ho
            v = n * VR + oh
            rn = gl.minimum(r + 1, ROWS - 1)
            n1 = rn // Ho
            oh1 = rn % Ho
            if DY_REGS:
                e0 = _load_dy(dy_ptr, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, 0, WX, LOAD)
                if FX > 1:
                    e1 = _load_dy(dy_ptr, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, 1, WX, LOAD)
                if FX > 2:
                    e2 = _load_dy(dy_ptr, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, 2, WX, LOAD)
            else:
                _issue_dy(dy_ptr, dy_s, 1 - stage, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, FX, WX, LOAD)
            # the next row's new input rows (one within an image, FY at an image's start), into free slots
            v1 = n1 * VR + oh1
            for ty in gl.static_range(FY):
                if (r + 1 < r1) & ((ty == FY - 1) | (oh1 == 0)):
                    _issue_x(x_ptr, x_s, n1, oh1 + ty - pad_h, (v1 + ty) % R, ch0, GC, H, W, pad_w,
                             xs_n, xs_h, xs_w, WX, LOAD)
            async_copy.commit_group()
            async_copy.wait_group(1)
            _barrier()
            a00, a01, a02 = _row_taps(a00, a01, a02, x_s, dy_s, v % R, stage, FX, A_L, B_L)
            if FY > 1:
                a10, a11, a12 = _row_taps(a10, a11, a12, x_s, dy_s, (v + 1) % R, stage, FX, A_L, B_L)
            if FY > 2:
                a20, a21, a22 = _row_taps(a20, a21, a22, x_s, dy_s, (v + 2) % R, stage, FX, A_L, B_L)
            if DY_REGS:
                dy_s.index((1 - stage) * FX).store(e0)
                if FX > 1:
                    dy_s.index((1 - stage) * FX + 1).store(e1)
                if FX > 2:
                    dy_s.index((1 - stage) * FX + 2).store(e2)
            _barrier()
        base = chunk * W_NUMEL
        _store_tap(a00, ws_ptr, base, blk, G, 0, 0, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FX > 1:
            _store_tap(a01, ws_ptr, base, blk, G, 0, 1, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FX > 2:
            _store_tap(a02, ws_ptr, base, blk, G, 0, 2, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FY > 1:
            _store_tap(a10, ws_ptr, base, blk, G, 1, 0, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 1:
                _store_tap(a11, ws_ptr, base, blk, G, 1, 1, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 2:
                _store_tap(a12, ws_ptr, base, blk, G, 1, 2, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FY > 2:
            _store_tap(a20, ws_ptr, base, blk, G, 2, 0, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 1:
                _store_tap(a21, ws_ptr, base, blk, G, 2, 1, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 2:
                _store_tap(a22, ws_ptr, base, blk, G, 2, 2, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
else:
    _bwd_weight_bdring_kernel = None


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightBdringConfig(KernelConfig):
    """Programs of one warp: ~``waves`` x SMs of them over the 16-channel blocks and row chunks; dy's
    shifted copies by cp.async or through registers (``dy_read``)."""

    waves: int
    dy_read: str

    def check(self) -> str | None:
        if self.waves not in WAVES:
            return f"waves={self.waves!r} is not one of {WAVES}"
        if self.dy_read not in DY_READS:
            return f"dy_read={self.dy_read!r} is not one of {DY_READS}"
        return None


def gluon_reason() -> str | None:
    """Why Gluon kernels cannot launch here, or None (also None while a lookup emulates a GPU from its rows:
    ``tuning.database.emulated``)."""
    if interpreting() and not gpu_emulated():
        return "bdring is a Gluon kernel, and Gluon does not run in the Triton interpreter"
    if gluon is None:
        return f"bdring is a Gluon kernel: Triton {triton.__version__} has no triton.experimental.gluon"
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


def _strides(params: ConvParams, layout: LayoutTriple) -> tuple | str:
    """(x's n / h / w strides, dy's) in elements, or why the layout does not fit."""
    geo = ConvGeometry.build(params, layout)
    gx, nx, cx, _, hx, wx = geo.x_strides
    gy, ny, ky, _, hy, wy = geo.y_strides
    if cx != 1 or ky != 1 or gx != params.C or gy != params.K:
        return (f"bdring reads 16 packed channels of consecutive groups per position (NHWGC / NWGC); layout "
                f"{layout.name} does not pack G and C that way")
    strides = (nx, hx, wx, ny, hy, wy)
    if any(s % 8 for s in strides):
        return (f"bdring copies 16-byte rows: G*C = {params.G * params.C} must be a multiple of 8 (the "
                f"position strides are {strides})")
    return strides


def decline(cfg: BwdWeightBdringConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := cfg.check() or gluon_reason() or problem_reason(params)) is not None:
        return why
    if dtype.data.itemsize != 2 or dtype.compute != "native":
        return f"bdring runs 16-bit data on fp16 / bf16 tensor cores, got {dtype.name}"
    if layout.ndim != params.ndim:
        return f"layout {layout.name} is {layout.ndim}D but the problem is {params.ndim}D"
    strides = _strides(params, layout)
    if isinstance(strides, str):
        return strides
    if params.numel("input") >= INT32_LIMIT or params.numel("output") >= INT32_LIMIT:
        return "bdring addresses input and grad_out in int32: a tensor has 2^31 or more elements"
    return None


def plan(params: ConvParams, waves: int, sms: int) -> tuple[int, int, int]:
    """(16-channel blocks, rows per chunk, chunks): about ``waves`` x ``sms`` one-warp programs."""
    _, _, ho, _, _, _, _ = _plane(params)
    rows = params.N * ho
    blocks = triton.cdiv(params.G * params.C, 16)
    chunks = max(1, min(rows, triton.cdiv(sms * waves, blocks)))
    chunk = triton.cdiv(rows, chunks)
    return blocks, chunk, triton.cdiv(rows, chunk)


def reduction_positions(params: ConvParams, cfg: Mapping[str, Any]) -> int:
    """Positions the mma chains reduce over: every output row padded to WX columns."""
    _, _, ho, _, _, _, _ = _plane(params)
    return params.N * ho * row_width(params)


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner launches the kernel and the fixed-order reduce."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight bdring", p)
    dev = check_tensors(args).device
    h, w, ho, wo, fy, fx, pad_h = _plane(p)
    blocks, chunk, chunks = plan(p, cfg.waves, sm_count(dev))
    w_numel = geo.w_numel
    int64 = bool(chunks * w_numel >= INT32_LIMIT)
    if int64:
        raise ValueError(f"bwd-weight bdring: {chunks} fp32 slices of {w_numel} elements need 64-bit offsets")
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    gemm = BoundKernel(_bwd_weight_bdring_kernel, (blocks, chunks), C=p.C, FY=fy, FX=fx, WX=row_width(p),
                       R=ring_slots(fy), DY_REGS=cfg.dy_read == "regs", num_warps=1)
    ws_g, ws_k, ws_c, _, ws_y, ws_x = geo.w_strides
    sizes = (p.G, p.N * ho, chunk, ho, h, w, wo, pad_h, p.left_pad[-1],
             *(s // 8 for s in _strides(p, args.layout)), ws_g, ws_k, ws_c, ws_y, ws_x, w_numel)
    return split_runner(gemm, slice_reduce(w_numel, int64, epi), sizes, (w_numel, chunks), chunks * w_numel)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="bdring", config=BwdWeightBdringConfig, decline=decline, bind=bind,
    description="Gluon grouped dL/dW for 4-16 channels per group: per output row the input row in a shared-memory "
                "ring and dy's row once per tap column (shifted), one mma.sync chain per tap on block-diagonal "
                "16 x 16 tiles; fp32 slices per row chunk, fixed-order reduce",
    kernels=tuple(k for k in (_bwd_weight_bdring_kernel, _bwd_weight_finalize_kernel) if k is not None)))
