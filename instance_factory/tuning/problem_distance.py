"""Where a problem sits among the tuned ones: the features and penalties of the cost model's neighbour search.

The distance between two problems of one pass is a weighted Euclidean distance over log2 features (the pass's
GEMM M, N, K, taps, stride, channels per group, groups, the filter's aspect and a one-wide band's orientation,
:func:`features`) plus fixed penalties for what the features do not see: another conv class, dimensionality, channel
alignment, data type, layout family or fused op (:func:`neighbor_distance`). The weights live in ``model_constants``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from .model_constants import (
    ALIGN_PENALTY,
    CLASS_PENALTY,
    DTYPE_PENALTY,
    FEATURE_WEIGHTS,
    FUSED_PENALTY,
    LAYOUT_PENALTY,
    NDIM_PENALTY,
    SIBLING_DTYPES,
)
from .roofline import gemm_shape, unaligned_groups

__all__ = ["conv_class", "feature_distance", "features", "layout_family", "neighbor_distance", "penalties",
           "problem_layout_family"]


def conv_class(params: Any) -> str:
    """``depthwise`` (C = K = 1 per group, G > 1), ``grouped`` (G > 1) or ``dense``."""
    if params.G > 1 and params.C == 1 and params.K == 1:
        return "depthwise"
    return "grouped" if params.G > 1 else "dense"


def features(op: str, params: Any) -> list[tuple[float, float]]:
    """(weight, log2 value) pairs locating a problem for :func:`neighbor_distance`. ``aspect`` (the longest
    filter side over the shortest) parts bands (1x7, 11x1, 51x5) from squares of as many taps: the kernels
    that slide along one axis win on the former and lose on the latter (session 44). ``orient`` parts a
    one-wide band along W from the same band along H (:func:`_orientation`, session 49)."""
    w = FEATURE_WEIGHTS
    _, m, n, k = gemm_shape(op, params)
    return [(w["M"], math.log2(m)), (w["N"], math.log2(n)), (w["K"], math.log2(k)),
            (w["taps"], math.log2(math.prod(params.filter))), (w["stride"], math.log2(math.prod(params.stride))),
            (w["C"], math.log2(params.C)), (w["Kc"], math.log2(params.K)), (w["G"], math.log2(params.G)),
            (w["aspect"], math.log2(max(params.filter) / min(params.filter))), (w["orient"], _orientation(params))]


def _orientation(params: Any) -> float:
    """For a one-wide band (1 x k or k x 1 in the last two filter dims), log2 of its W side over its H side;
    0 otherwise (squares, 5x51 bands, 1D). A 1x21 and a 21x1 band have the same taps and aspect, but the
    first is one filter row slid along W and the second 21 filter rows of one tap: different kernels win."""
    f = params.filter
    if len(f) < 2 or min(f[-1], f[-2]) != 1:
        return 0.0
    return math.log2(f[-1] / f[-2])


def feature_distance(fa: list[tuple[float, float]], fb: list[tuple[float, float]]) -> float:
    """The weighted Euclidean distance between two problems' :func:`features`."""
    return math.sqrt(sum(w * (a - b) ** 2 for (w, a), (_, b) in zip(fa, fb)))


def _dtype_relation(a: str, b: str) -> str:
    if a == b:
        return "same"
    if any(a in s and b in s for s in SIBLING_DTYPES):
        return "sibling"
    size = {"fp16": 2, "bf16": 2, "fp16_fp8": 2, "bf16_fp32w": 2, "fp32": 4, "fp32_tf32": 4}
    return "same_size" if size.get(a, 0) == size.get(b, -1) else "other"


@functools.lru_cache(maxsize=256)  # every ranking asks for each tuned problem
def layout_family(layout: str, groups: int = 1, depthwise: bool = False) -> str:
    """``cl`` for channels-last activations (..GC), ``cf`` for channels-first (NGC..), ``gm`` for
    group-major ones (GN..C) with several groups; also the layout part of a kernel's correction key.
    A pointer GEMM tiling channels runs 1.2-15x slower on channels-first tensors than on channels-last
    ones, so its time on one says little about the other.
    Keyed apart since session 18 for bwd data too (cfirst and relayout now ship for it): ResNet-50 NCHW
    N64 dgrad goes to them on 20 of 22 layers instead of 5, leave-one-out 0.959 -> 0.960.
    Group-major apart since session 35: a few-channel family reads 2-32 bytes a position there, 1.5-4x
    slower than on the channels-last twin, whose corrections made the policy pick those kernels over
    relayout (leave-one-out over group-major grouped / depthwise problems 0.59-0.77). With one group
    the two layouts are the same memory.
    ``cfk``, channels-first with a GKCYX weight, apart since session 49 except for depthwise layers (whose
    weights are a few taps per channel): a pointer GEMM reads that weight's channel vectors strided by the
    taps (igemm dgrad on ResNeXt's G32 C64 7x7: 0.151 ms against 0.052 with GKYXC), and the GKYXC rows priced
    it at a fifth of its time. Leave-one-out (H100, layer hidden): 0.930 -> 0.932, grouped dgrad 0.911 ->
    0.930, below 0.5x 14 -> 12 (with depthwise layers split too: 0.930, depthwise dgrad 0.909 -> 0.901)."""
    head, weight = layout.split("/")[:2] if layout.count("/") >= 2 else (layout, "")
    if head.startswith("G") and groups > 1:
        return "gm"
    if head.endswith("C"):
        return "cl"
    return "cfk" if weight.startswith("GKC") and not depthwise else "cf"


def problem_layout_family(layout: str, params: Any) -> str:
    """:func:`layout_family` of a problem in ``layout`` (its groups and whether it is depthwise)."""
    return layout_family(layout, params.G, conv_class(params) == "depthwise")


def neighbor_distance(op: str, p: Any, q: Any, *, dtype: str = "", q_dtype: str = "", layout: str = "",
                      q_layout: str = "", fused: str = "", q_fused: str = "") -> float:
    """Distance between problems ``p`` and ``q`` of one pass: features plus the kind penalties."""
    return feature_distance(features(op, p), features(op, q)) + penalties(
        p, q, dtype, q_dtype, layout, q_layout, fused, q_fused)


def penalties(p: Any, q: Any, dtype: str, q_dtype: str, layout: str, q_layout: str, fused: str,
              q_fused: str) -> float:
    """What the features do not see: another conv class, dimensionality, channel alignment, data type
    (where both are named), layout family (where both are named) or fused op."""
    d = 0.0 if conv_class(p) == conv_class(q) else CLASS_PENALTY
    d += ALIGN_PENALTY if unaligned_groups(p) != unaligned_groups(q) else 0.0
    d += NDIM_PENALTY if p.ndim != q.ndim else 0.0
    d += DTYPE_PENALTY[_dtype_relation(dtype, q_dtype)] if dtype and q_dtype else 0.0
    if layout and q_layout and problem_layout_family(layout, p) != problem_layout_family(q_layout, q):
        d += LAYOUT_PENALTY
    return d + (FUSED_PENALTY if fused != q_fused else 0.0)
