"""``relayout`` for both passes (channels-first and group-major layouts through channels-last copies,
run by the instance lookup serves for the channels-last twin): correctness vs the float64 reference on
both channels-first families (GKYXC and GKCYX weights: the latter through a GKYXC buffer, D tensors
included) and the group-major one, 1-D/2-D/3-D, groups, strides, fused ops, dtypes; bwd data's grad_in copied back; the
declines; the served twin instance; the kernel hashes. Runs in the Triton interpreter on CPU tensors
(TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import test_bwd_data_igemm as dgrad_tests  # noqa: E402
import test_bwd_weight_igemm as igemm_tests  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import ALGORITHMS, RunArgs, interpreting  # noqa: E402
from instance_factory.dtypes import DATA_TYPES  # noqa: E402
from instance_factory.epilogue import FUSED_OPS  # noqa: E402
from instance_factory.kernels import relayout  # noqa: E402
from instance_factory.layouts import LAYOUT_FAMILIES, layout_for  # noqa: E402
from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight, rel_error  # noqa: E402
from instance_factory.tuning import lookup as _lookup  # noqa: E402, F401  (sets relayout's twin resolver)

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

_p = igemm_tests._p
DEV = igemm_tests.DEVICE
ALG = igemm_tests._alg("relayout")
CFG = ALG.config.from_values({"inner": "lookup"})


def _bind(alg, p, lt, a, b, out, dtype="fp32", fused="passthrough", ds=(), alpha=1.0, beta=1.0):
    """``alg``'s runner for the relayout config, bound to these tensors."""
    return alg.bind(RunArgs(params=p, layout=lt, dtype=DATA_TYPES[dtype], fused=FUSED_OPS[fused], user_fn=None,
                            alpha=alpha, beta=beta, a=a, b=b, ds=ds, out=out, cfg=CFG))


def _check(p, layout, dtype="fp32", **kw):
    return igemm_tests._check("relayout", p, layout, dtype, cfg=CFG, **kw)


CASES = {
    "2d-3x3-p1": _p(2, G=1, N=2, K=8, C=16, f=(3, 3), i=(6, 7), lp=(1, 1), rp=(1, 1)),
    "2d-s2-asym": _p(2, G=2, N=1, K=8, C=8, f=(3, 2), i=(7, 6), s=(2, 2), lp=(1, 0), rp=(0, 1)),
    "1d-dil": _p(1, G=1, N=2, K=8, C=8, f=(3,), i=(11,), d=(2,), lp=(2,), rp=(2,)),
    "3d": _p(3, G=2, N=1, K=8, C=8, f=(3, 1, 3), i=(3, 4, 5), lp=(1, 0, 1), rp=(1, 0, 1)),
    "depthwise": _p(2, G=8, N=2, K=1, C=1, f=(3, 3), i=(5, 5), lp=(1, 1), rp=(1, 1)),
}


def _runs(name: str, family: str) -> bool:
    """Group-major with one group is the channels-last memory: relayout declines it."""
    return family != "gnhwc" or CASES[name].G > 1


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx", "gnhwc"])
@pytest.mark.parametrize("name", list(CASES))
def test_geometry(name, family):
    if not _runs(name, family):
        why = ALG.decline(CFG, CASES[name], layout_for(family, CASES[name].ndim), DATA_TYPES["fp32"],
                          FUSED_OPS["passthrough"])
        assert why and "same memory as the channels-last layout" in why
        return
    _check(CASES[name], family)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "bf16_fp32w"])
def test_dtypes(dtype):
    out = _check(CASES["2d-3x3-p1"], "ngchw", dtype)
    assert out.dtype == (DATA_TYPES[dtype].result or DATA_TYPES[dtype].data)


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx", "gnhwc"])
@pytest.mark.parametrize("op,n_ds", [("bilinear", 1), ("add_relu", 1), ("scale", 0)])
def test_fused_ops(op, n_ds, family):
    # with a GKCYX weight the D tensors go through the GKYXC buffer as well
    _check(CASES["2d-s2-asym"], family, op=op, n_ds=n_ds, alpha=1.5, beta=-0.75)


def test_serves_the_channels_last_twin():
    p = CASES["2d-3x3-p1"]
    lt = layout_for("ngchw_kcyx", 2)
    x = torch.randn(lt.shape("input", p), device=DEV)
    dy = torch.randn(lt.shape("output", p), device=DEV)
    out = torch.empty(lt.shape("weight", p), device=DEV)
    run = _bind(ALG, p, lt, x, dy, out)
    assert "-NHWGC_GKYXC_NHWGK-fp32-" in run.inner_instance
    assert relayout.twin_layout(lt).name == "NHWGC/GKYXC/NHWGK"


