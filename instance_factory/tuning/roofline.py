"""The analytic part of the cost model: a roofline time of one call of an instance on a problem.

:func:`model_ms` is the longest of the tile-padded GEMM work over the dtype's tensor-core rate and
the SM waves the tiles fill, the tiles' operand reads over L2 bandwidth, and the bytes over memory
bandwidth, blended with the family's floor (its fastest measured call). :mod:`.cost_model` corrects it
with what tuned neighbours measured; the constants live in :mod:`.model_constants`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..kernels.bwd_weight_pointwise import model_work as pointwise_work
from ..kernels.bwd_weight_rowstack import model_split as rowstack_split
from ..kernels.bwd_weight_tapshare import model_programs as tapshare_programs
from ..kernels.bwd_weight_tma import TMA_WGRAD_FAMILIES
from ..kernels.depthwise_plane import model_plan as plane_model_plan
from ..kernels.depthwise_plane import model_work as plane_work
from ..kernels.depthwise_plane import split_plan as plane_split_plan
from ..kernels.depthwise_plane_data import model_work as plane_data_work
from .box_rounding import boxed_reduction
from .model_constants import (
    CUDA_CORE_FLOPS,
    DEFAULT_SMS,
    DIRECT_UNALIGNED_FACTOR,
    EXTRA_LAUNCH,
    FLOOR_BLEND_POWER,
    L2_BW,
    MAX_SPLIT,
    MEM_BW,
    ONE_CTA_EFFICIENCY,
    PEAK_FLOPS,
    PLANAR_PACKED_BW,
    PLANE_FULL_VECTOR,
    POINTER_GEMMS,
    TAPS_IN_COLUMNS,
    UNALIGNED_FACTOR,
)
from .packed_tiles import BLOCKDIAG_DGRAD, bdrow_work, bdwin_work, blockdiag_dgrad_work, gluon_walk_work
from .walk_model import walk_term

__all__ = ["block_mode", "dgrad_channel_padding", "gemm_shape", "model_ms", "model_parts", "plane_chunks",
           "relayout_copy_bytes", "tf32_split", "unaligned_groups", "with_floor", "work_correction",
           "work_modelled"]


def gemm_shape(op: str, params: Any, algorithm: str = "") -> tuple[int, int, int, int]:
    """(batch, M, N, K) of the implicit GEMM a pass runs per group (bwd data: per stride phase;
    ``two_stage``, ``padx`` and ``padvec`` bwd weight fold the taps into N)."""
    p = params
    taps, phases = math.prod(p.filter), math.prod(p.stride)
    if op == "conv_bwd_data" and algorithm == "pointwise":  # one GEMM over grad_out's positions, any stride
        return p.G, p.N * math.prod(p.output), p.C, p.K
    if op == "conv_bwd_data":  # M = N*prod(in) per stride phase, N = C, K = K*taps hit per phase
        return p.G * phases, max(1, p.N * math.prod(p.input) // phases), p.C, max(1, p.K * taps // phases)
    if algorithm in TAPS_IN_COLUMNS:
        return p.G, p.K, p.C * taps, p.N * math.prod(p.output)
    return p.G * taps, p.K, p.C, p.N * math.prod(p.output)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _compute_type(dtype: str) -> str:
    return {"fp32_tf32": "tf32", "fp16_fp8": "fp8", "bf16_fp32w": "bf16"}.get(dtype, dtype)


def tf32_split(op: str, dtype: str, algorithm: str) -> bool:
    """Whether this kernel runs fp32 (tf32 compute) as three bf16 products (kernels/common.dot_tn). The cost
    model prices such kernels at a third of the bf16 rate, with corrections of their own (a bf16 row of the
    same tile says little: the split costs 2-3x more). Session 32 (H100 rows): without this, 7 of the 32
    split-kernel defaults for ResNet-50 / MobileNetV2 fp32 wgrad at batch 64 were tiles never timed in fp32
    (with it: 0 of 35); leave-one-out NHWGC tf32 wgrad 0.872 -> 0.898."""
    return dtype == "fp32_tf32" and op == "conv_bwd_weight" and algorithm in TMA_WGRAD_FAMILIES


def _tensor_rate(op: str, dtype: str, algorithm: str) -> float:
    """The tensor-core rate of this kernel's dots (FLOP/s): three bf16 products per fp32 one where split."""
    if tf32_split(op, dtype, algorithm):
        return PEAK_FLOPS["bf16"] / 3
    return PEAK_FLOPS.get(_compute_type(dtype), 350e12)


