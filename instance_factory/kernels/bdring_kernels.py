"""The Gluon helpers that bdring and bdstride share (their kernels: ``bdstride_kernels``, which walk stride 1 too):
the 16-byte cp.async copy and the barrier under both Triton spellings, the shifted dy-row copies and the stores of
a program's nine tap accumulators (their diagonal C x C blocks) into its chunk's fp32 slice. Session 54 retired
bdring's own two walks (the ring and the stacked rows): bdstride's take every dy shift from shared memory once a
step for all filter rows and ran the same layers as fast or faster (BENCHMARKS, session 54), and its ``dy_read="regs"``
variant had won none of 26 H200 problems. The module keeps its name: the kernel hash names each function's module."""

from __future__ import annotations

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
except ImportError:  # a Triton without Gluon (before 3.5): the family declines
    gluon = None

__all__ = ["gluon"]

if gluon is not None:
    # Triton 3.9 renamed two Gluon builtins; one name for both
    _async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
    _barrier = getattr(gl, "thread_barrier", None) or gl.barrier

    @gluon.jit
    def _issue_dy(dy_ptr, dy_s, stage, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w,
                  FX: gl.constexpr, WX: gl.constexpr, LOAD: gl.constexpr):
        """dy row (n, oh) once per tap column tx, shifted right by tx, by cp.async (each copy from L2)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        cok = (ch0 + cols) < GC
        for tx in gl.static_range(FX):
            ow = pos - tx
            m = ((ow >= 0) & (ow < Wo))[:, None] & cok[None, :]
            p = dy_ptr + (n * ys_n + oh * ys_h + ow[:, None] * ys_w) * 8 + (ch0 + cols)[None, :]
            _async_load(dy_s.index(stage * FX + tx), p, mask=m)

    @gluon.jit
    def _store_tap(acc, ws_ptr, base, blk, G, ty: gl.constexpr, tx: gl.constexpr, C: gl.constexpr,
                   ws_g, ws_k, ws_c, ws_y, ws_x, MMA: gl.constexpr):
        """Tap (ty, tx): the accumulator's diagonal C x C blocks into this chunk's fp32 slice."""
        i = gl.arange(0, 16, layout=gl.SliceLayout(1, MMA))  # input channel in the block: group i // C
        j = gl.arange(0, 16, layout=gl.SliceLayout(0, MMA))  # grad_out channel in the block
        g = blk * (16 // C) + i // C
        keep = ((i // C)[:, None] == (j // C)[None, :]) & (g < G)[:, None]
        off = (base + g[:, None] * ws_g + (j % C)[None, :] * ws_k + (i % C)[:, None] * ws_c
               + ty * ws_y + tx * ws_x)
        gl.store(ws_ptr + off, acc, mask=keep)

    @gluon.jit
    def _store_taps(a00, a01, a02, a10, a11, a12, a20, a21, a22, ws_ptr, base, blk, G, C: gl.constexpr,
                    FY: gl.constexpr, FX: gl.constexpr, ws_g, ws_k, ws_c, ws_y, ws_x, MMA: gl.constexpr):
        """Every tap's accumulator of a FY x FX (<= 3 x 3) filter into this chunk's fp32 slice."""
        _store_tap(a00, ws_ptr, base, blk, G, 0, 0, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FX > 1:
            _store_tap(a01, ws_ptr, base, blk, G, 0, 1, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FX > 2:
            _store_tap(a02, ws_ptr, base, blk, G, 0, 2, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FY > 1:
            _store_tap(a10, ws_ptr, base, blk, G, 1, 0, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 1:
                _store_tap(a11, ws_ptr, base, blk, G, 1, 1, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 2:
                _store_tap(a12, ws_ptr, base, blk, G, 1, 2, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FY > 2:
            _store_tap(a20, ws_ptr, base, blk, G, 2, 0, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 1:
                _store_tap(a21, ws_ptr, base, blk, G, 2, 1, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 2:
                _store_tap(a22, ws_ptr, base, blk, G, 2, 2, C, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
