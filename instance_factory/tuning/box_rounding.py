"""The reduction length of the bwd-weight GEMM families whose boxes or chunks round the positions up
(tma, shift, rowstack, tapshare, cfirst), for the cost model's roofline: each kernel walks whole boxes, so its
MMA work counts the padded positions, not N * prod(out)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..kernels.bwd_weight_rowstack import reduction_positions as rowstack_positions
from ..kernels.bwd_weight_shift import reduction_positions as shift_positions
from ..kernels.bwd_weight_tapshare import reduction_positions as tapshare_positions
from ..kernels.bwd_weight_tma import walk_width as tma_walk_width

__all__ = ["boxed_reduction"]


def boxed_reduction(params: Any, algorithm: str, cfg: Mapping[str, Any], k: int) -> int:
    """The positions ``algorithm``'s bwd-weight GEMM reduces over with config ``cfg`` (``k``: the
    unpadded N * prod(out), returned as is for the other families)."""
    if algorithm == "tma":  # rows in whole block_k-wide boxes
        wo, bk = tma_walk_width(params), int(cfg["block_k"])
        return k * -(-wo // bk) * bk // wo
    if algorithm == "shift":  # whole boxes per plane + the wrapped-column fix
        return shift_positions(params, int(cfg["block_k"]))
    if algorithm == "rowstack":  # whole bw-wide row chunks, whole boxes of images
        return rowstack_positions(params, int(cfg["block_k"]))
    if algorithm == "tapshare":  # whole block_h x block_w boxes of each output plane
        return tapshare_positions(params, cfg)
    if algorithm == "cfirst":  # each image's positions in whole chunks
        bk = int(cfg["block_k"])
        return params.N * -(-math.prod(params.output) // bk) * bk
    return k
