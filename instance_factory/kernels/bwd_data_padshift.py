"""conv_bwd_data (dL/dIn) as shifted TMA GEMMs over a zero-padded copy of grad_out, one per stride phase.

For stride phase r of a dim (input positions hi = r + s*i) the taps that hit are y = tap0 + step*j, and
each reads grad_out at ho = i + o_j (``stride_phases`` in geometry.py). A first pass copies grad_out into
a packed grid of U positions a dim, ho = u + lo with zeros where ho is outside [0, out): every (phase,
tap) is then one constant row shift of the flattened grid,

    dx[n, r + s*i, g, c] = sum over taps t of the phase, k of  dyp[q(n, i) + shift_t, g, k] * w[g, k, t, c]

with q(n, i) the row of (n, i) on the grid. So the GEMM's A operand is a plain [rows, K] TMA box at row
q0 + shift_t for every tap: no masks, no per-row index math in the loop, and the box feeds wgmma from
shared memory (``tma``'s 3-D patch boxes reshape through registers in Triton 3.6; igemm gathers with
pointer loads). The price: the copy (small for strided layers, whose grad_out is 1/s^2 of grad_in) and
the grid's spare rows (i >= the phase's count, masked at the store): U = count + the taps' spread, e.g.
15x15 rows for a 14x14 phase.

Each program computes a block_m x block_n tile of one phase of one group; the phase is the fastest
program index (the phases of a tile read the same grid rows) and the tiles of a phase go in groups of
``group_m``. A phase without taps stores E = f(0, D...). The phase table (taps' shifts and indices,
residues, counts) is a small int32 tensor the loop reads per step.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_data_pointwise import BwdDataPointwiseConfig, _tile_coords
from .bwd_data_tma import TensorDescriptor, _with_base, descriptor_template, tma_ready
from .host import SMEM_PER_BLOCK

__all__ = ["ALGORITHM", "PadShiftConfig", "PadShiftPlan", "bind", "decline", "plan"]

_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")
_MAX_TAPS = 64  # taps a phase may have (a row of the phase table)
_HEAD = 7  # table row: ntaps, residues (d, h, w), counts (d, h, w), then (shift, tap) pairs
_MAX_GRID = 2**31 - 1
_MAX_GRID_Y = 65535
_COPY_P, _COPY_C = 32, 64  # the copy pass's tile: positions x channels


# ------------------------------------------------------------------------------------------------
# the kernels
# ------------------------------------------------------------------------------------------------
@triton.jit
def _pad_copy_kernel(dy_ptr, out_ptr, rows, GK, K, Od, Oh, Ow, Ud, Uh, Uw, lo_d, lo_h, lo_w,
                     ys_g, ys_n, ys_d, ys_h, ys_w,
                     BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, USE_INT64: tl.constexpr):
    """grad_out into the packed [rows, G*K] grid: row (n, u_d, u_h, u_w) holds ho = u + lo, or zeros."""
    q = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    cc = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    uw = q % Uw
    t = q // Uw
    uh = t % Uh
    t = t // Uh
    ud = t % Ud
    n = t // Ud
    hd, hh, hw = ud + lo_d, uh + lo_h, uw + lo_w
    inside = (q < rows) & (hd >= 0) & (hd < Od) & (hh >= 0) & (hh < Oh) & (hw >= 0) & (hw < Ow)
    c_ok = cc < GK
    if USE_INT64:
        n, hd, hh, hw, q, cc = n.to(tl.int64), hd.to(tl.int64), hh.to(tl.int64), hw.to(tl.int64), \
            q.to(tl.int64), cc.to(tl.int64)
    src = (n * ys_n + hd * ys_d + hh * ys_h + hw * ys_w)[:, None] + ((cc // K) * ys_g + cc % K)[None, :]
    v = tl.load(dy_ptr + src, mask=inside[:, None] & c_ok[None, :], other=0.0)
    tl.store(out_ptr + q[:, None] * GK + cc[None, :], v, mask=(q < rows)[:, None] & c_ok[None, :])


@triton.jit
def _bwd_data_padshift_kernel(
    dy_desc, w_desc, table_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    rows, K, C, Ud, Uh, Uw, sd, sh, sw,
    xs_g, xs_n, xs_d, xs_h, xs_w, xs_c,
    tiles_m, tiles_n, phases,
    ROW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    ph = pid % phases
    _, pid_m, pid_n = _tile_coords(pid // phases, tiles_m, tiles_n, GROUP_M)
    entry = table_ptr + ph * ROW
    ntaps = tl.load(entry)
    q0 = pid_m * BLOCK_M
    c0 = pid_n * BLOCK_N
    k_tiles = tl.cdiv(K, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, ntaps * k_tiles):
        j = i // k_tiles
        kt = i - j * k_tiles
        shift = tl.load(entry + 7 + 2 * j)  # after the table row's 7 head fields
        tap = tl.load(entry + 8 + 2 * j)
        a = dy_desc.load([g, q0 + shift, kt * BLOCK_K]).reshape(BLOCK_M, BLOCK_K)
        b = w_desc.load([g, tap, kt * BLOCK_K, c0]).reshape(BLOCK_K, BLOCK_N)
        if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    # grid row -> (n, i_d, i_h, i_w) of this phase; rows past the phase's counts are the grid's spares
    offs_m = q0 + tl.arange(0, BLOCK_M)
    offs_n = c0 + tl.arange(0, BLOCK_N)
    iw = offs_m % Uw
    t = offs_m // Uw
    ih = t % Uh
    t = t // Uh
    i_d = t % Ud
    n = t // Ud
    ok = (offs_m < rows) & (i_d < tl.load(entry + 4)) & (ih < tl.load(entry + 5)) & (iw < tl.load(entry + 6))
    o_mask = ok[:, None] & (offs_n < C)[None, :]
    hd = tl.load(entry + 1) + sd * i_d
    hh = tl.load(entry + 2) + sh * ih
    hw = tl.load(entry + 3) + sw * iw
    if USE_INT64:
        g = g.to(tl.int64)
        n, hd, hh, hw, offs_n = n.to(tl.int64), hd.to(tl.int64), hh.to(tl.int64), hw.to(tl.int64), \
            offs_n.to(tl.int64)
    o_offs = g * xs_g + (n * xs_n + hd * xs_d + hh * xs_h + hw * xs_w)[:, None] + offs_n[None, :] * xs_c
    res = apply_epilogue(acc, o_offs, o_mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
    tl.store(out_ptr + o_offs, res.to(out_ptr.dtype.element_ty), mask=o_mask)


# ------------------------------------------------------------------------------------------------
# the plan: the padded grid and the phase table
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PadShiftPlan:
    grid3: tuple[int, int, int]  # U per dim (D, H, W)
    lo3: tuple[int, int, int]  # grid position u holds grad_out's ho = u + lo
    rows: int  # N * prod(U): the copy's rows and each phase's GEMM rows
    phases: int
    max_taps: int
    table: tuple[int, ...]  # phases rows of _HEAD + 2 * max_taps int32s
    tap_rows: int  # sum over phases of taps x rows: the GEMM's work in rows of K x C


@functools.lru_cache(maxsize=1024)
def plan(params: ConvParams) -> PadShiftPlan | str:
    """The padded grid and the phase table of ``params``, or why the problem does not fit them."""
    in3, out3 = params.spatial3("input"), params.spatial3("output")
    filt3, s3 = params.spatial3("filter"), params.spatial3("stride")
    dil3, lp3 = params.spatial3("dilation"), params.spatial3("left_pad")
    dims = []  # per dim: [(phase dim, [(tap, shift o)])]
    for a in range(3):
        per = []
        for r in range(min(s3[a], in3[a])):
            count = (in3[a] - r + s3[a] - 1) // s3[a]
            hits = []
            for y in range(filt3[a]):
                num = r + lp3[a] - y * dil3[a]
                if num % s3[a]:
                    continue
                o = num // s3[a]
                if o < out3[a] and o + count - 1 >= 0:  # some ho of this tap lands inside grad_out
                    hits.append((y, o))
            per.append((r, count, hits))
        dims.append(per)
    grid, lo = [], []
    for per in dims:
        shifts = [o for _, _, hits in per for _, o in hits] or [0]
        lo.append(min(shifts))
        grid.append(max(count for _, count, _ in per) + max(shifts) - min(shifts))
    step = (grid[1] * grid[2], grid[2], 1)
    rows = params.N * math.prod(grid)
    table, max_taps, tap_rows, phases = [], 0, 0, 0
    entries = []
    for pd in dims[0]:
        for ph in dims[1]:
            for pw in dims[2]:
                taps = [((z * filt3[1] + y) * filt3[2] + x,
                         (od - lo[0]) * step[0] + (oh - lo[1]) * step[1] + (ow - lo[2]))
                        for z, od in pd[2] for y, oh in ph[2] for x, ow in pw[2]]
                entries.append(((pd[0], ph[0], pw[0]), (pd[1], ph[1], pw[1]), taps))
                max_taps = max(max_taps, len(taps))
                tap_rows += len(taps) * rows
                phases += 1
    if max_taps > _MAX_TAPS:
        return f"a stride phase has {max_taps} taps, over the {_MAX_TAPS} of padshift's phase table"
    width = _HEAD + 2 * max(1, max_taps)
    for res, counts, taps in entries:
        row = [len(taps), *res, *counts]
        for tap, shift in taps:
            row += [shift, tap]
        table += row + [0] * (width - len(row))
    return PadShiftPlan(tuple(grid), tuple(lo), rows, phases, max(1, max_taps), tuple(table), tap_rows)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PadShiftConfig(BwdDataPointwiseConfig):
    """A block_m (grid rows) x block_n (C) tile of one phase of one group's grad_in, reduced over the
    phase's taps x block_k-wide chunks of K; tiles in groups of group_m; num_stages-deep TMA pipeline."""


