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
[BLOCK_M, RP*J] x [RP*J, J]. The product spends RP*J*J multiply-adds per TW outputs on FZ*FY*FX
useful ones (at 3x3, J 32: ~64 MMA products per output); tensor cores have that headroom, and a row
of grad_out is loaded once per filter row with 16-byte vectors.

Grid = (G, chunks of column blocks), g fastest. No reduction: each dot's tile is stored with the
fused epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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
from .depthwise_plane import planar_reason, plane_vector
from .depthwise_stream import vector_width
from .host import INT32_LIMIT, sm_count

__all__ = ["ALGORITHM", "DTYPES", "DwPlaneDataConfig", "bind", "block_plan", "decline", "model_work"]

DTYPES = ("fp16", "bf16", "fp32_tf32")  # tensor-core products (tf32: three bf16 parts)
_MAX_OPERAND_PER_THREAD = 128  # elements of the gathered [BLOCK_M, RP*J] grad_out tile per thread
_PROGRAMS_PER_SM = 8


@triton.jit
def _toeplitz(w_ptr, g, CB, FY, FX, R, s_w, dil_w, pad_w, ws_g, ws_z, ws_y, ws_x,
              J: tl.constexpr, RP: tl.constexpr):
    """T [RP*J, J]: T[r*J + j, i] = w[g, tz, ty, tx] with (tz, ty) = divmod(r, FY) and
    tx*dil_w = i + pad_w - s_w*(CB + j); zero where no tap of row r links column j to column i."""
    r = tl.arange(0, RP)[:, None, None]
    jj = tl.arange(0, J)[None, :, None]
    ii = tl.arange(0, J)[None, None, :]
    e = ii + pad_w - s_w * (CB + jj)  # [1, J, J]
    e_pos = tl.where(e >= 0, e, 0)
    tx = e_pos // dil_w
    ok = (e >= 0) & (e_pos - tx * dil_w == 0) & (tx < FX) & (r < R)
    tz = r // FY
    ty = r - tz * FY
    t = tl.load(w_ptr + g * ws_g + tz * ws_z + ty * ws_y + tx * ws_x, mask=ok, other=0.0)
    return tl.reshape(t, (RP * J, J))


@triton.jit
def _dwplane_dgrad_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    M, chunk, XB, TW_V, TWS_V, CB_V,  # column blocks per group (N*Di*Hi*XB), per program, per row; grad_in
    # columns per block / VEC; grad_out columns advanced per block / VEC; block 0's first grad_out column / VEC
    Di, Hi, WI_V, Do, Ho, WO_V,
    FY, FX, R,  # filter rows R = FZ*FY
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    xs_g, xs_n, xs_d, xs_h,  # grad_in (and every D) strides / VEC (w: 1)
    ys_g, ys_n, ys_d, ys_h,  # grad_out strides / VEC (w: 1)
    ws_g, ws_z, ws_y, ws_x,  # weight strides
    BLOCK_M: tl.constexpr, J: tl.constexpr, RP: tl.constexpr, VEC: tl.constexpr,
    OPERANDS: tl.constexpr, USE_INT64: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    g = tl.program_id(0)
    sid = tl.program_id(1)
    if USE_INT64:
        g = g.to(tl.int64)
        sid = sid.to(tl.int64)
    m_start = sid * chunk
    m_end = tl.minimum(m_start + chunk, M)
    t = _toeplitz(w_ptr, g, CB_V * VEC, FY, FX, R, s_w, dil_w, pad_w, ws_g, ws_z, ws_y, ws_x, J, RP)

    rows = tl.arange(0, BLOCK_M)
    rr = tl.arange(0, RP)
    tz = rr // FY
    ty = rr - tz * FY
    j = tl.arange(0, J)[None, None, :]
    jv = j // VEC  # constant over aligned runs of VEC: the loads and their masks vectorize
    i = tl.arange(0, J)
    iv = i // VEC
    for m0 in range(m_start, m_end, BLOCK_M):
        m = m0 + rows
        live = m < m_end
        xb = m % XB
        q = m // XB
        ih = q % Hi
        q = q // Hi
        i_d = q % Di
        n = q // Di
        # grad_out rows of the filter rows: od*s_d = id + p_d - tz*dil_d, oh*s_h = ih + p_h - ty*dil_h
        od_num = i_d[:, None] + pad_d - tz[None, :] * dil_d  # [BLOCK_M, RP]
        oh_num = ih[:, None] + pad_h - ty[None, :] * dil_h
        od = tl.where(od_num >= 0, od_num, 0) // s_d
        oh = tl.where(oh_num >= 0, oh_num, 0) // s_h
        row_ok = (live[:, None] & (rr < R)[None, :] & (od_num >= 0) & (od * s_d == od_num) & (od < Do)
                  & (oh_num >= 0) & (oh * s_h == oh_num) & (oh < Ho))
        c0_v = xb * TWS_V + CB_V
        row_off = (g * ys_g + n * ys_n + c0_v)[:, None] + od * ys_d + oh * ys_h  # [BLOCK_M, RP]
        cv = c0_v[:, None, None] + jv
        col_ok = (cv >= 0) & (cv < WO_V)
        a = tl.load(dy_ptr + (row_off * VEC)[:, :, None] + j, mask=row_ok[:, :, None] & col_ok, other=0.0)
        a = tl.reshape(a, (BLOCK_M, RP * J))
        acc = dot_tn(tl.trans(a), t, tl.zeros((BLOCK_M, J), dtype=tl.float32), OPERANDS)
        # grad_in columns xb*TW + i, i < TW
        x_row = g * xs_g + n * xs_n + i_d * xs_d + ih * xs_h + xb * TW_V
        offs = (x_row * VEC)[:, None] + i[None, :]
        keep = live[:, None] & (iv < TW_V)[None, :] & ((xb * TW_V)[:, None] + iv[None, :] < WI_V)
        res = apply_epilogue(acc, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)


