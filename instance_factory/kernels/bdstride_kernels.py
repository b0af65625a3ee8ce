"""bdstride's Gluon kernels (host side, declines and docs: ``bwd_weight_bdstride``): bdring's two walks for strided
layers. A strided tap column tx reads input column ow * SW + tx - pad_w. Split tx = SW * q + p: the input row is
copied once per phase p into X_p[u] = x[u * SW + p - pad_w] (consecutive positions of one phase) and the dy row once
per shift q into D_q[u] = dy[u - q], so sum_u X_p[u] D_q[u] = sum_ow x[ow * SW + tx - pad_w] dy[ow]: one mma.sync
chain per tap, as at stride 1. A 3 x 3 filter at stride 2 copies 2 phases of an input row and 2 dy shifts.
``_bwd_weight_bdstride_ring_kernel`` takes one output row a step, its input rows (ih = oh * SH + ty - pad_h) in a
ring of phase tiles, each row copied in once (SH new rows a step); ``_bwd_weight_bdstride_wide_kernel`` is that ring
with NB warps a program, NB consecutive 16-channel blocks (copies of NB * 32 contiguous bytes a position, batched
[NB, 16, 16] mma tiles); ``_bwd_weight_bdstride_kernel`` stacks ``RPS`` output rows a step, every filter row's input
rows copied again (narrow planes). Each writes its chunk's fp32 slice with the strides the host gives (bdstride: the
order tap, g, k, c that common's multi-slice reduce reads)."""

from __future__ import annotations

from .bdring_kernels import gluon

if gluon is not None:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

    from .bdring_kernels import _async_load, _barrier, _issue_dy, _store_taps

__all__ = ["_bwd_weight_bdstride_kernel", "_bwd_weight_bdstride_ring_kernel", "_bwd_weight_bdstride_wide_kernel"]