def test_declines():
    p = CASES["2d-3x3-p1"]
    fo = FUSED_OPS["passthrough"]
    for family in LAYOUT_FAMILIES:
        lt = layout_for(family, 2)
        why = ALG.decline(CFG, p, lt, DATA_TYPES["bf16"], fo)
        assert (why is None) == (family not in ("nhwgc", "gnhwc")), (family, why)  # p has one group
        if family == "nhwgc":
            assert "channels-last already" in why
    assert "must be one of" in ALG.config.from_values({"inner": "fixed"}).check()


@pytest.mark.parametrize("op", ["conv_bwd_weight", "conv_bwd_data"])
def test_declines_a_twin_no_instance_runs(op):
    """relayout accepts a channels-first problem only where an instance runs its channels-last twin
    (the registry's checker): otherwise it declines with the twin's reasons instead of failing at
    bind. The registry's answer for a runnable twin, then a stand-in checker that finds none."""
    from instance_factory.kernels import twin
    from instance_factory.registry import twin_decline

    p, fo, lt = CASES["2d-3x3-p1"], FUSED_OPS["passthrough"], layout_for("ngchw", 2)
    alg = ALGORITHMS[(op, "relayout")]
    assert twin_decline(op, p, layout_for("nhwgc", 2), "bf16", "passthrough") is None
    assert alg.decline(CFG, p, lt, DATA_TYPES["bf16"], fo) is None
    seen = []
    saved = twin.twin_checker()
    twin.set_twin_checker(lambda *a: seen.append(a) or "every family declined it")
    try:
        why = alg.decline(CFG, p, lt, DATA_TYPES["bf16"], fo)
    finally:
        twin.set_twin_checker(saved)
    assert why == ("relayout runs the channels-last twin (NHWGC/GKYXC/NHWGK), which no instance can run: every "
                   "family declined it")
    assert seen == [(op, p, layout_for("nhwgc", 2), "bf16", "passthrough")]


@pytest.mark.parametrize("op", ["conv_bwd_weight", "conv_bwd_data"])
def test_kernel_hash_covers_the_served_kernels(op):
    # relayout's rows go stale when its transpose or any kernel of its pass that can serve the twin
    # changes; the families that decline every channels-last problem (cfirst, dwplane of either pass) never serve it
    # and are left out, and so is the other pass
    from instance_factory.kernels.layout_copy import KERNELS as COPY_KERNELS

    assert relayout.CHANNELS_FIRST_ONLY == ("cfirst", "dwplane")
    served = {k for (alg_op, name), alg in ALGORITHMS.items() if alg_op == op and name != "relayout"
              and name not in relayout.CHANNELS_FIRST_ONLY
              and alg.config.__module__.startswith("instance_factory.") for k in alg.kernels}
    names = {(k.fn.__module__, k.fn.__name__) for k in ALGORITHMS[(op, "relayout")].kernels}
    missing = {(k.fn.__module__, k.fn.__name__) for k in (*served, *COPY_KERNELS)} - names
    assert not missing, missing
    for other in ("_bwd_weight_cfirst_kernel", "_bwd_data_cfirst_kernel", "_dwplane_kernel", "_dwplane_dgrad_kernel",
                  "_bwd_data_igemm_kernel" if op == "conv_bwd_weight" else "_bwd_weight_finalize_kernel"):
        assert other not in {name for _, name in names}, other


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx"])
def test_weight_with_groups_folded(family):
    # the torch bridge hands over torch's weight shape [G*K, C, ...]: same memory, fewer dims
    p = CASES["2d-s2-asym"]
    lt = layout_for(family, 2)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(lt.shape("input", p), generator=gen).to(DEV)
    dy = torch.randn(lt.shape("output", p), generator=gen).to(DEV)
    w_shape = lt.shape("weight", p)
    folded = (w_shape[0] * w_shape[1], *w_shape[2:])
    d = torch.randn(w_shape, generator=gen).to(DEV)
    out = torch.full(folded, float("nan"), device=DEV)
    run = _bind(ALG, p, lt, x, dy, out, fused="bilinear", ds=(d.reshape(folded),), alpha=1.5, beta=-0.75)
    run(x, dy, out, (d.reshape(folded),), 1.5, -0.75)
    ref = ref_conv_bwd_weight(x.double(), dy.double(), p, lt.name, ds=(d.double(),), op="bilinear", alpha=1.5,
                              beta=-0.75)
    assert rel_error(out.reshape(w_shape), ref) <= DATA_TYPES["fp32"].tolerance


