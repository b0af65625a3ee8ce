"""conv_bwd_data (dL/dIn) as one implicit GEMM per group, with stride-phase decomposition.

Per group g: M = N * prod(in), N_gemm = C, K_gemm = K * taps and

    dx[n, hi, c] = sum over (k, tap y) of dy[n, ho, k] * w[k, y, c],  ho = (hi + lp - y*dil) / stride

where only integer, in-range ho contribute. With stride > 1 the input positions split into
stride phases (hi = r + s*i per dim); each phase is a dense sub-GEMM over only the taps that hit
(``stride_phases`` in geometry.py), so no work is spent on the zero-inserted taps. The phase table
is per dim (one row per residue r that has input positions, so at most min(stride, in) rows per
dim, not prod(stride) rows: a 4096x2048 stride stays cheap) and a phase is one row of each dim.
All phases run in ONE launch: program id 0 = (tile, phase) with the phase fastest, so consecutive
programs read the same dy rows (the phases of one tile index share their ho range) and stay in L2;
the tiles of one phase are rasterized in groups of ``group_m`` m-tiles. Program id 1 is the group.

The reduction loop runs over the flattened (tap, k-chunk) index so Triton can software-pipeline it
(``num_stages``); the accumulator is fp32 and the multiple-D epilogue (``apply_epilogue``) runs in
registers before the one store of the result. Phases with no taps skip the loop and still store
E = f(0, D...). The ``1x1s1p0`` spec is the plain GEMM of a 1x1, stride-1, pad-0 filter: no tap loop,
no ho masks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry, stride_phases
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .host import SMEM_PER_BLOCK, GemmTileConfig, check_num_stages, is_pow2

__all__ = ["ALGORITHM", "PARAM_NAMES", "SPECS", "BwdDataIgemmConfig", "bind", "decline"]

SPECS = ("default", "1x1s1p0")
_NUM_WARPS = (1, 2, 4, 8, 16)
_MAX_BLOCK = 256
_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")  # the bwd-data rows of the dtype table
_PHASE_FIELDS = 5  # per (dim, residue) row: r, count, tap0, ntaps, ho_base
_MAX_GRID_Y = 65535
_TAP_BITS = 32  # taps per dim and phase that a per-row int32 bit mask holds


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _load_tiles(a_ptrs, b_ptrs, row_ok, b_col_ok, ks, K, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
                UPCAST: tl.constexpr):
    """The dy tile [BLOCK_M, BLOCK_K] (rows masked by ``row_ok``) and the weight tile
    [BLOCK_K, BLOCK_N] of one reduction step; k / c masks only where the sizes are not even."""
    if EVEN_K:
        a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
        if EVEN_N:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=b_col_ok, other=0.0)
    else:
        k_ok = ks < K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & b_col_ok, other=0.0)
    if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return a, b


@triton.jit
def _tap_bits(v, ntaps, ho_step, n_out):
    """Per row, bit j set when tap j of the phase reads grad_out inside [0, n_out) along one dim
    (ho = v - j*ho_step); ntaps <= 32. Built once, so the loop tests one bit instead of comparing."""
    bits = tl.zeros(v.shape, dtype=tl.int32)
    for j in range(0, ntaps):
        bits |= _in_range(v - j * ho_step, n_out).to(tl.int32) << j
    return bits


@triton.jit
def _in_range(ho, n_out):
    return (ho >= 0) & (ho < n_out)


@triton.jit
def _next_step(kt, j_w, j_h, j_d, k_tiles, nt_w, nt_h):
    """The (kt, j_w, j_h, j_d) digits of the next reduction step: kt fastest, one carry per digit."""
    kt += 1
    carry = (kt == k_tiles).to(tl.int32)
    kt -= carry * k_tiles
    j_w += carry
    carry = (j_w == nt_w).to(tl.int32)
    j_w -= carry * nt_w
    j_h += carry
    carry = (j_h == nt_h).to(tl.int32)
    j_h -= carry * nt_h
    return kt, j_w, j_h, j_d + carry


@triton.jit
def _bwd_data_igemm_kernel(
    dy_ptr, w_ptr, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, phase_ptr,
    alpha, beta,
    N, K, C,  # K and C arrive divided by ALIGN
    Do, Ho, Wo,  # grad_out spatial lengths (padded to 3D)
    s_d, s_h, s_w,  # conv strides
    step_d, step_h, step_w,  # tap step per phase index j: s / gcd(s, dil)
    hstep_d, hstep_h, hstep_w,  # ho step per phase index j: dil / gcd(s, dil)
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # grad_in (and every D) strides
    ws_g, ws_k, ws_c, ws_z, ws_y, ws_x,  # weight strides
    ys_g, ys_n, ys_k, ys_d, ys_h, ys_w,  # grad_out strides (all but the channel ones divided by ALIGN)
    nph_d, nph_h, num_phases, num_pid_m, num_pid_n,  # num_pid_m: m-tiles of the largest phase
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPEC_1X1: tl.constexpr,  # 1x1 filter, stride 1, pad 0: plain GEMM over flat spatial index
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,  # K % BLOCK_K == 0, C % BLOCK_N == 0: no k / c masks
    MASK_D: tl.constexpr, MASK_H: tl.constexpr, MASK_W: tl.constexpr,  # a tap can leave grad_out along it
    TAP_BITS: tl.constexpr,  # every masked dim has <= 32 taps per phase: per-row tap bit masks
    USE_INT64: tl.constexpr,  # 64-bit offsets (a tensor has >= 2**31 elements)
    ALIGN: tl.constexpr,  # ConvGeometry.channel_alignment: K, C and the row strides are multiples of it
    UPCAST: tl.constexpr,  # load bf16 operands as fp32 before tl.dot (interpreter bug triton#11584)
    PRECISION: tl.constexpr,  # tl.dot input_precision: "ieee" or "tf32" (ignored for fp16/bf16)
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr,
):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    if USE_INT64:
        g = g.to(tl.int64)
    # multiplied back here so Triton sees the alignment (16-byte loads with 8 or 24 channels a group)
    K, C = K * ALIGN, C * ALIGN
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN
    ws_g, ws_k, ws_z, ws_y, ws_x = ws_g * ALIGN, ws_k * ALIGN, ws_z * ALIGN, ws_y * ALIGN, ws_x * ALIGN
    ys_g, ys_n, ys_d, ys_h, ys_w = ys_g * ALIGN, ys_n * ALIGN, ys_d * ALIGN, ys_h * ALIGN, ys_w * ALIGN

    # ---- which phase and which (m, n) tile: phase fastest, grouped rasterization of the tiles --
    phase = pid % num_phases
    tile = pid // num_phases
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m
    pid_n = (tile % num_pid_in_group) // group_size_m

    # ---- the phase's table rows: one per dim (residues w fastest) --------------------------
    nph_w = num_phases // (nph_d * nph_h)
    row_d = phase_ptr + (phase // (nph_h * nph_w)) * 5
    row_h = phase_ptr + (nph_d + (phase // nph_w) % nph_h) * 5
    row_w = phase_ptr + (nph_d + nph_h + phase % nph_w) * 5
    cnt_d = tl.load(row_d + 1)
    cnt_h = tl.load(row_h + 1)
    cnt_w = tl.load(row_w + 1)
    m_phase = N * cnt_d * cnt_h * cnt_w
    if pid_m * BLOCK_M >= m_phase:
        return  # this phase has fewer m-tiles than the largest one

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < m_phase
    n_ok = offs_n < C
    if USE_INT64:
        offs_n = offs_n.to(tl.int64)
        offs_k = offs_k.to(tl.int64)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_tiles = tl.cdiv(K, BLOCK_K)
    b_cols = offs_n[None, :] * ws_c
    b_col_ok = n_ok[None, :]

    if SPEC_1X1:
        # in == out and every spatial dim is packed, so the flat spatial index sp addresses both
        sp_len = cnt_d * cnt_h * cnt_w
        n_idx = offs_m // sp_len
        sp = offs_m % sp_len
        if USE_INT64:
            n_idx = n_idx.to(tl.int64)
            sp = sp.to(tl.int64)
        x_row = g * xs_g + n_idx * xs_n + sp * xs_w
        a_rows = dy_ptr + (g * ys_g + n_idx * ys_n + sp * ys_w)[:, None]
        b_base = w_ptr + g * ws_g + b_cols
        for kt in range(0, k_tiles):
            ks = kt * BLOCK_K + offs_k
            a, b = _load_tiles(a_rows + ks[None, :] * ys_k, b_base + ks[:, None] * ws_k, m_ok, b_col_ok, ks, K,
                               EVEN_K, EVEN_N, UPCAST)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    else:
        r_d = tl.load(row_d + 0)
        tap0_d = tl.load(row_d + 2)
        nt_d = tl.load(row_d + 3)
        hb_d = tl.load(row_d + 4)
        r_h = tl.load(row_h + 0)
        tap0_h = tl.load(row_h + 2)
        nt_h = tl.load(row_h + 3)
        hb_h = tl.load(row_h + 4)
        r_w = tl.load(row_w + 0)
        tap0_w = tl.load(row_w + 2)
        nt_w = tl.load(row_w + 3)
        hb_w = tl.load(row_w + 4)

        # m -> (n, i_d, i_h, i_w) of this phase; input position hi = r + s*i
        i_w = offs_m % cnt_w
        t = offs_m // cnt_w
        i_h = t % cnt_h
        t = t // cnt_h
        i_d = t % cnt_d
        n_idx = t // cnt_d
        # ho at tap index j = 0 (ho = ho_base + i - j*ho_step)
        v_d = i_d + hb_d
        v_h = i_h + hb_h
        v_w = i_w + hb_w
        if USE_INT64:
            n_idx = n_idx.to(tl.int64)
            v_d = v_d.to(tl.int64)
            v_h = v_h.to(tl.int64)
            v_w = v_w.to(tl.int64)
            i_d = i_d.to(tl.int64)
            i_h = i_h.to(tl.int64)
            i_w = i_w.to(tl.int64)
        x_row = (g * xs_g + n_idx * xs_n + (r_d + s_d * i_d) * xs_d + (r_h + s_h * i_h) * xs_h
                 + (r_w + s_w * i_w) * xs_w)
        a_rows = dy_ptr + (g * ys_g + n_idx * ys_n + v_d * ys_d + v_h * ys_h + v_w * ys_w)[:, None]
        b_base = w_ptr + (g * ws_g + tap0_d * ws_z + tap0_h * ws_y + tap0_w * ws_x) + b_cols

        # the tap (j_d, j_h, j_w) and k-chunk kt of each step are carried digits (kt fastest, one
        # add and at most one carry each) instead of divisions of the flat step index: the loop is
        # issue-bound at 8 warps, and three runtime divisions cost ~100 instructions a step
        if TAP_BITS:  # per row, bit j: tap j lands inside grad_out (in-range rows only)
            live = tl.where(m_ok, -1, 0)  # out-of-range rows: no tap
            if MASK_D:
                live &= _tap_bits(v_d, nt_d, hstep_d, Do)
            if MASK_H:
                live_h = _tap_bits(v_h, nt_h, hstep_h, Ho)
            if MASK_W:
                live_w = _tap_bits(v_w, nt_w, hstep_w, Wo)
        kt = tl.zeros([], dtype=tl.int64 if USE_INT64 else tl.int32)  # int64: shifts past 2**31
        j_w = kt
        j_h = kt
        j_d = kt
        n_iter = nt_d * nt_h * nt_w * k_tiles  # 0 for a phase no tap hits: acc stays 0
        for _ in range(0, n_iter):
            if TAP_BITS:
                bits = live
                if MASK_D:
                    bits = bits >> j_d
                if MASK_H:
                    bits = bits & (live_h >> j_h)
                if MASK_W:
                    bits = bits & (live_w >> j_w)
                row_ok = (bits & 1) != 0
            else:  # a dim with more than 32 taps in a phase: compare every row's ho
                row_ok = m_ok
                if MASK_D:
                    row_ok = row_ok & _in_range(v_d - j_d * hstep_d, Do)
                if MASK_H:
                    row_ok = row_ok & _in_range(v_h - j_h * hstep_h, Ho)
                if MASK_W:
                    row_ok = row_ok & _in_range(v_w - j_w * hstep_w, Wo)
            a_shift = j_d * (hstep_d * ys_d) + j_h * (hstep_h * ys_h) + j_w * (hstep_w * ys_w)
            b_shift = j_d * (step_d * ws_z) + j_h * (step_h * ws_y) + j_w * (step_w * ws_x)
            ks = kt * BLOCK_K + offs_k
            a, b = _load_tiles(a_rows - a_shift + ks[None, :] * ys_k, b_base + b_shift + ks[:, None] * ws_k,
                               row_ok, b_col_ok, ks, K, EVEN_K, EVEN_N, UPCAST)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
            kt, j_w, j_h, j_d = _next_step(kt, j_w, j_h, j_d, k_tiles, nt_w, nt_h)

    # ---- fused multiple-D epilogue in registers, one store ------------------------------------
    o_offs = x_row[:, None] + offs_n[None, :] * xs_c
    o_mask = m_ok[:, None] & n_ok[None, :]
    acc = apply_epilogue(acc, o_offs, o_mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                         OP, NUM_DS, USER_FN)
    tl.store(out_ptr + o_offs, acc.to(out_ptr.dtype.element_ty), mask=o_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdDataIgemmConfig(GemmTileConfig):
    """igemm's tile and pipeline: a block_m x block_n tile of grad_in (input positions x C) reduced
    over block_k-wide chunks of K * taps."""

    spec: str  # "default", or "1x1s1p0": the plain GEMM of a 1x1, stride-1, pad-0 filter

    @classmethod
    def missing_reason(cls, missing: list[str]) -> str:
        return f"missing parameters {missing} (igemm takes {', '.join(cls.param_names())})"

    def check(self) -> str | None:
        """None for a buildable tile, else why not (expansion-time cull, independent of the problem)."""
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not is_pow2(v) or v < 16:
                return f"{name}={v!r} must be a power of two >= 16 (tl.dot's smallest tile)"
            if v > _MAX_BLOCK:
                return f"{name}={v} is over {_MAX_BLOCK}"
        if self.block_m * self.block_n > 256 * 256:
            return f"a {self.block_m}x{self.block_n} fp32 accumulator does not fit in registers"
        if (why := self.group_m_reason()) is not None:
            return why
        if self.num_warps not in _NUM_WARPS:
            return f"num_warps={self.num_warps!r} must be one of {_NUM_WARPS}"
        ns = self.num_stages
        if (why := check_num_stages(ns)) is not None:
            return why
        if self.spec not in SPECS:
            return f"spec={self.spec!r} is unknown; igemm specs: {', '.join(SPECS)}"
        # a tile is impossible only if it overflows shared memory even for 2-byte operands; fp32
        # problems that overflow are declined per problem (decline) so fp16/bf16 keep big tiles
        need = self.smem_bytes(2)
        if need > SMEM_PER_BLOCK:
            return (f"needs {need // 1024} KiB of shared memory with 2-byte operands "
                    f"(num_stages={ns}), over the {SMEM_PER_BLOCK // 1024} KiB of a Hopper SM")
        return None


PARAM_NAMES = BwdDataIgemmConfig.param_names()


def decline(cfg: BwdDataIgemmConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if dtype.name not in _DTYPES:
        return (f"igemm bwd data has no {dtype.name!r} variant ({dtype.label}); it supports "
                f"{', '.join(_DTYPES)}")
    if cfg.spec == "1x1s1p0" and not params.is_1x1_stride1_pad0:
        return (f"spec 1x1s1p0 needs a 1x1 filter, stride 1 and pad 0; the problem has filter "
                f"{params.filter}, stride {params.stride}, pads {params.left_pad}/{params.right_pad}")
    if params.G > _MAX_GRID_Y:
        return f"G={params.G} is over the {_MAX_GRID_Y} groups the launch grid's y axis holds"
    elem = dtype.data.itemsize
    need = cfg.smem_bytes(elem)
    if need > SMEM_PER_BLOCK:
        return (f"tile {cfg.block_m}x{cfg.block_n}x{cfg.block_k} with num_stages="
                f"{cfg.num_stages} needs {need // 1024} KiB of shared memory for {dtype.name} "
                f"operands, over {SMEM_PER_BLOCK // 1024} KiB")
    return None


def _phase_rows(geo: ConvGeometry, spec_1x1: bool) -> list[list[tuple[int, ...]]]:
    """Per dim (D, H, W), the phase rows (r, count, tap0, ntaps, ho_base) the kernel reads.

    Only residues with input positions get a row, so a dim has min(stride, in) rows at most.
    """
    if spec_1x1:
        return [[(0, n, 0, 1, 0)] for n in geo.in3]
    return [[(pd.r, pd.count, pd.tap0, pd.ntaps, pd.ho_base) for pd in per_dim if pd.count > 0]
            for per_dim in stride_phases(geo)]


def _phase_table(dims: list[list[tuple[int, ...]]], device: torch.device) -> tuple:
    """(int32 tensor of the per-dim rows on ``device``, (rows of D, H, W), largest phase's prod(count))."""
    m_max = math.prod(max(row[1] for row in rows) for rows in dims)
    flat = [v for rows in dims for row in rows for v in row]
    assert len(flat) == _PHASE_FIELDS * sum(len(rows) for rows in dims)
    return torch.tensor(flat, dtype=torch.int32).to(device), tuple(len(rows) for rows in dims), m_max


def _needs_mask(rows: list[tuple[int, ...]], ho_step: int, n_out: int) -> bool:
    """Whether some tap of some phase reads outside grad_out along this dim (ho = ho_base + i -
    j*ho_step for i < count, j < ntaps); a dim that never does (e.g. an unpadded 1x1, or the neutral
    leading dims of 1D/2D) needs no per-row mask in the loop."""
    return any(nt > 0 and (hb - (nt - 1) * ho_step < 0 or hb + cnt - 1 >= n_out)
               for _, cnt, _, nt, hb in rows)


def _row_masks(rows: list[list[tuple[int, ...]]], hsteps: list[int], out3: tuple[int, int, int]
               ) -> tuple[tuple[bool, bool, bool], int]:
    """(per dim D, H, W: whether the loop masks rows along it, the most taps a phase has along a
    masked dim): tap bit masks hold _TAP_BITS taps, past that the loop compares."""
    masks = tuple(_needs_mask(rows[a], hsteps[a], out3[a]) for a in range(3))
    return masks, max([row[3] for a in range(3) if masks[a] for row in rows[a]], default=0)


def _packed(strides: tuple[int, ...], lens: tuple[int, int, int]) -> bool:
    """Spatial dims d, h, w laid out back to back (flat index * w stride addresses them)."""
    sd, sh, sw = strides
    return (lens[1] == 1 or sh == lens[2] * sw) and (lens[0] == 1 or sd == lens[1] * lens[2] * sw)


def bind(args: RunArgs) -> Runner:
    """Everything but the tensors, computed once: a runner that fills a preallocated grad_in."""
    geo, cfg, dt = args.geo, args.cfg, args.dtype
    spec_1x1 = cfg.spec == "1x1s1p0"
    assert dt.name in _DTYPES, dt.name
    assert args.out.is_contiguous() and args.out.dtype == (dt.result or dt.data)
    if spec_1x1:
        assert args.params.is_1x1_stride1_pad0
        assert geo.in3 == geo.out3
        assert _packed(geo.x_strides[3:], geo.in3) and _packed(geo.y_strides[3:], geo.out3)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    rows = _phase_rows(geo, spec_1x1)
    table, (nph_d, nph_h, nph_w), m_cnt = _phase_table(rows, args.out.device)
    n_phases = nph_d * nph_h * nph_w
    num_pid_m = triton.cdiv(geo.N * m_cnt, bm)
    num_pid_n = triton.cdiv(geo.C, bn)
    grid = (n_phases * num_pid_m * num_pid_n, geo.G)

    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "ieee" if (dt.compute == "ieee" or upcast) else "tf32"
    n_ds = len(args.ds)
    s, d = geo.stride3, geo.dil3
    steps = [s[a] // math.gcd(s[a], d[a]) for a in range(3)]
    hsteps = [d[a] // math.gcd(s[a], d[a]) for a in range(3)]
    masks, most_taps = _row_masks(rows, hsteps, geo.out3)
    align = geo.channel_alignment()
    scalars = (
        geo.N, geo.K // align, geo.C // align, *geo.out3, *s, *steps, *hsteps,
        *geo.strides_over(align),
        nph_d, nph_h, n_phases, num_pid_m, num_pid_n,
    )
    kernel = BoundKernel(
        _bwd_data_igemm_kernel, grid,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m,
        SPEC_1X1=spec_1x1,
        EVEN_K=geo.K % bk == 0, EVEN_N=geo.C % bn == 0,
        MASK_D=masks[0], MASK_H=masks[1], MASK_W=masks[2], TAP_BITS=most_taps <= _TAP_BITS,
        USE_INT64=geo.needs_int64,
        ALIGN=align,
        UPCAST=upcast,
        PRECISION=precision,
        OP=args.fused.code, NUM_DS=n_ds, USER_FN=user_fn_or_noop(args.user_fn),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        kernel(dy, w, out, *epilogue_args(ds, out), table, alpha, beta, *scalars)

    return run


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data",
    name="igemm",
    config=BwdDataIgemmConfig,
    decline=decline,
    bind=bind,
    description=(
        "implicit GEMM dL/dIn per group (M = N*prod(in), N = C, K = K*taps) with all stride phases "
        "in one launch, flattened (tap, k) pipelined loop, grouped rasterization, fp32 accumulate, "
        "fused multiple-D epilogue; spec 1x1s1p0 is the plain GEMM of a 1x1/stride-1/pad-0 filter"
    ),
    kernels=(_bwd_data_igemm_kernel,),
))
