"""conv_bwd_weight (dL/dW) per group, a block of filter taps sharing each grad_out box ("tapshare").

``tma`` runs one tap per program: a 3x3 filter loads every grad_out box nine times and each
pipelined step is one dot. Grouped layers with 16-64 channels per group (ResNeXt's G32 C32, RegNet's
widths) make that dot small (32 x 32 x block_k), so the step's fixed costs (barriers, box issue, the
walk's carries) dominate and the pointer GEMMs beat it. Here a program owns one block_m x block_n tile
of group g's K x C and a block of taps_y x taps_x taps of one depth tap tz (filter rows ty0.., columns
tx0..). A step loads grad_out's box of block_h x block_w positions once and, for each tap of the block,
the input box shifted by that tap, and adds one dot per tap into that tap's accumulator:

    dw[g, k, tz, ty0+jy, tx0+jx, c] += dy[n, od, oh0 + [0, BH), ow0 + [0, BW), g, k]^T
        @ x[n, id, (oh0 + [0, BH))*sh + (ty0+jy)*dil_h - pad_h, ow0 + [0, BW) + (tx0+jx)*dil_w - pad_w, g, c]

TMA fills boxes outside the tensors with zeros: the padding halo, the ends of rows and planes, taps
past the filter's edge (their box is pointed past the tensor) and steps past a split's end (a grad_out
box past the last image). The loop has no masks. Boxes of several rows (block_h > 1) need H stride 1
(consecutive output rows read consecutive input rows); one-row boxes take any H stride. W stride 1
only, as ``tma``. Up to 3 x 3 taps per program (nine fp32 accumulators); larger filters take several
tap blocks (grid axis).

Launches: the GEMM (epilogue from the accumulators with one split, else fp32 slices per split) and,
with several splits, ``bwd_weight_igemm``'s fixed-order reduce + epilogue (deterministic).

Where it runs (session 50 probes, H100, docs/BENCHMARKS.md): grouped layers of 17-64 channels per group that
are not both multiples of 32. Each tap's input box streams from L2 (TMA does not use L1; G32 C32 14x14 moved
~4.2 TB/s L2 -> shared memory), so on ResNeXt's 8-64 channel groups the pointer GEMMs and bdrow / bdwin stay
ahead (0.18-0.63x cuDNN here); on RegNet's 40 / 56-channel groups, where those lose their 16-element channel loads,
it ran up to 2.4x faster than any other family.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_data_tma import _dy_view, _with_base, channels_last_view, descriptor_template, tma_ready
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, slice_reduce
from .bwd_weight_igemm_plan import auto_split, check_tensors
from .bwd_weight_tma import tf32_smem_reason, tma_wgrad_reason
from .common import dot_operands, dot_tn, split_runner
from .host import INT32_LIMIT, SMEM_PER_BLOCK, check_split_k, even_split, is_pow2, sm_count

__all__ = ["ALGORITHM", "MAX_GROUP_CHANNELS", "MAX_PACKED_CHANNELS", "BwdWeightTapshareConfig", "bind",
           "choose_split", "decline", "model_programs", "problem_reason", "reduction_positions"]

OP_NAME = "conv_bwd_weight"
_MODE_FUSED = 0  # one split: epilogue + final dtype from the accumulators
_MODE_SLICE = 2  # fp32 store into this split's workspace slice
_MAX_GRID = 2**31 - 1
_MAX_BOX = 256  # TMA: at most 256 elements per box dim
_MAX_TAPS = 3  # per filter axis in one program: the kernel's nine accumulators
MAX_PACKED_CHANNELS = 16  # groups this narrow go to the block-diagonal families
MAX_GROUP_CHANNELS = 64  # groups this wide go to the 128-wide tiles and the pointer GEMMs


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _tap_dot(acc, a, x_desc, xrow, ih, iw, g, c0,
             BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, OPERANDS: tl.constexpr):
    """acc + a^T @ (one tap's input box at rows ih.., columns iw..: zeros where it leaves the tensor)."""
    b = x_desc.load([xrow, ih, iw, g, c0]).reshape(BLOCK_H * BLOCK_W, BLOCK_N)
    return dot_tn(a, b, acc, OPERANDS)


@triton.jit
def _tap_store(acc, out_ptr, ws_ptr, ws_base, w_base, ok, offs_m, offs_n, K, C, ws_k, ws_c,
               d0, d1, d2, d3, alpha, beta,
               MODE: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """One tap's tile: the epilogue into dW (one split) or fp32 into the split's slice; ``ok``: the tap
    lies inside the filter (a block's taps past its edge store nothing)."""
    w_offs = w_base + offs_m[:, None] * ws_k + offs_n[None, :] * ws_c
    k_end = tl.where(ok, K, 0)  # a scalar bool and a tensor mask do not mix in the interpreter
    w_mask = (offs_m < k_end)[:, None] & (offs_n < C)[None, :]
    if MODE == 0:
        res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)
    else:
        tl.store(ws_ptr + ws_base + w_offs, acc, mask=w_mask)


@triton.jit
def _bwd_weight_tapshare_kernel(
    dy_desc, x_desc, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, FZ, FY, FX, YBLK, XBLK,
    Di, Hi, Wi, Do, HB, NDo,  # HB: row blocks per output plane; NDo = N*Do (a box past it reads zeros)
    sd, sh, off_z, off_y, off_x, dil_z, dil_y, dil_x,  # off_* = -padding per axis
    WCH, Q, STEPS_PER_SPLIT, W_NUMEL,  # column chunks per row block, units (n, od, row block, chunk)
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr,
    TY: tl.constexpr, TX: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr,
    OPERANDS: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    # ---- (split, g, tap block, tile), tile fastest: programs running together share grad_out's boxes
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(C, BLOCK_N)
    tiles = tl.cdiv(K, BLOCK_M) * num_pid_n
    tile = pid % tiles
    rest = pid // tiles
    tb = rest % (FZ * YBLK * XBLK)
    rest = rest // (FZ * YBLK * XBLK)
    g = rest % G
    split = rest // G
    k0 = (tile // num_pid_n) * BLOCK_M
    c0 = (tile % num_pid_n) * BLOCK_N
    tx0 = (tb % XBLK) * TX
    ty0 = ((tb // XBLK) % YBLK) * TY
    tz = tb // (XBLK * YBLK)
    zoff = tz * dil_z + off_z
    yoff = ty0 * dil_y + off_y
    xoff = tx0 * dil_x + off_x
    BLOCK_K: tl.constexpr = BLOCK_H * BLOCK_W

    q = split * STEPS_PER_SPLIT
    q_end = tl.minimum(q + STEPS_PER_SPLIT, Q)
    # the first unit's (column chunk, row block, od, n); the walk then adds one unit at a time
    wc = q % WCH
    t = q // WCH
    hb = t % HB
    t = t // HB
    od = t % Do
    n = t // Do

    acc00 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc01 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc02 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc10 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc11 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc12 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc20 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc21 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc22 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # taps of the block past the filter's edge read boxes past the tensor (zeros): rows at Hi, columns at Wi
    col0 = tl.where(tx0 < FX, 0, Wi)
    col1 = tl.where(tx0 + 1 < FX, dil_x, Wi)
    col2 = tl.where(tx0 + 2 < FX, 2 * dil_x, Wi)
    row1 = tl.where(ty0 + 1 < FY, dil_y, Hi)
    row2 = tl.where(ty0 + 2 < FY, 2 * dil_y, Hi)
    for _ in range(q, q_end):
        oh0 = hb * BLOCK_H
        ow0 = wc * BLOCK_W
        a = dy_desc.load([n * Do + od, oh0, ow0, g, k0]).reshape(BLOCK_K, BLOCK_M)
        id_ = od * sd + zoff
        ih = tl.where((id_ >= 0) & (id_ < Di), oh0 * sh + yoff, Hi)  # input plane outside: zero boxes
        xrow = n * Di + id_
        iw = ow0 + xoff
        acc00 = _tap_dot(acc00, a, x_desc, xrow, ih, iw + col0, g, c0, BLOCK_H, BLOCK_W, BLOCK_N, OPERANDS)
        if TX > 1:
            acc01 = _tap_dot(acc01, a, x_desc, xrow, ih, iw + col1, g, c0, BLOCK_H, BLOCK_W, BLOCK_N, OPERANDS)
        if TX > 2:
            acc02 = _tap_dot(acc02, a, x_desc, xrow, ih, iw + col2, g, c0, BLOCK_H, BLOCK_W, BLOCK_N, OPERANDS)
        if TY > 1:
            acc10 = _tap_dot(acc10, a, x_desc, xrow, ih + row1, iw + col0, g, c0, BLOCK_H, BLOCK_W, BLOCK_N,
                             OPERANDS)
            if TX > 1:
                acc11 = _tap_dot(acc11, a, x_desc, xrow, ih + row1, iw + col1, g, c0, BLOCK_H, BLOCK_W, BLOCK_N,
                                 OPERANDS)
            if TX > 2:
                acc12 = _tap_dot(acc12, a, x_desc, xrow, ih + row1, iw + col2, g, c0, BLOCK_H, BLOCK_W, BLOCK_N,
                                 OPERANDS)
        if TY > 2:
            acc20 = _tap_dot(acc20, a, x_desc, xrow, ih + row2, iw + col0, g, c0, BLOCK_H, BLOCK_W, BLOCK_N,
                             OPERANDS)
            if TX > 1:
                acc21 = _tap_dot(acc21, a, x_desc, xrow, ih + row2, iw + col1, g, c0, BLOCK_H, BLOCK_W, BLOCK_N,
                                 OPERANDS)
            if TX > 2:
                acc22 = _tap_dot(acc22, a, x_desc, xrow, ih + row2, iw + col2, g, c0, BLOCK_H, BLOCK_W, BLOCK_N,
                                 OPERANDS)
        # next unit: one carry per digit; past the split's end grad_out's box lies past the last image
        wc += 1
        cw = wc >= WCH
        wc = tl.where(cw, 0, wc)
        hb += cw.to(tl.int32)
        ch = hb >= HB
        hb = tl.where(ch, 0, hb)
        od += ch.to(tl.int32)
        cd = od >= Do
        od = tl.where(cd, 0, od)
        n += cd.to(tl.int32)

    offs_m = k0 + tl.arange(0, BLOCK_M)
    offs_n = c0 + tl.arange(0, BLOCK_N)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
        g = g.to(tl.int64)
        split = split.to(tl.int64)
    base = g * ws_g + tz * ws_z + ty0 * ws_y + tx0 * ws_x
    ws_base = split * W_NUMEL
    ok_x1 = tx0 + 1 < FX
    ok_x2 = tx0 + 2 < FX
    ok_y1 = ty0 + 1 < FY
    ok_y2 = ty0 + 2 < FY
    _tap_store(acc00, out_ptr, ws_ptr, ws_base, base, ty0 < FY, offs_m, offs_n, K, C, ws_k, ws_c,
               d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
    if TX > 1:
        _tap_store(acc01, out_ptr, ws_ptr, ws_base, base + ws_x, ok_x1, offs_m, offs_n, K, C, ws_k, ws_c,
                   d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
    if TX > 2:
        _tap_store(acc02, out_ptr, ws_ptr, ws_base, base + 2 * ws_x, ok_x2, offs_m, offs_n, K, C, ws_k, ws_c,
                   d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
    if TY > 1:
        _tap_store(acc10, out_ptr, ws_ptr, ws_base, base + ws_y, ok_y1, offs_m, offs_n, K, C, ws_k, ws_c,
                   d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
        if TX > 1:
            _tap_store(acc11, out_ptr, ws_ptr, ws_base, base + ws_y + ws_x, ok_y1 & ok_x1, offs_m, offs_n, K, C,
                       ws_k, ws_c, d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
        if TX > 2:
            _tap_store(acc12, out_ptr, ws_ptr, ws_base, base + ws_y + 2 * ws_x, ok_y1 & ok_x2, offs_m, offs_n, K,
                       C, ws_k, ws_c, d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
    if TY > 2:
        _tap_store(acc20, out_ptr, ws_ptr, ws_base, base + 2 * ws_y, ok_y2, offs_m, offs_n, K, C, ws_k, ws_c,
                   d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
        if TX > 1:
            _tap_store(acc21, out_ptr, ws_ptr, ws_base, base + 2 * ws_y + ws_x, ok_y2 & ok_x1, offs_m, offs_n, K,
                       C, ws_k, ws_c, d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)
        if TX > 2:
            _tap_store(acc22, out_ptr, ws_ptr, ws_base, base + 2 * ws_y + 2 * ws_x, ok_y2 & ok_x2, offs_m, offs_n,
                       K, C, ws_k, ws_c, d0, d1, d2, d3, alpha, beta, MODE, OP, NUM_DS, USER_FN)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightTapshareConfig(KernelConfig):
    """A block_m (K) x block_n (C) tile of taps_y x taps_x taps' dW, reduced over boxes of block_h x
    block_w output positions (one grad_out box a step, shared by the taps), split over split_k
    programs (0: automatic, :func:`choose_split`)."""

    block_m: int
    block_n: int
    block_h: int
    block_w: int
    taps_y: int
    taps_x: int
    num_warps: int
    num_stages: int
    split_k: int

    @property
    def taps(self) -> int:
        return self.taps_y * self.taps_x

    @property
    def block_k(self) -> int:
        """Positions per box: the dots' K (what ``bwd_weight_tma.tf32_smem_reason`` reads)."""
        return self.block_h * self.block_w

    def smem_bytes(self, elem_bytes: int) -> int:
        """The pipeline's boxes: num_stages x (grad_out block_k x block_m + taps x input block_k x block_n)."""
        return max(1, self.num_stages) * self.block_k * (self.block_m + self.taps * self.block_n) * elem_bytes

    def check(self) -> str | None:
        for name in ("block_m", "block_n", "block_h", "block_w"):
            v = getattr(self, name)
            if not is_pow2(v) or not 1 <= v <= _MAX_BOX:
                return f"{name}={v!r} must be a power of two up to {_MAX_BOX} (a TMA box dim)"
        if min(self.block_m, self.block_n, self.block_k) < 16:
            return (f"block_m={self.block_m}, block_n={self.block_n} and block_h*block_w={self.block_k} must be "
                    f">= 16 (tl.dot's smallest tile)")
        for name in ("taps_y", "taps_x"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 1 <= v <= _MAX_TAPS:
                return f"{name}={v!r} must be 1..{_MAX_TAPS} (the kernel's 3 x 3 accumulators)"
        if self.num_warps not in (4, 8):
            return f"num_warps={self.num_warps!r} must be 4 or 8"
        if not isinstance(self.num_stages, int) or not 2 <= self.num_stages <= 6:
            return f"num_stages={self.num_stages!r} must be an int in 2..6"
        if (why := check_split_k(self.split_k)) is not None:
            return why
        if self.taps * self.block_m * self.block_n // (32 * self.num_warps) > 160:
            return (f"{self.taps} fp32 accumulators of {self.block_m}x{self.block_n} do not fit in "
                    f"{self.num_warps} warps' registers")
        if (need := self.smem_bytes(2)) > SMEM_PER_BLOCK:
            return (f"needs {need // 1024} KiB of shared memory with 2-byte operands, over the "
                    f"{SMEM_PER_BLOCK // 1024} KiB of a Hopper SM")
        return None


def _tap_blocks(params: ConvParams, cfg: BwdWeightTapshareConfig) -> int:
    fz, fy, fx = (1, 1, *params.filter)[-3:]
    return fz * triton.cdiv(fy, cfg.taps_y) * triton.cdiv(fx, cfg.taps_x)


def _tiles(params: ConvParams, cfg: BwdWeightTapshareConfig) -> int:
    """Programs of one split: tap blocks x block_m x block_n tiles of each group's K x C."""
    return (params.G * _tap_blocks(params, cfg) * triton.cdiv(params.K, cfg.block_m)
            * triton.cdiv(params.C, cfg.block_n))


def _units(params: ConvParams, cfg: BwdWeightTapshareConfig) -> int:
    """Steps of the whole reduction: (n, od, row block, column chunk)."""
    do, ho, wo = (1, 1, *params.output)[-3:]
    return params.N * do * triton.cdiv(ho, cfg.block_h) * triton.cdiv(wo, cfg.block_w)


def _as_config(cfg: Mapping[str, Any]) -> BwdWeightTapshareConfig:
    """The cost model hands configs as mappings."""
    return cfg if isinstance(cfg, BwdWeightTapshareConfig) else BwdWeightTapshareConfig.from_values(cfg)


def reduction_positions(params: ConvParams, cfg: Mapping[str, Any]) -> int:
    """Positions the GEMM reduces over: whole block_h x block_w boxes per plane (the cost model's work)."""
    cfg = _as_config(cfg)
    return _units(params, cfg) * cfg.block_k


def choose_split(params: ConvParams, cfg: BwdWeightTapshareConfig, sms: int) -> int:
    """Automatic split: the GEMM families' rule (:func:`auto_split`) over this family's programs and steps."""
    return auto_split(_tiles(params, cfg), _units(params, cfg), sms, params.numel("weight"))


@functools.lru_cache(maxsize=1024)
def _views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """((dy shape, strides), (x shape, strides)) ready for TMA descriptors, or why not."""
    geo = ConvGeometry.build(params, layout)
    dy, x = _dy_view(geo), channels_last_view(geo.x_strides, geo.in3, geo.N, geo.G, geo.C)
    if dy is None or x is None:
        return (f"tapshare needs channels-last input and grad_out (unit C and K strides: the NHWGC / GNHWC "
                f"families); layout {layout.name} has neither or one")
    return tma_ready((dy, x), elem, params, dtype_name)


def problem_reason(params: ConvParams) -> str | None:
    """Why tapshare declines this problem whatever the config, layout and dtype, or None (also the rekey
    tool's test of whether a relayout row's channels-last twin may launch it)."""
    if params.G == 1:
        return ("tapshare runs grouped layers (G > 1): on dense ones tma, shift and rowstack's larger tiles ran "
                "2-3x faster (session 50, H100: ResNet-50 7x7 / 14x14 and R3D-18 2x7x7 at 0.36-0.55x cuDNN)")
    if min(params.C, params.K) <= MAX_PACKED_CHANNELS:
        return (f"tapshare runs groups of more than {MAX_PACKED_CHANNELS} channels, got C={params.C}, K={params.K}: "
                f"bdrow / bdwin pack several small groups per tile (session 50, H100: ResNeXt's G32 C8 56x56 "
                f"0.84 ms here vs 0.18 ms bdwin)")
    if max(params.C, params.K) > MAX_GROUP_CHANNELS:
        return (f"tapshare runs groups of at most {MAX_GROUP_CHANNELS} channels, got C={params.C}, K={params.K}: "
                f"wider groups fill the 128-wide tiles of tma / shift / rowstack and the pointer GEMMs (session 50, "
                f"H100: RegNetY-16GF's 112-channel groups ran 1.2-1.4x faster on splitk_atomic and igemm)")
    if params.C % 32 == 0 and params.K % 32 == 0:
        return (f"C={params.C} and K={params.K} fill 32-wide tiles exactly: the pointer GEMMs (two_stage, igemm, "
                f"split-K) run such groups faster (session 50, H100: ResNeXt's G32 C32 7x7 0.044 ms here vs 0.028 "
                f"two_stage, G32 C64 7x7 0.094 vs 0.038 igemm)")
    if params.stride[-1] != 1:
        return f"tapshare needs a W stride of 1 (an input row is one box), got stride {params.stride}"
    return None


def decline(cfg: BwdWeightTapshareConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := tma_wgrad_reason("tapshare", dtype)) is not None:
        return why
    if (why := tf32_smem_reason("tapshare", cfg, dtype) or problem_reason(params)) is not None:
        return why
    if cfg.block_h > 1 and params.ndim >= 2 and params.stride[-2] != 1:
        return (f"block_h={cfg.block_h}: boxes of several rows need an H stride of 1 (consecutive input rows), "
                f"got stride {params.stride}; block_h 1 takes any H stride")
    fy, fx = (1, *params.filter)[-2:]
    if cfg.taps_x > fx or cfg.taps_y > fy:
        return (f"taps_y x taps_x = {cfg.taps_y} x {cfg.taps_x} taps per program is more than the filter's "
                f"{fy} x {fx}")
    ho, wo = (1, *params.output)[-2:]
    if cfg.block_w > 2 * wo or cfg.block_h > 2 * ho:
        return (f"a {cfg.block_h} x {cfg.block_w} box is over twice the {ho} x {wo} output plane: most of it "
                "would be past the plane's end")
    views = _views(params, layout, dtype.data.itemsize, dtype.name)
    return views if isinstance(views, str) else None


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner moves the two descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight tapshare", p)
    dev = check_tensors(args).device
    dy_view, x_view = _views(p, args.layout, dt.data.itemsize, dt.name)
    bm, bn, bh, bw = cfg.block_m, cfg.block_n, cfg.block_h, cfg.block_w

    FZ, FY, FX = geo.filt3
    Di, Hi, Wi = geo.in3
    Do, Ho, Wo = geo.out3
    sd, sh, _ = geo.stride3
    pd, ph, pw = geo.pad3
    dd, dh, dw = geo.dil3
    hb, wch = triton.cdiv(Ho, bh), triton.cdiv(Wo, bw)
    units = _units(p, cfg)
    split, steps_per_split = even_split(int(cfg.split_k) or choose_split(p, cfg, sm_count(dev)), units)
    programs = _tiles(p, cfg) * split
    if programs > _MAX_GRID:
        raise ValueError(f"bwd-weight tapshare: {programs} programs are over the launch grid's {_MAX_GRID}")
    mode = _MODE_FUSED if split == 1 else _MODE_SLICE
    w_numel = geo.w_numel
    int64 = bool(split * w_numel >= INT32_LIMIT)
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))

    gemm = BoundKernel(
        _bwd_weight_tapshare_kernel, (programs,),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_H=bh, BLOCK_W=bw, TY=cfg.taps_y, TX=cfg.taps_x, MODE=mode, INT64=int64,
        OPERANDS=dot_operands(dt), num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi,
    )
    sizes = (geo.G, geo.K, geo.C, FZ, FY, FX, triton.cdiv(FY, cfg.taps_y), triton.cdiv(FX, cfg.taps_x),
             Di, Hi, Wi, Do, hb, geo.N * Do, sd, sh, -pd, -ph, -pw, dd, dh, dw,
             wch, units, steps_per_split, w_numel, *geo.w_strides)
    dy_template = descriptor_template(args.b, dy_view, [1, bh, bw, 1, bm])
    x_template = descriptor_template(args.a, x_view, [1, bh, bw, 1, bn])

    def descriptors(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        return _with_base(dy_template, dy), _with_base(x_template, x)

    finalize = None if mode == _MODE_FUSED else slice_reduce(w_numel, int64, epi)
    return split_runner(gemm, finalize, sizes, (w_numel, split), split * w_numel, operands=descriptors)


def model_programs(params: ConvParams, cfg: Mapping[str, Any], sms: int) -> tuple[int, int]:
    """(programs of one split, the automatic or fixed split) as bind chooses them: the cost model's waves."""
    cfg = _as_config(cfg)
    split, _ = even_split(int(cfg.split_k) or choose_split(params, cfg, sms), _units(params, cfg))
    return _tiles(params, cfg), split


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="tapshare", config=BwdWeightTapshareConfig, decline=decline, bind=bind,
    description="per-group GEMM dL/dW of a block of up to 3 x 3 filter taps sharing each grad_out TMA box "
                "(one box of block_h x block_w positions, one input box and one dot per tap a step; zero "
                "fill = padding); fp32 slices per split, fixed-order reduce",
    kernels=(_bwd_weight_tapshare_kernel, _bwd_weight_finalize_kernel)))
