"""dwplane dgrad's run blocks (:mod:`.depthwise_plane_data`, session 40): the banded matrix and the grad_out
tile of blocks that read one flat grad_out run for all their filter rows (``run_plan`` there says when)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _run_toeplitz(w_ptr, g, Wi, Wo, FY, FX, s_w, dil_w, pad_w, ws_g, ws_y, ws_x,
                  JO: tl.constexpr, RUN: tl.constexpr, RUN_D: tl.constexpr, DIL_H: tl.constexpr):
    """Run blocks' T [RUN, JO]: run element k = b*Wo + c (grad_out row b of the run, column c) reaches grad_in
    element i = a*Wi + u (row a of the block) through tap (ty, tx) with ty*DIL_H = a - b + RUN_D and
    c*s_w = u + pad_w - tx*dil_w; zero elsewhere. One filter row along D (tz 0)."""
    k = tl.arange(0, RUN)[:, None]
    ii = tl.arange(0, JO)[None, :]
    b = k // Wo
    c = k - b * Wo
    a = ii // Wi
    u = ii - a * Wi
    e = u + pad_w - s_w * c  # tx*dil_w
    e_pos = tl.where(e >= 0, e, 0)
    tx = e_pos // dil_w
    f = a - b + RUN_D  # ty*DIL_H
    f_pos = tl.where(f >= 0, f, 0)
    ty = f_pos // DIL_H
    ok = (e >= 0) & (e_pos - tx * dil_w == 0) & (tx < FX) & (f >= 0) & (f_pos - ty * DIL_H == 0) & (ty < FY)
    return tl.load(w_ptr + g * ws_g + ty * ws_y + tx * ws_x, mask=ok, other=0.0)


@triton.jit
def _run_tiles(dy_g, tab_ptr, m0, m_end, rows, HO_ROWS, WO_V, RP: tl.constexpr, VEC: tl.constexpr,
               RUN: tl.constexpr):
    """Run blocks m0 + rows: the grad_out tile [BLOCK_M, RUN] (one flat run a block; its elements outside the
    plane, rows above or below it, read as zeros), grad_in offsets and stored vectors."""
    m = m0 + rows
    live = m < m_end
    rec = tab_ptr + tl.where(live, m, 0) * (3 + 2 * RP)
    x_off = tl.load(rec)
    lim = tl.where(live, tl.load(rec + 1), 0)
    k = tl.arange(0, RUN)
    fv = tl.load(rec + 4)[:, None] + (k // VEC)[None, :]
    ok = live[:, None] & (fv >= 0) & (fv < HO_ROWS * WO_V)
    a = tl.load(dy_g + (tl.load(rec + 3) * VEC)[:, None] + k[None, :], mask=ok, other=0.0)
    return a, x_off, lim
