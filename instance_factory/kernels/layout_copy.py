"""Channels-first / group-major <-> channels-last copies at copy bandwidth: one batched transpose per tensor.

An NGC{spatial} activation is a batch of N matrices [G*C, S] (S = the flattened spatial axes); its
N{spatial}GC twin is the same batch transposed, [S, G*C]. A group-major GN{spatial}C activation is
one matrix [G, N*S] of C-vectors; its twin is that matrix transposed with each vector kept whole
(``_batched_transpose_vec_kernel``; C = 1 is the plain transpose). torch's ``permute(...).contiguous()``
runs that through its generic strided copy at ~0.9 TB/s on an H100 (session 16), which made the
copies the larger part of a channels-first wgrad through ``relayout``. The kernel here reads a
[BLOCK_R, BLOCK_S] tile along the contiguous S axis and writes it along the contiguous R axis (Triton
moves the tile between the two coalesced layouts through shared memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from ..fast_launch import BoundKernel
from .common import INT32_LIMIT, MAX_GRID_YZ

__all__ = ["KERNELS", "transpose_copier", "vector_transpose_copier"]


@triton.jit
def _batched_transpose_kernel(src, dst, R, S, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
                              USE_INT64: tl.constexpr):
    """dst[b, s, r] = src[b, r, s] for contiguous src [B, R, S] and dst [B, S, R]."""
    pid_s = tl.program_id(0)
    pid_r = tl.program_id(1)
    b = tl.program_id(2)
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    if USE_INT64:
        base = b.to(tl.int64) * R * S
        r = r.to(tl.int64)
        s = s.to(tl.int64)
    else:
        base = b * R * S
    mask = (r[:, None] < R) & (s[None, :] < S)
    tile = tl.load(src + base + r[:, None] * S + s[None, :], mask=mask)
    tl.store(dst + base + s[None, :] * R + r[:, None], tile, mask=mask)


@triton.jit
def _batched_transpose_vec_kernel(src, dst, R, S, V, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
                                  BLOCK_V: tl.constexpr, USE_INT64: tl.constexpr):
    """dst[b, s, r, :] = src[b, r, s, :] for contiguous src [B, R, S, V] and dst [B, S, R, V]: the
    V-vectors (a group's channels) move whole, so both sides read and write runs of V elements."""
    pid_s = tl.program_id(0)
    pid_r = tl.program_id(1)
    b = tl.program_id(2)
    r = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    v = tl.arange(0, BLOCK_V)
    if USE_INT64:
        base = b.to(tl.int64) * R * S * V
        r = r.to(tl.int64)
        s = s.to(tl.int64)
    else:
        base = b * R * S * V
    r3 = r[:, None, None]
    s3 = s[None, :, None]
    v3 = v[None, None, :]
    mask = (r3 < R) & (s3 < S) & (v3 < V)
    tile = tl.load(src + base + (r3 * S + s3) * V + v3, mask=mask)
    tl.store(dst + base + (s3 * R + r3) * V + v3, tile, mask=mask)


KERNELS = (_batched_transpose_kernel, _batched_transpose_vec_kernel)  # what a caller's kernel hash must cover


def _blocks(rows: int) -> tuple[int, int]:
    """A 64 x 64 tile, narrower along R when the matrix has few rows (a 3-channel stem: 4 x 1024),
    so that every program moves ~8 KB of bf16."""
    block_r = min(64, triton.next_power_of_2(max(rows, 1)))
    return block_r, min(1024, 4096 // block_r)


def _checked_copy(kernel: BoundKernel, dims: tuple[int, ...], in_grid: bool,
                  what: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """The copy function of a transpose over ``dims`` = (batch, rows, cols[, vec]): checks the tensors,
    launches ``kernel`` on contiguous ones, else swaps rows and cols through torch's copy."""
    batch, rows, cols, *vec = dims
    numel = math.prod(dims)
    sizes = (rows, cols, *vec)

    def copy(src: torch.Tensor, dst: torch.Tensor) -> None:
        if src.numel() != numel or dst.numel() != src.numel() or src.dtype != dst.dtype:
            raise ValueError(f"{what} of [{', '.join(map(str, dims))}] got {tuple(src.shape)} "
                             f"{src.dtype} -> {tuple(dst.shape)} {dst.dtype}")
        if src.numel() == 0:
            return
        if in_grid and src.is_contiguous() and dst.is_contiguous():
            kernel(src, dst, *sizes)
            return
        dst.view(batch, cols, rows, *vec).copy_(src.reshape(dims).transpose(1, 2))

    return copy


def transpose_copier(batch: int, rows: int, cols: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A copy ``dst[b, s, r] = src[b, r, s]`` for tensors holding [batch, rows, cols] contiguously
    (any shape with that many elements, e.g. NGCHW in and NHWGC out), all sizes fixed here once.
    Non-contiguous tensors, or a batch beyond the grid's limit, go through torch's copy."""
    block_r, block_s = _blocks(rows)
    use_int64 = batch * rows * cols >= INT32_LIMIT
    grid = (triton.cdiv(cols, block_s), triton.cdiv(rows, block_r), batch)
    kernel = BoundKernel(_batched_transpose_kernel, grid, BLOCK_R=block_r, BLOCK_S=block_s,
                         USE_INT64=use_int64, num_warps=4)
    in_grid = batch <= MAX_GRID_YZ and grid[1] <= MAX_GRID_YZ
    return _checked_copy(kernel, (batch, rows, cols), in_grid, "transpose copy")


def vector_transpose_copier(batch: int, rows: int, cols: int,
                            vec: int) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """A copy ``dst[b, s, r, :] = src[b, r, s, :]`` for tensors holding [batch, rows, cols, vec]
    contiguously (GNHWC in, NHWGC out: batch 1, rows G, cols N*prod(spatial), vec C); ``vec`` 1 is
    :func:`transpose_copier`. Non-contiguous tensors, or a grid beyond its limits, go through torch's copy."""
    if vec == 1:
        return transpose_copier(batch, rows, cols)
    block_v = triton.next_power_of_2(vec)
    # ~4096 elements a program (a wide vector takes fewer rows: 16 x 2048 would be 256 registers a thread)
    block_r = max(1, min(16, triton.next_power_of_2(max(rows, 1)), 4096 // block_v))
    block_s = max(1, min(1024, 4096 // (block_r * block_v)))
    use_int64 = batch * rows * cols * vec >= INT32_LIMIT
    grid = (triton.cdiv(cols, block_s), triton.cdiv(rows, block_r), batch)
    kernel = BoundKernel(_batched_transpose_vec_kernel, grid, BLOCK_R=block_r, BLOCK_S=block_s, BLOCK_V=block_v,
                         USE_INT64=use_int64, num_warps=4)
    in_grid = batch <= MAX_GRID_YZ and grid[1] <= MAX_GRID_YZ
    return _checked_copy(kernel, (batch, rows, cols, vec), in_grid, "vector transpose copy")
