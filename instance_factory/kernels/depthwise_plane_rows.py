"""dwplane wgrad's blocks of whole rows (:mod:`.depthwise_plane`): reading the taps off the product.

A row block's product acc[(xr, c), i] pairs input row xr, column c of its x tile with dy column i of its
flat run of rows; dw[tz, ty, tx] sums the pairs where xr = a + ty*dil_h and c = ow*s_w - pad_w + tx*dil_w
(a = i // Wo, ow = i % Wo) with c inside its row. Measurements: docs/BENCHMARKS.md, session 39.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..epilogue import apply_epilogue

__all__ = ["GATHER_MAX", "gathers_taps"]

GATHER_MAX = 4096  # products up to this many elements read their taps with one tl.gather


def gathers_taps(rows: int, x_rows: int, j: int) -> bool:
    """Whether a block of ``rows`` whole rows (its product [x_rows, j]) reads its taps with one ``tl.gather``:
    several rows and a small product (a gather from [256, 32] took 187 registers against 126 and ran 28x28
    planes 1.5x slower, H100, session 39)."""
    return rows > 1 and x_rows * j <= GATHER_MAX


@triton.jit
def _row_taps_out(acc, i, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, G, FY, FX, TAPS,
                  WI, WO, PAD_W, s_w, dil_h, dil_w, ws_g, ws_z, ws_y, ws_x,
                  ROWS: tl.constexpr, XRP: tl.constexpr, WP: tl.constexpr, J: tl.constexpr, FYP: tl.constexpr,
                  TP: tl.constexpr, GATHER: tl.constexpr, FINAL: tl.constexpr,
                  OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """Row blocks: dw[tz, ty, tx] = sum over dy columns i (row a = i // Wo, column ow) of acc[(xr, c), i] with
    input row xr = a + ty*dil_h and column c = ow*s_w - pad_w + tx*dil_w inside its row. One row a block:
    one masked sum per tx over [XRP, WP, J] gives every filter row. Else small products (GATHER:
    :func:`gathers_taps`) gather the taps' [TP, J] elements at once, larger ones select per tx the column
    ([XRP, WP, J] -> [XRP, J]) and then every filter row (a gather from [64, 32] ran 7x7 planes 1.4x
    faster than masked sums, H100, session 39)."""
    a_row = i // WO
    ow = i - a_row * WO
    i_ok = a_row < ROWS
    if ROWS == 1:  # input row xr is filter row xr / dil_h: one masked sum per tx gives every filter row
        acc3 = tl.reshape(acc, (XRP, WP, J))
        xr = tl.arange(0, XRP)
        ty = xr // dil_h
        keep = (ty * dil_h == xr) & (ty < FY)
        cpos = tl.arange(0, WP)
        for tx in range(FX):
            col = ow * s_w - PAD_W + tx * dil_w
            sel = (cpos[:, None] == col[None, :]) & (i_ok & (col >= 0) & (col < WI))[None, :]  # [WP, J]
            res = tl.sum(tl.sum(tl.where(sel[None, :, :], acc3, 0.0), axis=2), axis=1)  # [XRP]
            _store_taps(res, keep, ty, tx, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                        G, FY, FX, TAPS, ws_g, ws_z, ws_y, ws_x, FINAL, OP, NUM_DS, USER_FN)
    elif GATHER:
        t = tl.arange(0, TP)
        ty = t // FX
        tx = t - ty * FX
        col = (ow * s_w - PAD_W)[None, :] + (dil_w * tx)[:, None]  # [TP, J]
        keep = t < FY * FX
        ok = keep[:, None] & i_ok[None, :] & (col >= 0) & (col < WI)
        k = (a_row[None, :] + (dil_h * ty)[:, None]) * WP + col
        res = tl.sum(tl.where(ok, tl.gather(acc, tl.where(ok, k, 0), 0), 0.0), axis=1)  # [TP]
        _store_taps(res, keep, ty, tx, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                    G, FY, FX, TAPS, ws_g, ws_z, ws_y, ws_x, FINAL, OP, NUM_DS, USER_FN)
    else:
        _row_taps_masked(acc, a_row, ow, i_ok, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha,
                         beta, G, FY, FX, TAPS, WI, PAD_W, s_w, dil_h, dil_w, ws_g, ws_z, ws_y, ws_x,
                         XRP, WP, J, FYP, FINAL, OP, NUM_DS, USER_FN)


@triton.jit
def _row_taps_masked(acc, a_row, ow, i_ok, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                     G, FY, FX, TAPS, WI, PAD_W, s_w, dil_h, dil_w, ws_g, ws_z, ws_y, ws_x,
                     XRP: tl.constexpr, WP: tl.constexpr, J: tl.constexpr, FYP: tl.constexpr, FINAL: tl.constexpr,
                     OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """_row_taps_out by masked sums: per tx, its column of each row, then every filter row at once."""
    acc3 = tl.reshape(acc, (XRP, WP, J))
    tyv = tl.arange(0, FYP)
    keep_y = tyv < FY
    xr = tl.arange(0, XRP)
    sel_y = xr[None, :, None] == a_row[None, None, :] + (tyv * dil_h)[:, None, None]  # [FYP, XRP, J]
    cpos = tl.arange(0, WP)
    for tx in range(FX):
        col = ow * s_w - PAD_W + tx * dil_w
        sel = (cpos[:, None] == col[None, :]) & (i_ok & (col >= 0) & (col < WI))[None, :]  # [WP, J]
        per_row = tl.sum(tl.where(sel[None, :, :], acc3, 0.0), axis=1)  # [XRP, J]
        res = tl.sum(tl.sum(tl.where(sel_y, per_row[None, :, :], 0.0), axis=2), axis=1)  # [FYP]
        _store_taps(res, keep_y, tyv, tx, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                    G, FY, FX, TAPS, ws_g, ws_z, ws_y, ws_x, FINAL, OP, NUM_DS, USER_FN)


@triton.jit
def _store_taps(res, keep, ty, tx, g, tz, sid, out_ptr, ws_ptr, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta,
                G, FY, FX, TAPS, ws_g, ws_z, ws_y, ws_x, FINAL: tl.constexpr,
                OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """Row blocks: the taps (tz, ty, tx) of ``res`` where ``keep``: the result with the fused epilogue, or
    fp32 partials [chunk, taps, G] (the layout of the split reduce)."""
    if FINAL:
        offs = g * ws_g + tz * ws_z + ty * ws_y + tx * ws_x
        res = apply_epilogue(res, offs, keep, d0_ptr, d1_ptr, d2_ptr, d3_ptr, alpha, beta, OP, NUM_DS, USER_FN)
        tl.store(out_ptr + offs, res.to(out_ptr.dtype.element_ty), mask=keep)
    else:
        tl.store(ws_ptr + (sid * TAPS + (tz * FY + ty) * FX + tx) * G + g, res, mask=keep)