def _elem_bytes(dtype: str) -> int:
    return 4 if dtype.startswith("fp32") else 2


def relayout_copy_bytes(params: Any, layout: str, dtype: str) -> int:
    """Bytes ``relayout``'s copies read and write around its channels-last twin: each activation
    tensor once each way (the operands in, the bwd-data result back) and a KC-order weight (GKC..),
    alike for both passes."""
    eb = _elem_bytes(dtype)
    act = params.numel("input") + params.numel("output")
    kc_weight = layout.split("/")[1].startswith("GKC")
    wei = params.numel("weight") * (4 if dtype == "bf16_fp32w" else eb) if kc_weight else 0
    return 2 * (act * eb + wei)


def model_ms(op: str, params: Any, dtype: str, algorithm: str, cfg: Mapping[str, Any],
             sms: int = DEFAULT_SMS, host_floor_ms: float = 0.0, group_major: bool = False,
             channels_first: bool = False) -> float:
    """Roofline estimate of one call in ms: :func:`model_parts`' work blended with its floor (:func:`with_floor`)."""
    return with_floor(*model_parts(op, params, dtype, algorithm, cfg, sms, host_floor_ms, group_major, channels_first))


def _work_kind(op: str, algorithm: str, cfg: Mapping[str, Any]) -> str:
    """Which of :func:`model_parts`' models prices this kernel's work: ``packed`` (block-diagonal dgrad tiles),
    ``plane`` (dwplane), ``gemm`` (tiles of an implicit GEMM), ``relayout``, ``window`` (bdrow / bdwin / bdring /
    bdstride), ``walk`` (walk_model's CUDA-core walks) or ``flops`` (its FLOPs at the CUDA cores' rate)."""
    if op == "conv_bwd_data" and algorithm in BLOCKDIAG_DGRAD:
        return "packed"
    if algorithm == "dwplane":
        return "plane"
    if op == "conv_bwd_weight" and algorithm in ("bdring", "bdstride"):
        return "window"
    if ("block_m" in cfg or "block_h" in cfg) and "block_n" in cfg:
        return "gemm"
    if algorithm == "relayout":
        return "relayout"
    if op == "conv_bwd_weight" and algorithm in ("bdrow", "bdwin") and "block_w" in cfg:
        return "window"
    return "walk" if walk_term(op, algorithm) else "flops"


def work_modelled(op: str, algorithm: str, cfg: Mapping[str, Any]) -> bool:
    """Whether :func:`model_parts` models this kernel's work by its tiles, bytes or grid (the GEMM, packed
    block-diagonal, planar and relayout families, the walks of walk_model), not as its FLOPs at the CUDA
    cores' rate: the time of the latter on small planes has a per-call part above the launch floor that
    their FLOPs do not show (H200, direct wgrad, G46 C8 7x7 plane: 2x the time per FLOP of a G19 C8 14x14 one)."""
    return _work_kind(op, algorithm, cfg) != "flops"


