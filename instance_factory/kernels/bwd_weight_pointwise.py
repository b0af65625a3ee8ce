"""conv_bwd_weight (dL/dW) of a pointwise layer (1x1(x1) filter, no padding, any stride) as a split-K
TMA GEMM over the merged positions, tiles up to 128x256, the splits summed in a fixed order.

Per group g, with p running over the output positions (n, od, oh, ow):

    dw[g, k, c] = sum_p dy[p, g, k] * x[n, od*sd, oh*sh, ow*sw, g, c]

A plain GEMM (M = K, N = C) with a long reduction (N*Do*Ho*Wo) and a small result, so most layers
need a split reduction to fill the GPU. ``tma`` bwd weight (session 13) runs them with one-row boxes
and two accumulators per tile (its two-level summation), which caps its tiles at 128x128. Here one
accumulator takes each split's whole share (tens of thousands of products at most, summed in fp32 by
the MMA), so 128x256 tiles fit, and the splits' fp32 partial tiles ("slabs") are summed in split
order 0, 1, ... by one of two means (``reduce``):

* ``last``: each split stores its slab and bumps the tile's arrival counter (release); the program
  that arrives last (acquire) sums the slabs, applies the fused epilogue, writes dW and sets the
  counter back to zero. One launch; the counters live in a per-(device, stream) int32 buffer that
  stays zero between launches. That program reads every slab alone, so it pays past a few splits.
* ``pass``: a second launch sums the slabs over the whole GPU (many splits: layers with a small dW
  and many positions).

The sum order never depends on which split finishes first: results are bitwise reproducible.

Measured (session 23, H100): the large 1x1 layers are bound by the L2-to-SM operand traffic, which
falls with the tile's area (ResNet-50's 1024x256 14x14 layer at batch 64: 64x64 tiles 0.034 ms,
128x128 with 8 splits 0.030, cuDNN 0.027); 128x256 tiles win where the dW alone fills the GPU.

Positions: grad_out and the strided input positions are viewed as [G, A, B, W, ch], merged as far as
their strides allow (a stride-1 channels-last layer is one run of N*D*H*W positions: A = B = 1). A
reduction chunk is one box [1, 1, box_r, box_w, ch] of box_r rows x box_w columns (box_r * box_w =
block_k; a row rounds up to a power of two, so a 7-wide row of a stride-2 layer fills 7 of 8 box
columns); TMA zero-fills what lies past a row or the tensor, which then adds nothing.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple, layout_for
from ..problem import ConvParams
from .bwd_data_tma import _with_base, descriptor_template, tma_ready
from .bwd_weight_igemm_plan import check_tensors
from .bwd_weight_tma import tf32_smem_reason, tma_wgrad_reason
from .common import dot_operands, dot_tn
from .host import SMEM_PER_BLOCK, GemmTileConfig, check_num_stages, merge_positions, sm_count

__all__ = ["ALGORITHM", "BwdWeightPointwiseConfig", "bind", "box_of", "choose_split", "decline", "model_work", "plan",
           "programs_per_sm", "walk_of"]

OP_NAME = "conv_bwd_weight"
_MAX_BOX = 256  # TMA: at most 256 elements per box dim
_MAX_GRID = 2**31 - 1
# Layers with a small dW and many positions (MobileNetV2's 16x32 1x1 at 112x112: one tile, 12,544
# chunks) need hundreds of programs to keep enough loads in flight (session 23, H100: 0.13 ms at 32
# splits, falling linearly with more)
MAX_SPLIT = 512
# The last program to arrive reads every slab alone: past a few splits that serial read costs more
# than the reduce pass (session 23, H100, ResNet-50 1024x256 14x14: 128x256 tiles 0.102 ms at 16
# splits this way, 0.035 ms with the pass), so the automatic split stops here for reduce "last".
LAST_MAX_SPLIT = 8
# Fixed cost of one program beyond its reduction chunks, in chunks (pipeline fill, the partial tile's
# store and its share of the sum): the automatic split's trade-off between fuller waves and more
# fixed costs.
_PROGRAM_OVERHEAD_CHUNKS = 6
_ONE = tl.constexpr(0)  # one split: epilogue from the accumulator
_LAST_SUMS = tl.constexpr(1)  # the last split to arrive sums the slabs (one launch)
_SLABS = tl.constexpr(2)  # slabs only; a reduce pass sums them (two launches, the sum spread over the GPU)
_REDUCE_TILE_ELEMS = 2048
# fp32 partial sums a reduce program holds (BLOCK_S slabs x ROWS x BLOCK_N): 32 registers a thread
_REDUCE_PARTS = 4096
# Session 23 (H100, Triton 3.6): 128x256 tiles over boxes of several rows (strided layers, rows under
# 64 positions) gave relative errors of 1e-3 to 0.15 on 52 of 273 runs over 9 layers; 128x128 and
# smaller tiles passed all 504 such runs, and 128x256 over single-row boxes all of its 2,240.
_MULTI_ROW_TILE_LIMIT = 32768  # elements of a tile one reduce program sums
REDUCES = ("last", "pass")


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _tile_origin(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """(g, k0, c0) of a linear tile id: group-M order within a group, so programs running together
    share grad_out and input boxes in L2."""
    per_g = tiles_m * tiles_n
    g = tile // per_g
    t = tile % per_g
    in_group = GROUP_M * tiles_n
    first_m = (t // in_group) * GROUP_M
    size_m = tl.minimum(tiles_m - first_m, GROUP_M)
    return g, (first_m + (t % in_group) % size_m) * BLOCK_M, ((t % in_group) // size_m) * BLOCK_N


@triton.jit
def _bwd_weight_pointwise_kernel(
    dy_desc, x_desc, out_ptr, ws_ptr, cnt_ptr,
    d0, d1, d2, d3, alpha, beta,
    K, C, B, RB, WCH, CHUNKS, CHUNKS_PER_SPLIT,  # rows per A, row groups per A, column chunks per row
    tiles_m, tiles_n, TILES, SPLIT,
    ws_g, ws_k, ws_c,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOX_R: tl.constexpr, BOX_W: tl.constexpr,
    GROUP_M: tl.constexpr, MODE: tl.constexpr, INT64: tl.constexpr, OPERANDS: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    BLOCK_K: tl.constexpr = BOX_R * BOX_W
    # (split, tile), tile fastest: programs running together reduce the same positions
    pid = tl.program_id(0)
    tile = pid % TILES
    split = pid // TILES
    g, k0, c0 = _tile_origin(tile, tiles_m, tiles_n, GROUP_M, BLOCK_M, BLOCK_N)

    q_lo = split * CHUNKS_PER_SPLIT
    q_hi = tl.minimum(q_lo + CHUNKS_PER_SPLIT, CHUNKS)
    per_a = RB * WCH
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for q in range(q_lo, q_hi):
        a_idx = q // per_a
        r = q % per_a
        b0 = (r // WCH) * BOX_R
        w0 = (r % WCH) * BOX_W
        a = dy_desc.load([g, a_idx, b0, w0, k0]).reshape(BLOCK_K, BLOCK_M)
        b = x_desc.load([g, a_idx, b0, w0, c0]).reshape(BLOCK_K, BLOCK_N)
        acc = dot_tn(a, b, acc, OPERANDS)

    if MODE == _SLABS:  # fp32 partial tile -> its slab (split * TILES + tile); the reduce pass sums them
        loc = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(ws_ptr + (split * TILES + tile).to(tl.int64) * (BLOCK_M * BLOCK_N) + loc, acc)
    else:
        offs_m = k0 + tl.arange(0, BLOCK_M)
        offs_n = c0 + tl.arange(0, BLOCK_N)
        if INT64:
            offs_m = offs_m.to(tl.int64)
            offs_n = offs_n.to(tl.int64)
            g = g.to(tl.int64)
        w_offs = g * ws_g + offs_m[:, None] * ws_k + offs_n[None, :] * ws_c
        w_mask = (offs_m < K)[:, None] & (offs_n < C)[None, :]
        last = True
        if MODE == _LAST_SUMS:
            # the slab, then the arrival count; the last to arrive sums every slab in split order
            loc = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(ws_ptr + (split * TILES + tile).to(tl.int64) * (BLOCK_M * BLOCK_N) + loc, acc)
            tl.debug_barrier()  # every thread's stores are issued before the release below
            arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
            last = arrived == SPLIT - 1
            if last:  # every slab, its own too: one accumulator's registers (a second one spills)
                acc = tl.load(ws_ptr + tile.to(tl.int64) * (BLOCK_M * BLOCK_N) + loc, cache_modifier=".cg")
                for s in range(1, SPLIT):  # .cg: read at L2, where the other programs' stores went
                    slab = ws_ptr + (s * TILES + tile).to(tl.int64) * (BLOCK_M * BLOCK_N)
                    acc += tl.load(slab + loc, cache_modifier=".cg")
                tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")  # zero again for the next launch
        if last:
            res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
            tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)


@triton.jit
def _pointwise_reduce_kernel(
    ws_ptr, out_ptr, d0, d1, d2, d3, alpha, beta,
    K, C, tiles_m, tiles_n, TILES, SPLIT, ws_g, ws_k, ws_c,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, BLOCK_S: tl.constexpr,
    GROUP_M: tl.constexpr, INT64: tl.constexpr, OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    """ROWS rows of one tile: its slabs summed in a fixed order, one a step (ROWS x BLOCK_N of 2048:
    enough programs to fill the GPU) or BLOCK_S a step (few rows a program: one program summing a
    one-tile layer's 131 slabs one by one took ~33 us, each step waiting on its load); the epilogue, dW."""
    tile = tl.program_id(0)
    g, k0, c0 = _tile_origin(tile, tiles_m, tiles_n, GROUP_M, BLOCK_M, BLOCK_N)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    loc = rows[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    if BLOCK_S == 1:
        # session 29 (H100): the [BLOCK_S, ROWS, BLOCK_N] block below with BLOCK_S = 2 ran these ~7% slower
        acc = tl.load(ws_ptr + tile.to(tl.int64) * (BLOCK_M * BLOCK_N) + loc)
        for s in range(1, SPLIT):
            acc += tl.load(ws_ptr + (s * TILES + tile).to(tl.int64) * (BLOCK_M * BLOCK_N) + loc)
    else:
        srow = tl.arange(0, BLOCK_S)
        parts = tl.zeros((BLOCK_S, ROWS, BLOCK_N), dtype=tl.float32)
        for s0 in range(0, SPLIT, BLOCK_S):
            sp = s0 + srow
            slab = (sp * TILES + tile).to(tl.int64) * (BLOCK_M * BLOCK_N)
            parts += tl.load(ws_ptr + slab[:, None, None] + loc[None, :, :], mask=(sp < SPLIT)[:, None, None],
                             other=0.0)
        acc = tl.sum(parts, axis=0)
    offs_m = k0 + rows
    offs_n = c0 + tl.arange(0, BLOCK_N)
    if INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
        g = g.to(tl.int64)
    w_offs = g * ws_g + offs_m[:, None] * ws_k + offs_n[None, :] * ws_c
    w_mask = (offs_m < K)[:, None] & (offs_n < C)[None, :]
    res = apply_epilogue(acc, w_offs, w_mask, d0, d1, d2, d3, alpha, beta, OP, NUM_DS, USER_FN)
    tl.store(out_ptr + w_offs, res.to(out_ptr.dtype.element_ty), mask=w_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdWeightPointwiseConfig(GemmTileConfig):
    """A block_m (K) x block_n (C) tile of one group's dW, reduced over block_k positions a step (one
    TMA box per operand), num_stages-deep pipeline, split over split_k programs (0: automatic,
    :func:`choose_split`); reduce "last": the last split to arrive sums the splits' partial tiles (one
    launch), "pass": a second launch sums them over the whole GPU."""

    split_k: int
    reduce: str

    def check(self) -> str | None:
        if (why := self.blocks_reason(_MAX_BOX, "tl.dot's smallest tile, a TMA box dim")) is not None:
            return why
        sk = self.split_k
        if not isinstance(sk, int) or isinstance(sk, bool) or not 0 <= sk <= MAX_SPLIT:
            return f"split_k={sk!r} must be an int in 0..{MAX_SPLIT} (0 = automatic)"
        if self.reduce not in REDUCES:
            return f"reduce={self.reduce!r} must be one of {', '.join(REDUCES)}"
        return (self.group_m_reason() or self.warpgroups_reason() or check_num_stages(self.num_stages)
                or self.fit_reason(max_acc_regs=128))


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


@functools.lru_cache(maxsize=1024)
def walk_of(params: ConvParams, layout: LayoutTriple) -> tuple | str:
    """((dy shape, strides), (x shape, strides)) as [G, A, B, W, ch] views over the same position
    index, merged as far as both tensors' strides allow, or why the layer cannot run here."""
    geo = ConvGeometry.build(params, layout)
    gy, ny, ky, dy_, hy, wy = geo.y_strides
    gx, nx, cx, dx, hx, wx = geo.x_strides
    if ky != 1 or cx != 1:
        return (f"pointwise bwd weight needs grad_out and input with unit channel strides (the NHWGC / GNHWC "
                f"families); layout {layout.name} has neither or one")
    sd, sh, sw = geo.stride3
    axes = merge_positions((geo.N, *geo.out3), (ny, dy_, hy, wy), (nx, dx * sd, hx * sh, wx * sw))
    if len(axes) > 3:
        return (f"pointwise bwd weight walks at most three position axes; {layout.name} with stride "
                f"{params.stride} leaves {len(axes)}")
    axes = [(1, 0, 0)] * (3 - len(axes)) + axes
    (a, ya, xa), (b, yb, xb), (w, yw, xw) = axes
    dy = [geo.G, a, b, w, geo.K], [gy, ya, yb, yw, 1]
    x = [geo.G, a, b, w, geo.C], [gx, xa, xb, xw, 1]
    return dy, x


def box_of(width: int, block_k: int) -> tuple[int, int]:
    """(box_r, box_w): rows x columns of a block_k-position box over rows of ``width`` positions (a
    row rounds up to a power of two: at least half of each box is real positions)."""
    box_w = min(block_k, _pow2_at_least(width))
    return block_k // box_w, box_w


@functools.lru_cache(maxsize=1024)
def _ready_views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    walk = walk_of(params, layout)
    return walk if isinstance(walk, str) else tma_ready(walk, elem, params, dtype_name)


def _views(params: ConvParams, layout: LayoutTriple, dtype: DataType) -> tuple | str:
    """(dy view, x view) with TMA-aligned strides, or why not. Cached: every config of a problem asks
    (decline), then bind."""
    return _ready_views(params, layout, dtype.data.itemsize, dtype.name)


def decline(cfg: BwdWeightPointwiseConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if (why := tma_wgrad_reason("pointwise", dtype) or tf32_smem_reason("pointwise", cfg, dtype)) is not None:
        return why
    if not params.is_1x1_pad0:
        return (f"pointwise bwd weight is the GEMM of a 1x1 filter without padding; the problem has filter "
                f"{params.filter}, padding {params.left_pad}/{params.right_pad}")
    views = _views(params, layout, dtype)
    if isinstance(views, str):
        return views
    if cfg.block_m * cfg.block_n >= _MULTI_ROW_TILE_LIMIT and box_of(views[0][0][3], cfg.block_k)[0] > 1:
        return (f"m{cfg.block_m} n{cfg.block_n} tiles over boxes of several rows (rows of {views[0][0][3]} "
                f"positions, stride {params.stride}) gave wrong results on Triton 3.6 (H100); smaller tiles run it")
    need = cfg.smem_bytes(dtype.data.itemsize)
    if need > SMEM_PER_BLOCK:
        return (f"m{cfg.block_m} n{cfg.block_n} k{cfg.block_k} with num_stages={cfg.num_stages} needs "
                f"{need // 1024} KiB of shared memory, over {SMEM_PER_BLOCK // 1024} KiB")
    return None


def programs_per_sm(cfg: BwdWeightPointwiseConfig) -> int:
    """Programs of this config one SM holds at once: its shared memory (2-byte operands), warps and
    registers (the fp32 accumulator plus ~40 others a thread)."""
    by_smem = SMEM_PER_BLOCK // max(1, cfg.smem_bytes(2))
    by_warps = 64 // cfg.num_warps
    threads = 32 * cfg.num_warps
    by_regs = 65536 // (threads * (cfg.block_m * cfg.block_n // threads + 40))
    return max(1, min(by_smem, by_warps, by_regs))


@functools.lru_cache(maxsize=4096)
def choose_split(tiles: int, chunks: int, sms: int, per_sm: int = 1, most: int = MAX_SPLIT) -> int:
    """Splits per tile: the fewest that minimize waves x (chunks per split + a program's fixed cost),
    waves counted over ``sms`` x ``per_sm`` resident programs; at most ``most`` and one per chunk."""
    slots = max(1, sms * per_sm)
    best, best_cost = 1, math.inf
    for s in range(1, min(most, chunks) + 1):
        cost = -(-tiles * s // slots) * (-(-chunks // s) + _PROGRAM_OVERHEAD_CHUNKS * (s > 1))
        if cost < best_cost - 1e-9:
            best, best_cost = s, cost
    return best


def plan(params: ConvParams, cfg: BwdWeightPointwiseConfig, layout: LayoutTriple, sms: int) -> tuple[int, int, int]:
    """(tiles, chunks, split) of a problem this config runs: the split the launch takes (the
    config's, or the automatic one), clipped so that every split has chunks. The cost model asks too."""
    walk = walk_of(params, layout)
    _, a, b, w, _ = walk[0][0]
    box_r, box_w = box_of(w, cfg.block_k)
    chunks = a * triton.cdiv(b, box_r) * triton.cdiv(w, box_w)
    tiles = params.G * triton.cdiv(params.K, cfg.block_m) * triton.cdiv(params.C, cfg.block_n)
    most = LAST_MAX_SPLIT if cfg.reduce == "last" else MAX_SPLIT
    split = int(cfg.split_k) or choose_split(tiles, chunks, sms, programs_per_sm(cfg), most)
    split = max(1, min(split, chunks))
    return tiles, chunks, triton.cdiv(chunks, triton.cdiv(chunks, split))


def reduce_shape(tiles: int, split: int, bm: int, bn: int, sms: int) -> tuple[int, int]:
    """(rows of a tile per reduce program, slabs summed per step): fewer rows where the tiles alone
    leave SMs idle (a one-tile layer's 131 slabs were read by one program), and then as many slabs a
    step as the partial sums allow; one slab a step where the full rows fill the GPU."""
    full = rows = max(1, min(bm, _REDUCE_TILE_ELEMS // bn))
    while rows > 1 and tiles * (bm // rows) < sms:
        rows //= 2
    if rows == full:
        return rows, 1
    return rows, max(1, min(triton.next_power_of_2(split), _REDUCE_PARTS // (rows * bn), 64))


# The last program to arrive reads one slab after another (session 23, H100: about 0.7 us a slab of
# up to 64 KiB, 4 us for a 128x256 tile's 128 KiB, where the accumulator leaves no registers to spare)
_SERIAL_SLAB_S = 0.7e-6
_SERIAL_SLAB_BIG_S = 4e-6


@functools.lru_cache(maxsize=8192)
def _model_work(params: ConvParams, values: tuple, sms: int) -> tuple[int, int, float]:
    cfg = BwdWeightPointwiseConfig(**dict(values))
    _, chunks, split = plan(params, cfg, layout_for("nhwgc", params.ndim), sms)
    serial = 0.0
    if split > 1 and cfg.reduce == "last":
        serial = split * (_SERIAL_SLAB_BIG_S if cfg.block_m * cfg.block_n >= 32768 else _SERIAL_SLAB_S)
    return chunks * cfg.block_k, split, serial


def model_work(params: ConvParams, cfg: Mapping[str, Any], sms: int) -> tuple[int, int, float]:
    """For the cost model: (positions the GEMM reduces, boxes rounded; the split it launches; seconds
    the last program spends reading the slabs alone, 0 with the reduce pass) of ``cfg`` (its values)
    on ``params`` with channels-last tensors."""
    names = BwdWeightPointwiseConfig.param_names()
    return _model_work(params, tuple((n, cfg[n]) for n in names), sms)


_COUNTERS: dict[tuple, torch.Tensor] = {}
_COUNTERS_LOCK = threading.Lock()


def _counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Zeroed int32 arrival counters for ``tiles`` tiles, one buffer per (device, stream): launches on
    one stream run in order, and each leaves its counters at zero again. Inside CUDA graph capture a
    buffer of the graph's own (its zeroing is captured too), never cached: the graph's memory pool
    goes away with the graph."""
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return torch.zeros(tiles, dtype=torch.int32, device=device)
    stream = torch.cuda.current_stream(device).stream_id if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < tiles:
        with _COUNTERS_LOCK:
            buf = _COUNTERS.get(key)
            if buf is None or buf.numel() < tiles:
                buf = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
                _COUNTERS[key] = buf
    return buf


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner moves the two descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-weight pointwise", p)
    dev = check_tensors(args).device
    dy_view, x_view = _views(p, args.layout, dt)
    _, a, b, w, _ = dy_view[0]
    bm, bn = cfg.block_m, cfg.block_n
    box_r, box_w = box_of(w, cfg.block_k)
    rb, wch = triton.cdiv(b, box_r), triton.cdiv(w, box_w)
    tiles_m, tiles_n = triton.cdiv(geo.K, bm), triton.cdiv(geo.C, bn)
    tiles, chunks, split = plan(p, cfg, args.layout, sm_count(dev))
    per_split = triton.cdiv(chunks, split)
    if tiles * split > _MAX_GRID:
        raise ValueError(f"bwd-weight pointwise: {tiles * split} programs are over the launch grid's {_MAX_GRID}")
    int64 = bool(geo.w_numel >= 2**31 - 1)
    mode = _ONE if split == 1 else _LAST_SUMS if cfg.reduce == "last" else _SLABS
    epi = dict(OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn))
    kernel = BoundKernel(
        _bwd_weight_pointwise_kernel, (tiles * split,),
        BLOCK_M=bm, BLOCK_N=bn, BOX_R=box_r, BOX_W=box_w, GROUP_M=cfg.group_m, MODE=mode, INT64=int64,
        OPERANDS=dot_operands(dt), num_warps=cfg.num_warps, num_stages=cfg.num_stages, **epi,
    )
    ws_g, ws_k, ws_c = geo.w_strides[:3]
    scalars = (geo.K, geo.C, b, rb, wch, chunks, per_split, tiles_m, tiles_n, tiles, split, ws_g, ws_k, ws_c)
    dy_template = descriptor_template(args.b, dy_view, [1, 1, box_r, box_w, bm])
    x_template = descriptor_template(args.a, x_view, [1, 1, box_r, box_w, bn])
    slab_numel = split * tiles * bm * bn if split > 1 else 1
    rows, block_s = reduce_shape(tiles, split, bm, bn, sm_count(dev))
    reduce = BoundKernel(_pointwise_reduce_kernel, (tiles, bm // rows), BLOCK_M=bm, BLOCK_N=bn, ROWS=rows,
                         BLOCK_S=block_s, GROUP_M=cfg.group_m, INT64=int64, num_warps=4, **epi)
    reduce_scalars = (geo.K, geo.C, tiles_m, tiles_n, tiles, split, ws_g, ws_k, ws_c)

    def run(x: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        ws = torch.empty(slab_numel, dtype=torch.float32, device=out.device)
        cnt = _counters(out.device, tiles) if mode == _LAST_SUMS else ws
        d = epilogue_args(ds, out)
        kernel(_with_base(dy_template, dy), _with_base(x_template, x), out, ws, cnt, *d, alpha, beta, *scalars)
        if mode == _SLABS:
            reduce(ws, out, *d, alpha, beta, *reduce_scalars)

    return run


ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="pointwise", config=BwdWeightPointwiseConfig, decline=decline, bind=bind,
    description="1x1 / pad-0 dL/dW as a split-K TMA GEMM over the merged positions, tiles up to 128x256; the "
                "splits' fp32 partial tiles summed in split order by the last to arrive or by a reduce pass",
    kernels=(_bwd_weight_pointwise_kernel, _pointwise_reduce_kernel)))
