"""conv_bwd_weight ``bdring`` family (a Gluon kernel: mma.sync on tiles in shared memory, groups of 4-16
channels; the device code is bdstride's walks at stride 1). Gluon does not run in the Triton interpreter, so on CPU
this file checks the declines, the configs, the launch plan and that every kernel variant compiles for sm_90
(Triton's wheel carries ptxas); on a CUDA GPU (TRITON_INTERPRET=0) it checks results against the float64
reference, launched directly with test_bwd_weight_igemm's runner, for both walks (the input-row ring and stacked
rows): ring reloads at image starts and across row chunks, stacked steps across images and past a chunk's end,
asymmetric pads, filters under 3 x 3, groups past the last 16-channel block, 1D rows, many slices in the
multi-slice reduce, every fused op and the dtypes.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

from instance_factory.algorithms import emulating_gpu, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import bwd_weight_bdring  # noqa: E402
from instance_factory.layouts import layout_for  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
_p = igemm_tests._p
ALG = igemm_tests._alg("bdring")
ON_GPU = torch.cuda.is_available() and not interpreting()


def gpu(test):
    """A results test: marked gpu (``pytest -m gpu``) and skipped off the GPU, where Gluon kernels do not run."""
    return pytest.mark.gpu(pytest.mark.skipif(not ON_GPU, reason="Gluon kernels run on a CUDA GPU only")(test))


def _cfg(**kw):
    cfg = dict(waves=4, rows=1)
    cfg.update(kw)
    return ALG.config.from_values(cfg)


# ------------------------------------------------------------------------------------------------
# CPU: declines, configs, plan
# ------------------------------------------------------------------------------------------------
def test_declines_in_the_interpreter_unless_a_gpu_is_emulated(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    args = (_cfg(), _p(2, G=4, K=8, C=8, i=(6, 9), lp=(1, 1), rp=(1, 1)), layout_for("nhwgc", 2),
            DATA_TYPES["fp16"], FUSED_OPS["passthrough"])
    why = ALG.decline(*args)
    assert why and "Gluon does not run in the Triton interpreter" in why
    with emulating_gpu():  # a lookup replayed from a GPU's rows (tuning.database.emulated) chooses as there
        assert ALG.decline(*args) is None or bwd_weight_bdring.gluon is None


@pytest.mark.parametrize("p,words", [
    (_p(3, G=4, K=8, C=8), "1D and 2D"),
    (_p(2, G=4, K=8, C=4), "C == K"),
    (_p(2, G=4, K=32, C=32), "C == K in (4, 8, 16)"),
    (_p(2, G=4, K=8, C=8, i=(9, 9), s=(2, 2)), "stride and dilation 1"),
    (_p(2, G=4, K=8, C=8, i=(9, 9), d=(1, 2)), "stride and dilation 1"),
    (_p(2, G=4, K=8, C=8, f=(5, 5), i=(9, 9)), "3 x 3 taps"),
    (_p(1, G=4, K=8, C=8, f=(3,), i=(200,)), "a tile of at most 128"),
])
def test_problem_declines(p, words):
    why = bwd_weight_bdring.problem_reason(p)
    assert why and words in why, why


def test_layout_dtype_and_alignment_declines(monkeypatch):
    monkeypatch.setattr(bwd_weight_bdring, "gluon_reason", lambda: None)  # as on a GPU
    fo = FUSED_OPS["passthrough"]
    p = _p(2, G=4, K=8, C=8, i=(6, 9), lp=(1, 1), rp=(1, 1))
    lt = layout_for("nhwgc", 2)
    assert ALG.decline(_cfg(), p, lt, DATA_TYPES["bf16"], fo) is None
    assert ALG.decline(_cfg(rows=2), _p(1, G=2, K=16, C=16, i=(40,), lp=(1,), rp=(1,)),
                       layout_for("nhwgc", 1), DATA_TYPES["bf16_fp32w"], fo) is None
    for dtype in ("fp32", "fp32_tf32", "fp16_fp8"):
        why = ALG.decline(_cfg(), p, lt, DATA_TYPES[dtype], fo)
        assert why and "16-bit data" in why, why
    why = ALG.decline(_cfg(), p, layout_for("gnhwc", 2), DATA_TYPES["fp16"], fo)
    assert why and "packed channels of consecutive groups" in why
    why = ALG.decline(_cfg(), _p(2, G=3, K=4, C=4, i=(6, 9)), lt, DATA_TYPES["fp16"], fo)
    assert why and "multiple of 8" in why
    assert "waves" in ALG.decline(_cfg(waves=3), p, lt, DATA_TYPES["fp16"], fo)
    wide = _p(2, G=4, K=8, C=8, i=(6, 56), lp=(1, 1), rp=(1, 1))  # rows of 64 positions
    assert ALG.decline(_cfg(rows=2), wide, lt, DATA_TYPES["fp16"], fo) is None
    why = ALG.decline(_cfg(rows=4), wide, lt, DATA_TYPES["fp16"], fo)
    assert why and "rows=1 takes this plane" in why


def test_config_checks():
    assert ALG.check_config(_cfg()) is None
    assert "waves" in ALG.check_config(_cfg(waves=5))
    assert "rows=3" in ALG.check_config(_cfg(rows=3))
    assert "rows=16" in ALG.check_config(_cfg(rows=16))
    assert ALG.check_config(_cfg(rows=8)) is None


@pytest.mark.parametrize("step", [1, 2, 4, 8])
@pytest.mark.parametrize("n,g,c,h,waves,sms", [(64, 32, 8, 56, 4, 132), (3, 7, 8, 11, 16, 132), (1, 2, 16, 5, 2, 8)])
def test_plan_covers_every_row_and_channel(n, g, c, h, waves, sms, step):
    p = _p(2, G=g, N=n, K=c, C=c, i=(h, h), lp=(1, 1), rp=(1, 1))
    blocks, chunk, chunks = bwd_weight_bdring.plan(p, waves, sms, step)
    rows = n * h
    assert blocks * 16 >= g * c > (blocks - 1) * 16
    assert chunk % step == 0
    assert (chunks - 1) * chunk < rows <= chunks * chunk
    assert blocks * chunks <= max(blocks, sms * waves + blocks)


def test_ring_and_row_sizes():
    assert [bwd_weight_bdring.ring_slots(fy) for fy in (1, 2, 3)] == [2, 4, 8]
    assert bwd_weight_bdring.row_width(_p(2, G=4, K=8, C=8, i=(56, 56), lp=(1, 1), rp=(1, 1))) == 64
    assert bwd_weight_bdring.row_width(_p(2, G=4, K=8, C=8, i=(7, 7), lp=(1, 1), rp=(1, 1))) == 16


# ------------------------------------------------------------------------------------------------
# CPU: every variant builds for sm_90 (as the GPU machine's Triton would; a subprocess, out of the interpreter)
# ------------------------------------------------------------------------------------------------
@pytest.mark.skipif(not PTXAS.exists() and not shutil.which("ptxas"), reason="no ptxas: no NVIDIA builds here")
@pytest.mark.skipif(bwd_weight_bdring.gluon is None, reason="this Triton has no Gluon")
@pytest.mark.parametrize("dtype,problem,layout", [
    ("fp16", "2d-g32-n2-k8-c8-f3x3-i56x56-s1x1-d1x1-l1x1-r1x1", "NHWGC/GKYXC/NHWGK"),
    ("bf16", "2d-g7-n2-k16-c16-f1x3-i9x30-s1x1-d1x1-l0x1-r0x1", "NHWGC/GKYXC/NHWGK"),
    ("fp16", "1d-g16-n2-k4-c4-f3-i50-s1-d1-l1-r1", "NWGC/GKXC/NWGK"),
])
def test_compiles_for_sm90(dtype, problem, layout):
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compile_check.py"), "--op", "conv_bwd_weight", "--dtype", dtype,
         "--pattern", "*-bdring-*wv4_*", "--layout", layout, "--problem", problem],
        capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    lines = [ln for ln in run.stdout.splitlines() if "_bwd_weight_bdstride_" in ln]
    assert sum("_bwd_weight_bdstride_ring_kernel" in ln for ln in lines) == 1, run.stdout  # the ring
    assert sum("_bwd_weight_bdstride_kernel" in ln for ln in lines) >= 1, run.stdout  # stacked rows 2 (4, 8)
    for ln in lines:
        assert "stack    0" in ln and "cp.async.16B" in ln, ln  # no spills; 16-byte async copies


# ------------------------------------------------------------------------------------------------
# GPU: results against float64
# ------------------------------------------------------------------------------------------------
GEOMETRY = {
    "G4-C8-3x3": (_p(2, G=4, N=3, K=8, C=8, i=(9, 13), lp=(1, 1), rp=(1, 1)), {}),
    "G7-C8-odd-groups": (_p(2, G=7, N=3, K=8, C=8, i=(11, 7), lp=(1, 1), rp=(1, 1)), {}),
    "G8-C4-wide-row": (_p(2, G=8, N=2, K=4, C=4, i=(6, 30), lp=(1, 1), rp=(1, 1)), {}),
    "G2-C16": (_p(2, G=2, N=2, K=16, C=16, i=(5, 17), lp=(1, 1), rp=(1, 1)), {}),
    "1x3-asym": (_p(2, G=6, N=2, K=8, C=8, f=(1, 3), i=(8, 8), lp=(0, 2), rp=(0, 0)), {}),
    "3x1-asym": (_p(2, G=4, N=1, K=16, C=16, f=(3, 1), i=(12, 9), lp=(2, 0), rp=(0, 0)), {}),
    "2x2-no-pad": (_p(2, G=4, N=2, K=8, C=8, f=(2, 2), i=(7, 10)), {}),
    "many-chunks": (_p(2, G=4, N=4, K=4, C=4, i=(10, 33), lp=(2, 0), rp=(0, 0)), dict(waves=16)),
    "7x7-planes": (_p(2, G=6, N=5, K=8, C=8, i=(7, 7), lp=(1, 1), rp=(1, 1)), dict(waves=2)),
    "many-slices": (_p(2, G=2, N=9, K=16, C=16, i=(20, 5), lp=(1, 1), rp=(1, 1)), dict(waves=16)),
    "1d": (_p(1, G=16, N=3, K=4, C=4, f=(3,), i=(100,), lp=(1,), rp=(1,)), {}),
}


@gpu
@pytest.mark.parametrize("walk", [dict(rows=1), dict(rows=2), dict(rows=4), dict(rows=8)])
@pytest.mark.parametrize("name", list(GEOMETRY))
def test_geometry(name, walk):
    p, kw = GEOMETRY[name]
    cfg = _cfg(**walk, **kw)
    if ALG.decline(cfg, p, layout_for("nhwgc", p.ndim), DATA_TYPES["fp16"], FUSED_OPS["passthrough"]):
        pytest.skip("this walk declines the plane (rows over 128 positions a step)")
    igemm_tests._check("bdring", p, "nhwgc", "fp16", cfg=cfg)


@gpu
@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w"])
def test_dtypes(dtype, rows):
    igemm_tests._check("bdring", GEOMETRY["G7-C8-odd-groups"][0], "nhwgc", dtype, cfg=_cfg(rows=rows))


@gpu
@pytest.mark.parametrize("op,n_ds", [("bilinear", 1), ("add_relu", 1), ("scale", 0)])
def test_fused_ops(op, n_ds):
    igemm_tests._check("bdring", GEOMETRY["G4-C8-3x3"][0], "nhwgc", "bf16", cfg=_cfg(), op=op, n_ds=n_ds,
                       alpha=0.7, beta=-1.3)


@gpu
@pytest.mark.parametrize("rows", [1, 2])
def test_deterministic_bitwise(rows):
    p = GEOMETRY["many-chunks"][0]
    first, _, err, tol = igemm_tests._run("bdring", p, "nhwgc", "fp16", cfg=_cfg(waves=16, rows=rows), seed=3)
    assert err <= tol
    again, _, _, _ = igemm_tests._run("bdring", p, "nhwgc", "fp16", cfg=_cfg(waves=16, rows=rows), seed=3)
    assert torch.equal(first.view(torch.int16), again.view(torch.int16))


def test_cost_model_prices_both_walks():
    """The roofline's window term (``packed_tiles.gluon_walk_work``, bdstride's at stride 1): on a wide plane the
    ring (each input row copied in once) is the cheapest config, on a 14x14 plane a stacked walk (its steps fewer,
    the latency part shrinks), as the H200 rows of session 52 ranked them; the model prices every walk."""
    from instance_factory.tuning.packed_tiles import gluon_walk_work
    from instance_factory.tuning.roofline import model_ms, work_modelled

    def cheapest(p):
        cfgs = [dict(waves=w, rows=r) for w in bwd_weight_bdring.WAVES for r in bwd_weight_bdring.ROWS_PER_STEP
                if r * bwd_weight_bdring.row_width(p) <= bwd_weight_bdring.MAX_ROW]
        return min(cfgs, key=lambda c: model_ms("conv_bwd_weight", p, "fp16", "bdring", c, 132))

    wide = _p(2, G=32, N=64, K=8, C=8, i=(56, 56), lp=(1, 1), rp=(1, 1))
    narrow = _p(2, G=32, N=64, K=16, C=16, i=(14, 14), lp=(1, 1), rp=(1, 1))
    assert work_modelled("conv_bwd_weight", "bdring", dict(waves=4, rows=1))
    assert cheapest(wide)["rows"] == 1
    assert cheapest(narrow)["rows"] > 1
    pipe = [gluon_walk_work(narrow, dict(waves=2, rows=r), 132, 2)[3] for r in (1, 4, 8)]
    assert all(p > 0 for p in pipe)
