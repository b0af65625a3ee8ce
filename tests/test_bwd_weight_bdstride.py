"""conv_bwd_weight ``bdstride`` family (bdring's Gluon walks for strided layers of 4-16 channels per group: the
input rows copied once per stride phase, in a ring or stacked, dy once per shift). Gluon does not run in the Triton interpreter, so on
CPU this file checks the declines, the configs, the phase / shift split and that the kernel compiles for sm_90; on
a CUDA GPU (TRITON_INTERPRET=0) it checks results against the float64 reference for strides 2 and 3 on either
axis, odd planes whose last phase column is missing, asymmetric pads, filters under 3 x 3, groups past the last
16-channel block, stacked steps across images and past a chunk's end, 1D rows, every fused op and the dtypes.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402
from test_bwd_weight_bdring import PTXAS, ROOT, gpu  # noqa: E402  (the Gluon families' GPU marker and ptxas)

from instance_factory.algorithms import emulating_gpu  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_bdstride  # noqa: E402
from instance_factory.kernels.bdring_kernels import gluon  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402

_p = igemm_tests._p
ALG = igemm_tests._alg("bdstride")
FO = FUSED_OPS["passthrough"]


def _cfg(**kw):
    cfg = dict(waves=4, rows=1, warps=1)
    cfg.update(kw)
    return ALG.config.from_values(cfg)


def _s2(g=4, n=2, c=8, i=(9, 13), **kw):
    """A 3 x 3 stride-2 pad-1 layer (ResNeXt's first block of a stage)."""
    return _p(2, G=g, N=n, K=c, C=c, i=i, s=kw.pop("s", (2, 2)), lp=kw.pop("lp", (1, 1)), rp=kw.pop("rp", (1, 1)),
              **kw)


# ------------------------------------------------------------------------------------------------
# CPU: declines, configs, the phase / shift split
# ------------------------------------------------------------------------------------------------
def test_declines_in_the_interpreter_unless_a_gpu_is_emulated(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    args = (_cfg(), _s2(), layout_for("nhwgc", 2), DATA_TYPES["fp16"], FO)
    why = ALG.decline(*args)
    assert why and "bdstride is a Gluon kernel" in why
    with emulating_gpu():  # a lookup replayed from a GPU's rows chooses as there
        assert ALG.decline(*args) is None or gluon is None


@pytest.mark.parametrize("p,words", [
    (_p(3, G=4, K=8, C=8, s=(2, 2, 2), i=(6, 6, 6)), "1D and 2D"),
    (_s2(c=32), "C == K in (4, 8, 16)"),
    (_p(2, G=4, K=8, C=4, s=(2, 2), i=(9, 9)), "C == K"),
    (_p(2, G=4, K=8, C=8, i=(9, 9), lp=(1, 1), rp=(1, 1)), "stride 1 is bdring's"),
    (_s2(d=(2, 2)), "dilation 1 only"),
    (_s2(f=(5, 5), lp=(2, 2), rp=(2, 2)), "3 x 3 taps"),
    (_p(1, G=4, K=8, C=8, f=(3,), s=(2,), i=(400,), lp=(1,), rp=(1,)), "a tile of at most 128"),
])
def test_problem_declines(p, words):
    why = bwd_weight_bdstride.problem_reason(p)
    assert why and words in why, why


def test_layout_dtype_and_alignment_declines(monkeypatch):
    monkeypatch.setattr(bwd_weight_bdstride, "gluon_reason", lambda family: None)  # as on a GPU
    lt = layout_for("nhwgc", 2)
    assert ALG.decline(_cfg(), _s2(), lt, DATA_TYPES["bf16"], FO) is None
    assert ALG.decline(_cfg(rows=8), _p(1, G=2, K=16, C=16, s=(2,), i=(30,), lp=(1,), rp=(1,)),
                       layout_for("nhwgc", 1), DATA_TYPES["bf16_fp32w"], FO) is None
    for dtype in ("fp32", "fp32_tf32", "fp16_fp8"):
        why = ALG.decline(_cfg(), _s2(), lt, DATA_TYPES[dtype], FO)
        assert why and "16-bit data" in why, why
    why = ALG.decline(_cfg(), _s2(), layout_for("gnhwc", 2), DATA_TYPES["fp16"], FO)
    assert why and "bdstride reads 16 packed channels of consecutive groups" in why
    why = ALG.decline(_cfg(), _s2(g=3, c=4), lt, DATA_TYPES["fp16"], FO)
    assert why and "multiple of 8" in why
    wide = _s2(i=(8, 112))  # output rows of 56 + 1 shift: 64 positions
    assert ALG.decline(_cfg(rows=2), wide, lt, DATA_TYPES["fp16"], FO) is None
    why = ALG.decline(_cfg(rows=4), wide, lt, DATA_TYPES["fp16"], FO)
    assert why and "fewer rows take this plane" in why


def test_config_checks():
    assert ALG.check_config(_cfg()) is None
    assert "waves" in ALG.check_config(_cfg(waves=5))
    assert "rows=3" in ALG.check_config(_cfg(rows=3))
    assert "warps=3" in ALG.check_config(_cfg(warps=3))
    assert "rows must be 1" in ALG.check_config(_cfg(warps=2, rows=2))


@pytest.mark.parametrize("f,s,expect", [(3, 2, (2, 2, 1)), (3, 1, (1, 3, 2)), (3, 3, (3, 1, 0)), (2, 2, (2, 1, 0)),
                                        (1, 2, (1, 1, 0)), (3, 4, (3, 1, 0))])
def test_phases_and_shifts(f, s, expect):
    """Every tap tx = s * q + p has its phase p < NP and shift q < NQ; the row width covers the largest shift."""
    p = _p(2, G=4, K=8, C=8, f=(3, f), s=(2, s), i=(9, 20))
    n_phases, n_shifts, top = bwd_weight_bdstride.copies(p)
    assert (n_phases, n_shifts, top) == expect
    assert {tx % s for tx in range(f)} == set(range(n_phases))
    assert {tx // s for tx in range(f)} == set(range(n_shifts))
    assert bwd_weight_bdstride.row_width(p) >= p.output[-1] + top


def test_ring_slots_hold_the_rows_in_use_and_the_next_rows():
    """FY rows in use plus the next output row's (SH within an image, FY at an image's start)."""
    for fy, sh, slots in [(3, 2, 8), (3, 1, 8), (1, 2, 4), (3, 3, 8), (2, 2, 4)]:
        p = _p(2, G=4, K=8, C=8, f=(fy, 3), s=(sh, 2), i=(12, 12))
        assert bwd_weight_bdstride.ring_slots(p) == slots >= max(2 * fy, fy + sh)


# ------------------------------------------------------------------------------------------------
# CPU: the kernel builds for sm_90 (as the GPU machine's Triton would; a subprocess, out of the interpreter)
# ------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not PTXAS.exists() and not shutil.which("ptxas"), reason="no ptxas: no NVIDIA builds here")
@pytest.mark.skipif(gluon is None, reason="this Triton has no Gluon")
@pytest.mark.parametrize("dtype,problem,layout", [
    ("fp16", "2d-g32-n2-k8-c8-f3x3-i56x56-s2x2-d1x1-l1x1-r1x1", "NHWGC/GKYXC/NHWGK"),
    ("bf16", "2d-g7-n2-k16-c16-f1x3-i9x30-s1x3-d1x1-l0x1-r0x1", "NHWGC/GKYXC/NHWGK"),
    ("fp16", "1d-g16-n2-k4-c4-f3-i50-s2-d1-l1-r1", "NWGC/GKXC/NWGK"),
])
def test_compiles_for_sm90(dtype, problem, layout):
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_check.py"), "--op", "conv_bwd_weight", "--dtype", dtype,
         "--pattern", "*-bdstride-*wv4_*", "--layout", layout, "--problem", problem],
        capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = [ln for ln in run.stdout.splitlines() if "_bwd_weight_bdstride_" in ln]
    assert sum("_bwd_weight_bdstride_ring_kernel" in ln for ln in lines) == 1, run.stdout  # rows 1: the ring
    assert sum("_bwd_weight_bdstride_wide_kernel" in ln for ln in lines) == 2, run.stdout  # the ring, 2 / 4 warps
    assert sum("_bwd_weight_bdstride_kernel" in ln for ln in lines) >= 1, run.stdout  # stacked rows 2 (and more)
    for ln in lines:
        # no spills (Triton 3.9's ptxas keeps an 8-byte frame on one 1D variant; 3.6, the GPU's, none)
        assert int(ln.split("stack")[1].split()[0]) <= 8 and "cp.async.16B" in ln, ln  # 16-byte async copies


# ------------------------------------------------------------------------------------------------
# GPU: results against float64
# ------------------------------------------------------------------------------------------------
GEOMETRY = {
    "G4-C8-s2-odd": (_s2(g=4, n=3, c=8, i=(9, 13)), {}),
    "G7-C8-s2-even": (_s2(g=7, n=3, c=8, i=(12, 14)), {}),
    "G8-C4-s2-wide": (_s2(g=8, n=2, c=4, i=(6, 60)), {}),
    "G2-C16-s2": (_s2(g=2, n=2, c=16, i=(11, 17)), {}),
    "G12-C8-s2-several-wide-programs": (_s2(g=12, n=2, c=8, i=(10, 21)), {}),
    "s2x1": (_s2(g=4, n=2, c=8, i=(10, 9), s=(2, 1)), {}),
    "s1x2": (_s2(g=4, n=2, c=8, i=(7, 15), s=(1, 2)), {}),
    "s3": (_s2(g=6, n=2, c=8, i=(13, 16), s=(3, 3)), {}),
    "1x3-s2-asym": (_p(2, G=6, N=2, K=8, C=8, f=(1, 3), s=(2, 2), i=(8, 11), lp=(0, 2), rp=(0, 0)), {}),
    "2x2-s2-no-pad": (_p(2, G=4, N=2, K=8, C=8, f=(2, 2), s=(2, 2), i=(8, 10)), {}),
    "many-chunks": (_s2(g=4, n=4, c=4, i=(10, 33), lp=(2, 0), rp=(0, 0)), dict(waves=16)),
    "7x7-out": (_s2(g=6, n=5, c=8, i=(14, 14)), dict(waves=2)),
    "1d": (_p(1, G=16, N=3, K=4, C=4, f=(3,), s=(2,), i=(101,), lp=(1,), rp=(1,)), {}),
}


WALKS = [dict(rows=1), dict(rows=2), dict(rows=4), dict(rows=8), dict(warps=2), dict(warps=4)]


@gpu
@pytest.mark.parametrize("walk", WALKS, ids=lambda w: "-".join(f"{k}{v}" for k, v in w.items()))
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name, walk):
    p, kw = GEOMETRY[name]
    cfg = _cfg(**walk, **kw)
    if ALG.decline(cfg, p, layout_for("nhwgc", p.ndim), DATA_TYPES["fp16"], FO):
        pytest.skip("these stacked rows decline the plane (over 128 positions a step)")
    igemm_tests._check("bdstride", p, "nhwgc", "fp16", cfg=cfg)


@gpu
@pytest.mark.parametrize("walk", [dict(rows=1), dict(rows=4), dict(warps=4)], ids=str)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w"])
def test_dtypes(dtype, walk):
    igemm_tests._check("bdstride", GEOMETRY["G7-C8-s2-even"][0], "nhwgc", dtype, cfg=_cfg(**walk))


@gpu
@pytest.mark.parametrize("warps", [1, 2])
@pytest.mark.parametrize("op,n_ds", [("bilinear", 1), ("add_relu", 1), ("scale", 0)])
def test_fused_ops(op, n_ds, warps):
    igemm_tests._check("bdstride", GEOMETRY["G4-C8-s2-odd"][0], "nhwgc", "bf16", cfg=_cfg(warps=warps), op=op,
                       n_ds=n_ds, alpha=0.7, beta=-1.3)


@gpu
@pytest.mark.parametrize("walk", [dict(rows=2), dict(warps=2)], ids=str)
def test_deterministic_bitwise(walk):
    p = GEOMETRY["many-chunks"][0]
    first, _, err, tol = igemm_tests._run("bdstride", p, "nhwgc", "fp16", cfg=_cfg(waves=16, **walk), seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("bdstride", p, "nhwgc", "fp16", cfg=_cfg(waves=16, **walk), seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_cost_model_prices_the_walk():
    """The roofline's window term for bdstride: the ring copies each input row once (cheaper than stacking on wide
    planes); more stacked rows copy the same bytes in fewer, longer steps."""
    from instance_factory.tuning.packed_tiles import gluon_walk_work
    from instance_factory.tuning.roofline import model_parts, work_modelled

    layer = _s2(g=32, n=64, c=8, i=(56, 56))
    cfg = dict(waves=4, rows=1)
    assert work_modelled("conv_bwd_weight", "bdstride", cfg)
    ring = model_parts("conv_bwd_weight", layer, "fp16", "bdstride", cfg, 132)[0]
    stacked = model_parts("conv_bwd_weight", layer, "fp16", "bdstride", dict(cfg, rows=2), 132)[0]
    assert 0 < ring < stacked
    narrow = _s2(g=32, n=64, c=16, i=(14, 14))
    pipe = [gluon_walk_work(narrow, dict(cfg, rows=r), 132, 2)[3] for r in (2, 8)]
    assert pipe[1] < pipe[0]