if gluon is not None:
    @gluon.jit
    def _issue_strided(x_ptr, dy_ptr, x_s, dy_s, stage, r, r1, ch0, GC, Ho, H, W, Wo, pad_h, pad_w,
                       xs_n, xs_h, xs_w, ys_n, ys_h, ys_w, FY: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
                       NP: gl.constexpr, NQ: gl.constexpr, WX: gl.constexpr, RPS: gl.constexpr, LOAD: gl.constexpr):
        """Output rows r .. r + RPS - 1 (past r1: zeros), each a WX-long segment: dy shifted right by q per shift,
        and per filter row the input row's phases p (zero outside the plane)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, RPS * WX, layout=gl.SliceLayout(1, LOAD))
        u = pos % WX
        row = r + pos // WX
        live = row < r1
        n = row // Ho
        oh = row % Ho
        cok = ((ch0 + cols) < GC)[None, :]
        for q in gl.static_range(NQ):
            ow = u - q
            m = (live & (ow >= 0) & (ow < Wo))[:, None] & cok
            p = dy_ptr + (n * ys_n + oh * ys_h + ow * ys_w)[:, None] * 8 + (ch0 + cols)[None, :]
            _async_load(dy_s.index(stage * NQ + q), p, mask=m)
        for ty in gl.static_range(FY):
            ih = oh * SH + ty - pad_h
            row_ok = live & (ih >= 0) & (ih < H)
            for ph in gl.static_range(NP):
                iw = u * SW + ph - pad_w
                m = (row_ok & (iw >= 0) & (iw < W))[:, None] & cok
                p = x_ptr + (n * xs_n + ih * xs_h + iw * xs_w)[:, None] * 8 + (ch0 + cols)[None, :]
                _async_load(x_s.index((stage * FY + ty) * NP + ph), p, mask=m)
        async_copy.commit_group()

    @gluon.jit
    def _strided_taps(a0, a1, a2, x_s, xi, b0, b1, b2, FX: gl.constexpr, SW: gl.constexpr, A_L: gl.constexpr):
        """One filter row's taps: tap tx is input phase tx % SW (tile xi + phase) against dy shift tx // SW (b_q)."""
        x0 = x_s.index(xi).permute((1, 0)).load(A_L)
        a0 = mma_v2(x0, b0, a0)
        if FX > 1:
            if SW == 1:
                a1 = mma_v2(x0, b1, a1)
            else:
                x1 = x_s.index(xi + 1).permute((1, 0)).load(A_L)
                a1 = mma_v2(x1, b0, a1)
        if FX > 2:
            if SW == 1:
                a2 = mma_v2(x0, b2, a2)
            elif SW == 2:
                a2 = mma_v2(x0, b1, a2)
            else:
                x2 = x_s.index(xi + 2).permute((1, 0)).load(A_L)
                a2 = mma_v2(x2, b0, a2)
        return a0, a1, a2

    @gluon.jit
    def _bwd_weight_bdstride_kernel(
        x_ptr, dy_ptr, out_ptr, ws_ptr, d0, d1, d2, d3, alpha, beta,
        G, ROWS, CHUNK, Ho, H, W, Wo, pad_h, pad_w,
        xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,  # n / h / w strides in units of 8 elements: 16-byte rows
        ws_g, ws_k, ws_c, ws_y, ws_x, W_NUMEL,
        C: gl.constexpr, FY: gl.constexpr, FX: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
        NP: gl.constexpr, NQ: gl.constexpr, WX: gl.constexpr, RPS: gl.constexpr,
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
        dy_s = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [2 * NQ, RPS * WX, 16], SMEM)
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [2 * FY * NP, RPS * WX, 16], SMEM)

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
        _issue_strided(x_ptr, dy_ptr, x_s, dy_s, 0, r0, r1, ch0, GC, Ho, H, W, Wo, pad_h, pad_w,
                       xs_n, xs_h, xs_w, ys_n, ys_h, ys_w, FY, SH, SW, NP, NQ, WX, RPS, LOAD)
        for r in range(r0, r1, RPS):
            stage = ((r - r0) // RPS) % 2
            # the next step's rows (all masked past the chunk: the group still counts for the wait)
            _issue_strided(x_ptr, dy_ptr, x_s, dy_s, 1 - stage, r + RPS, r1, ch0, GC, Ho, H, W, Wo, pad_h, pad_w,
                           xs_n, xs_h, xs_w, ys_n, ys_h, ys_w, FY, SH, SW, NP, NQ, WX, RPS, LOAD)
            async_copy.wait_group(1)
            _barrier()
            # each dy shift read from shared memory once a step, for every filter row
            b0 = dy_s.index(stage * NQ).load(B_L)
            b1 = b0
            b2 = b0
            if NQ > 1:
                b1 = dy_s.index(stage * NQ + 1).load(B_L)
            if NQ > 2:
                b2 = dy_s.index(stage * NQ + 2).load(B_L)
            a00, a01, a02 = _strided_taps(a00, a01, a02, x_s, stage * FY * NP, b0, b1, b2, FX, SW, A_L)
            if FY > 1:
                a10, a11, a12 = _strided_taps(a10, a11, a12, x_s, (stage * FY + 1) * NP, b0, b1, b2, FX, SW, A_L)
            if FY > 2:
                a20, a21, a22 = _strided_taps(a20, a21, a22, x_s, (stage * FY + 2) * NP, b0, b1, b2, FX, SW, A_L)
            _barrier()
        async_copy.wait_group(0)
        base = chunk * W_NUMEL
        _store_taps(a00, a01, a02, a10, a11, a12, a20, a21, a22, ws_ptr, base, blk, G, C, FY, FX,
                    ws_g, ws_k, ws_c, ws_y, ws_x, MMA)

    @gluon.jit
    def _issue_phases(x_ptr, x_s, n, ih, slot, ch0, GC, H, W, pad_w, xs_n, xs_h, xs_w, SW: gl.constexpr,
                      NP: gl.constexpr, WX: gl.constexpr, LOAD: gl.constexpr):
        """Input row (n, ih) into ring slot ``slot``: phase p as tile slot * NP + p, X_p[u] = x[u * SW + p - pad_w]
        (zero outside the plane)."""
        cols = gl.arange(0, 16, layout=gl.SliceLayout(0, LOAD))
        pos = gl.arange(0, WX, layout=gl.SliceLayout(1, LOAD))
        ok = (ih >= 0) & (ih < H)
        cok = ((ch0 + cols) < GC)[None, :]
        for ph in gl.static_range(NP):
            iw = pos * SW + ph - pad_w
            m = ((iw >= 0) & (iw < W) & ok)[:, None] & cok
            p = x_ptr + (n * xs_n + ih * xs_h + iw[:, None] * xs_w) * 8 + (ch0 + cols)[None, :]
            _async_load(x_s.index(slot * NP + ph), p, mask=m)

    @gluon.jit
    def _bwd_weight_bdstride_ring_kernel(
        x_ptr, dy_ptr, out_ptr, ws_ptr, d0, d1, d2, d3, alpha, beta,
        G, ROWS, CHUNK, Ho, H, W, Wo, pad_h, pad_w,
        xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,  # n / h / w strides in units of 8 elements: 16-byte rows
        ws_g, ws_k, ws_c, ws_y, ws_x, W_NUMEL,
        C: gl.constexpr, FY: gl.constexpr, FX: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
        NP: gl.constexpr, NQ: gl.constexpr, WX: gl.constexpr, R: gl.constexpr,
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
        dy_s = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [2 * NQ, WX, 16], SMEM)
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [R * NP, WX, 16], SMEM)

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
        VR = (Ho - 1) * SH + FY  # ring rows per image: input row ih of image n is v = n * VR + ih + pad_h
        n = r0 // Ho
        oh = r0 % Ho
        _issue_dy(dy_ptr, dy_s, 0, n, oh, ch0, GC, Wo, ys_n, ys_h, ys_w, NQ, WX, LOAD)
        for ty in gl.static_range(FY):
            _issue_phases(x_ptr, x_s, n, oh * SH + ty - pad_h, (n * VR + oh * SH + ty) % R, ch0, GC, H, W, pad_w,
                          xs_n, xs_h, xs_w, SW, NP, WX, LOAD)
        async_copy.commit_group()
        for r in range(r0, r1):
            stage = (r - r0) % 2
            n = r // Ho
            oh = r % Ho
            v = n * VR + oh * SH
            rn = gl.minimum(r + 1, ROWS - 1)
            n1 = rn // Ho
            oh1 = rn % Ho
            _issue_dy(dy_ptr, dy_s, 1 - stage, n1, oh1, ch0, GC, Wo, ys_n, ys_h, ys_w, NQ, WX, LOAD)
            # the next row's new input rows (its last SH filter rows within an image, all FY at an image's start)
            v1 = n1 * VR + oh1 * SH
            for ty in gl.static_range(FY):
                if (r + 1 < r1) & ((ty >= FY - SH) | (oh1 == 0)):
                    _issue_phases(x_ptr, x_s, n1, oh1 * SH + ty - pad_h, (v1 + ty) % R, ch0, GC, H, W, pad_w,
                                  xs_n, xs_h, xs_w, SW, NP, WX, LOAD)
            async_copy.commit_group()
            async_copy.wait_group(1)
            _barrier()
            b0 = dy_s.index(stage * NQ).load(B_L)
            b1 = b0
            b2 = b0
            if NQ > 1:
                b1 = dy_s.index(stage * NQ + 1).load(B_L)
            if NQ > 2:
                b2 = dy_s.index(stage * NQ + 2).load(B_L)
            a00, a01, a02 = _strided_taps(a00, a01, a02, x_s, (v % R) * NP, b0, b1, b2, FX, SW, A_L)
            if FY > 1:
                a10, a11, a12 = _strided_taps(a10, a11, a12, x_s, ((v + 1) % R) * NP, b0, b1, b2, FX, SW, A_L)
            if FY > 2:
                a20, a21, a22 = _strided_taps(a20, a21, a22, x_s, ((v + 2) % R) * NP, b0, b1, b2, FX, SW, A_L)
            _barrier()
        base = chunk * W_NUMEL
        _store_taps(a00, a01, a02, a10, a11, a12, a20, a21, a22, ws_ptr, base, blk, G, C, FY, FX,
                    ws_g, ws_k, ws_c, ws_y, ws_x, MMA)

    @gluon.jit
    def _issue_wide(ptr, tile, n, h, w0, ws, lim_h, lim_w, ch0, GC, s_n, s_h, s_w, WX: gl.constexpr,
                    NB: gl.constexpr, LOAD: gl.constexpr):
        """Row (n, h), columns w0 + u * ws for u < WX (zero outside [0, lim_h) x [0, lim_w)), NB 16-channel blocks
        from ch0, into the [WX, NB, 16] tile: NB * 32 contiguous bytes a position."""
        u = gl.arange(0, WX, layout=gl.SliceLayout(1, gl.SliceLayout(2, LOAD)))
        b = gl.arange(0, NB, layout=gl.SliceLayout(1, gl.SliceLayout(0, LOAD)))
        j = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(0, LOAD)))
        col = w0 + u * ws
        ok = (col >= 0) & (col < lim_w) & (h >= 0) & (h < lim_h)
        ch = ch0 + b[:, None] * 16 + j[None, :]
        m = ok[:, None, None] & (ch < GC)[None, :, :]
        p = ptr + (n * s_n + h * s_h + col * s_w)[:, None, None] * 8 + ch[None, :, :]
        _async_load(tile, p, mask=m)

    @gluon.jit
    def _wide_taps(a0, a1, a2, x_s, xi, b0, b1, b2, FX: gl.constexpr, SW: gl.constexpr, A_L: gl.constexpr):
        """_strided_taps on [NB, ., .] batches: warp b multiplies its own 16-channel block."""
        x0 = x_s.index(xi).permute((1, 2, 0)).load(A_L)
        a0 = mma_v2(x0, b0, a0)
        if FX > 1:
            if SW == 1:
                a1 = mma_v2(x0, b1, a1)
            else:
                x1 = x_s.index(xi + 1).permute((1, 2, 0)).load(A_L)
                a1 = mma_v2(x1, b0, a1)
        if FX > 2:
            if SW == 1:
                a2 = mma_v2(x0, b2, a2)
            elif SW == 2:
                a2 = mma_v2(x0, b1, a2)
            else:
                x2 = x_s.index(xi + 2).permute((1, 2, 0)).load(A_L)
                a2 = mma_v2(x2, b0, a2)
        return a0, a1, a2

    @gluon.jit
    def _store_wide(acc, ws_ptr, base, blk, G, ty: gl.constexpr, tx: gl.constexpr, C: gl.constexpr, NB: gl.constexpr,
                    ws_g, ws_k, ws_c, ws_y, ws_x, MMA: gl.constexpr):
        """Tap (ty, tx) of NB blocks: each block's diagonal C x C blocks into this chunk's fp32 slice."""
        b = gl.arange(0, NB, layout=gl.SliceLayout(1, gl.SliceLayout(2, MMA)))
        i = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(2, MMA)))  # input channel in the block
        j = gl.arange(0, 16, layout=gl.SliceLayout(0, gl.SliceLayout(1, MMA)))  # grad_out channel in the block
        g = (blk * NB + b)[:, None] * (16 // C) + (i // C)[None, :]  # [NB, 16]
        keep = ((i // C)[None, :, None] == (j // C)[None, None, :]) & (g < G)[:, :, None]
        off = (base + g[:, :, None] * ws_g + (j % C)[None, None, :] * ws_k + (i % C)[None, :, None] * ws_c
               + ty * ws_y + tx * ws_x)
        gl.store(ws_ptr + off, acc, mask=keep)

    @gluon.jit
    def _bwd_weight_bdstride_wide_kernel(
        x_ptr, dy_ptr, out_ptr, ws_ptr, d0, d1, d2, d3, alpha, beta,
        G, ROWS, CHUNK, Ho, H, W, Wo, pad_h, pad_w,
        xs_n, xs_h, xs_w, ys_n, ys_h, ys_w,  # n / h / w strides in units of 8 elements: 16-byte rows
        ws_g, ws_k, ws_c, ws_y, ws_x, W_NUMEL,
        C: gl.constexpr, FY: gl.constexpr, FX: gl.constexpr, SH: gl.constexpr, SW: gl.constexpr,
        NP: gl.constexpr, NQ: gl.constexpr, WX: gl.constexpr, R: gl.constexpr, NB: gl.constexpr,
    ):
        """The ring walk with NB warps a program, NB consecutive 16-channel blocks (one a warp): copies of
        NB * 32 contiguous bytes a position, batched [NB, 16, 16] mma.sync tiles."""
        blk = gl.program_id(0)  # NB 16-channel blocks
        chunk = gl.program_id(1)
        ch0 = blk * 16 * NB
        GC = G * C
        LOAD: gl.constexpr = gl.BlockedLayout([1, 1, 8], [16 // NB, NB, 2], [NB, 1, 1], [2, 1, 0])
        SMEM: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
        MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NB, 1, 1],
                                                      instr_shape=[1, 16, 8])
        A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
        B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
        dy_s = gl.allocate_shared_memory(dy_ptr.dtype.element_ty, [2 * NQ, WX, NB, 16], SMEM)
        x_s = gl.allocate_shared_memory(x_ptr.dtype.element_ty, [R * NP, WX, NB, 16], SMEM)

        r0 = chunk * CHUNK
        r1 = gl.minimum(r0 + CHUNK, ROWS)
        zero = gl.zeros([NB, 16, 16], gl.float32, MMA)
        a00 = zero
        a01 = zero
        a02 = zero
        a10 = zero
        a11 = zero
        a12 = zero
        a20 = zero
        a21 = zero
        a22 = zero
        VR = (Ho - 1) * SH + FY
        n = r0 // Ho
        oh = r0 % Ho
        for q in gl.static_range(NQ):
            _issue_wide(dy_ptr, dy_s.index(q), n, oh, -q, 1, Ho, Wo, ch0, GC, ys_n, ys_h, ys_w, WX, NB, LOAD)
        for ty in gl.static_range(FY):
            for ph in gl.static_range(NP):
                _issue_wide(x_ptr, x_s.index(((n * VR + oh * SH + ty) % R) * NP + ph), n, oh * SH + ty - pad_h,
                            ph - pad_w, SW, H, W, ch0, GC, xs_n, xs_h, xs_w, WX, NB, LOAD)
        async_copy.commit_group()
        for r in range(r0, r1):
            stage = (r - r0) % 2
            n = r // Ho
            oh = r % Ho
            v = n * VR + oh * SH
            rn = gl.minimum(r + 1, ROWS - 1)
            n1 = rn // Ho
            oh1 = rn % Ho
            for q in gl.static_range(NQ):
                _issue_wide(dy_ptr, dy_s.index((1 - stage) * NQ + q), n1, oh1, -q, 1, Ho, Wo, ch0, GC,
                            ys_n, ys_h, ys_w, WX, NB, LOAD)
            v1 = n1 * VR + oh1 * SH
            for ty in gl.static_range(FY):
                if (r + 1 < r1) & ((ty >= FY - SH) | (oh1 == 0)):
                    for ph in gl.static_range(NP):
                        _issue_wide(x_ptr, x_s.index(((v1 + ty) % R) * NP + ph), n1, oh1 * SH + ty - pad_h,
                                    ph - pad_w, SW, H, W, ch0, GC, xs_n, xs_h, xs_w, WX, NB, LOAD)
            async_copy.commit_group()
            async_copy.wait_group(1)
            _barrier()
            b0 = dy_s.index(stage * NQ).permute((1, 0, 2)).load(B_L)
            b1 = b0
            b2 = b0
            if NQ > 1:
                b1 = dy_s.index(stage * NQ + 1).permute((1, 0, 2)).load(B_L)
            if NQ > 2:
                b2 = dy_s.index(stage * NQ + 2).permute((1, 0, 2)).load(B_L)
            a00, a01, a02 = _wide_taps(a00, a01, a02, x_s, (v % R) * NP, b0, b1, b2, FX, SW, A_L)
            if FY > 1:
                a10, a11, a12 = _wide_taps(a10, a11, a12, x_s, ((v + 1) % R) * NP, b0, b1, b2, FX, SW, A_L)
            if FY > 2:
                a20, a21, a22 = _wide_taps(a20, a21, a22, x_s, ((v + 2) % R) * NP, b0, b1, b2, FX, SW, A_L)
            _barrier()
        base = chunk * W_NUMEL
        _store_wide(a00, ws_ptr, base, blk, G, 0, 0, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FX > 1:
            _store_wide(a01, ws_ptr, base, blk, G, 0, 1, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FX > 2:
            _store_wide(a02, ws_ptr, base, blk, G, 0, 2, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FY > 1:
            _store_wide(a10, ws_ptr, base, blk, G, 1, 0, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 1:
                _store_wide(a11, ws_ptr, base, blk, G, 1, 1, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 2:
                _store_wide(a12, ws_ptr, base, blk, G, 1, 2, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
        if FY > 2:
            _store_wide(a20, ws_ptr, base, blk, G, 2, 0, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 1:
                _store_wide(a21, ws_ptr, base, blk, G, 2, 1, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
            if FX > 2:
                _store_wide(a22, ws_ptr, base, blk, G, 2, 2, C, NB, ws_g, ws_k, ws_c, ws_y, ws_x, MMA)
else:
    _bwd_weight_bdstride_kernel = None
    _bwd_weight_bdstride_ring_kernel = None
    _bwd_weight_bdstride_wide_kernel = None
