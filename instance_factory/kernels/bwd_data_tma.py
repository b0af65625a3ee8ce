"""conv_bwd_data (dL/dIn) as an implicit GEMM whose operands arrive by TMA boxes: no masks, no address math.

The same math and stride phases as ``bwd_data_igemm`` (M = input positions of one phase, N = C,
reduction over K * taps(phase)), but the M tile is a block_h x block_w patch of one (n, d) plane of
the phase instead of a flat strip of positions. For tap j the grad_out rows it needs are then one
box of the channels-last grad_out tensor, a 5-D TMA descriptor [N*Do, Ho, Wo, G, K]:

    box at (n*Do + d_out, ho0 - j_h*ho_step, wo0 - j_w*ho_step, g, k0), shape [1, bh, bw, 1, bk]

TMA fills the parts of a box outside grad_out with zeros, which is exactly the padding halo, so the
reduction loop has no row masks and no per-row addresses (the igemm loop spends ~140 instructions a
step on them). The weight tile is a box of the 4-D view [G, K, taps, C]. Along D the tile is a single
plane, so the taps that leave grad_out along D are skipped by the loop bounds instead of masked.

The cost: a patch of block_h x block_w covers a ceil-rounded area (a 7x7 plane in an 8x8 patch does
49/64 useful rows), so the tuner picks the patch shape per problem. Only layouts whose grad_out has
unit K stride and whose weight has unit C stride with packed taps (NHWGC / GNHWC families) and
channels that keep every TMA stride 16-byte aligned run here; the rest decline to igemm. The result
and the D tensors are written through pointers (once per tile), so any output layout works.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..algorithms import Algorithm, RunArgs, Runner, interpreting, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp, apply_epilogue, epilogue_args, user_fn_or_noop
from ..fast_launch import BoundKernel
from ..geometry import ConvGeometry
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple
from ..problem import ConvParams
from .bwd_data_igemm import _next_step, _phase_rows, _phase_table
from .host import SMEM_PER_BLOCK, check_num_stages, is_pow2, operand_smem_bytes

try:  # Triton >= 3.4: host-side tensor descriptors
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - an older Triton: every problem declines
    TensorDescriptor = None

__all__ = ["ALGORITHM", "BwdDataTmaConfig", "bind", "channels_last_view", "decline", "descriptor_template",
           "kmajor_weight", "tma_ready"]

_DTYPES = ("fp32", "fp32_tf32", "fp16", "bf16")
_NUM_WARPS = (4, 8)
_MAX_GRID_Y = 65535
_TMA_BYTES = 16  # TMA: base address and every stride but the innermost a multiple of 16 bytes
_MAX_BOX = 256  # TMA: at most 256 elements per box dim


# ------------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------------
@triton.jit
def _bwd_data_tma_kernel(
    dy_desc, w_desc, out_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, phase_ptr,
    alpha, beta,
    N, K, C,  # C arrives divided by ALIGN
    Do, X_TAPS, YX_TAPS,  # grad_out depth; taps per filter row (X) and per filter plane (Y*X)
    s_d, s_h, s_w,  # conv strides
    step_d, step_h, step_w,  # tap step per phase index j: s / gcd(s, dil)
    hstep_d, hstep_h, hstep_w,  # ho step per phase index j: dil / gcd(s, dil)
    xs_g, xs_n, xs_c, xs_d, xs_h, xs_w,  # grad_in (and every D) strides, all but xs_c divided by ALIGN
    nph_d, nph_h, num_phases,
    cnt_d_max, tiles_h, tiles_w, num_pid_n,  # patches of the largest phase, c-tiles
    BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_N: tl.constexpr,  # C % BLOCK_N == 0
    USE_INT64: tl.constexpr, ALIGN: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr, W_KMAJOR: tl.constexpr,
):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    C = C * ALIGN
    xs_g, xs_n, xs_d, xs_h, xs_w = xs_g * ALIGN, xs_n * ALIGN, xs_d * ALIGN, xs_h * ALIGN, xs_w * ALIGN

    # ---- (patch, c-tile, phase), phase fastest: the phases of one patch read the same grad_out
    # boxes, and the c-tiles of one patch too, so neighbouring programs share them in L2 ----------
    phase = pid % num_phases
    t = pid // num_phases
    pid_n = t % num_pid_n
    t = t // num_pid_n
    tw = t % tiles_w
    t = t // tiles_w
    th = t % tiles_h
    nd = t // tiles_h
    n = nd // cnt_d_max
    i_d = nd % cnt_d_max

    nph_w = num_phases // (nph_d * nph_h)
    row_d = phase_ptr + (phase // (nph_h * nph_w)) * 5
    row_h = phase_ptr + (nph_d + (phase // nph_w) % nph_h) * 5
    row_w = phase_ptr + (nph_d + nph_h + phase % nph_w) * 5
    cnt_d = tl.load(row_d + 1)
    cnt_h = tl.load(row_h + 1)
    cnt_w = tl.load(row_w + 1)
    i0_h = th * BLOCK_H
    i0_w = tw * BLOCK_W
    if (i_d >= cnt_d) | (i0_h >= cnt_h) | (i0_w >= cnt_w):
        return  # this phase is smaller than the largest one

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

    # along D the patch is one plane: the taps j_d with 0 <= hb_d + i_d - j_d*hstep_d < Do
    v_d = hb_d + i_d
    jd_lo = tl.maximum(0, (v_d - Do + hstep_d) // hstep_d)  # v_d - Do + hstep_d > 0 when it matters
    jd_hi = tl.where(v_d >= 0, tl.minimum(nt_d, v_d // hstep_d + 1), 0)
    k_tiles = tl.cdiv(K, BLOCK_K)
    n_iter = tl.maximum(jd_hi - jd_lo, 0) * nt_h * nt_w * k_tiles  # 0: acc stays 0, E = f(0, D)

    nd_base = n * Do + v_d  # merged (n, d_out) coordinate at j_d = 0
    ho0 = hb_h + i0_h
    wo0 = hb_w + i0_w
    c0 = pid_n * BLOCK_N
    tap_base = tap0_d * YX_TAPS + tap0_h * X_TAPS + tap0_w
    tstep_d = step_d * YX_TAPS
    tstep_h = step_h * X_TAPS

    acc = tl.zeros((BLOCK_H * BLOCK_W, BLOCK_N), dtype=tl.float32)
    kt = jd_lo * 0
    j_w = kt
    j_h = kt
    j_d = jd_lo
    for _ in range(0, n_iter):
        a = dy_desc.load([nd_base - j_d * hstep_d, ho0 - j_h * hstep_h, wo0 - j_w * hstep_w, g,
                          kt * BLOCK_K]).reshape(BLOCK_H * BLOCK_W, BLOCK_K)
        tap = tap_base + j_d * tstep_d + j_h * tstep_h + j_w * step_w
        if W_KMAJOR:  # tf32: the weight's [G, taps, C, K] copy (tf32 wgmma reads K-major tiles only)
            b = tl.trans(w_desc.load([g, tap, c0, kt * BLOCK_K]).reshape(BLOCK_N, BLOCK_K))
        else:
            b = w_desc.load([g, kt * BLOCK_K, tap, c0]).reshape(BLOCK_K, BLOCK_N)
        if UPCAST:  # bf16 tl.dot is wrong in the interpreter (triton#11584)
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        kt, j_w, j_h, j_d = _next_step(kt, j_w, j_h, j_d, k_tiles, nt_w, nt_h)

    # ---- fused multiple-D epilogue in registers, one store through pointers ---------------------
    rows = tl.arange(0, BLOCK_H * BLOCK_W)
    i_h = i0_h + rows // BLOCK_W
    i_w = i0_w + rows % BLOCK_W
    offs_n = c0 + tl.arange(0, BLOCK_N)
    m_ok = (i_h < cnt_h) & (i_w < cnt_w)
    if USE_INT64:
        g = g.to(tl.int64)
        n = n.to(tl.int64)
        i_h = i_h.to(tl.int64)
        i_w = i_w.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    x_row = (g * xs_g + n * xs_n + (r_d + s_d * i_d) * xs_d + (r_h + s_h * i_h) * xs_h
             + (r_w + s_w * i_w) * xs_w)
    o_offs = x_row[:, None] + offs_n[None, :] * xs_c
    if EVEN_N:
        o_mask = m_ok[:, None]
    else:
        o_mask = m_ok[:, None] & (offs_n < C)[None, :]
    acc = apply_epilogue(acc, o_offs, o_mask, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                         OP, NUM_DS, USER_FN)
    tl.store(out_ptr + o_offs, acc.to(out_ptr.dtype.element_ty), mask=o_mask)


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BwdDataTmaConfig(KernelConfig):
    """A block_h x block_w patch of input positions (one stride phase of one (n, d) plane) times
    block_n channels of grad_in, reduced over block_k-wide chunks of K for every tap that hits."""

    block_h: int
    block_w: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int

    @property
    def block_m(self) -> int:
        return self.block_h * self.block_w

    def smem_bytes(self, elem_bytes: int) -> int:
        """Operand boxes the pipeline keeps in shared memory."""
        return operand_smem_bytes(self.num_stages, self.block_m, self.block_n, self.block_k, elem_bytes)

    @classmethod
    def missing_reason(cls, missing: list[str]) -> str:
        return f"missing parameters {missing} (tma takes {', '.join(cls.param_names())})"

    def check(self) -> str | None:
        for name in ("block_h", "block_w", "block_n", "block_k"):
            v = getattr(self, name)
            if not is_pow2(v) or v > _MAX_BOX:
                return f"{name}={v!r} must be a power of two <= {_MAX_BOX} (a TMA box dim)"
        if self.block_m < 64 or self.block_m > 256:
            return f"block_h*block_w={self.block_m} must be 64..256 rows (one or two warpgroup MMAs)"
        for name in ("block_n", "block_k"):
            if getattr(self, name) < 16:
                return f"{name}={getattr(self, name)} must be >= 16 (tl.dot's smallest tile)"
        if self.block_m * self.block_n > 256 * 128:
            return f"a {self.block_m}x{self.block_n} fp32 accumulator does not fit in registers"
        if self.num_warps not in _NUM_WARPS:
            return f"num_warps={self.num_warps!r} must be one of {_NUM_WARPS}"
        if (why := check_num_stages(self.num_stages)) is not None:
            return why
        need = self.smem_bytes(2)
        if need > SMEM_PER_BLOCK:
            return (f"needs {need // 1024} KiB of shared memory with 2-byte operands "
                    f"(num_stages={self.num_stages}), over the {SMEM_PER_BLOCK // 1024} KiB of a Hopper SM")
        return None


def channels_last_view(strides: tuple[int, ...], spatial: tuple[int, int, int], n: int, g: int,
                       channels: int) -> tuple[list[int], list[int]] | None:
    """An activation (strides in the kernels' (g, n, c, d, h, w) order) as [N*D, H, W, G, channels]
    (shape, strides in elements), or None when its strides cannot express that (channels not
    unit-stride, or n and d not mergeable)."""
    gs, ns, cs, ds, hs, ws = strides
    d, h, w = spatial
    if cs != 1 or (n > 1 and d > 1 and ns != d * ds):
        return None
    return [n * d, h, w, g, channels], [ds if d > 1 else ns, hs, ws, gs, 1]


def _dy_view(geo: ConvGeometry) -> tuple[list[int], list[int]] | None:
    """grad_out as [N*Do, Ho, Wo, G, K], or None (see :func:`channels_last_view`)."""
    return channels_last_view(geo.y_strides, geo.out3, geo.N, geo.G, geo.K)


def _w_view(geo: ConvGeometry) -> tuple[list[int], list[int]] | None:
    """The weight as [G, K, taps, C], or None when C is not unit-stride or the taps are not packed."""
    gs, ks, cs, zs, ys, xs = geo.w_strides
    z, y, x = geo.filt3
    if cs != 1 or (y > 1 and ys != x * xs) or (z > 1 and zs != y * x * xs):
        return None
    return [geo.G, geo.K, z * y * x, geo.C], [gs, ks, xs, cs]


def kmajor_weight(dtype: DataType, k: int) -> bool:
    """Whether bwd data (tma, pointwise) reads a copy of the weight with K contiguous: for tf32, whose
    wgmma reads only K-major tiles. On the weight's own C-contiguous tiles Triton copies every tile into
    K-major order in shared memory each step (session 32, sm_90 compile of pointwise: 40 LDS + 64 STS
    beside 8 HGMMA; with the copy both operands go from TMA straight to wgmma). The weight is small: one
    copy a call. Its rows must be 16-byte aligned for TMA (K * elem % 16 == 0)."""
    return dtype.compute == "tf32" and (k * dtype.data.itemsize) % 16 == 0


def _aligned_strides(shape: list[int], strides: list[int], elem: int) -> list[int] | None:
    """``strides`` with those of length-1 dims replaced by a harmless aligned value (their index is
    always 0); None when a real stride is not a multiple of 16 bytes."""
    out = list(strides)
    for i in range(len(shape) - 2, -1, -1):
        if shape[i] == 1:
            out[i] = out[i + 1] * shape[i + 1] if out[i + 1] * shape[i + 1] * elem % _TMA_BYTES == 0 \
                else _TMA_BYTES // elem
        elif out[i] * elem % _TMA_BYTES:
            return None
    return out


def tma_ready(views: tuple[tuple[list[int], list[int]], ...], elem: int, params: ConvParams,
              dtype_name: str) -> tuple | str:
    """Each (shape, strides) as tuples with TMA-aligned strides (:func:`_aligned_strides`), or why
    not when a real stride is not a multiple of 16 bytes for ``elem``-byte (``dtype_name``) data.
    Tuples: the callers cache the result."""
    out = []
    for shape, strides in views:
        aligned = _aligned_strides(shape, strides, elem)
        if aligned is None:
            return (f"K={params.K}, C={params.C} (G={params.G}) leave a TMA stride that is not a multiple of "
                    f"16 bytes for {dtype_name}; igemm runs it")
        out.append((tuple(shape), tuple(aligned)))
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _tma_views(params: ConvParams, layout: LayoutTriple, elem: int, dtype_name: str) -> tuple | str:
    """((dy shape, dy strides), (w shape, w strides)) ready for TMA descriptors of ``elem``-byte
    (``dtype_name``) elements, or why the problem's tensors cannot have them. Cached: every tma config of a problem
    asks (decline), then bind."""
    geo = ConvGeometry.build(params, layout)
    dy, w = _dy_view(geo), _w_view(geo)
    if dy is None or w is None:
        return (f"tma needs grad_out with unit K stride and a weight with unit C stride and packed taps "
                f"(the NHWGC / GNHWC families); layout {layout.name} has neither or one")
    return tma_ready((dy, w), elem, params, dtype_name)


def descriptor_template(like: torch.Tensor, view: tuple, box: list[int]) -> TensorDescriptor:
    """A descriptor of ``view`` ((shape, strides)) with ``box``, validated once over a small stand-in
    of ``like``'s dtype and device: a cached plan must not keep the caller's tensors alive, so per call
    :func:`_with_base` only moves the base."""
    shape, strides = view
    return TensorDescriptor(like.new_empty(16), list(shape), list(strides), box)


def _with_base(template: TensorDescriptor, base: torch.Tensor) -> TensorDescriptor:
    """``template`` over ``base`` (same shape, strides and box). TMA needs a 16-byte aligned base: a
    view that starts elsewhere is copied (the public ops pass whole tensors, so this is rare)."""
    if base.data_ptr() % _TMA_BYTES:
        base = base.clone()
    desc = object.__new__(TensorDescriptor)  # a plain copy of the fields, without __post_init__
    desc.__dict__.update(template.__dict__)
    desc.base = base
    return desc


def decline(cfg: BwdDataTmaConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason."""
    if TensorDescriptor is None:
        return "tma needs Triton's host tensor descriptors (triton.tools.tensor_descriptor, Triton >= 3.4)"
    if dtype.name not in _DTYPES:
        return f"tma bwd data has no {dtype.name!r} variant ({dtype.label}); it supports {', '.join(_DTYPES)}"
    if params.G > _MAX_GRID_Y:
        return f"G={params.G} is over the {_MAX_GRID_Y} groups the launch grid's y axis holds"
    elem = dtype.data.itemsize
    views = _tma_views(params, layout, elem, dtype.name)
    if isinstance(views, str):
        return views
    need = cfg.smem_bytes(elem)
    if need > SMEM_PER_BLOCK:
        return (f"patch {cfg.block_h}x{cfg.block_w}, n{cfg.block_n}, k{cfg.block_k} with num_stages="
                f"{cfg.num_stages} needs {need // 1024} KiB of shared memory for {dtype.name}, over "
                f"{SMEM_PER_BLOCK // 1024} KiB")
    return None


def bind(args: RunArgs) -> Runner:
    """Per-problem host work once; the runner builds the two descriptors (their base moves with the
    tensors) and launches."""
    geo, cfg, dt = args.geo, args.cfg, args.dtype
    assert dt.name in _DTYPES, dt.name
    dy_view, w_view = _tma_views(args.params, args.layout, dt.data.itemsize, dt.name)
    bh, bw, bn, bk = cfg.block_h, cfg.block_w, cfg.block_n, cfg.block_k
    dy_box = [1, bh, bw, 1, bk]
    w_box = [1, bk, 1, bn]

    rows = _phase_rows(geo, False)
    table, (nph_d, nph_h, nph_w), _ = _phase_table(rows, args.out.device)
    n_phases = nph_d * nph_h * nph_w
    cnt_max = [max(r[1] for r in per_dim) for per_dim in rows]
    tiles_h, tiles_w = triton.cdiv(cnt_max[1], bh), triton.cdiv(cnt_max[2], bw)
    num_pid_n = triton.cdiv(geo.C, bn)
    grid = (geo.N * cnt_max[0] * tiles_h * tiles_w * num_pid_n * n_phases, geo.G)

    upcast = interpreting() and dt.data == torch.bfloat16
    precision = "ieee" if (dt.compute == "ieee" or upcast) else "tf32"
    w_kmajor = kmajor_weight(dt, geo.K)
    s, d = geo.stride3, geo.dil3
    steps = [s[a] // math.gcd(s[a], d[a]) for a in range(3)]
    hsteps = [d[a] // math.gcd(s[a], d[a]) for a in range(3)]
    align = geo.channel_alignment()
    xs = geo.strides_over(align)[:6]
    z, y, x = geo.filt3
    scalars = (
        geo.N, geo.K, geo.C // align, geo.out3[0], x, y * x, *s, *steps, *hsteps, *xs,
        nph_d, nph_h, n_phases, cnt_max[0], tiles_h, tiles_w, num_pid_n,
    )
    kernel = BoundKernel(
        _bwd_data_tma_kernel, grid,
        BLOCK_H=bh, BLOCK_W=bw, BLOCK_N=bn, BLOCK_K=bk,
        EVEN_N=geo.C % bn == 0,
        USE_INT64=geo.needs_int64, ALIGN=align, UPCAST=upcast, PRECISION=precision,
        OP=args.fused.code, NUM_DS=len(args.ds), USER_FN=user_fn_or_noop(args.user_fn), W_KMAJOR=w_kmajor,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )

    dy_template = descriptor_template(args.a, dy_view, dy_box)
    kmajor_copy = None
    if w_kmajor:
        (G, K, taps, C), w_strides = w_view
        w_template = descriptor_template(args.b, ([G, taps, C, K], [taps * C * K, C * K, K, 1]), [1, 1, bn, bk])

        def kmajor_copy(w: torch.Tensor) -> torch.Tensor:
            """One small copy a call: the weight is K*taps*C, the GEMM's operands N*positions*(K + C)."""
            return torch.as_strided(w, (G, K, taps, C), w_strides).permute(0, 2, 3, 1).contiguous()
    else:
        w_template = descriptor_template(args.b, w_view, w_box)

    def run(dy: torch.Tensor, w: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        if kmajor_copy is not None:
            w = kmajor_copy(w)
        kernel(_with_base(dy_template, dy), _with_base(w_template, w), out, *epilogue_args(ds, out), table,
               alpha, beta, *scalars)

    return run


ALGORITHM = register_algorithm(Algorithm(
    op="conv_bwd_data",
    name="tma",
    config=BwdDataTmaConfig,
    decline=decline,
    bind=bind,
    description=(
        "implicit GEMM dL/dIn with TMA boxes: the M tile is a block_h x block_w patch of one stride "
        "phase, each tap's grad_out rows one 5-D box whose out-of-bounds zero fill is the padding "
        "(no masks in the loop), the weight a box of [G, K, taps, C]; channels-last grad_out only"
    ),
    kernels=(_bwd_data_tma_kernel,),
))
