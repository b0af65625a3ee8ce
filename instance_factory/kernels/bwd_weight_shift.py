"""conv_bwd_weight (dL/dW) as a per-tap GEMM over each plane's flattened positions: a filter tap is a
constant shift of the flat (h, w) index, so both operands are full 2-D TMA boxes.

With stride 1 in H and W and an output as wide as the input (Wo = Wi, any padding that keeps the
width), the output position (oh, ow) of one (n, d) plane reads, for tap (ty, tx), the input element
at flat index

    (oh + sy) * Wi + (ow + sx) = f + sy * Wi + sx,    f = oh * Wi + ow,  sy = ty*dil_h - pad_h,  sx = tx*dil_w - pad_w

so block_k consecutive flat positions of grad_out (one box of [G, N*Do, Ho*Wo, K]) meet block_k
consecutive flat positions of the input (one box of [G, N*Di, Hi*Wi, C]), shifted by a constant.
TMA's zero fill stands for the rows above and below the plane and for the end of the plane's last
box, and the boxes carry leading unit dims only, so wgmma reads them from shared memory as they
land (session 14: a unit dim between rows and channels sends a box through registers). Compared
with ``tma``'s one-row boxes, a 7x7 or 14x14 plane no longer rounds each row up to a box.

What the flat index gets wrong: an output column with ow + sx outside [0, Wi) reads the neighbouring
row's element instead of the zero padding. Those |sx| columns per tap are summed again on their own
(their positions walked flat through pointers, block_k at a time) and subtracted: |sx| / Wo of the
main work (1/14 for a 3x3 filter on a 14-wide plane). Both sums stay
in fp32. A 3-D tap whose input plane lies in the padding points its boxes past the plane's end.

Schedules. "split": one program per (tile, split), fp32 slices and ``bwd_weight_igemm``'s
fixed-order reduce + epilogue (deterministic; with one split the epilogue runs from the accumulator).
"stream": one program per SM takes an equal share of all tiles' steps (a piece of a tile where its
share starts or ends) and adds each piece into one zeroed fp32 workspace with atomics, then the same
reduce pass over that one slice: no wave tail and no slices, at the price of a run-to-run varying
summation order (like ``splitk_atomic``). Only
channels-last data with packed (h, w) runs here, in fp16, bf16 (also with an fp32 weight gradient) and
fp32 with tf32 compute (see ``bwd_weight_tma``); the rest declines to the other families.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_data_tma import _with_base, channels_last_view, descriptor_template, tma_ready
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, chunk_iters, slice_reduce
from .bwd_weight_igemm_plan import auto_split, check_tensors
from .bwd_weight_tma import group_tile_reason, tf32_smem_reason, tma_wgrad_reason
from .common import dot_operands, dot_tn, split_runner
from .host import (
    INT32_LIMIT,
    GemmTileConfig,
    check_split_k,
    even_split,
    is_pow2,
    operand_smem_bytes,
    sm_count,
)

__all__ = ["ALGORITHM", "BwdWeightShiftConfig", "bind", "decline", "plane_plan"]

OP_NAME = "conv_bwd_weight"
_MODE_FUSED = 0  # one split: epilogue + final dtype from the accumulator
_MODE_SLICE = 2  # fp32 store into this split's workspace slice
_MODE_STREAM = 3  # equal shares of all steps per program, atomic adds into one fp32 workspace
_SCHEDULES = ("split", "stream")
_MAX_GRID = 2**31 - 1
_MAX_BOX = 256  # TMA: at most 256 elements per box dim


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _unit_coords(unit, K, C, TAPS, FX, FY, dil_z, dil_y, dil_x, off_z, off_y, off_x,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """A work unit (g, tap, tile), tile fastest, as (g, tap axes, shifts, k0, c0)."""
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(C, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    tile = unit % tiles
    rest = unit // tiles
    tap = rest % TAPS
    g = rest // TAPS
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m
    pid_n = (tile % num_pid_in_group) // group_size_m
    tx = tap % FX
    ty = (tap // FX) % FY
    tz = tap // (FX * FY)
    return g, tz, ty, tx, tz * dil_z + off_z, ty * dil_y + off_y, tx * dil_x + off_x, pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _main_sum(acc, dy_desc, x_desc, g, k0, c0, zoff, shift, s_lo, s_hi, Di, Lx, Do, sd, CH,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, OPERANDS: tl.constexpr):
    """acc + the products of main steps [s_lo, s_hi): box `ch` of grad_out plane (n, od) against the
    input plane's box shifted by `shift` (step = (n * Do + od) * CH + ch)."""
    ch = s_lo % CH
    t = s_lo // CH
    od = t % Do
    n = t // Do
    for _ in range(s_lo, s_hi):
        id_ = od * sd + zoff
        inside = (id_ >= 0) & (id_ < Di)
        xf = tl.where(inside, ch * BLOCK_K + shift, Lx)  # an input plane in the padding: past the end
        xp = tl.where(inside, n * Di + id_, 0)
        a = dy_desc.load([g, n * Do + od, ch * BLOCK_K, k0]).reshape(BLOCK_K, BLOCK_M)
        b = x_desc.load([g, xp, xf, c0]).reshape(BLOCK_K, BLOCK_N)
        acc = dot_tn(a, b, acc, OPERANDS)
        ch += 1
        cc = ch >= CH
        ch = tl.where(cc, 0, ch)
        od += cc.to(tl.int32)
        cd = od >= Do
        od = tl.where(cd, 0, od)
        n += cd.to(tl.int32)
    return acc


