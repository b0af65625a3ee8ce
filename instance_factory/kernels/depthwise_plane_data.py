"""Depthwise conv_bwd_data on planar layouts, on tensor cores: "dwplane" (the bwd-data twin of
:mod:`.depthwise_plane`).

dx[n, g, i] = sum over taps t of dy[n, g, o] * w[g, t], where o*s = i + p - t*dil (integral, in range)

In channels-first (NGCHW) and, for one channel per group, group-major (GNHWC) tensors each (n, g)
plane is contiguous along W. The channels-last kernels (dwtaps, dwroll, direct) put channels on the
vector lanes, which are H*W elements apart there; relayout copies grad_out to channels-last and
grad_in back (four passes over the activations around the kernel's two).

Here the lanes run along W, and the taps along x become a matrix product with a banded (Toeplitz)
matrix built from the weight. Cut each grad_in row into blocks of TW columns (a multiple of s_w).
Block m of group g (one (n, id, ih, column block)) reads, for each filter row r = (tz, ty), the
grad_out row (od, oh) with od*s_d = id + p_d - tz*dil_d and oh*s_h = ih + p_h - ty*dil_h (a zero row
when that is not an integral row in range), J columns from c0 = xb*TW/s_w + CB (CB: the first column
any tap of block 0 reaches, rounded down to VEC so the row loads are aligned VEC-element vectors).
Then dx[m, i] = sum over (r, j) of A[m, r*J + j] * T[r*J + j, i] with A the gathered rows and
T[r*J + j, i] = w[g, tz, ty, tx] where tx*dil_w = i + p_w - s_w*(CB + j) (else 0): T does not depend
on the block, so it is built once per program and every BLOCK_M blocks are one dot of
[BLOCK_M, RP*J] x [RP*J, J] (RP: the FZ*FY filter rows rounded up to a power of two). The product
spends RP*J*J multiply-adds per TW outputs on FZ*FY*FX useful ones (at 3x3, J 32: ~64 MMA products
per output); tensor cores have that headroom, and a row of grad_out is loaded once per filter row
with 16-byte vectors where the plane widths allow.

Small planes (s_h = 1) put ROWS whole grad_in rows in a block instead: grad_out is read as a flat run
of rows from the first one a filter row reaches, and T links a column only to the columns of its own
row (:func:`block_plan` picks the cut with the fewest blocks). The blocks' index math (offsets, the
grad_out row of each filter row, the vectors to store) is one table built per bind
(:func:`block_table`): its divisions were most of the loop's instructions.

Row blocks still load a run of J per filter row, so each grad_out row is loaded once per filter row it
meets. Run blocks (session 40, :func:`run_plan`) load one flat run per block instead, from the first
grad_out row any filter row of the block reaches to the last, and T [RUN, JO] maps every run element to
the grad_in elements it reaches (its filter row from the two rows' distance): 2-7x fewer loaded elements
on 7x7 and 14x14 planes, and a smaller product. Taken where they load fewer elements (one filter row
along D, stride 1 along H).

Grid = (G, chunks of blocks), g fastest. No reduction: each dot's tile is stored with the fused
epilogue. Measurements and what did not help: docs/BENCHMARKS.md, session 38.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import MAX_GRID_YZ, DirectStyleConfig, dot_operands, dot_tn, occupancy_split, require_contiguous
from .depthwise_plane import planar_depthwise_reason, plane_tile_reason, plane_vector
from .depthwise_plane_runs import _run_tiles, _run_toeplitz
from .depthwise_stream import vector_width
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "DTYPES", "BlockPlan", "DwPlaneDataConfig", "bind", "block_plan", "decline", "model_work",
           "max_run", "problem_plan", "result_columns", "run_plan"]

DTYPES = ("fp16", "bf16", "fp32_tf32")  # tensor-core products (tf32: three bf16 parts)
_MAX_OPERAND_PER_THREAD = 128  # elements of the gathered [BLOCK_M, RP*J] grad_out tile per thread
_MAX_ACC_PER_THREAD = 64  # fp32 accumulators of the [BLOCK_M, JO] result per thread (128 spilled in wgrad)
_PROGRAMS_PER_SM = 8
# loads of narrower vectors cost more: the cost model's PLANE_FULL_VECTOR (wgrad, session 37); kernels do not
# import the tuning layer (tests/test_architecture)
FULL_VECTOR = 4
_MODEL_BLOCK_M = 64  # the cost model prices a j with the block_m most often best (session 38)


@triton.jit
def _toeplitz(w_ptr, g, CB, Wi, Wo, FY, FX, R, s_w, dil_w, pad_w, ws_g, ws_z, ws_y, ws_x,
              J: tl.constexpr, JO: tl.constexpr, RP: tl.constexpr, ROWS: tl.constexpr):
    """T [RP*J, JO]: T[r*J + j, i] = w[g, tz, ty, tx] with (tz, ty) = divmod(r, FY) when grad_out column
    c (of the block's row a) reaches grad_in column u through tap tx: c*s_w = u + pad_w - tx*dil_w;
    zero elsewhere. Column blocks (ROWS 1): u = i, c = CB + j (block-relative). Row blocks: i = a*Wi + u
    and CB + j = a*Wo + c with 0 <= c < Wo (a column past the row end is another row's)."""
    r = tl.arange(0, RP)[:, None, None]
    jj = tl.arange(0, J)[None, :, None]
    ii = tl.arange(0, JO)[None, None, :]
    if ROWS > 1:
        a = ii // Wi
        u = ii - a * Wi
        c = CB + jj - a * Wo
        c_ok = (c >= 0) & (c < Wo)
    else:
        u = ii
        c = CB + jj
        c_ok = c == c
    e = u + pad_w - s_w * c  # [1, J, JO]
    e_pos = tl.where(e >= 0, e, 0)
    tx = e_pos // dil_w
    ok = c_ok & (e >= 0) & (e_pos - tx * dil_w == 0) & (tx < FX) & (r < R)
    tz = r // FY
    ty = r - tz * FY
    t = tl.load(w_ptr + g * ws_g + tz * ws_z + ty * ws_y + tx * ws_x, mask=ok, other=0.0)
    return tl.reshape(t, (RP * J, JO))


@triton.jit
def _dwplane_dgrad_kernel(
    dy_ptr, w_ptr, out_ptr, tab_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    M, chunk, CB_V,  # blocks per group, per program; block 0's first grad_out column / VEC
    Wi, Wo, HO_ROWS, WO_V,  # HO_ROWS: grad_out rows of a row block's flat run (Ho)
    FY, FX, R,  # filter rows R = FZ*FY
    s_w, dil_w, pad_w,
    xs_g, ys_g,  # group strides / VEC
    ws_g, ws_z, ws_y, ws_x,  # weight strides
    BLOCK_M: tl.constexpr, J: tl.constexpr, JO: tl.constexpr, RP: tl.constexpr, ROWS: tl.constexpr,
    VEC: tl.constexpr, PREFETCH: tl.constexpr, OPERANDS: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
    RUN: tl.constexpr, RUN_D: tl.constexpr, DIL_H: tl.constexpr,  # run blocks (RUN > 0): BlockPlan, _toeplitz
):
    """tab[m] (block_table): grad_in offset, stored vectors, first grad_out column (/ VEC), then per
    filter row the grad_out row offset and the grad_out row (below 0: none; run blocks: one run, its
    offset and its first vector in the plane). The blocks' index math
    is the host's, once per problem: here a block costs a few table loads (the divisions it replaces
    were most of the loop's instructions)."""
    g = tl.program_id(0)
    sid = tl.program_id(1)
    if USE_INT64:
        g = g.to(tl.int64)
        sid = sid.to(tl.int64)
    m_start = sid * chunk
    m_end = tl.minimum(m_start + chunk, M)
    if RUN > 0:
        t = _run_toeplitz(w_ptr, g, Wi, Wo, FY, FX, s_w, dil_w, pad_w, ws_g, ws_y, ws_x, JO, RUN, RUN_D, DIL_H)
    else:
        t = _toeplitz(w_ptr, g, CB_V * VEC, Wi, Wo, FY, FX, R, s_w, dil_w, pad_w, ws_g, ws_z, ws_y, ws_x,
                      J, JO, RP, ROWS)
    dy_g = dy_ptr + g * ys_g * VEC
    x_g = g * xs_g * VEC

    rows = tl.arange(0, BLOCK_M)
    rr = tl.arange(0, RP)
    j = tl.arange(0, J)[None, None, :]
    jv = j // VEC  # constant over aligned runs of VEC: the loads and their masks vectorize
    if ROWS > 1:  # the grad_out row (from the block's first) of each column of the flat run
        j_row = (CB_V + jv) // WO_V
    else:
        j_row = jv  # unused
    i = tl.arange(0, JO)
    iv = i // VEC
    if PREFETCH:  # the next blocks' loads are in flight during this dot and its stores
        a, x_off, lim = _tiles(dy_g, tab_ptr, m_start, m_end, rows, rr, j, jv, j_row, HO_ROWS, WO_V,
                               BLOCK_M, J, RP, ROWS, VEC, RUN)
        for m0 in range(m_start, m_end, BLOCK_M):
            a_n, x_off_n, lim_n = _tiles(dy_g, tab_ptr, m0 + BLOCK_M, m_end, rows, rr, j, jv, j_row, HO_ROWS,
                                         WO_V, BLOCK_M, J, RP, ROWS, VEC, RUN)
            _block_dot(a, x_off, lim, t, out_ptr, x_g, i, iv, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                       BLOCK_M, JO, VEC, OPERANDS, OP, NUM_DS, USER_FN)
            a, x_off, lim = a_n, x_off_n, lim_n
    else:
        for m0 in range(m_start, m_end, BLOCK_M):
            a, x_off, lim = _tiles(dy_g, tab_ptr, m0, m_end, rows, rr, j, jv, j_row, HO_ROWS, WO_V,
                                   BLOCK_M, J, RP, ROWS, VEC, RUN)
            _block_dot(a, x_off, lim, t, out_ptr, x_g, i, iv, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                       BLOCK_M, JO, VEC, OPERANDS, OP, NUM_DS, USER_FN)


@triton.jit
def _block_tiles(dy_g, tab_ptr, m0, m_end, rows, rr, j, jv, j_row, HO_ROWS, WO_V,
                 BLOCK_M: tl.constexpr, J: tl.constexpr, RP: tl.constexpr, ROWS: tl.constexpr, VEC: tl.constexpr):
    """Blocks m0 + rows: the gathered grad_out tile [BLOCK_M, RP*J], grad_in offsets and stored vectors."""
    m = m0 + rows
    live = m < m_end
    rec = tab_ptr + tl.where(live, m, 0) * (3 + 2 * RP)
    x_off = tl.load(rec)
    lim = tl.where(live, tl.load(rec + 1), 0)
    y_rec = rec[:, None] + 3 + rr[None, :]
    y_off = tl.load(y_rec)  # [BLOCK_M, RP]
    oh = tl.where(live[:, None], tl.load(y_rec + RP), -1 << 30)
    if ROWS > 1:
        oh_e = oh[:, :, None] + j_row
        ok = (oh_e >= 0) & (oh_e < HO_ROWS)
    else:
        cv = tl.load(rec + 2)[:, None, None] + jv
        ok = (oh >= 0)[:, :, None] & (cv >= 0) & (cv < WO_V)
    a = tl.load(dy_g + (y_off * VEC)[:, :, None] + j, mask=ok, other=0.0)
    return tl.reshape(a, (BLOCK_M, RP * J)), x_off, lim


@triton.jit
def _tiles(dy_g, tab_ptr, m0, m_end, rows, rr, j, jv, j_row, HO_ROWS, WO_V,
           BLOCK_M: tl.constexpr, J: tl.constexpr, RP: tl.constexpr, ROWS: tl.constexpr, VEC: tl.constexpr,
           RUN: tl.constexpr):
    """The blocks' grad_out tile, grad_in offsets and stored vectors: run blocks, or a run per filter row."""
    if RUN > 0:
        a, x_off, lim = _run_tiles(dy_g, tab_ptr, m0, m_end, rows, HO_ROWS, WO_V, RP, VEC, RUN)
    else:
        a, x_off, lim = _block_tiles(dy_g, tab_ptr, m0, m_end, rows, rr, j, jv, j_row, HO_ROWS, WO_V,
                                     BLOCK_M, J, RP, ROWS, VEC)
    return a, x_off, lim


@triton.jit
def _block_dot(a, x_off, lim, t, out_ptr, x_g, i, iv, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
               BLOCK_M: tl.constexpr, JO: tl.constexpr, VEC: tl.constexpr, OPERANDS: tl.constexpr,
               OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """grad_in of the blocks: a @ t, the fused epilogue, the store."""
    acc = dot_tn(tl.trans(a), t, tl.zeros((BLOCK_M, JO), dtype=tl.float32), OPERANDS)
    offs = x_g + (x_off * VEC)[:, None] + i[None, :]
    keep = iv[None, :] < lim[:, None]
    res = apply_epilogue(acc, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
    tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)


def block_table(geo: ConvGeometry, plan: BlockPlan, rp: int, vec: int, device: torch.device,
                dtype: torch.dtype) -> torch.Tensor:
    """[M, 3 + 2*rp] per block m = (n, id, row block, column block): grad_in offset (/ VEC, without the
    group), grad_in vectors to store, first grad_out column (/ VEC); per filter row r = (tz, ty): the
    grad_out row offset (/ VEC, without the group: n, od, oh, first column) and the grad_out row oh
    (-2^30 where r reads no row: not integral, out of range, or past the filter). Row blocks (s_h = 1)
    keep oh as it is, in range or not: the kernel tests each element's row of the flat run. Run blocks
    (``plan.run``, rp 1): the run's offset and its first vector in the plane (-2^30: depth not reached)."""
    (Di, Hi, Wi), (Do, Ho, _) = geo.in3, geo.out3
    fz, fy, _ = geo.filt3
    s_d, s_h, _ = geo.stride3
    dil_d, dil_h, _ = geo.dil3
    pad_d, pad_h, _ = geo.pad3
    xs, ys = [v // vec for v in geo.x_strides], [v // vec for v in geo.y_strides]
    xb_count = 1 if plan.rows > 1 else triton.cdiv(Wi, plan.tw)
    hb_count = triton.cdiv(Hi, plan.rows)
    m = torch.arange(geo.N * Di * hb_count * xb_count, device=device, dtype=torch.int64)
    xb, q = m % xb_count, m // xb_count
    hb, q = q % hb_count, q // hb_count
    i_d, n = q % Di, q // Di
    ih = hb * plan.rows
    tw_v, wi_v = plan.tw // vec, Wi // vec
    c0_v = xb * (plan.tw // geo.stride3[2] // vec) + plan.cb // vec
    x_off = n * xs[1] + i_d * xs[3] + ih * xs[4] + xb * tw_v
    if plan.rows > 1:
        lim = (Hi - ih).clamp(max=plan.rows) * wi_v
    else:
        lim = (wi_v - xb * tw_v).clamp(max=tw_v)
    if plan.run:  # one run from row ih - lead (one filter row along D: tz 0); its first vector in the plane
        od_num = i_d + pad_d
        od = od_num.div(s_d, rounding_mode="floor")
        ok = (od_num >= 0) & (od * s_d == od_num) & (od < Do)
        oh0 = ih - plan.lead
        y_off = torch.where(ok, n * ys[1] + od * ys[3] + oh0 * ys[4], 0)
        first = torch.where(ok, oh0 * (geo.out3[2] // vec), -(1 << 30))
        cols = [x_off, lim, torch.zeros_like(x_off), y_off, first]
        return torch.stack(cols, dim=1).to(dtype).contiguous()
    r = torch.arange(rp, device=device, dtype=torch.int64)
    tz, ty = r // fy, r % fy
    od_num = i_d[:, None] + pad_d - tz[None, :] * dil_d  # [M, rp]
    oh_num = ih[:, None] + pad_h - ty[None, :] * dil_h
    od = od_num.div(s_d, rounding_mode="floor")
    ok = (r < fz * fy)[None, :] & (od_num >= 0) & (od * s_d == od_num) & (od < Do)
    if plan.rows > 1:
        oh = oh_num
    else:
        oh = oh_num.div(s_h, rounding_mode="floor")
        ok &= (oh_num >= 0) & (oh * s_h == oh_num) & (oh < Ho)
    y_off = torch.where(ok, (n * ys[1] + c0_v)[:, None] + od * ys[3] + oh * ys[4], 0)
    oh = torch.where(ok, oh, -(1 << 30))
    return torch.cat([x_off[:, None], lim[:, None], c0_v[:, None], y_off, oh], dim=1).to(dtype).contiguous()


@dataclass(frozen=True)
class DwPlaneDataConfig(DirectStyleConfig):
    """dwplane (bwd data): block_m blocks per dot (its M); j grad_out columns per block and filter row
    (a block holds up to j - dil*(FX-1) grad_in columns at stride 1, or whole rows of small planes:
    :func:`block_plan`); the next blocks loaded during this dot when ``prefetch`` is 1."""

    block_m: int
    j: int
    prefetch: int
    num_warps: int
    num_stages: int

    ALGORITHM: ClassVar[str] = "dwplane"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_m", "j")

    def check(self) -> str | None:
        return super().check() or plane_tile_reason(self)


class BlockPlan(NamedTuple):
    """How grad_in planes are cut into blocks: ``rows`` whole rows per block (row blocks, s_h = 1; 1:
    column blocks of ``tw`` columns of one row), the first grad_out column ``cb`` a block reads (relative
    to its first column), the vector width, and the dot's result columns ``jo``. ``run`` > 0: one flat
    run of ``run`` grad_out elements per block (a power of two), from ``lead`` rows above the block's first
    grad_in row, serves every filter row (run blocks); 0: a run of j per filter row."""

    rows: int
    tw: int
    cb: int
    vec: int
    jo: int
    run: int = 0
    lead: int = 0

    def blocks(self, hi: int, wi: int) -> int:
        """Blocks per (n, id) plane."""
        return triton.cdiv(hi, self.rows) if self.rows > 1 or self.run else hi * triton.cdiv(wi, self.tw)

    def loads(self, hi: int, wi: int, rp: int) -> float:
        """grad_out elements a plane's blocks load (and grad_in elements they store), narrow vectors
        counted as FULL_VECTOR / vec elements: the kernel is bound by issuing loads."""
        per_block = (self.run or rp * self.jo) + self.jo  # j grad_out columns per filter row; j = jo
        return self.blocks(hi, wi) * per_block * max(1.0, FULL_VECTOR / self.vec)


def result_columns(j: int, stride_w: int) -> int:
    """The dot's result columns: j. (j*s_w, which j grad_out columns reach at stride s_w, ran 1.09-1.15x
    slower on H100 stride-2 layers, session 38: 4-wide vectors, tiles past the plane.)"""
    return j


def block_plan(j: int, fx: int, stride_w: int, dil_w: int, pad_w: int, vec: int, wi: int, wo: int,
               stride_h: int = 1) -> BlockPlan:
    """The plan with the fewest blocks per plane, counting blocks of vectors narrower than
    FULL_VECTOR proportionally more (their loads issue more instructions), then the widest vectors.
    Column blocks: the largest tw <= jo, a multiple of s_w*v, whose grad_out columns (from cb, the
    leftmost any tap reaches rounded down to v) fit in j, for v = vec, vec/2, ..., 1. Row blocks
    (stride 1 along H): as many whole rows as jo grad_in and j grad_out columns hold, when that is at
    least two. tw 0: j is too narrow."""
    jo = result_columns(j, stride_w)
    best, best_cost = BlockPlan(1, 0, 0, 1, jo), 0.0
    v = vec
    while v >= 1:
        cb = (pad_w - dil_w * (fx - 1)) // stride_w
        cb -= cb % v
        step = stride_w * v
        tw = jo // step * step
        while tw > 0 and (tw - 1 + pad_w) // stride_w - cb > j - 1:
            tw -= step
        cost = triton.cdiv(wi, max(tw, 1)) * max(1.0, FULL_VECTOR / v)
        if tw > 0 and (best.tw == 0 or cost < best_cost):
            best, best_cost = BlockPlan(1, tw, cb, v, jo), cost
        v //= 2
    if stride_h == 1 and best.tw:
        last = min(wo - 1, (wi - 1 + pad_w) // stride_w)  # the rightmost grad_out column a row reads
        rows = min(jo // wi, (j - 1 - last) // wo + 1) if last >= 0 else 0
        if rows >= 2 and triton.cdiv(wi, best.tw) * rows > 1:
            return BlockPlan(rows, wi, 0, vec, jo)
    return best


def run_plan(base: BlockPlan, vec: int, fy: int, dil_h: int, pad_h: int, hi: int, ho: int, wi: int, wo: int,
             rp: int, max_run: int) -> BlockPlan:
    """Run blocks (stride 1 along H, one filter row along D) where they load fewer elements than ``base``:
    ``rows`` whole grad_in rows (as many as jo columns hold) read one flat run of grad_out from the first
    row a filter row reaches to the last, each grad_out row once for every filter row (row blocks load a run
    of j per filter row). A block of the whole plane runs over the grad_out rows that exist only. The run
    (a power of two, at least the dot's 16) is at most ``max_run``."""
    if not base.tw:
        return base
    best, best_loads = base, base.loads(hi, wi, rp)
    span = dil_h * (fy - 1)
    for rows in range(1, min(base.jo // wi, hi) + 1):
        if rows >= hi:
            first, last = max(pad_h - span, 0), min(hi - 1 + pad_h, ho - 1)
            lead, run_rows = -first, last - first + 1
        else:
            lead, run_rows = span - pad_h, rows + span
        run = max(16, triton.next_power_of_2(run_rows * wo))
        plan = BlockPlan(rows, wi, 0, vec, base.jo, run, lead)
        loads = plan.loads(hi, wi, rp)
        if run <= max_run and loads < best_loads:
            best, best_loads = plan, loads
    return best


def max_run(block_m: int, j: int, num_warps: int) -> int:
    """The longest run whose [block_m, run] tile and [run, j] banded matrix keep their per-thread limit."""
    threads = 32 * num_warps
    return _MAX_OPERAND_PER_THREAD * threads // max(block_m, result_columns(j, 1))


def _filter_rows_padded(p: ConvParams) -> int:
    fz, fy = (1, 1, *p.filter)[-3:-1]
    return triton.next_power_of_2(fz * fy)


def problem_plan(p: ConvParams, j: int, vec: int, max_k: int = 0) -> BlockPlan:
    """The plan of a launch on ``vec``-element vectors; run blocks up to ``max_k`` elements (0: none)."""
    wi, wo = p.input[-1], p.output[-1]
    sh = p.stride[-2] if p.ndim >= 2 else 1
    base = block_plan(j, p.filter[-1], p.stride[-1], p.dilation[-1], p.left_pad[-1], vec, wi, wo, sh)
    fz = p.filter[-3] if p.ndim == 3 else 1
    if p.ndim < 2 or sh != 1 or fz != 1 or max_k < 16:
        return base
    return run_plan(base, vec, p.filter[-2], p.dilation[-2], p.left_pad[-2], p.input[-2], p.output[-2], wi, wo,
                    _filter_rows_padded(p), max_k)


def model_work(p: ConvParams, j: int) -> tuple[int, int, int]:
    """(grad_out tile elements loaded + grad_in elements stored, products of the dots, vector width) of
    one call with j-column blocks, for the cost model (tuning/roofline.py). The layout is not known
    there: the vector width is taken from the plane widths alone (planar strides are multiples of them)."""
    di, hi, wi = (1, 1, *p.input)[-3:]
    plan = problem_plan(p, j, vector_width((p.input[-1],), p.output[-1]), max_run(_MODEL_BLOCK_M, j, 4))
    k = plan.run or _filter_rows_padded(p) * j  # the dot's K: a run, or j columns per filter row
    blocks = p.G * p.N * di * plan.blocks(hi, wi)
    return blocks * (k + plan.jo), blocks * k * plan.jo, plan.vec


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; sizes and the block table
    (:func:`block_table`, on the device) built here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    require_runnable(decline(cfg, p, args.layout, args.dtype, args.fused), "dwplane", p)
    require_contiguous(args, "dwplane", "conv_bwd_data")
    block_m, j = int(cfg.block_m), int(cfg.j)
    fz, fy, fx = geo.filt3
    Di, Hi, Wi = geo.in3
    Do, Ho, Wo = geo.out3
    plan = problem_plan(p, j, plane_vector(geo), max_run(block_m, j, int(cfg.num_warps)))
    vec, rp = plan.vec, 1 if plan.run else _filter_rows_padded(p)
    blocks = geo.N * Di * plan.blocks(Hi, Wi)
    chunks = occupancy_split(geo.G, sm_count(args.out.device), _PROGRAMS_PER_SM, triton.cdiv(blocks, block_m))
    chunk = triton.cdiv(blocks, min(chunks, MAX_GRID_YZ))
    chunk = triton.cdiv(chunk, block_m) * block_m  # whole dots per program
    chunks = triton.cdiv(blocks, chunk)
    # the table's offsets leave out the group (n's stride spans the groups in channels-first tensors)
    span = max(geo.N * max(geo.x_strides[1], geo.y_strides[1]), blocks * (3 + 2 * rp))
    use_int64 = force_int64 or geo.needs_int64 or span >= INT32_LIMIT
    table = block_table(geo, plan, rp, vec, args.out.device, torch.int64 if use_int64 else torch.int32)
    main = BoundKernel(_dwplane_dgrad_kernel, (geo.G, chunks),
                       BLOCK_M=block_m, J=j, JO=plan.jo, RP=rp, ROWS=plan.rows, VEC=vec, PREFETCH=bool(cfg.prefetch),
                       OPERANDS=dot_operands(args.dtype), USE_INT64=use_int64,
                       OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
                       RUN=plan.run, RUN_D=geo.pad3[1] + plan.lead if plan.run else 0,
                       DIL_H=geo.dil3[1] if plan.run else 1,
                       num_warps=int(cfg.num_warps), num_stages=int(cfg.num_stages))
    ws = geo.w_strides
    sizes = (blocks, chunk, plan.cb // vec, Wi, Wo, Ho, Wo // vec, fy, fx, fz * fy,
             geo.stride3[2], geo.dil3[2], geo.pad3[2], geo.x_strides[0] // vec, geo.y_strides[0] // vec,
             ws[0], ws[3], ws[4], ws[5])

    def run(dy, w, out, ds: tuple, alpha: float, beta: float) -> None:
        main(dy, w, out, table, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline(cfg: DwPlaneDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    reason = planar_depthwise_reason(p, layout, dtype, DTYPES, "direct and dwtaps")
    if reason:
        return reason
    vec = plane_vector(ConvGeometry.build(p, layout))
    plan = problem_plan(p, cfg.j, vec, max_run(cfg.block_m, cfg.j, cfg.num_warps))
    if plan.tw < 1:
        fx, sw, dw, pw = p.filter[-1], p.stride[-1], p.dilation[-1], p.left_pad[-1]
        return (f"j={cfg.j} grad_out columns hold no grad_in column of a {fx}-tap row at stride {sw}, "
                f"dilation {dw}, pad {pw}")
    rp = _filter_rows_padded(p)
    threads = 32 * cfg.num_warps
    per_thread = cfg.block_m * rp * cfg.j / threads
    if not plan.run and per_thread > _MAX_OPERAND_PER_THREAD:  # a run was sized to it (max_run)
        return (f"block_m={cfg.block_m} x {rp} filter rows x j={cfg.j} grad_out elements per dot is "
                f"{per_thread:g} per thread with num_warps={cfg.num_warps} (more than {_MAX_OPERAND_PER_THREAD})")
    acc = cfg.block_m * plan.jo / threads
    if acc > _MAX_ACC_PER_THREAD:
        return (f"block_m={cfg.block_m} x {plan.jo} result columns is {acc:g} fp32 accumulators per thread with "
                f"num_warps={cfg.num_warps} (more than {_MAX_ACC_PER_THREAD})")
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data", name="dwplane", config=DwPlaneDataConfig, decline=decline, bind=bind,
    description="depthwise dgrad on planar layouts (channels-first, group-major C = 1): grad_out rows times a "
                "banded matrix of the filter row's taps on tensor cores, fused epilogue",
    kernels=(_dwplane_dgrad_kernel,),
))