# ------------------------------------------------------------------------------------------------
# bwd data: grad_out (and a GKCYX weight, and the Ds) copied to the twin, grad_in copied back
# ------------------------------------------------------------------------------------------------
DGRAD = ALGORITHMS[("conv_bwd_data", "relayout")]


def _dgrad(p, family, dtype="fp32", **kw):
    return dgrad_tests.run_case(p, family, dtype, alg=DGRAD, base_cfg={"inner": "lookup"}, **kw)


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx", "gnhwc"])
@pytest.mark.parametrize("name", list(CASES))
def test_dgrad_geometry(name, family):
    if _runs(name, family):
        _dgrad(CASES[name], family)
    else:
        assert "same memory" in DGRAD.decline(CFG, CASES[name], layout_for(family, CASES[name].ndim),
                                              DATA_TYPES["fp32"], FUSED_OPS["passthrough"])


@pytest.mark.parametrize("dtype", ["fp32_tf32", "fp16", "bf16"])
def test_dgrad_dtypes(dtype):
    _dgrad(CASES["2d-3x3-p1"], "ngchw_kcyx", dtype)


@pytest.mark.parametrize("family", ["ngchw", "ngchw_kcyx", "gnhwc"])
@pytest.mark.parametrize("op,n_ds", [("bilinear", 1), ("add", 2), ("scale", 0)])
def test_dgrad_fused_ops(op, n_ds, family):
    _dgrad(CASES["2d-s2-asym"], family, op=op, n_ds=n_ds, alpha=1.5, beta=-0.75)


def test_dgrad_serves_the_twin_and_declines():
    p = CASES["2d-3x3-p1"]
    lt = layout_for("ngchw_kcyx", 2)
    dy = torch.randn(lt.shape("output", p), device=DEV)
    w = torch.randn(lt.shape("weight", p), device=DEV)
    out = torch.empty(lt.shape("input", p), device=DEV)
    run = _bind(DGRAD, p, lt, dy.half(), w.half(), out.half(), dtype="fp16")
    assert run.inner_instance.startswith("conv_bwd_data-")
    assert "-NHWGC_GKYXC_NHWGK-fp16-" in run.inner_instance
    why = DGRAD.decline(CFG, p, layout_for("nhwgc", 2), DATA_TYPES["bf16"], FUSED_OPS["passthrough"])
    assert why and "channels-last already" in why
    gm = layout_for("gnhwc", 2)  # group-major: the same twin, the GKYXC weight used as it is
    p = CASES["2d-s2-asym"]  # two groups (with one, group-major is the channels-last memory: declined)
    run = _bind(DGRAD, p, gm, torch.randn(gm.shape("output", p), device=DEV).half(),
                torch.randn(gm.shape("weight", p), device=DEV).half(), torch.empty(gm.shape("input", p), device=DEV).half(),
                dtype="fp16")
    assert "-NHWGC_GKYXC_NHWGK-fp16-" in run.inner_instance


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_gnhwc_dtypes_both_passes(dtype):
    _check(CASES["depthwise"], "gnhwc", dtype)
    _dgrad(CASES["2d-s2-asym"], "gnhwc", dtype)


def test_dgrad_weight_with_groups_folded():
    # the torch bridge hands over torch's weight shape [G*K, C, ...] (GKCYX)
    p = CASES["2d-s2-asym"]
    lt = layout_for("ngchw_kcyx", 2)
    gen = torch.Generator().manual_seed(5)
    dy = torch.randn(lt.shape("output", p), generator=gen).to(DEV)
    w_shape = lt.shape("weight", p)
    w = torch.randn(w_shape, generator=gen).to(DEV)
    folded = w.reshape(w_shape[0] * w_shape[1], *w_shape[2:])
    out = torch.full(lt.shape("input", p), float("nan"), device=DEV)
    run = _bind(DGRAD, p, lt, dy, folded, out)
    run(dy, folded, out, (), 1.0, 1.0)
    ref = ref_conv_bwd_data(dy.double(), w.double(), p, lt.name)
    assert rel_error(out, ref) <= DATA_TYPES["fp32"].tolerance