@triton.jit
def _fix_sum(dy_ptr, x_ptr, g, k0, c0, zoff, sy, sx, f_lo, f_hi, K, C, Di, Hi, Wi, Do, Ho, NDo, sd,
             ys_g, ys_n, ys_d, ys_h, ys_w, xs_g, xs_n, xs_d, xs_h, xs_w,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, OPERANDS: tl.constexpr):
    """The products of the wrapped positions [f_lo, f_hi) (position = (j * NDo + plane) * Ho + oh
    for the tap's j-th wrapped column): ow + sx outside [0, Wi), where the flat index read the next
    or previous row's element instead of the padding. Walked flat through pointers, BLOCK_K at a
    time: |sx| / Wo of the main work, without box rounding."""
    left = sx < 0
    drow = tl.where(left, -1, 1)
    offs_k = k0 + tl.arange(0, BLOCK_M)
    offs_c = c0 + tl.arange(0, BLOCK_N)
    dy_g = dy_ptr + g.to(tl.int64) * ys_g + offs_k[None, :]
    x_g = x_ptr + g.to(tl.int64) * xs_g + offs_c[None, :]
    fix = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for f0 in range(f_lo, f_hi, BLOCK_K):
        pos = f0 + tl.arange(0, BLOCK_K)
        valid = pos < f_hi
        oh = pos % Ho
        t = pos // Ho
        nd = t % NDo
        j = t // NDo
        od = nd % Do
        n = (nd // Do).to(tl.int64)
        ow = tl.where(left, j, Wi - sx + j)
        xcol = tl.where(left, ow + sx + Wi, ow + sx - Wi)
        row = oh + sy + drow
        id_ = od * sd + zoff
        xvalid = valid & (row >= 0) & (row < Hi) & (id_ >= 0) & (id_ < Di)
        dy_row = n * ys_n + od * ys_d + oh * ys_h + ow * ys_w
        x_row = n * xs_n + id_ * xs_d + row * xs_h + xcol * xs_w
        a = tl.load(dy_g + dy_row[:, None], mask=valid[:, None] & (offs_k < K)[None, :], other=0.0)
        b = tl.load(x_g + x_row[:, None], mask=xvalid[:, None] & (offs_c < C)[None, :], other=0.0)
        fix = dot_tn(a, b, fix, OPERANDS)
    return fix


@triton.jit
def _w_offsets(g, tz, ty, tx, k0, c0, K, C, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INT64: tl.constexpr):
    offs_m = k0 + tl.arange(0, BLOCK_M)
    offs_n = c0 + tl.arange(0, BLOCK_N)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
        g = g.to(tl.int64)
    w_offs = (g * ws_g + tz * ws_z + ty * ws_y + tx * ws_x) + offs_m[:, None] * ws_k + offs_n[None, :] * ws_c
    w_mask = (offs_m < K)[:, None] & (offs_n < C)[None, :]
    return w_offs, w_mask


@triton.jit
def _bwd_weight_shift_kernel(
    dy_desc, x_desc, dy_ptr, x_ptr, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, TAPS, FY, FX,
    Di, Hi, Wi, Do, Ho, NDo,  # NDo = N*Do
    sd, off_z, off_y, off_x, dil_z, dil_y, dil_x,  # off_* = -left padding per axis
    CH, STEPS_PER_SPLIT, TOTAL_STEPS, FIX_SPAN, W_NUMEL,  # CH: boxes per plane; FIX_SPAN: see bind
    ys_g, ys_n, ys_d, ys_h, ys_w, xs_g, xs_n, xs_d, xs_h, xs_w,  # grad_out / input strides (channels: 1)
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    CHUNK_STEPS: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr, OPERANDS: tl.constexpr,
    FIX: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles = tl.cdiv(K, BLOCK_M) * tl.cdiv(C, BLOCK_N)
    Lx = Hi * Wi
    if MODE == 3:
        # ---- stream: this program's equal share [start, end) of the units' main steps (unit-major),
        # then of their wrapped-column steps; every piece of a unit is added into the fp32 workspace
        units = tiles * TAPS * G
        total = units * TOTAL_STEPS
        per = tl.cdiv(total, tl.num_programs(0))
        start = pid * per
        end = tl.minimum(start + per, total)
        for unit in range(start // TOTAL_STEPS, tl.cdiv(end, TOTAL_STEPS)):
            g, tz, ty, tx, zoff, sy, sx, k0, c0 = _unit_coords(
                unit, K, C, TAPS, FX, FY, dil_z, dil_y, dil_x, off_z, off_y, off_x, BLOCK_M, BLOCK_N, GROUP_M)
            s_lo = tl.maximum(start - unit * TOTAL_STEPS, 0)
            s_hi = tl.minimum(end - unit * TOTAL_STEPS, TOTAL_STEPS)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc = _main_sum(acc, dy_desc, x_desc, g, k0, c0, zoff, sy * Wi + sx, s_lo, s_hi, Di, Lx, Do, sd, CH,
                            BLOCK_M, BLOCK_N, BLOCK_K, OPERANDS)
            w_offs, w_mask = _w_offsets(g, tz, ty, tx, k0, c0, K, C, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
                                        BLOCK_M, BLOCK_N, INT64)
            tl.atomic_add(ws_ptr + w_offs, acc, mask=w_mask, sem="relaxed")
        if FIX:
            fsteps = FIX_SPAN  # wrapped-column steps per unit (of the widest tap)
            ftotal = units * fsteps
            fper = tl.cdiv(ftotal, tl.num_programs(0))
            fstart = pid * fper
            fend = tl.minimum(fstart + fper, ftotal)
            for unit in range(fstart // fsteps, tl.cdiv(fend, fsteps)):
                g, tz, ty, tx, zoff, sy, sx, k0, c0 = _unit_coords(
                    unit, K, C, TAPS, FX, FY, dil_z, dil_y, dil_x, off_z, off_y, off_x, BLOCK_M, BLOCK_N, GROUP_M)
                npos = tl.minimum(tl.abs(sx), Wi) * NDo * Ho
                f_lo = tl.maximum(fstart - unit * fsteps, 0) * BLOCK_K
                f_hi = tl.minimum(tl.minimum(fend - unit * fsteps, fsteps) * BLOCK_K, npos)
                if f_lo < f_hi:
                    fix = _fix_sum(dy_ptr, x_ptr, g, k0, c0, zoff, sy, sx, f_lo, f_hi, K, C, Di, Hi, Wi, Do, Ho,
                                   NDo, sd, ys_g, ys_n, ys_d, ys_h, ys_w, xs_g, xs_n, xs_d, xs_h, xs_w,
                                   BLOCK_M, BLOCK_N, BLOCK_K, OPERANDS)
                    w_offs, w_mask = _w_offsets(g, tz, ty, tx, k0, c0, K, C, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
                                                BLOCK_M, BLOCK_N, INT64)
                    tl.atomic_add(ws_ptr + w_offs, -fix, mask=w_mask, sem="relaxed")
    else:
        # ---- split: program = (split, unit), unit fastest: programs running together share
        # (split, g, tap) and with it the same grad_out and input boxes in L2
        units = tiles * TAPS * G
        unit = pid % units
        split = pid // units
        g, tz, ty, tx, zoff, sy, sx, k0, c0 = _unit_coords(
            unit, K, C, TAPS, FX, FY, dil_z, dil_y, dil_x, off_z, off_y, off_x, BLOCK_M, BLOCK_N, GROUP_M)
        s_start = split * STEPS_PER_SPLIT
        s_end = tl.minimum(s_start + STEPS_PER_SPLIT, TOTAL_STEPS)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for c_lo in range(s_start, s_end, CHUNK_STEPS):  # two-level fp32 sum, as in the igemm kernels
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            part = _main_sum(part, dy_desc, x_desc, g, k0, c0, zoff, sy * Wi + sx, c_lo,
                             tl.minimum(c_lo + CHUNK_STEPS, s_end), Di, Lx, Do, sd, CH,
                             BLOCK_M, BLOCK_N, BLOCK_K, OPERANDS)
            acc += part
        if FIX:
            f_start = split * FIX_SPAN
            f_end = tl.minimum(f_start + FIX_SPAN, tl.minimum(tl.abs(sx), Wi) * NDo * Ho)
            acc -= _fix_sum(dy_ptr, x_ptr, g, k0, c0, zoff, sy, sx, f_start, f_end, K, C, Di, Hi, Wi, Do, Ho,
                            NDo, sd, ys_g, ys_n, ys_d, ys_h, ys_w, xs_g, xs_n, xs_d, xs_h, xs_w,
                            BLOCK_M, BLOCK_N, BLOCK_K, OPERANDS)
        w_offs, w_mask = _w_offsets(g, tz, ty, tx, k0, c0, K, C, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
                                    BLOCK_M, BLOCK_N, INT64)
        if MODE == 0:
            res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
            tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)
        else:
            if INT64:
                split = split.to(tl.int64)
            tl.store(ws_ptr + split * W_NUMEL + w_offs, acc, mask=w_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightShiftConfig(GemmTileConfig):
    """A block_m (K) x block_n (C) tile of one tap's dW, reduced over boxes of block_k consecutive
    flat positions of one plane. schedule "split": split_k programs per tile (0: automatic), fp32
    slices and a fixed-order reduce (deterministic); "stream": one program per SM (two for tiles of
    at most 64x64) takes an equal share of all tiles' steps and adds its pieces into one fp32
    workspace with atomics (no wave tail, no slices; the summation order varies from run to run)."""

    split_k: int
    schedule: str

    def smem_bytes(self, elem_bytes: int) -> int:
        return operand_smem_bytes(self.num_stages, self.block_m, self.block_n, self.block_k, elem_bytes)

    def check(self) -> str | None:
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not is_pow2(v):
                return f"{name}={v!r} must be a power of two"
            if not 16 <= v <= _MAX_BOX:
                return f"{name}={v} must be 16..{_MAX_BOX} (tl.dot's smallest tile, a TMA box dim)"
        if (why := self.group_m_reason() or self.warpgroups_reason()) is not None:
            return why
        if (why := self.pipeline_stages_reason() or check_split_k(self.split_k)) is not None:
            return why
        if self.schedule not in _SCHEDULES:
            return f"schedule={self.schedule!r} must be one of {', '.join(_SCHEDULES)}"
        if self.schedule == "stream" and self.split_k:
            return (f"split_k={self.split_k} has no meaning with schedule 'stream' (each program takes an equal "
                    "share); use 0")
        return self.fit_reason(max_acc_regs=256)


def _flat_view(view: tuple[list[int], list[int]] | None, w: int) -> tuple[list[int], list[int]] | None:
    """A [N*D, H, W, G, ch] channels-last view as [G, N*D, H*W, ch] (group first: leading unit box
    dims), or None when H and W are not one run (h stride != W * w stride)."""
    if view is None:
        return None
    (nd, h, w_, g, ch), (snd, sh, sw, sg, _) = view
    if h > 1 and sh != w * sw:
        return None
    return [g, nd, h * w_, ch], [sg, snd, sw, 1]


def _position_strides(strides: tuple[int, ...]) -> tuple[int, ...]:
    """(g, n, d, h, w) strides of a tensor given in the kernels' (g, n, c, d, h, w) order."""
    g, n, _, d, h, w = strides
    return g, n, d, h, w


@functools.lru_cache(maxsize=1024)
def _shift_views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """(dy flat, x flat) as TMA-ready (shape, strides), or why not. Cached:
    every config of a problem asks (decline), then bind."""
    geo = ConvGeometry.build(params, layout)
    dy = channels_last_view(geo.y_strides, geo.out3, geo.N, geo.G, geo.K)
    x = channels_last_view(geo.x_strides, geo.in3, geo.N, geo.G, geo.C)
    if dy is None or x is None:
        return (f"shift needs channels-last input and grad_out (unit C and K strides, n and d one run: the "
                f"NHWGC / GNHWC families); layout {layout.name} has neither or one")
    dyf, xf = _flat_view(dy, geo.out3[2]), _flat_view(x, geo.in3[2])
    if dyf is None or xf is None:
        return "shift needs each plane's rows packed (H stride = W x the W stride) in input and grad_out"
    return tma_ready((dyf, xf), elem, params, dtype_name)


def plane_plan(params: ConvParams) -> str | None:
    """Why the flat-shift walk cannot express this problem's geometry, or None. It needs stride 1 in H
    and W, an output as wide as the input, and taps that shift a column by less than a row."""
    sh, sw = params.spatial3("stride")[1:]
    if sh != 1 or sw != 1:
        return f"shift needs stride 1 in H and W (a tap is then one flat shift), got stride {params.stride}"
    wi, wo = params.spatial3("input")[2], params.spatial3("output")[2]
    if wo != wi:
        return (f"shift needs an output as wide as the input (padding that keeps W), got W {wi} -> {wo}: "
                "a flat box of grad_out would then meet a differently strided input")
    fx, dw, pw = params.spatial3("filter")[2], params.spatial3("dilation")[2], params.spatial3("left_pad")[2]
    if max(pw, (fx - 1) * dw - pw) > wi:
        return (f"shift needs taps that move a column by at most a row (W={wi}), got pad {pw}, filter {fx}, "
                f"dilation {dw}")
    return None


def wrapped_columns(params: ConvParams) -> int:
    """Columns per row whose flat read wraps into the neighbouring row for the worst tap (|sx| of the
    leftmost and rightmost): what the fix re-sums. None for a 1-D problem (one row, no H taps), where
    a wrapped read leaves the plane and TMA returns zeros anyway."""
    _, hi, wi = params.spatial3("input")
    _, fy, fx = params.spatial3("filter")
    if hi == 1 and params.spatial3("output")[1] == 1 and fy == 1 and params.spatial3("left_pad")[1] == 0:
        return 0
    dw, pw = params.spatial3("dilation")[2], params.spatial3("left_pad")[2]
    return min(max(pw, (fx - 1) * dw - pw), wi)


def reduction_positions(params: ConvParams, block_k: int) -> int:
    """Positions one tile's reduction walks: each output plane in whole block_k-wide boxes, plus the
    wrapped columns the fix re-sums (the cost model's K for this family)."""
    do, ho, wo = params.spatial3("output")
    return params.N * do * (-(-ho * wo // block_k) * block_k + wrapped_columns(params) * ho)


def decline(cfg: BwdWeightShiftConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := tma_wgrad_reason("shift", dtype)) is not None:
        return why
    if (why := group_tile_reason("shift", params) or tf32_smem_reason("shift", cfg, dtype)) is not None:
        return why
    if (why := plane_plan(params)) is not None:
        return why
    plane = math.prod(params.spatial3("output")[1:])
    if cfg.block_k > 2 * plane:
        return (f"block_k={cfg.block_k} positions per box is over twice the {plane} positions of an output "
                "plane: most of each box would be past the plane's end")
    views = _shift_views(params, layout, dtype.data.itemsize, dtype.name)
    return views if isinstance(views, str) else None


def _tiles(params: ConvParams, cfg: BwdWeightShiftConfig) -> int:
    """Output tiles of one split: block_m x block_n of each group's and tap's K x C."""
    return params.G * math.prod(params.filter) * triton.cdiv(params.K, cfg.block_m) * triton.cdiv(params.C, cfg.block_n)


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner moves the two descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight shift", p)
    dev = check_tensors(args).device
    dy_flat, x_flat = _shift_views(p, args.layout, dt.data.itemsize, dt.name)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k

    Di, Hi, Wi = geo.in3
    Do, Ho, Wo = geo.out3
    _, FY, FX = geo.filt3
    pd, ph, pw = geo.pad3
    dd, dh, dw = geo.dil3
    ndo = geo.N * Do
    ch = triton.cdiv(Ho * Wo, bk)
    total_steps = ndo * ch
    fix_total = wrapped_columns(p) * ndo * Ho

    units = _tiles(p, cfg)
    stream = cfg.schedule == "stream"
    if stream:
        per_sm = 2 if bm * bn <= 4096 else 1
        programs = max(1, min(sm_count(dev) * per_sm, units * total_steps))
        split, steps_per_split, mode = 1, total_steps, _MODE_STREAM
        fix_span = triton.cdiv(fix_total, bk)  # wrapped-column steps per unit
        if units * max(total_steps, fix_span) >= INT32_LIMIT:
            raise ValueError(f"bwd-weight shift: {units} units x {total_steps} steps are over the int32 step index")
    else:
        split, steps_per_split = even_split(
            int(cfg.split_k) or auto_split(units, total_steps, sm_count(dev), p.numel("weight")), total_steps)
        fix_span = triton.cdiv(triton.cdiv(fix_total, bk), split) * bk  # wrapped positions per split
        programs = units * split
        if programs > _MAX_GRID:
            raise ValueError(f"bwd-weight shift: {programs} programs are over the launch grid's {_MAX_GRID}")
        mode = _MODE_FUSED if split == 1 else _MODE_SLICE
    w_numel = geo.w_numel
    int64 = bool(split * w_numel >= INT32_LIMIT)
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))

    gemm = BoundKernel(
        _bwd_weight_shift_kernel, (programs,),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, CHUNK_STEPS=chunk_iters(bk), MODE=mode,
        INT64=int64, OPERANDS=dot_operands(dt), FIX=bool(fix_total), num_warps=cfg.num_warps,
        num_stages=cfg.num_stages, **epi,
    )
    sizes = (geo.G, geo.K, geo.C, geo.taps, FY, FX, Di, Hi, Wi, Do, Ho, ndo,
             geo.stride3[0], -pd, -ph, -pw, dd, dh, dw, ch, steps_per_split, total_steps, fix_span,
             w_numel, *_position_strides(geo.y_strides), *_position_strides(geo.x_strides), *geo.w_strides)
    templates = (descriptor_template(args.b, dy_flat, [1, 1, bk, bm]),
                 descriptor_template(args.a, x_flat, [1, 1, bk, bn]))

    def descriptors(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        return _with_base(templates[0], dy), _with_base(templates[1], x), dy, x

    finalize = None if mode == _MODE_FUSED else slice_reduce(w_numel, int64, epi)
    # stream: the pieces are added into one zeroed slice; split: every slice is written whole
    return split_runner(gemm, finalize, sizes, (w_numel, split), split * w_numel, operands=descriptors,
                        zeroed=stream)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="shift", config=BwdWeightShiftConfig, decline=decline, bind=bind,
    description="per-tap GEMM dL/dW over each plane's flat positions (a tap = one flat shift, full 2-D TMA "
                "boxes); wrapped columns summed again and subtracted; fp32 slices per split, fixed-order reduce",
    kernels=(_bwd_weight_shift_kernel, _bwd_weight_finalize_kernel)))
