"""conv_bwd_weight (dL/dW) as a per-tap GEMM whose reduction steps are one output row of several images:
one TMA box per operand and step, however narrow the rows (7x7, 14x14 and 28x28 planes).

Per group g and filter tap t (M = K, N = C, reduced over the output positions, like ``tma``):

    dw[g, k, t, c] = sum_{od, oh, n, ow} dy[n, od, oh, ow, g, k] * x[n, id, ih, ow*sw + t_x*dil_w - pad_w, g, c]

with id = od*sd + t_z*dil_z - pad_z and ih likewise. A step takes row (od, oh) of ``imgs`` images,
``bw`` positions each (bw = the row rounded up to a power of two, at most block_k; imgs * bw =
block_k). The input box is [imgs, bw, block_n] of the channels-last input seen as [Di, Hi, N, W, G*C]
(the image axis moved next to W, which TMA allows: any order of strides), so TMA's zero fill is the
padding halo along D, H and W and the images past N; an input column past the row holds data, but
grad_out's box is zero there. ``tma`` (one-row boxes of block_k >= 16 positions) fills 7/16 of a box
on a 7-wide row; here 7/8, 14/16 and 28/32, and one box a step instead of ``rows`` small ones.
W stride 2 (and any sw dividing Wi): the input seen as [Di, Hi, N, Wi/sw, sw*G*C], a tap's column
offset split into whole steps and a phase that selects the channel block (x[.., sw*w' + p, g, c] sits
at [.., w', p*G*C + g*C + c]).

grad_out's box has the same [imgs, bw, block_m] shape. With imgs = 1 it goes to wgmma as it lands;
with imgs > 1, Triton 3.6-3.9 fold the [imgs, bw] reshape of the input box into its shared-memory
descriptor but not the transposed grad_out operand's, which goes through registers (``dy_read="inplace"``),
so ``dy_read="packed"`` first copies grad_out into [Do, Ho, W chunks, N, bw, G*K] (zero past the row),
where a step's positions are one 2-D box [block_k, block_m]: one more pass over grad_out, a shared
memory operand in the GEMM. Session 26 (H100, bf16): either wins somewhere.

Schedules. "split": one program per (tile, split), fp32 slices and ``bwd_weight_igemm``'s fixed-order
reduce + epilogue (deterministic; with one split the epilogue runs from the accumulator). "stream":
one program per SM slot takes an equal share of all tiles' steps and adds each piece of a tile into
one zeroed fp32 workspace (atomics: the order of the adds varies from run to run, as in
``splitk_atomic``), then the same reduce pass over that one slice: layers whose tiles fill half a
wave or one and a half lose no SM to the tail. Launches: [the grad_out copy], the GEMM, [the reduce].
One fp32 accumulator per tile (no two-level sum: a split's or piece's share is at most
MAX_SPLIT_POSITIONS positions), so tiles up to 128x256.
Only the channels-last NHWGC family (G*C and G*K packed per position) runs here, in 16-bit data and
fp32 with tf32 compute (see ``bwd_weight_tma``).
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
from .bwd_data_tma import _with_base, descriptor_template, tma_ready
from .bwd_weight_igemm import _bwd_weight_finalize_kernel, slice_reduce
from .bwd_weight_igemm_plan import check_tensors
from .bwd_weight_pointwise import programs_per_sm
from .bwd_weight_tma import group_tile_reason, tf32_smem_reason, tma_wgrad_reason
from .common import dot_operands, dot_tn, split_runner
from .host import INT32_LIMIT, GemmTileConfig, check_split_k, even_split, operand_smem_bytes, sm_count

__all__ = ["ALGORITHM", "MAX_SPLIT_POSITIONS", "BwdWeightRowstackConfig", "bind", "box_shape", "choose_split",
           "decline", "min_split", "model_split", "reduction_positions"]

OP_NAME = "conv_bwd_weight"
_MODE_FUSED = 0  # one split: epilogue + final dtype from the accumulator
_MODE_SLICE = 2  # fp32 store into this split's workspace slice
_MODE_STREAM = 3  # equal shares of all units' steps per program, atomic adds into one fp32 workspace
SCHEDULES = ("split", "stream")
_MAX_GRID = 2**31 - 1
_MAX_BOX = 256  # TMA: at most 256 elements per box dim
_PACK_BLOCK = 2048  # elements per program of the grad_out copy
DY_READS = ("packed", "inplace")
# One fp32 accumulator takes a split's whole share (no two-level sum). Session 26 (H100, fp16): a 3-D
# layer's 1.6M positions in one split ran at rel. error 2.0e-3 (over fp16's 2e-3 tolerance), 4 splits
# 5.6e-4, 8 splits 3.3e-4, the two-level families 2.5e-4: so a split sums at most this many positions.
MAX_SPLIT_POSITIONS = 1 << 16
# The automatic split's model (H100 class): a step's MMA work at ~600 TFLOP/s over 132 SMs, the fp32
# slices at HBM speed, a program's fixed cost (pipeline fill, its slice's store) in steps
_SM_FLOPS = 4.5e12
_REDUCE_BYTES_PER_S = 3.0e12
_PROGRAM_STEPS = 6
MAX_AUTO_SPLIT = 64


# ------------------------------------------------------------------------------------------------
# the kernels
# ------------------------------------------------------------------------------------------------
@triton.jit
def _rowstack_pack_kernel(dy_ptr, dyp_ptr, N, Ho, Wo, WCH, ROW, sy_n, sy_d, sy_h,
                          BW: tl.constexpr, BLOCK: tl.constexpr):
    """dyp[od, oh, wc, n, j, :] = dy[n, od, oh, wc*BW + j, :] (zero past the row): one program per
    (od, oh, wc, n) chunk and BLOCK of its BW * ROW contiguous elements (ROW = G*K, W stride = ROW)."""
    chunk = tl.program_id(0)
    n = chunk % N
    t = chunk // N
    wc = t % WCH
    t = t // WCH
    oh = t % Ho
    od = t // Ho
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    span = BW * ROW
    valid = tl.minimum(Wo - wc * BW, BW) * ROW
    src = dy_ptr + (n.to(tl.int64) * sy_n + od.to(tl.int64) * sy_d + oh.to(tl.int64) * sy_h
                    + (wc * BW).to(tl.int64) * ROW)
    v = tl.load(src + offs, mask=offs < valid, other=0.0)
    tl.store(dyp_ptr + chunk.to(tl.int64) * span + offs, v, mask=offs < span)


@triton.jit
def _unit_coords(unit, G, K, C, TAPS, FX, FY, GC, SW, off_z, off_y, off_x, dil_z, dil_y, dil_x,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """A unit = (g, tap, group-M swizzled K x C tile), tile fastest: programs running together share
    (g, tap) and with it the same grad_out and input boxes in L2. Returns the tap, its input offsets
    (``q`` whole W steps of SW and the channel start ``chan`` of its phase) and the tile's k0, c0."""
    num_pid_m = tl.cdiv(K, BLOCK_M)
    num_pid_n = tl.cdiv(C, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    tile = unit % tiles
    rest = unit // tiles
    tap = rest % TAPS
    g = (rest // TAPS) % G
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    k0 = (first_pid_m + (tile % num_pid_in_group) % group_size_m) * BLOCK_M
    c0 = ((tile % num_pid_in_group) // group_size_m) * BLOCK_N
    tx = tap % FX
    ty = (tap // FX) % FY
    tz = tap // (FX * FY)
    e = tx * dil_x + off_x  # the tap's input column offset: q whole steps of SW plus the phase par
    q = (e + 64 * SW) // SW - 64  # floor(e / SW) for a negative e too (|e| < 64 * SW: checked on the host)
    chan = (e - q * SW) * GC + g * C + c0
    return g, tz, ty, tx, tz * dil_z + off_z, ty * dil_y + off_y, q, chan, k0, c0


@triton.jit
def _sum_steps(acc, dy_desc, x_desc, s_lo, s_hi, NB, WCH, Ho, CHUNK_ROWS, sd, sh, g, K, k0, zoff, yoff, q, chan,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IMGS: tl.constexpr, BW: tl.constexpr,
               PACKED: tl.constexpr, OPERANDS: tl.constexpr):
    """acc += this unit's steps [s_lo, s_hi). Step s = ((od * Ho + oh) * WCH + wc) * NB + nb: images
    fastest, so consecutive steps read neighbouring rows of the packed grad_out."""
    BLOCK_K: tl.constexpr = IMGS * BW
    for s in range(s_lo, s_hi):
        nb = s % NB
        t = s // NB
        wc = t % WCH
        t = t // WCH
        oh = t % Ho
        od = t // Ho
        if PACKED:
            a = dy_desc.load([(t * WCH + wc) * CHUNK_ROWS + nb * BLOCK_K, g * K + k0])
        else:
            a = dy_desc.load([od, oh, nb * IMGS, wc * BW, g * K + k0]).reshape(BLOCK_K, BLOCK_M)
        b = x_desc.load([od * sd + zoff, oh * sh + yoff, nb * IMGS, wc * BW + q, chan]).reshape(BLOCK_K, BLOCK_N)
        acc = dot_tn(a, b, acc, OPERANDS)
    return acc


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
    return w_offs, (offs_m < K)[:, None] & (offs_n < C)[None, :]


@triton.jit
def _bwd_weight_rowstack_kernel(
    dy_desc, x_desc, out_ptr, ws_ptr,
    d0, d1, d2, d3, alpha, beta,
    G, K, C, TAPS, FY, FX, Ho, NB, WCH, CHUNK_ROWS, GC,
    sd, sh, off_z, off_y, off_x, dil_z, dil_y, dil_x, SW,
    STEPS_PER_SPLIT, TOTAL_STEPS, W_NUMEL,
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IMGS: tl.constexpr, BW: tl.constexpr,
    GROUP_M: tl.constexpr, PACKED: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr,
    OPERANDS: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid = tl.program_id(0)
    units = tl.cdiv(K, BLOCK_M) * tl.cdiv(C, BLOCK_N) * TAPS * G
    if MODE == 3:
        # ---- stream: an equal share [start, end) of all units' steps (unit-major); each piece of a
        # unit is added into the zeroed fp32 workspace (no wave tail; the order of the adds varies)
        total = units * TOTAL_STEPS
        per = tl.cdiv(total, tl.num_programs(0))
        start = pid * per
        end = tl.minimum(start + per, total)
        for unit in range(start // TOTAL_STEPS, tl.cdiv(end, TOTAL_STEPS)):
            g, tz, ty, tx, zoff, yoff, q, chan, k0, c0 = _unit_coords(
                unit, G, K, C, TAPS, FX, FY, GC, SW, off_z, off_y, off_x, dil_z, dil_y, dil_x,
                BLOCK_M, BLOCK_N, GROUP_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc = _sum_steps(acc, dy_desc, x_desc, tl.maximum(start - unit * TOTAL_STEPS, 0),
                             tl.minimum(end - unit * TOTAL_STEPS, TOTAL_STEPS), NB, WCH, Ho, CHUNK_ROWS, sd, sh,
                             g, K, k0, zoff, yoff, q, chan, BLOCK_M, BLOCK_N, IMGS, BW, PACKED, OPERANDS)
            w_offs, w_mask = _w_offsets(g, tz, ty, tx, k0, c0, K, C, ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,
                                        BLOCK_M, BLOCK_N, INT64)
            tl.atomic_add(ws_ptr + w_offs, acc, mask=w_mask, sem="relaxed")
    else:
        # ---- split: program = (split, unit), unit fastest
        unit = pid % units
        split = pid // units
        g, tz, ty, tx, zoff, yoff, q, chan, k0, c0 = _unit_coords(
            unit, G, K, C, TAPS, FX, FY, GC, SW, off_z, off_y, off_x, dil_z, dil_y, dil_x,
            BLOCK_M, BLOCK_N, GROUP_M)
        s_start = split * STEPS_PER_SPLIT
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = _sum_steps(acc, dy_desc, x_desc, s_start, tl.minimum(s_start + STEPS_PER_SPLIT, TOTAL_STEPS), NB, WCH,
                         Ho, CHUNK_ROWS, sd, sh, g, K, k0, zoff, yoff, q, chan, BLOCK_M, BLOCK_N, IMGS, BW, PACKED,
                         OPERANDS)
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
class BwdWeightRowstackConfig(GemmTileConfig):
    """A block_m (K) x block_n (C) tile of one tap's dW, reduced over steps of block_k positions: one
    output row of block_k / bw images (:func:`box_shape`); split over split_k programs (0: automatic,
    :func:`choose_split`); ``dy_read``: grad_out read ``"packed"`` (from a packed copy, a
    shared-memory operand) or ``"inplace"`` (its own boxes; several images' rows go through registers);
    ``schedule``: ``"split"`` (fp32 slices per split, fixed-order reduce: deterministic) or ``"stream"``
    (one program per SM slot, equal shares of all tiles' steps, atomic adds: no wave tail)."""

    split_k: int
    dy_read: str
    schedule: str

    @property
    def packed(self) -> bool:
        return self.dy_read == "packed"

    def smem_bytes(self, elem_bytes: int) -> int:
        """The pipeline's operand boxes: num_stages x (A: block_k x block_m, B: block_k x block_n)."""
        return operand_smem_bytes(self.num_stages, self.block_m, self.block_n, self.block_k, elem_bytes)

    def check(self) -> str | None:
        if (why := self.blocks_reason(_MAX_BOX, "tl.dot's smallest tile, a TMA box dim")) is not None:
            return why
        if (why := self.group_m_reason() or self.warpgroups_reason()) is not None:
            return why
        if (why := self.pipeline_stages_reason() or check_split_k(self.split_k)) is not None:
            return why
        if self.dy_read not in DY_READS:
            return f"dy_read={self.dy_read!r} must be one of {DY_READS}"
        if self.schedule not in SCHEDULES:
            return f"schedule={self.schedule!r} must be one of {SCHEDULES}"
        if self.schedule == "stream" and self.split_k:
            return (f"split_k={self.split_k} has no meaning with schedule 'stream' (each program takes an equal "
                    "share); use 0")
        return self.fit_reason(max_acc_regs=256)


def box_shape(params: ConvParams, block_k: int) -> tuple[int, int, int]:
    """(imgs, bw, chunks): a step's images and positions per image (bw: the output row rounded up to a
    power of two, at most block_k) and the chunks of bw positions per row."""
    wo = params.output[-1]
    bw = min(triton.next_power_of_2(wo), block_k)
    return block_k // bw, bw, triton.cdiv(wo, bw)


def reduction_positions(params: ConvParams, block_k: int) -> int:
    """Positions the GEMM reduces over, padding included: every output row in whole bw-wide chunks,
    the images in whole boxes (the cost model's K)."""
    imgs, bw, chunks = box_shape(params, block_k)
    rows = params.N * math.prod(params.output[:-1])
    return rows // params.N * triton.cdiv(params.N, imgs) * imgs * chunks * bw


@functools.lru_cache(maxsize=1024)
def _views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """((dy shape, strides) as [Do, Ho, N, Wo, G*K], (x shape, strides) as [Di, Hi, N, Wi/sw, sw*G*C]),
    TMA-aligned, or why not. Cached: every config of a problem asks (decline), then bind."""
    geo = ConvGeometry.build(params, layout)
    gy, ny, ky, dy_, hy, wy = geo.y_strides
    gx, nx, cx, dx, hx, wx = geo.x_strides
    G, C, K = geo.G, geo.C, geo.K
    if not (ky == 1 and cx == 1 and (G == 1 or (gy == K and gx == C)) and wy == G * K and wx == G * C):
        return (f"rowstack needs channels-last input and grad_out with the groups' channels packed per "
                f"position (the NHWGC family); layout {layout.name} has not")
    sw = geo.stride3[2]
    di, hi, wi = geo.in3
    do, ho, wo = geo.out3
    if wi % sw:
        return (f"rowstack reads a W stride of {sw} as {sw} channel blocks of [W/{sw}] columns: the input "
                f"width {wi} must be a multiple of it")
    if C * elem % 16 or K * elem % 16:
        return (f"rowstack's channel offsets must be 16-byte aligned: C={C} and K={K} must be multiples of "
                f"{16 // elem} for {dtype_name}")
    edge = max(abs(t * geo.dil3[2] - geo.pad3[2]) for t in range(geo.filt3[2]))
    if edge >= 64 * sw:
        return f"rowstack handles tap column offsets below {64 * sw}, got {edge}"
    dy_view = [do, ho, geo.N, wo, G * K], [dy_, hy, ny, wy, 1]
    x_view = [di, hi, geo.N, wi // sw, sw * G * C], [dx, hx, nx, sw * wx, 1]
    return tma_ready((dy_view, x_view), elem, params, dtype_name)


def decline(cfg: BwdWeightRowstackConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := tma_wgrad_reason("rowstack", dtype)) is not None:
        return why
    if (why := group_tile_reason("rowstack", params) or tf32_smem_reason("rowstack", cfg, dtype)) is not None:
        return why
    views = _views(params, layout, dtype.data.itemsize, dtype.name)
    if isinstance(views, str):
        return views
    imgs, bw, _ = box_shape(params, cfg.block_k)
    if (positions := reduction_positions(params, cfg.block_k)) >= INT32_LIMIT:
        return (f"rowstack addresses the packed grad_out rows and the TMA coordinates in int32: "
                f"{positions} boxed positions are over {INT32_LIMIT - 1}")
    if cfg.packed and imgs == 1:
        return (f"dy_read='packed' copies grad_out so that a box holds several images' rows; with block_k="
                f"{cfg.block_k} and {params.output[-1]}-wide rows a box holds one row, read in place ('inplace')")
    if imgs > 1 and not cfg.packed and cfg.block_m * cfg.block_n > 16384:
        return (f"{cfg.block_m}x{cfg.block_n} tiles with several images' rows per grad_out box read in place "
                f"(through registers) gave wrong results under Triton 3.6 (session 26, H100: rel. error 6e-2 to "
                f"1.7e-1 on 6 of 16 small layers with 4 splits); dy_read='packed' runs this tile")
    if cfg.schedule == "split" and cfg.split_k and cfg.split_k < (least := min_split(params, cfg.block_k)):
        return (f"split_k={cfg.split_k} leaves over {MAX_SPLIT_POSITIONS} positions to one fp32 accumulator "
                f"(rounding error past fp16's tolerance); this layer needs split_k >= {least} or 0 (automatic)")
    if imgs > 2 * params.N:
        return (f"block_k={cfg.block_k} stacks {imgs} images' rows of {bw} positions per box, over twice "
                f"the batch of {params.N}: most of each box would be zero fill")
    return None


def _tiles(params: ConvParams, cfg: BwdWeightRowstackConfig) -> int:
    """Output tiles of one split: block_m x block_n of each group's and tap's K x C."""
    return params.G * math.prod(params.filter) * triton.cdiv(params.K, cfg.block_m) * triton.cdiv(params.C, cfg.block_n)


def _steps(params: ConvParams, block_k: int) -> int:
    imgs, _, chunks = box_shape(params, block_k)
    return math.prod(params.output[:-1]) * chunks * triton.cdiv(params.N, imgs)


def min_split(params: ConvParams, block_k: int) -> int:
    """The fewest splits that keep each split's share within MAX_SPLIT_POSITIONS positions."""
    steps = _steps(params, block_k)
    return triton.cdiv(steps, max(1, MAX_SPLIT_POSITIONS // block_k))


def choose_split(params: ConvParams, cfg: BwdWeightRowstackConfig, sms: int) -> int:
    """Automatic split, at least :func:`min_split`: the fewest splits that minimize waves x (steps per
    split + a program's fixed cost) + the reduce pass over the splits' fp32 slices, waves counted over
    the programs an SM holds. Session 26 (H100, bf16): ResNet-50's 256x256 14x14 layer at N 128 (36
    tiles of 448 steps) ran 0.071 ms at 7 splits (two waves), 0.106 at 4 and 0.100 at 15, where the
    GEMM families' ~3-waves rule takes 11 (0.089); its 512x512 7x7 layer with 128x256 tiles (72 tiles,
    112 steps) ran 0.080 ms unsplit and 0.17 at 4 splits, whose slices (4 x 9.4 MB) the reduce reads."""
    tiles, steps = _tiles(params, cfg), _steps(params, cfg.block_k)
    slots = max(1, sms * programs_per_sm(cfg))
    step_s = 2.0 * cfg.block_m * cfg.block_n * cfg.block_k / _SM_FLOPS
    slice_s = 8.0 * params.numel("weight") / _REDUCE_BYTES_PER_S  # one split's slice written and read
    best, best_cost = 1, math.inf
    for split in range(1, min(MAX_AUTO_SPLIT, steps) + 1):
        waves = -(-tiles * split // slots)
        cost = waves * (-(-steps // split) + _PROGRAM_STEPS) * step_s + (split * slice_s if split > 1 else 0.0)
        if cost < best_cost - 1e-12:
            best, best_cost = split, cost
    return max(best, min_split(params, cfg.block_k))


def model_split(params: ConvParams, values: dict, sms: int) -> int:
    """The split a launch of the config ``values`` (its parameters by name) takes: the cost model's."""
    values = {"schedule": "split", **values}  # rows measured before the schedule existed ran "split"
    cfg = BwdWeightRowstackConfig(**{k: values[k] for k in BwdWeightRowstackConfig.param_names()})
    if cfg.schedule == "stream":
        return 1
    split = int(cfg.split_k) or choose_split(params, cfg, sms)
    steps = _steps(params, cfg.block_k)
    return triton.cdiv(steps, triton.cdiv(steps, max(1, min(split, steps))))


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner [packs grad_out,] moves the descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight rowstack", p)
    dev = check_tensors(args).device
    dy_view, x_view = _views(p, args.layout, dt.data.itemsize, dt.name)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    imgs, bw, wch = box_shape(p, bk)
    N, G, K, C = geo.N, geo.G, geo.K, geo.C
    do, ho, wo = geo.out3
    _, FY, FX = geo.filt3
    pd, ph, pw = geo.pad3
    sd, sh, sw = geo.stride3
    nb = triton.cdiv(N, imgs)
    total_steps = do * ho * wch * nb
    tiles = _tiles(p, cfg)
    stream = cfg.schedule == "stream"
    if stream:  # one program per SM slot, but no piece of a unit over MAX_SPLIT_POSITIONS positions
        work = tiles * total_steps
        programs = min(work, max(sm_count(dev) * programs_per_sm(cfg), triton.cdiv(work * bk, MAX_SPLIT_POSITIONS)))
        if work >= INT32_LIMIT or programs > _MAX_GRID:
            raise ValueError(f"bwd-weight rowstack: {tiles} tiles x {total_steps} steps are over the int32 step index")
        split, steps_per_split, mode = 1, total_steps, _MODE_STREAM
    else:
        split, steps_per_split = even_split(int(cfg.split_k) or choose_split(p, cfg, sm_count(dev)), total_steps)
        programs = tiles * split
        if programs > _MAX_GRID:
            raise ValueError(f"bwd-weight rowstack: {programs} programs are over the launch grid's {_MAX_GRID}")
        mode = _MODE_FUSED if split == 1 else _MODE_SLICE
    w_numel = geo.w_numel
    int64 = bool(split * w_numel >= INT32_LIMIT)
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    gemm = BoundKernel(
        _bwd_weight_rowstack_kernel, (programs,),
        BLOCK_M=bm, BLOCK_N=bn, IMGS=imgs, BW=bw, GROUP_M=cfg.group_m, PACKED=cfg.packed, MODE=mode,
        INT64=int64, OPERANDS=dot_operands(dt), num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi,
    )
    dd, dh, dw = geo.dil3
    sizes = (G, K, C, geo.taps, FY, FX, ho, nb, wch, N * bw, G * C,
             sd, sh, -pd, -ph, -pw, dd, dh, dw, sw, steps_per_split, total_steps, w_numel, *geo.w_strides)
    x_template = descriptor_template(args.a, x_view, [1, 1, imgs, bw, bn])
    if cfg.packed:
        rows = do * ho * wch * N * bw
        dy_template = descriptor_template(args.b, ([rows, G * K], [G * K, 1]), [bk, bm])
        _, ny, _, dys, hy, _ = geo.y_strides
        pack = BoundKernel(_rowstack_pack_kernel, (do * ho * wch * N, triton.cdiv(bw * G * K, _PACK_BLOCK)),
                           BW=bw, BLOCK=_PACK_BLOCK, num_warps=4)
        pack_sizes = (N, ho, wo, wch, G * K, ny, dys, hy)
    else:
        dy_template = descriptor_template(args.b, dy_view, [1, 1, imgs, bw, bm])

    def operands(x: torch.Tensor, dy: torch.Tensor) -> tuple:
        if cfg.packed:
            dyp = dy.new_empty(rows * G * K)
            pack(dy, dyp, *pack_sizes)
            dy = dyp
        return _with_base(dy_template, dy), _with_base(x_template, x)

    finalize = None if mode == _MODE_FUSED else slice_reduce(w_numel, int64, epi)
    # stream: the pieces are added into one zeroed slice; split: every slice is written whole
    return split_runner(gemm, finalize, sizes, (w_numel, split), split * w_numel, operands=operands, zeroed=stream)


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="rowstack", config=BwdWeightRowstackConfig, decline=decline, bind=bind,
    description="per-tap GEMM dL/dW whose steps are one output row of several images: a [images, row, "
                "channels] TMA box per operand (zero fill = padding), grad_out read in place or from a "
                "packed copy; fp32 slices per split, fixed-order reduce",
    kernels=(_rowstack_pack_kernel, _bwd_weight_rowstack_kernel, _bwd_weight_finalize_kernel)))
