"""The cost model on planar depthwise (dwplane) and group-major grouped (bdwin) wgrad: issue 13, session 40."""

from __future__ import annotations

import math

import pytest

from instance_factory.problem import ConvParams
from instance_factory.tuning import cost_model as C
from instance_factory.tuning import roofline as R
from instance_factory.tuning.packed_tiles import bdwin_work

OP = "conv_bwd_weight"
CF = "NGCHW/GKYXC/NGKHW"
GM = "GNHWC/GKYXC/GNHWK"
PLANE = '{"block_m": 128, "j": 32, "num_stages": 1, "num_warps": 4, "prefetch": 0, "split": 0}'
PLANE_CFG = {"block_m": 128, "j": 32, "num_stages": 1, "num_warps": 4, "prefetch": 0, "split": 0}


def _dw(groups: int, n: int, size: int, k: int = 3) -> ConvParams:
    return ConvParams(2, groups, n, 1, 1, (k, k), (size, size), (1, 1), (1, 1), (k // 2,) * 2, (k // 2,) * 2)


def _row(layout: str, params: ConvParams, inst: str, alg: str, ms: float, cfg: str = "{}") -> dict:
    return {"problem_key": f"{OP}|{layout}|bf16|passthrough|{params.key()}", "status": "ok", "instance": inst,
            "algorithm": alg, "instance_params": cfg, "median_ms": ms}


def test_dwplane_block_mode_follows_the_plane():
    """j = 32 cuts a 14x14 plane into blocks of two whole rows, a 56x56 one into column blocks."""
    assert R.block_mode(OP, _dw(480, 64, 14), "dwplane", PLANE_CFG) == "rows"
    assert R.block_mode(OP, _dw(480, 64, 56), "dwplane", PLANE_CFG) == ""
    assert R.block_mode(OP, _dw(480, 64, 14), "dwslide", PLANE_CFG) == ""
    assert C.kernel_variant(OP, "bf16", "dwplane", _dw(480, 64, 14), PLANE) == "dwplane+rows"
    assert C.kernel_variant(OP, "bf16", "dwplane") == "dwplane"


def test_a_row_block_problem_takes_its_correction_from_row_block_neighbours():
    """The roofline misses row blocks by more than column blocks (H100: log measured / model +1.15 vs +0.73),
    so one config's rows on a column-block plane say little about a row-block one: the 14x14 target is
    corrected by the 14x14 neighbour alone, not averaged with the nearer-in-weight 56x56 one."""
    target, rows_nb, cols_nb = _dw(480, 64, 14), _dw(384, 64, 14), _dw(480, 32, 28 * 2)
    assert R.block_mode(OP, cols_nb, "dwplane", PLANE_CFG) == ""
    m_rows = R.model_ms(OP, rows_nb, "bf16", "dwplane", PLANE_CFG)
    m_cols = R.model_ms(OP, cols_nb, "bf16", "dwplane", PLANE_CFG)
    rows = [_row(CF, rows_nb, "p", "dwplane", 3.0 * m_rows, PLANE), _row(CF, cols_nb, "p", "dwplane", m_cols, PLANE)]
    ev = C.Evidence.from_rows(rows)
    r = C.rank(OP, target, CF, "bf16", "passthrough", [("p", "dwplane", PLANE_CFG)], ev)
    rows_key = f"{OP}|{CF}|bf16|passthrough|{rows_nb.key()}"
    (corr,) = ev.tuned[rows_key].corrections.values()
    d = next(d for d, k in r.neighbors if k == rows_key)
    assert r.best.basis.startswith("measured on 1 neighbour")
    work, floor = R.model_parts(OP, target, "bf16", "dwplane", PLANE_CFG, host_floor_ms=ev.floor(OP, "dwplane"),
                                channels_first=True)
    assert r.best.predicted_ms == pytest.approx(R.with_floor(work * math.exp(corr + C.DISTANCE_PENALTY * d), floor))


def test_dwplane_floor_is_one_launch():
    """dwplane's fastest rows (0.023 ms) are real work on its smallest evidence layers, not its launch
    cost: its floor is capped at one launch (here igemm's 0.0101 ms), as for the GEMM families."""
    big = ConvParams(2, 1, 64, 256, 256, (3, 3), (14, 14), (1, 1), (1, 1), (1, 1), (1, 1))
    rows = [_row(CF, _dw(960, 64, 7, 5), "p", "dwplane", 0.023, PLANE), _row(CF, big, "i", "igemm", 0.0101)]
    ev = C.Evidence.from_rows(rows)
    assert C.LAUNCHES[(OP, "dwplane")] == 1
    assert ev.floor(OP, "dwplane") == pytest.approx(0.0101)
    # dgrad too (one launch; the block table is built at bind)
    data = [{**r, "problem_key": r["problem_key"].replace(OP, "conv_bwd_data")} for r in rows]
    assert C.Evidence.from_rows(data).floor("conv_bwd_data", "dwplane") == pytest.approx(0.0101)


def test_dwplane_split_reduce_costs_a_second_launch():
    """G480 3x3 14x14 N64: block_m 128 holds each group's 448 row blocks in one chunk (one launch);
    block_m 64 splits them into 3 chunks and a reduce (H100: 0.0245 vs 0.032 ms). The floor of the split
    call is that of two launches; without a floor the two are the same work."""
    p = _dw(480, 64, 14)
    one, three = PLANE_CFG, {**PLANE_CFG, "block_m": 64}
    assert R.plane_chunks(p, one, 132) == 1 and R.plane_chunks(p, three, 132) == 3
    assert R.model_ms(OP, p, "bf16", "dwplane", one, 132) == R.model_ms(OP, p, "bf16", "dwplane", three, 132)
    assert R.model_ms(OP, p, "bf16", "dwplane", one, 132, 0.01) < R.model_ms(OP, p, "bf16", "dwplane", three, 132, 0.01)


def test_group_major_bdwin_reads_each_groups_channels_as_a_run():
    """In GN..C tensors a tile's GPT groups are a plane apart: C8 bf16 reads 16-byte runs whatever block_n,
    so the tiles of several groups (block_n 64: 8 groups) cost more loads than on NHWGC (128-byte runs);
    one group a tile (C16, block_n 16) reads the same either way."""
    cfg = {"block_w": 32, "block_n": 64, "taps_x": 1, "prefetch": 0, "mma_rows": "x", "num_warps": 4, "split": 0}
    c8 = ConvParams(1, 64, 32, 8, 8, (5,), (1024,), (1,), (1,), (2,), (2,))
    assert bdwin_work(c8, cfg, 132, 2, group_major=True)[3] > 1.5 * bdwin_work(c8, cfg, 132, 2)[3]
    c16 = ConvParams(2, 32, 64, 16, 16, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1))
    one = {**cfg, "block_n": 16, "taps_x": 0}
    assert bdwin_work(c16, one, 132, 2, group_major=True)[3] == pytest.approx(bdwin_work(c16, one, 132, 2)[3])


def test_channels_first_packed_dgrad_is_bound_by_its_plane_gathers():
    """blockdiag dgrad on NGCHW gathers each tile's channels from planes H*W apart: the H100 rows ran at
    ~450 GB/s of dx + dy, from RegNetY C24 7x7 N32 (0.0179 ms) to G32 C8 56x56 N64 (0.419 ms). At MEM_BW the
    model sat at its host floor on the small layers, so the measured/model ratio grew 3.5x with size and the
    big layers' corrections priced the small ones 2.6-4.8x too slow (relayout won at 0.60 of the best)."""
    cfg = {"block_m": 256, "block_n": 32, "num_warps": 8}

    def p(groups: int, n: int, c: int, size: int) -> ConvParams:
        return ConvParams(2, groups, n, c, c, (3, 3), (size, size), (1, 1), (1, 1), (1, 1), (1, 1))

    measured = [(p(37, 32, 24, 7), 0.0179), (p(5, 32, 24, 28), 0.0293), (p(5, 64, 24, 28), 0.0511),
                (p(2, 64, 24, 56), 0.0721), (p(32, 64, 8, 56), 0.4194)]
    logs = [math.log(ms / R.model_ms("conv_bwd_data", q, "bf16", "blockdiag", cfg, 132, 0.01, channels_first=True))
            for q, ms in measured]
    assert max(logs) - min(logs) < 0.6 and max(map(abs, logs)) < 0.5
    # channels-last activations read contiguous channel runs: their model keeps MEM_BW
    q = measured[-1][0]
    cl = R.model_ms("conv_bwd_data", q, "bf16", "blockdiag", cfg, 132, 0.01)
    assert cl < 0.2 * R.model_ms("conv_bwd_data", q, "bf16", "blockdiag", cfg, 132, 0.01, channels_first=True)