def _packed_stride(lengths: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The stride of one step of the flattened index over ``lengths`` (row-major), or None when the
    strides do not pack it; 1 for a single element (its index is always 0)."""
    dims = [(n, s) for n, s in zip(lengths, strides) if n > 1]
    if not dims:
        return 1
    expect = dims[-1][1]
    for n, s in reversed(dims):
        if s != expect:
            return None
        expect = s * n
    return dims[-1][1]


@functools.lru_cache(maxsize=1024)
def _views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """((grid shape, strides), (weight [G, taps, K, C] shape, strides)) for the TMA descriptors, or why not."""
    geo = ConvGeometry.build(params, layout)
    gw, kw, cw = geo.w_strides[:3]
    tap_stride = _packed_stride(geo.filt3, geo.w_strides[3:])
    if geo.y_strides[2] != 1 or cw != 1 or tap_stride is None:
        return (f"padshift needs grad_out with unit K stride and a weight with unit C stride and packed taps "
                f"(the NHWGC / GNHWC families); layout {layout.name} has not")
    p = plan(params)
    if isinstance(p, str):
        return p
    taps = math.prod(geo.filt3)
    grid_view = [geo.G, p.rows, geo.K], [geo.K, geo.G * geo.K, 1]
    w_view = [geo.G, taps, geo.K, geo.C], [gw, tap_stride, kw, 1]
    return tma_ready((grid_view, w_view), elem, params, dtype_name)


def decline(cfg: PadShiftConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if TensorDescriptor is None:
        return "padshift needs Triton's host tensor descriptors (triton.tools.tensor_descriptor, Triton >= 3.4)"
    if dtype.name not in _DTYPES:
        return f"padshift bwd data has no {dtype.name!r} variant ({dtype.label}); it supports {', '.join(_DTYPES)}"
    if params.is_1x1_pad0:
        return "a 1x1 filter without padding reads grad_out as it is: pointwise runs it without the padded copy"
    if params.G > _MAX_GRID_Y:
        return f"G={params.G} is over the {_MAX_GRID_Y} groups the launch grid's y axis holds"
    views = _views(params, layout, dtype.data.itemsize, dtype.name)
    if isinstance(views, str):
        return views
    p = plan(params)
    if p.rows * params.G * params.K >= 2**31:
        return f"the padded grad_out grid ({p.rows} rows x {params.G * params.K} channels) is over 2^31 elements"
    need = cfg.smem_bytes(dtype.data.itemsize)
    if need > SMEM_PER_BLOCK:
        return (f"m{cfg.block_m} n{cfg.block_n} k{cfg.block_k} with num_stages={cfg.num_stages} needs "
                f"{need // 1024} KiB of shared memory for {dtype.name}, over {SMEM_PER_BLOCK // 1024} KiB")
    return None


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once (plan, table, descriptors); the runner copies grad_out into the grid,
    moves the descriptors' bases and launches."""
    cfg, p, geo, dt = args.cfg, args.params, args.geo, args.dtype
    require_runnable(decline(cfg, p, args.layout, dt, args.fused), "bwd-data padshift", p)
    grid_view, w_view = _views(p, args.layout, dt.data.itemsize, dt.name)
    pl = plan(p)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    tiles_m, tiles_n = triton.cdiv(pl.rows, bm), triton.cdiv(geo.C, bn)
    programs = pl.phases * tiles_m * tiles_n
    if programs > _MAX_GRID:
        raise ValueError(f"bwd-data padshift: {programs} programs are over the {_MAX_GRID} a grid axis holds")
    device = args.out.device
    table = torch.tensor(pl.table, dtype=torch.int32, device=device)
    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "ieee" if (dt.compute == "ieee" or upcast) else "tf32"
    gk = geo.G * geo.K
    copy = BoundKernel(_pad_copy_kernel, (triton.cdiv(pl.rows, _COPY_P), triton.cdiv(gk, _COPY_C)),
                       BLOCK_P=_COPY_P, BLOCK_C=_COPY_C, USE_INT64=geo.needs_int64, num_warps=4)
    ys_g, ys_n, _, ys_d, ys_h, ys_w = geo.y_strides
    copy_scalars = (pl.rows, gk, geo.K, *geo.out3, *pl.grid3, *pl.lo3, ys_g, ys_n, ys_d, ys_h, ys_w)
    kernel = BoundKernel(
        _bwd_data_padshift_kernel, (programs, geo.G),
        ROW=len(pl.table) // pl.phases, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m,
        USE_INT64=geo.needs_int64, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w = geo.x_strides
    scalars = (pl.rows, geo.K, geo.C, *pl.grid3, *geo.stride3, xs_g, xs_n, xs_d, xs_h, xs_w, xs_c,
               tiles_m, tiles_n, pl.phases)
    grid_template = descriptor_template(args.a, grid_view, [1, bm, bk])
    w_template = descriptor_template(args.b, w_view, [1, 1, bk, bn])

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        padded = torch.empty((pl.rows, gk), dtype=dy.dtype, device=dy.device)
        copy(dy, padded, *copy_scalars)
        kernel(_with_base(grid_template, padded), _with_base(w_template, w), table, out, *epilogue_args(ds, out),
               alpha, beta, *scalars)

    return run


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data",
    name="padshift",
    config=PadShiftConfig,
    decline=decline,
    bind=bind,
    description=(
        "dL/dIn per stride phase as TMA GEMMs over a zero-padded copy of grad_out, each tap a constant "
        "row shift (plain [rows, K] boxes, no masks in the loop); channels-last"
    ),
    kernels=(_pad_copy_kernel, _bwd_data_padshift_kernel),
))
