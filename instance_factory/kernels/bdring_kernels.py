"""bdring's Gluon kernels (host side, declines and docs: ``bwd_weight_bdring``). Two walks of the same taps:
``_bwd_weight_bdring_kernel`` takes one output row a step with its input rows in a ring (each copied in once),
``_bwd_weight_bdring_stack_kernel`` takes ``RPS`` output rows a step, each filter row's input rows and each tap
column's dy rows stacked into one [RPS * WX, 16] tile (an input row copied in once per filter row), so a step's mma
chains reduce over RPS * WX positions: narrow planes (7x7, 14x14) run 4x fewer, longer steps."""

from __future__ import annotations

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
except ImportError:  # a Triton without Gluon (before 3.5): the family declines
    gluon = None

__all__ = ["_bwd_weight_bdring_kernel", "_bwd_weight_bdring_stack_kernel", "gluon"]

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
    def _load_dy(dy_ptr, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, tx: gl.constexpr, WX: gl.constexpr,
                 LOAD: gl.constexpr):
        """dy row (n, oh) shifted right by tx, in registers (zero outside the row)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        ow = pos - tx
        m = ((ow >= 0) & (ow < Wo))[:, None] & ((ch0 + cols) < GC)[None, :]
        p = dy_ptr + (n * ys_n + oh * ys_h + ow[:, None] * ys_w) * 8 + (ch0 + cols)[None, :]
        return gl.load(p, mask=m, other=0.0)

    @gluon.jit
    def _issue_x(x_ptr, x_s, n, ih, slot, ch0, GC, H, W, pad_w, xs_n, xs_h, xs_w,
                 WX: gl.constexpr, LOAD: gl.constexpr):
        """Input row (n, ih) from column -pad_w into ring slot ``slot``, zero outside the plane."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        iw = pos - pad_w
        ok = (ih >= 0) & (ih < H)
        m = ((iw >= 0) & (iw < W) & ok)[:, None] & ((ch0 + cols) < GC)[None, :]
        p = x_ptr + (n * xs_n + ih * xs_h + iw[:, None] * xs_w) * 8 + (ch0 + cols)[None, :]
        _async_load(x_s.index(slot), p, mask=m)

    @gluon.jit
    def _row_taps(a0, a1, a2, x_s, dy_s, slot, stage, FX: gl.constexpr, A_L: gl.constexpr, B_L: gl.constexpr):
        """One filter row's taps: its input row (A, loaded once) against the FX shifted dy copies."""
        a = x_s.index(slot).permute((1, 0)).load(A_L)
        a0 = mma_v2(a, dy_s.index(stage * FX).load(B_L), a0)
        if FX > 1:
            a1 = mma_v2(a, dy_s.index(stage * FX + 1).load(B_L), a1)
        if FX > 2:
            a2 = mma_v2(a, dy_s.index(stage * FX + 2).load(B_L), a2)
        return a0, a1, a2

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

    @gluon.jit
    def _bwd_weight_bdring_kernel(
        x_ptr, dy_ptr, out_ptr, ws_ptr, d0, d1, d2, d3, alpha, beta,
        G, ROWS, CHUNK, Ho, H, W, Wo, pad_h, pad_w,
        xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,  # n / h / w strides in units of 8 elements: 16-byte rows
        ws_g, ws_k, ws_c, ws_y, ws_x, W_NUMEL,
        C: gl.constexpr, FY: gl.constexpr, FX: gl.constexpr, WX: gl.constexpr, R: gl.constexpr,
        DY_REGS: gl.constexpr,
    ):
        blk = gl.program_id(0)  # 16-channel block
        chunk = gl.program_id(1)  # chunk of output rows (n, oh)
        ch0 = blk * 16
        GC = G * C
        LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [16, 2], [1, 1], [1, 0])
        SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        dy_s = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [2 * FX, WX, 16], SMEM)
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [R, WX, 16], SMEM)

        r0 = chunk * CHUNK
        r1 = gl.minimum(r0 + CHUNK, ROWS)
        zero = gl.zeros([16, 16], gl.float32, MMA)
        a00 = zero
        a01 = zero
        a02 = zero
        a10 = zero
        a11 = zero
        a12 = zero
        a20 = zero
        a21 = zero
        a22 = zero
        VR = Ho + FY - 1  # ring rows per image
        n = r0 // Ho
        oh = r0 % Ho
        if DY_REGS:
            for tx in gl.static_range(FX):
                dy_s.index(tx).store(_load_dy(dy_ptr, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, tx, WX, LOAD))
        else:
            _issue_dy(dy_ptr, dy_s, 0, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, FX, WX, LOAD)
        for ty in gl.static_range(FY):
            _issue_x(x_ptr, x_s, n, oh + ty - pad_h, (n * VR + oh + ty) % R, ch0, GC, H, W, pad_w,
                     xs_n, xs_h, xs_w, WX, LOAD)
        async_copy.commit_group()
        for r in range(r0, r1):
            stage = (r - r0) % 2
            n = r // Ho
            oh = r % Ho
            v = n * VR + oh
            rn = gl.minimum(r + 1, ROWS - 1)
            n1 = rn // Ho
            oh1 = rn % Ho
            if DY_REGS:
                e0 = _load_dy(dy_ptr, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, 0, WX, LOAD)
                if FX > 1:
                    e1 = _load_dy(dy_ptr, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, 1, WX, LOAD)
                if FX > 2:
                    e2 = _load_dy(dy_ptr, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, 2, WX, LOAD)
            else:
                _issue_dy(dy_ptr, dy_s, 1 - stage, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, FX, WX, LOAD)
            # the next row's new input rows (one within an image, FY at an image's start), into free slots
            v1 = n1 * VR + oh1
            for ty in gl.static_range(FY):
                if (r + 1 < r1) & ((ty == FY - 1) | (oh1 == 0)):
                    _issue_x(x_ptr, x_s, n1, oh1 + ty - pad_h, (v1 + ty) % R, ch0, GC, H, W, pad_w,
                             xs_n, xs_h, xs_w, WX, LOAD)
            async_copy.commit_group()
            async_copy.wait_group(1)
            _barrier()
            a00, a01, a02 = _row_taps(a00, a01, a02, x_s, dy_s, v % R, stage, FX, A_L, B_L)
            if FY > 1:
                a10, a11, a12 = _row_taps(a10, a11, a12, x_s, dy_s, (v + 1) % R, stage, FX, A_L, B_L)
            if FY > 2:
                a20, a21, a22 = _row_taps(a20, a21, a22, x_s, dy_s, (v + 2) % R, stage, FX, A_L, B_L)
            if DY_REGS:
                dy_s.index((1 - stage) * FX).store(e0)
                if FX > 1:
                    dy_s.index((1 - stage) * FX + 1).store(e1)
                if FX > 2:
                    dy_s.index((1 - stage) * FX + 2).store(e2)
            _barrier()
        base = chunk * W_NUMEL
        _store_taps(a00, a01, a02, a10, a11, a12, a20, a21, a22, ws_ptr, base, blk, G, C, FY, FX,
                    ws_g, ws_k, ws_c, ws_y, ws_x, MMA)

    @gluon.jit
    def _issue_stack(x_ptr, dy_ptr, x_s, dy_s, stage, r, r1, ch0, GC, Ho, H, W, Wo, pad_h, pad_w,
                     xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,
                     FY: gl.constexpr, FX: gl.constexpr, WX: gl.constexpr, RPS: gl.constexpr, LOAD: gl.constexpr):
        """Output rows r .. r + RPS - 1 (past r1: zeros), each a WX-long segment: per tap column the dy rows
        shifted right by tx, per filter row the input rows ty - pad_h below them (zero outside the plane)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, RPS * WX, layout=gl.SliceLayout(1, LOAD))
        u = pos % WX
        row = r + pos // WX
        live = row < r1
        n = row // Ho
        oh = row % Ho
        cok = ((ch0 + cols) < GC)[None, :]
        for tx in gl.static_range(FX):
            ow = u - tx
            m = (live & (ow >= 0) & (ow < Wo))[:, None] & cok
            p = dy_ptr + (n * ys_n + oh * ys_h + ow * ys_w)[:, None] * 8 + (ch0 + cols)[None, :]
            _async_load(dy_s.index(stage * FX + tx), p, mask=m)
        iw = u - pad_w
        for ty in gl.static_range(FY):
            ih = oh + ty - pad_h
            m = (live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W))[:, None] & cok
            p = x_ptr + (n * xs_n + ih * xs_h + iw * xs_w)[:, None] * 8 + (ch0 + cols)[None, :]
            _async_load(x_s.index(stage * FY + ty), p, mask=m)
        async_copy.commit_group()

    @gluon.jit
    def _bwd_weight_bdring_stack_kernel(
        x_ptr, dy_ptr, out_ptr, ws_ptr, d0, d1, d2, d3, alpha, beta,
        G, ROWS, CHUNK, Ho, H, W, Wo, pad_h, pad_w,
        xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,  # n / h / w strides in units of 8 elements: 16-byte rows
        ws_g, ws_k, ws_c, ws_y, ws_x, W_NUMEL,
        C: gl.constexpr, FY: gl.constexpr, FX: gl.constexpr, WX: gl.constexpr, RPS: gl.constexpr,
    ):
        blk = gl.program_id(0)  # 16-channel block
        chunk = gl.program_id(1)  # chunk of output rows (a multiple of RPS)
        ch0 = blk * 16
        GC = G * C
        LOAD: gl.constexpr = gl.BlockedLayout([1, 8], [16, 2], [1, 1], [1, 0])
        SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        dy_s = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [2 * FX, RPS * WX, 16], SMEM)
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [2 * FY, RPS * WX, 16], SMEM)

        r0 = chunk * CHUNK
        r1 = gl.minimum(r0 + CHUNK, ROWS)
        zero = gl.zeros([16, 16], gl.float32, MMA)
        a00 = zero
        a01 = zero
        a02 = zero
        a10 = zero
        a11 = zero
        a12 = zero
        a20 = zero
        a21 = zero
        a22 = zero
        _issue_stack(x_ptr, dy_ptr, x_s, dy_s, 0, r0, r1, ch0, GC, Ho, H, W, Wo, pad_h, pad_w,
                     xs_n, xs_h, xs_w, ys_n, ys_h, ys_w, FY, FX, WX, RPS, LOAD)
        for r in range(r0, r1, RPS):
            stage = ((r - r0) // RPS) % 2
            # the next step's rows (all masked past the chunk: the group still counts for the wait)
            _issue_stack(x_ptr, dy_ptr, x_s, dy_s, 1 - stage, r + RPS, r1, ch0, GC, Ho, H, W, Wo, pad_h, pad_w,
                         xs_n, xs_h, xs_w, ys_n, ys_h, ys_w, FY, FX, WX, RPS, LOAD)
            async_copy.wait_group(1)
            _barrier()
            a00, a01, a02 = _row_taps(a00, a01, a02, x_s, dy_s, stage * FY, stage, FX, A_L, B_L)
            if FY > 1:
                a10, a11, a12 = _row_taps(a10, a11, a12, x_s, dy_s, stage * FY + 1, stage, FX, A_L, B_L)
            if FY > 2:
                a20, a21, a22 = _row_taps(a20, a21, a22, x_s, dy_s, stage * FY + 2, stage, FX, A_L, B_L)
            _barrier()
        async_copy.wait_group(0)
        base = chunk * W_NUMEL
        _store_taps(a00, a01, a02, a10, a11, a12, a20, a21, a22, ws_ptr, base, blk, G, C, FY, FX,
                    ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
else:
    _bwd_weight_bdring_kernel = None
    _bwd_weight_bdring_stack_kernel = None