def model_parts(op: str, params: Any, dtype: str, algorithm: str, cfg: Mapping[str, Any],
                sms: int = DEFAULT_SMS, host_floor_ms: float = 0.0, group_major: bool = False,
                channels_first: bool = False) -> tuple[float, float]:
    """(work, floor) of one call in ms: the roofline's work, max(tile-padded GEMM work over the tensor-core
    rate and the waves the tiles fill, the fewest bytes over memory bandwidth), and the algorithm's host
    floor as the call pays it (``host_floor_ms``, times a second launch where the plan adds one); see
    :func:`with_floor`. ``group_major`` / ``channels_first``: the activations' layout family (GN..C with
    several groups / NGC..), where some families load differently."""
    sms = sms or DEFAULT_SMS
    rbytes = 4 if dtype == "bf16_fp32w" else None
    mem_s = params.bytes_moved(op, _elem_bytes(dtype), result_bytes=rbytes) / MEM_BW
    kind = _work_kind(op, algorithm, cfg)
    if kind == "packed":
        padded, fill = blockdiag_dgrad_work(params, algorithm, cfg, sms)
        compute_s = padded / (PEAK_FLOPS.get(_compute_type(dtype), 350e12) * fill)
        if channels_first:  # channel gathers across planes (model_constants.PLANAR_PACKED_BW)
            mem_s *= MEM_BW / PLANAR_PACKED_BW
    elif kind == "plane":
        compute_s = _plane_s(params, dtype, cfg, plane_work if op == "conv_bwd_weight" else plane_data_work)
        if op == "conv_bwd_weight" and plane_chunks(params, cfg, sms) > 1:  # + the split reduce's launch
            host_floor_ms *= 1 + EXTRA_LAUNCH
    elif kind == "gemm":
        batch, m, n, k = gemm_shape(op, params, algorithm)
        bn = int(cfg["block_n"])
        if "block_h" in cfg and op == "conv_bwd_data":  # tma dgrad: block_h x block_w patches of each phase's plane
            bh, bw = int(cfg["block_h"]), int(cfg["block_w"])
            bm = bh * bw
            in_d, in_h, in_w = (1, 1, *params.input)[-3:]
            s_d, s_h, s_w = (1, 1, *params.stride)[-3:]
            patches = (params.N * _cdiv(in_d, s_d) * _cdiv(_cdiv(in_h, s_h), bh)
                       * _cdiv(_cdiv(in_w, s_w), bw))
            tiles = batch * patches * -(-n // bn)
        else:
            bm = int(cfg["block_m"])
            if op == "conv_bwd_data" and algorithm == "cfirst":  # tiles stay inside one image
                m = params.N * _cdiv(math.prod(params.input), bm) * bm
            tiles = batch * -(-m // bm) * -(-n // bn)
            if op == "conv_bwd_weight":  # the box-walking families reduce over padded positions
                k = boxed_reduction(params, algorithm, cfg, k)
        split = int(cfg.get("split_k", 1) or 0)
        stream = cfg.get("schedule") == "stream"  # equal step shares on every SM, atomic adds of partial tiles
        pointwise = op == "conv_bwd_weight" and algorithm == "pointwise"  # its own split rule, whole boxes
        k, split, serial_s = pointwise_work(params, cfg, sms) if pointwise else (k, split, 0.0)
        if stream:
            split = 1
        elif op == "conv_bwd_weight" and algorithm == "rowstack":  # its own wave-aware split rule
            split = rowstack_split(params, dict(cfg), sms)
        elif split == 0:  # automatic: about three waves, at most MAX_SPLIT
            split = max(1, min(MAX_SPLIT, -(-3 * sms // tiles))) if tiles < 2 * sms else 1
        programs = tiles * split
        if op == "conv_bwd_weight" and algorithm == "tapshare":  # a program runs a block of taps: bind's grid
            per_split, split = tapshare_programs(params, cfg, sms)
            programs = per_split * split
        fill = 1.0 if stream else programs / (-(-programs // sms) * sms)
        if not stream and programs <= sms:  # one CTA an SM: below its share of the peak
            fill *= ONE_CTA_EFFICIENCY
        padded = 2.0 * tiles * bm * bn * k
        compute_s = padded * dgrad_channel_padding(op, params, cfg) / (
            _tensor_rate(op, dtype, algorithm) * fill) + serial_s
        if op == "conv_bwd_weight" and algorithm == "tapshare":  # an input box per tap, grad_out's shared
            taps = int(cfg["taps_y"]) * int(cfg["taps_x"])
            compute_s = max(compute_s, tiles * (bn + bm / taps) * k * _elem_bytes(dtype) / L2_BW)
        elif op == "conv_bwd_weight" and params.G == 1:
            compute_s = max(compute_s, tiles * (bm + bn) * k * _elem_bytes(dtype) / L2_BW)
        mem_s *= padded / (2.0 * batch * m * n * k)  # masked tile loads still move whole tiles
        if stream:  # zeroed fp32 workspace read back once, a partial tile added per share boundary
            mem_s += 4 * (2 * params.numel("weight") + (tiles + sms) * bm * bn) / MEM_BW
        if split > 1:  # fp32 partial slices written and read back once
            mem_s += 2 * 4 * split * params.numel("weight") / MEM_BW
        if algorithm == "rowstack" and cfg.get("dy_read") == "packed":  # a pass before the GEMM: grad_out copied
            copy_s = 2 * params.G * params.K * k * _elem_bytes(dtype) / MEM_BW
            mem_s += copy_s
            compute_s += copy_s
        if algorithm in ("padx", "padvec"):  # the padded input copy, a pass before the GEMM: written, read back
            copy_s = 2 * params.N * math.prod(params.reached_input) * params.G * params.C * _elem_bytes(dtype) / MEM_BW
            mem_s, compute_s = mem_s + copy_s, compute_s + copy_s
        if op == "conv_bwd_weight" and algorithm in POINTER_GEMMS and unaligned_groups(params):
            compute_s *= UNALIGNED_FACTOR
            mem_s *= UNALIGNED_FACTOR
    elif kind == "relayout":  # channels-last copies of input and grad_out, then a tensor-core GEMM
        act = params.N * params.G * (params.C * math.prod(params.input) + params.K * math.prod(params.output))
        mem_s += 2 * act * _elem_bytes(dtype) / MEM_BW
        compute_s = params.flops() / PEAK_FLOPS.get(_compute_type(dtype), 350e12)
    elif kind == "window":
        pipe_s = 0.0
        if algorithm == "bdrow":
            padded, fill, split = bdrow_work(params, cfg, sms, _elem_bytes(dtype))
        elif algorithm in ("bdring", "bdstride"):
            padded, fill, split, pipe_s = gluon_walk_work(params, cfg, sms, _elem_bytes(dtype))
        else:
            padded, fill, split, pipe_s = bdwin_work(params, cfg, sms, _elem_bytes(dtype), group_major)
        compute_s = max(padded / (PEAK_FLOPS.get(_compute_type(dtype), 350e12) * fill), pipe_s)
        if split > 1:  # fp32 partial slices written and read back once
            mem_s += 2 * 4 * split * params.numel("weight") / MEM_BW
    else:  # CUDA-core kernels; the rolling-row walks and direct dgrad by the warps their grid keeps resident
        walk = walk_term(op, algorithm) if kind == "walk" else None
        compute_s = (walk and walk(params, cfg, CUDA_CORE_FLOPS, sms)) or params.flops() / CUDA_CORE_FLOPS
        if algorithm == "direct" and not (group_major or channels_first) and _unaligned_channel_stride(params):
            compute_s *= DIRECT_UNALIGNED_FACTOR
            mem_s *= DIRECT_UNALIGNED_FACTOR
    return 1e3 * max(compute_s, mem_s), host_floor_ms


def _plane_s(params: Any, dtype: str, cfg: Mapping[str, Any], work: Any = plane_work) -> float:
    """dwplane (either pass; ``work`` is its module's model_work): its row-block tiles over L2 bandwidth
    (narrower vectors issue more loads: session 37, H100, 7- and 14-wide planes ran 2-4x further from
    this than 56-wide ones) or its dots' products (tf32: three bf16 products), whichever is longer."""
    elems, products, vec = work(params, int(cfg.get("j", 32)))
    tiles_s = elems * _elem_bytes(dtype) / L2_BW * max(1.0, PLANE_FULL_VECTOR / vec)
    rate = PEAK_FLOPS["bf16"] / 3 if dtype == "fp32_tf32" else PEAK_FLOPS.get(_compute_type(dtype), 350e12)
    return max(tiles_s, 2.0 * products / rate)


def _plane_plan(params: Any, cfg: Mapping[str, Any]) -> Any:
    """dwplane wgrad's blocks on this problem, as its model_work takes them."""
    return plane_model_plan(params, int(cfg.get("j", 32)), int(cfg.get("num_warps", 4)))


def plane_chunks(params: Any, cfg: Mapping[str, Any], sms: int) -> int:
    """The chunks dwplane wgrad splits each group's blocks into (``depthwise_plane.split_plan``, as its bind
    does). One chunk is one launch; more write fp32 partials that the split reduce sums, a second launch, so
    the call's floor is two launches' (:func:`model_ms`). Session 40, H100: G480 3x3 14x14 N64 ran 0.0245 ms
    at block_m 128 (one chunk) and 0.032 at 64 (three), G384 7x7 14x14 0.0285 and 0.040, where the model had
    them level; leave-one-out with the layer hidden (H100 file): channels-first depthwise wgrad 0.851 -> 0.890,
    group-major 0.774 -> 0.807."""
    do, ho, wo = (1, 1, *params.output)[-3:]
    fz = (1, 1, *params.filter)[-3]
    blocks = params.N * do * _plane_plan(params, cfg).blocks(ho, wo)
    split = int(cfg.get("split", 0) or 0)
    return plane_split_plan(blocks, params.G * fz, int(cfg.get("block_m", 64)), split, sms)[0]


def block_mode(op: str, params: Any, algorithm: str, cfg: Mapping[str, Any]) -> str:
    """"rows" where dwplane wgrad cuts this problem's planes into blocks of whole rows (small planes at
    stride 1, ``depthwise_plane.block_plan``), else "". The roofline misses the two modes by different
    factors (H100 rows, log measured / model: row blocks median +1.15, column blocks +0.73; session 40),
    and one config runs column blocks on 56x56 planes and row blocks on 28x28 ones, so the cost model keys
    their corrections apart (``cost_model.kernel_variant``): leave-one-out with the layer hidden, H100
    file, channels-first depthwise wgrad 0.842 -> 0.851, group-major 0.763 -> 0.774."""
    if op != "conv_bwd_weight" or algorithm != "dwplane":
        return ""
    return "rows" if _plane_plan(params, cfg).rows else ""


def with_floor(work_ms: float, floor_ms: float) -> float:
    """A call's work blended with its family's floor (``FLOOR_BLEND_POWER``): near the floor, work still shows."""
    q = FLOOR_BLEND_POWER
    return max((work_ms ** q + floor_ms ** q) ** (1 / q), 1e-4)


def work_correction(log_ms: float, work_ms: float, floor_ms: float) -> float:
    """log(measured work / modelled work) of a call measured at exp(``log_ms``) ms: the c with
    with_floor(work * e^c, floor) = measured; a call at its floor keeps at least a third of its time as work."""
    q = FLOOR_BLEND_POWER
    ms = math.exp(log_ms)
    return math.log(max(ms ** q - floor_ms ** q, (ms / 3) ** q) ** (1 / q) / max(work_ms, 1e-6))


def dgrad_channel_padding(op: str, params: Any, cfg: Mapping[str, Any]) -> float:
    """bwd-data tiles reduce each tap's K in block_k chunks: K = 32 under 64 doubles the steps."""
    bk = int(cfg.get("block_k", 0)) if op == "conv_bwd_data" else 0
    return -(-params.K // bk) * bk / params.K if bk else 1.0


def _unaligned_channel_stride(params: Any) -> bool:
    """Channels-last activations whose position stride (G*C, G*K elements) is over 16 without a divisor of
    16: ``direct`` (either pass) has no alignment constexpr, so Triton splits its channel loads into narrow
    ones (the depthwise walks divide the strides by their vector width instead). Session 42, held-out layers
    (H100 and H200, NHWGC): direct dgrad ran 2.3-3.5x the best on G = 120 and 728 (Xception, MoViNet) and on
    the H100 file's G = 72 (MobileNetV3) layers, where on aligned depthwise layers it is the median best;
    wgrad 2-4x on G = 12 against 1.9x aligned (DIRECT_UNALIGNED_FACTOR). A stride of at most 16 elements
    (G = 12) holds one short vector either way: dgrad ran 1.0-1.4x the best there, and the factor served it
    bdtap at 0.20. The fix at the kernel (the walks' strides_by_vec) would re-measure every direct row."""
    return any(n > 16 and n % 16 for n in (params.G * params.C, params.G * params.K))


def unaligned_groups(params: Any) -> bool:
    """A grouped layer whose channel counts Triton sees without a divisor of 16 (it specializes
    integer arguments on divisibility by 16 only): the pointer GEMMs' channel loads fall to one
    element."""
    return params.G > 1 and any(v % 16 for v in (params.C, params.K, params.G * params.C, params.G * params.K))