@dataclass(frozen=True)
class DwPlaneDataConfig(DirectStyleConfig):
    """dwplane (bwd data): block_m column blocks per dot (its M); j grad_out columns per block and
    filter row (the block holds up to j*s_w - dil*(FX-1) grad_in columns, :func:`block_plan`)."""

    block_m: int
    j: int
    num_warps: int
    num_stages: int

    ALGORITHM: ClassVar[str] = "dwplane"
    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_m", "j")

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        if self.block_m < 16 or self.j < 16:
            return f"block_m={self.block_m} and j={self.j} must be at least 16 (the dot's smallest tile)"
        if self.num_stages not in (1, 2, 3, 4):
            return f"num_stages={self.num_stages!r} must be 1 to 4"
        return None


def block_plan(j: int, fx: int, stride_w: int, dil_w: int, pad_w: int, vec: int) -> tuple[int, int, int]:
    """(grad_in columns per block TW, block 0's first grad_out column CB, vector width): the largest TW
    <= j, a multiple of s_w*vec, whose grad_out columns (from CB, the leftmost any tap reaches rounded
    down to vec) fit in j; unvectorized (vec 1) when no aligned block fits. TW 0: j is too narrow."""
    for v in dict.fromkeys((vec, 1)):
        cb = (pad_w - dil_w * (fx - 1)) // stride_w
        cb -= cb % v
        step = stride_w * v
        tw = j // step * step
        while tw > 0 and (tw - 1 + pad_w) // stride_w - cb > j - 1:
            tw -= step
        if tw > 0:
            return tw, cb, v
    return 0, 0, 1


def _filter_rows_padded(p: ConvParams) -> int:
    fz, fy = (1, 1, *p.filter)[-3:-1]
    return triton.next_power_of_2(fz * fy)


def model_work(p: ConvParams, j: int) -> tuple[int, int, int]:
    """(grad_out tile elements loaded + grad_in elements stored, products of the dots, vector width) of
    one call with j-column blocks, for the cost model (tuning/roofline.py). The layout is not known
    there: the vector width is taken from the plane widths alone (planar strides are multiples of them)."""
    fx = p.filter[-1]
    di, hi, wi = (1, 1, *p.input)[-3:]
    vec = vector_width((p.input[-1],), p.output[-1])
    tw, _, vec = block_plan(j, fx, p.stride[-1], p.dilation[-1], p.left_pad[-1], vec)
    rp = _filter_rows_padded(p)
    blocks = p.G * p.N * di * hi * triton.cdiv(wi, max(tw, 1))
    return blocks * (rp + 1) * j, blocks * rp * j * j, vec


