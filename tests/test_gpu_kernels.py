"""GPU checks (marked `gpu`: skipped in CI and on CPU-only machines). Full matrix: tools/gpu_check.py."""

import pytest
import torch

from instance_factory.problem import ConvParams
from instance_factory.registry import get_registry
from instance_factory.verify import Case, verify_instance

pytestmark = pytest.mark.gpu

P = ConvParams
CASES = [
    Case("conv_bwd_data", P(2, 1, 8, 64, 64, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1)), "NHWGC/GKYXC/NHWGK", "fp16"),
    Case("conv_bwd_data", P(2, 2, 4, 32, 48, (3, 3), (29, 30), (2, 2), (1, 1), (1, 0), (0, 1)), "NHWGC/GKYXC/NHWGK", "bf16", "add", 2),
    Case("conv_bwd_data", P(3, 1, 2, 16, 24, (3, 3, 3), (9, 9, 9), (2, 2, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1)), "NGCDHW/GKCZYX/NGKDHW", "fp32"),
    Case("conv_bwd_data", P(2, 64, 4, 1, 1, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1)), "NHWGC/GKYXC/NHWGK", "fp16"),
    Case("conv_bwd_weight", P(2, 1, 8, 64, 64, (3, 3), (28, 28), (1, 1), (1, 1), (1, 1), (1, 1)), "NHWGC/GKYXC/NHWGK", "bf16_fp32w"),
    Case("conv_bwd_weight", P(2, 8, 4, 4, 4, (3, 3), (28, 28), (2, 2), (1, 1), (1, 1), (1, 1)), "GNHWC/GKYXC/GNHWK", "fp16", "bilinear", 1),
    Case("conv_bwd_weight", P(1, 1, 4, 32, 32, (5,), (100,), (1,), (2,), (4,), (4,)), "NWGC/GKXC/NWGK", "fp32_tf32"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}-{c.dtype}-{c.params.key()}")
def test_every_family_on_gpu(case):
    runnable, declined = get_registry().candidates(case.op, case.params, case.layout, case.dtype, case.fused_op)
    assert runnable, declined[:3]
    seen = set()
    for inst in runnable:
        if inst.algorithm in seen:
            continue
        seen.add(inst.algorithm)
        r = verify_instance(inst, case, "cuda", seed=len(seen))
        assert r.passed, (inst.name, r.error)
    assert torch.cuda.is_available()


def _bound_kernels(runner, depth: int = 3):
    """The BoundKernels a runner launches: in its closure, or in the closures of the functions it calls
    (relayout's runner wraps the channels-last twin's runner and its copy functions)."""
    from instance_factory.fast_launch import BoundKernel

    found = []
    for cell in runner.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a name the function binds only on some paths: no kernel there
            continue
        if isinstance(value, BoundKernel):
            found.append(value)
        elif depth > 1 and callable(value) and getattr(value, "__closure__", None):
            found += _bound_kernels(value, depth - 1)
    return found


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}-{c.dtype}-{c.params.key()}")
def test_cached_runner_takes_the_direct_launch_and_stays_correct(case):
    """Repeated public calls reuse one bound runner whose kernels launch through the compiled
    kernel directly; fresh tensors each call, and a misaligned tensor falls back to Triton's binder."""
    from instance_factory import ops
    from instance_factory.dtypes import DATA_TYPES, op_kwargs
    from instance_factory.harness.operands import make_problem_tensors
    from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight, rel_error

    dt = DATA_TYPES[case.dtype]
    kw = op_kwargs(case.dtype)
    fn = ops.conv_bwd_data if case.op == "conv_bwd_data" else ops.conv_bwd_weight
    ref_fn = ref_conv_bwd_data if case.op == "conv_bwd_data" else ref_conv_bwd_weight
    runnable, _ = get_registry().candidates(case.op, case.params, case.layout, case.dtype, case.fused_op)
    for inst in {i.algorithm: i for i in runnable}.values():
        for seed in range(3):
            t = make_problem_tensors(case.op, case.params, case.layout, case.dtype, case.n_ds, "cuda", seed)
            a, b = t["a"], t["b"]
            if seed == 2:  # same values, 2 bytes off a 16-byte boundary
                buf = torch.empty(a.numel() + 1, dtype=a.dtype, device="cuda")
                a = buf[1:].view(a.shape).copy_(a)
                assert a.data_ptr() % 16
            out = fn(a, b, case.params, layout=case.layout, ds=t["ds"], op=case.fused_op, alpha=1.5,
                     beta=-0.5, instance=inst, **kw)
            ref = ref_fn(t["a"], t["b"], case.params, case.layout, ds=t["ds"], op=case.fused_op, alpha=1.5,
                         beta=-0.5)
            err = rel_error(out, ref)
            assert err <= dt.tolerance, (inst.name, seed, err)
        runners = [r for k, r in ops._RUNNERS.items() if k[1] == inst.name and k[0][1] == case.params]
        assert len(runners) == 1, inst.name
        kernels = _bound_kernels(runners[0])
        assert kernels and all(k._fast is not None for k in kernels), inst.name


@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[5]], ids=lambda c: f"{c.op}-{c.dtype}")
def test_compile_only_compiles_through_warmup_and_launches_nothing(case):
    """Inside fast_launch.compile_only() a bound runner compiles its kernels (Triton's warmup) and
    launches none: the NaN-filled result stays NaN; the same runner then runs for real, correctly."""
    from instance_factory import fast_launch
    from instance_factory.dtypes import DATA_TYPES, op_kwargs
    from instance_factory.harness.operands import make_problem_tensors
    from instance_factory.ops import prepare
    from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight, rel_error

    assert fast_launch.compile_only_supported()
    ref_fn = ref_conv_bwd_data if case.op == "conv_bwd_data" else ref_conv_bwd_weight
    runnable, _ = get_registry().candidates(case.op, case.params, case.layout, case.dtype, case.fused_op)
    for inst in {i.algorithm: i for i in runnable}.values():
        t = make_problem_tensors(case.op, case.params, case.layout, case.dtype, case.n_ds, "cuda", 0)
        _, args = prepare(case.op, t["a"], t["b"], case.params, layout=case.layout, ds=t["ds"],
                          fused_op=case.fused_op, instance=inst, **op_kwargs(case.dtype))
        run = inst.alg.bind(args)
        args.out.fill_(float("nan"))
        with fast_launch.compile_only():
            run(args.a, args.b, args.out, tuple(args.ds), 1.0, 1.0)
        torch.cuda.synchronize()
        assert args.out.isnan().all(), inst.name
        assert all(k._fast is None for k in _bound_kernels(run)), inst.name
        run(args.a, args.b, args.out, tuple(args.ds), 1.0, 1.0)
        ref = ref_fn(t["a"], t["b"], case.params, case.layout, ds=t["ds"], op=case.fused_op)
        assert rel_error(args.out, ref) <= DATA_TYPES[case.dtype].tolerance, inst.name
