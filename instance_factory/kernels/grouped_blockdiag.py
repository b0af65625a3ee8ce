"""Grouped convolutions with few channels per group on tensor cores: block-diagonal tiles ("blockdiag").

A grouped convolution is G independent GEMMs. With C, K per group below tl.dot's smallest tile
(16) one group per program wastes most of each tile and gathers short rows; ``direct`` avoids the
waste but runs on fp32 FMAs and re-reads dy once per output channel. Here one program owns GPT
whole groups side by side: in the channels-last layouts the flattened (g, c) and (g, k) axes of
those groups are contiguous, so every operand row is one contiguous run of GPT*C (or GPT*K)
elements, and the weight becomes a block-diagonal [GPT*K x GPT*C] tile (zeros off the diagonal
blocks). The tensor cores then do GPT times the useful work, which at 16x16 tiles costs less than
the FMA path, while HBM sees each operand once.

conv_bwd_data: dx[m, (g, c)] = sum over taps hitting m's stride phase of
    dy[m shifted by the tap, (g, k)] @ blockdiag(w[g, k, tap, c]).
    Grid = (position tiles of the largest stride phase, group blocks, stride phases); as in
    ``direct`` a program's positions all lie in one phase, so a tap's hit test is a scalar branch.

conv_bwd_weight runs on the same tiles in ``grouped_rows`` (``bdrow``), which walks the reduction by
output-row blocks; this module's own wgrad kernel (flattened positions, ~500 instructions per step
of index math) lost every grouped and depthwise layer to bdrow or dwslide on an H100 and was retired
in session 8. ``tile_groups``, the config checks and the common declines here serve both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .common import (
    MAX_GRID_YZ,
    DirectStyleConfig,
    num_phases,
    require_contiguous,
)
from .host import INT32_LIMIT

__all__ = ["ALGORITHM_BWD_DATA", "MAX_CHANNELS_PER_GROUP", "BlockdiagDataConfig", "tile_groups"]

MAX_CHANNELS_PER_GROUP = 64  # wider groups fill igemm's own tiles
_MIN_DOT = 16  # tl.dot's smallest tile side
_MAX_ROWS = 128  # BLOCK_K: the rows (g, k) of a tile
_DATA_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")


def tile_groups(K: int, C: int, block_n: int) -> tuple[int, int, int]:
    """(groups per tile GPT, column block, row block) for C, K per group and ``block_n`` columns:
    as many whole groups as fit in block_n columns and 128 rows; both blocks at least 16."""
    gpt = max(1, min(block_n // C, _MAX_ROWS // K))
    bn = max(_MIN_DOT, triton.next_power_of_2(gpt * C))
    bk = max(_MIN_DOT, triton.next_power_of_2(gpt * K))
    return gpt, bn, bk


@triton.jit
def _channels_ok(j, g0, G, PER: tl.constexpr, GPT: tl.constexpr):
    """Which of a tile's flattened (group, channel) slots j hold a real channel of groups g0 ..
    g0+GPT-1: written as a bound on the flat index (not on j // PER) so that the mask stays constant
    over aligned runs of 16 and the loads and stores it guards can vectorize."""
    return (j < GPT * PER) & (g0 * PER + j < G * PER)


# ------------------------------------------------------------------------------------------------
# conv_bwd_data
# ------------------------------------------------------------------------------------------------
@triton.jit
def _bd_dgrad_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr,
    alpha, beta,
    N, G,
    Di, Hi, Wi, Do, Ho, Wo,
    FZ, FY, FX,
    s_d, s_h, s_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w,
    MD, MH, MW,  # the largest phase's position counts per dim: ceil(in / stride)
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # result (and every D) strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # weight strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    K: tl.constexpr, C: tl.constexpr, GPT: tl.constexpr,  # per group, groups per tile
    ALIGN: tl.constexpr,  # ConvGeometry.channel_alignment: multiplied back below so loads vectorize
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PACKED_X: tl.constexpr, PACKED_Y: tl.constexpr,  # (g, c) / (g, k) contiguous: flat offsets
    USE_INT64: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_g = tl.program_id(1)
    phase = tl.program_id(2)
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_z, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_z * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_d, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_d * ALIGN, ys_h * ALIGN, ys_w * ALIGN

    # ---- the stride phase (r_d, r_h, r_w): residues below the input length only ---------------
    nr_w = tl.minimum(s_w, Wi)
    nr_h = tl.minimum(s_h, Hi)
    r_w = phase % nr_w
    r_h = (phase // nr_w) % nr_h
    r_d = phase // (nr_w * nr_h)
    cnt_d = (Di - r_d + s_d - 1) // s_d
    cnt_h = (Hi - r_h + s_h - 1) // s_h
    cnt_w = (Wi - r_w + s_w - 1) // s_w

    # ---- input positions of this phase: flattened (n, i_d, i_h, i_w), hi = r + s*i ----------
    if USE_INT64:
        pid_m = pid_m.to(tl.int64)
    pos = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    b_w = pos % MW
    q = pos // MW
    b_h = q % MH
    q = q // MH
    b_d = q % MD
    n = q // MD
    pmask = (n < N) & (b_d < cnt_d) & (b_h < cnt_h) & (b_w < cnt_w)
    y_n = n * ys_n

    # ---- the GPT groups of this program: columns (g, c), rows (g, k) ---------------------------
    g0 = pid_g * GPT
    jn = tl.arange(0, BLOCK_N)
    jk = tl.arange(0, BLOCK_K)
    gl_n = jn // C
    gl_k = jk // K
    n_ok = _channels_ok(jn, g0, G, C, GPT)
    k_ok = _channels_ok(jk, g0, G, K, GPT)
    if PACKED_Y:
        a_col = g0 * K + jk
    else:
        a_col = (g0 + gl_k) * ys_g + (jk % K) * ys_k
    b_off = ((g0 + gl_k) * ws_g + (jk % K) * ws_k)[:, None] + ((jn % C) * ws_c)[None, :]
    b_mask = k_ok[:, None] & n_ok[None, :] & (gl_k[:, None] == gl_n[None, :])

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # tap z hits phase r iff (r + pad - z*dil) % s == 0; shifted by s*dil*(F-1) to stay >= 0
    for z in range(FZ):
        a_d = r_d + pad_d + s_d * dil_d * (FZ - 1) - z * dil_d
        if a_d % s_d == 0:
            o_d = b_d + (a_d // s_d - dil_d * (FZ - 1))
            m_d = pmask & (o_d >= 0) & (o_d < Do)
            for y in range(FY):
                a_h = r_h + pad_h + s_h * dil_h * (FY - 1) - y * dil_h
                if a_h % s_h == 0:
                    o_h = b_h + (a_h // s_h - dil_h * (FY - 1))
                    m_h = m_d & (o_h >= 0) & (o_h < Ho)
                    for x in range(FX):
                        a_w = r_w + pad_w + s_w * dil_w * (FX - 1) - x * dil_w
                        if a_w % s_w == 0:
                            o_w = b_w + (a_w // s_w - dil_w * (FX - 1))
                            m = m_h & (o_w >= 0) & (o_w < Wo)
                            y_pos = y_n + o_d * ys_d + o_h * ys_h + o_w * ys_w
                            a = tl.load(dy_ptr + (y_pos[:, None] + a_col[None, :]),
                                        mask=m[:, None] & k_ok[None, :], other=0.0)
                            b = tl.load(w_ptr + (z * ws_z + y * ws_y + x * ws_x) + b_off, mask=b_mask,
                                        other=0.0)
                            if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
                                a = a.to(tl.float32)
                                b = b.to(tl.float32)
                            acc = tl.dot(a, b, acc, input_precision=PRECISION)

    x_pos = (n * xs_n + (r_d + s_d * b_d) * xs_d + (r_h + s_h * b_h) * xs_h
             + (r_w + s_w * b_w) * xs_w)
    if PACKED_X:
        x_col = g0 * C + jn
    else:
        x_col = (g0 + gl_n) * xs_g + (jn % C) * xs_c
    offs = x_pos[:, None] + x_col[None, :]
    mask = pmask[:, None] & n_ok[None, :]
    acc = apply_epilogue(acc, offs, mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                         OP, NUM_DS, USER_FN)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _packed(strides: tuple[int, ...], per_group: int) -> bool:
    """(g, ch) flattened is one contiguous axis: ch stride 1 and g stride = channels per group."""
    return strides[2] == 1 and strides[0] == per_group


def _precision(args: RunArgs) -> tuple[bool, str]:
    """(upcast bf16 operands to fp32 before tl.dot, tl.dot's input_precision)."""
    dt = args.dtype
    upcast = interpreting() and dt.data == torch.bfloat16  # bf16 tl.dot is wrong there (triton#11584)
    return upcast, "ieee" if (dt.compute == "ieee" or upcast) else "tf32"


def bind_bwd_data(args: RunArgs) -> Runner:
    """A runner filling grad_in (final dtype) from grad_out and weight; all sizes fixed here once."""
    geo, cfg = args.geo, args.cfg
    require_contiguous(args, "blockdiag", "conv_bwd_data")
    gpt, bn, bk = tile_groups(geo.K, geo.C, int(cfg.block_n))
    bm = int(cfg.block_m)
    md, mh, mw = (triton.cdiv(i, s) for i, s in zip(geo.in3, geo.stride3))
    n_pos = geo.N * md * mh * mw
    use_int64 = geo.needs_int64 or n_pos + bm >= INT32_LIMIT
    upcast, precision = _precision(args)
    align = geo.channel_alignment()
    grid = (triton.cdiv(n_pos, bm), triton.cdiv(geo.G, gpt), num_phases(geo.in3, geo.stride3))
    kernel = BoundKernel(
        _bd_dgrad_kernel, grid,
        K=geo.K, C=geo.C, GPT=gpt, ALIGN=align, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
        PACKED_X=_packed(geo.x_strides, geo.C), PACKED_Y=_packed(geo.y_strides, geo.K),
        USE_INT64=use_int64, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=int(cfg.num_warps),
    )
    sizes = (geo.N, geo.G, *geo.in3, *geo.out3, *geo.filt3, *geo.stride3, *geo.dil3, *geo.pad3,
             md, mh, mw, *geo.strides_over(align))

    def run(dy, w, out, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), alpha, beta, *sizes)

    return run


# ------------------------------------------------------------------------------------------------
# configs and declines
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _BlockdiagTile(DirectStyleConfig):
    """The checks both blockdiag configs share: the direct-style ones, then both tile sides (the
    position block, first in POW2_BLOCKS, and block_n) at least tl.dot's smallest."""

    ALGORITHM: ClassVar[str] = "blockdiag"

    def check(self) -> str | None:
        reason = super().check()
        if reason:
            return reason
        pos_block = self.POW2_BLOCKS[0]
        if getattr(self, pos_block) < _MIN_DOT or self.block_n < _MIN_DOT:
            return f"{pos_block} and block_n must be at least {_MIN_DOT} (tl.dot's smallest tile)"
        return None


@dataclass(frozen=True)
class BlockdiagDataConfig(_BlockdiagTile):
    """blockdiag dgrad: block_m positions x block_n columns (whole groups side by side) per tile."""

    block_m: int
    block_n: int
    num_warps: int

    POW2_BLOCKS: ClassVar[tuple[str, ...]] = ("block_m", "block_n")

    def check(self) -> str | None:
        reason = super().check()
        if reason is None and self.block_m * self.block_n > 128 * 32 * self.num_warps:
            return (f"block_m*block_n={self.block_m * self.block_n} needs more than 128 fp32 "
                    f"accumulators per thread with num_warps={self.num_warps}")
        return reason


def _decline_common(cfg: _BlockdiagTile, p: ConvParams, dtype: DataType, allowed: tuple[str, ...],
                    op: str) -> str | None:
    if dtype.name not in allowed:
        return f"{cfg.ALGORITHM} {op} takes the dtypes {', '.join(allowed)}, not {dtype.name}"
    if p.G == 1:
        return f"{cfg.ALGORITHM} is for grouped convolutions (G > 1); a dense one is igemm's"
    if p.C > MAX_CHANNELS_PER_GROUP or p.K > MAX_CHANNELS_PER_GROUP:
        return (f"{cfg.ALGORITHM} serves C, K per group <= {MAX_CHANNELS_PER_GROUP}; this problem has "
                f"C={p.C}, K={p.K} (igemm's tiles fit it)")
    if p.C > cfg.block_n:
        return f"C={p.C} per group is wider than block_n={cfg.block_n}: one group must fit a tile"
    gpt, _, _ = tile_groups(p.K, p.C, cfg.block_n)
    if triton.cdiv(p.G, gpt) > MAX_GRID_YZ:
        return f"G={p.G} needs more than {MAX_GRID_YZ} group blocks of {gpt}"
    return None


def decline_bwd_data(cfg: BlockdiagDataConfig, p: ConvParams, layout: LayoutTriple, dtype: DataType,
                     fused: FusedOp) -> str | None:
    phases = num_phases(p.input, p.stride)
    return _decline_common(cfg, p, dtype, _DATA_DTYPES, "conv_bwd_data") or (
        f"{phases} stride phases exceed the grid's {MAX_GRID_YZ}" if phases > MAX_GRID_YZ else None)


ALGORITHM_BWD_DATA = register_algorithm(Algorithm(
    op="conv_bwd_data", name="blockdiag", config=BlockdiagDataConfig, decline=decline_bwd_data, bind=bind_bwd_data,
    description="grouped dgrad with few channels per group on tensor cores: several whole groups per "
                "tile, block-diagonal weight tile, one stride phase per program, fused epilogue",
    kernels=(_bd_dgrad_kernel,),
))