def bind(args: RunArgs, *, force_int64: bool = False) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg, p = args.geo, args.cfg, args.params
    require_runnable(decline(cfg, p, args.layout, args.dtype, args.fused), "dwplane", p)
    require_contiguous(args, "dwplane", "conv_bwd_data")
    block_m, j = int(cfg.block_m), int(cfg.j)
    fz, fy, fx = geo.filt3
    Di, Hi, Wi = geo.in3
    Do, Ho, Wo = geo.out3
    tw, cb, vec = block_plan(j, fx, geo.stride3[2], geo.dil3[2], geo.pad3[2], plane_vector(geo))
    xb = triton.cdiv(Wi, tw)
    blocks = geo.N * Di * Hi * xb
    chunks = occupancy_split(geo.G, sm_count(args.out.device), _PROGRAMS_PER_SM, triton.cdiv(blocks, block_m))
    chunk = triton.cdiv(blocks, min(chunks, MAX_GRID_YZ))
    chunk = triton.cdiv(chunk, block_m) * block_m  # whole dots per program
    chunks = triton.cdiv(blocks, chunk)
    use_int64 = force_int64 or geo.needs_int64 or blocks + chunk >= INT32_LIMIT
    main = BoundKernel(_dwplane_dgrad_kernel, (geo.G, chunks),
                       BLOCK_M=block_m, J=j, RP=_filter_rows_padded(p), VEC=vec,
                       OPERANDS=dot_operands(args.dtype), USE_INT64=use_int64,
                       OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
                       num_warps=int(cfg.num_warps), num_stages=int(cfg.num_stages))
    xs, ys, ws = geo.x_strides, geo.y_strides, geo.w_strides
    sizes = (blocks, chunk, xb, tw // vec, tw // geo.stride3[2] // vec, cb // vec, Di, Hi, Wi // vec, Do, Ho, Wo // vec,
             fy, fx, fz * fy, *geo.stride3, *geo.dil3, *geo.pad3,
             xs[0] // vec, xs[1] // vec, xs[3] // vec, xs[4] // vec,
             ys[0] // vec, ys[1] // vec, ys[3] // vec, ys[4] // vec, ws[0], ws[3], ws[4], ws[5])

    def run(dy, w, out, ds: tuple, alpha: float, beta: float) -> None:
        main(dy, w, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


def decline(cfg: DwPlaneDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    if dtype.name not in DTYPES:
        return (f"dwplane multiplies on tensor cores: it takes {', '.join(DTYPES)}, not {dtype.name} "
                "(direct and dwtaps run true fp32)")
    if p.C != 1 or p.K != 1:
        return f"dwplane serves depthwise groups (C = K = 1); this problem has C={p.C}, K={p.K}"
    if layout.layout_family == "nhwgc":  # relayout's twins: dwplane never serves them (its rows stay apart)
        return "dwplane reads planar layouts (channels-first, group-major); channels-last kernels fit NHWGC"
    reason = planar_reason(ConvGeometry.build(p, layout))
    if reason:
        return reason
    fx, sw, dw, pw = p.filter[-1], p.stride[-1], p.dilation[-1], p.left_pad[-1]
    if block_plan(cfg.j, fx, sw, dw, pw, 1)[0] < 1:
        return (f"j={cfg.j} grad_out columns hold no grad_in column of a {fx}-tap row at stride {sw}, "
                f"dilation {dw}, pad {pw}")
    rp = _filter_rows_padded(p)
    per_thread = cfg.block_m * rp * cfg.j / (32 * cfg.num_warps)
    if per_thread > _MAX_OPERAND_PER_THREAD:
        return (f"block_m={cfg.block_m} x {rp} filter rows x j={cfg.j} grad_out elements per dot is "
                f"{per_thread:g} per thread with num_warps={cfg.num_warps} (more than {_MAX_OPERAND_PER_THREAD})")
    return None


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data", name="dwplane", config=DwPlaneDataConfig, decline=decline, bind=bind,
    description="depthwise dgrad on planar layouts (channels-first, group-major C = 1): grad_out rows times a "
                "banded matrix of the filter row's taps on tensor cores, fused epilogue",
    kernels=(_dwplane_dgrad_kernel,),
))
