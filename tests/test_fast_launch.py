"""The cached launch path: bound runners per problem plan, and BoundKernel's launch-hook rule.

The direct CompiledKernel launch itself only exists on a GPU (tests/test_gpu_kernels.py checks that
it engages and stays correct); here, in the interpreter, every call takes Triton's normal path.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import instance_factory as inf  # noqa: E402
from instance_factory import fast_launch, ops  # noqa: E402
from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight, rel_error  # noqa: E402
from instance_factory.registry import get_registry  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreting(), reason="interpreter-side checks of the launch path")

P = inf.ConvParams(2, 2, 2, 4, 3, (3, 3), (6, 5), (2, 1), (1, 1), (1, 0), (0, 1))
LAY = "NHWGC/GKYXC/NHWGK"


@triton.jit
def _add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def test_bound_kernel_runs_and_never_shortcuts_in_the_interpreter():
    k = fast_launch.BoundKernel(_add_one, (1,), BLOCK=16)
    assert k.grid == (1, 1, 1)
    for v in (1.0, 5.0):
        x = torch.full((10,), v)
        out = torch.full((10,), float("nan"))
        k(x, out, 10)
        assert torch.equal(out, x + 1)
    assert k._fast is None


def test_empty_hook_chains_are_not_hooks(monkeypatch):
    from triton import knobs

    assert not fast_launch._launch_hooks_installed()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a, **k: None)
    assert fast_launch._launch_hooks_installed()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    assert not fast_launch._launch_hooks_installed()
    chain = knobs.runtime.launch_exit_hook
    if hasattr(chain, "add"):  # Triton >= 3.5: a HookChain, empty unless a profiler adds to it
        hook = lambda *a, **k: None  # noqa: E731
        chain.add(hook)
        try:
            assert fast_launch._launch_hooks_installed()
        finally:
            chain.remove(hook)
        assert not fast_launch._launch_hooks_installed()


def test_repeated_calls_reuse_one_runner_and_stay_correct(monkeypatch):
    monkeypatch.setattr(ops, "_RUNNERS", {})
    lt = inf.parse_layout(LAY)
    inst = get_registry().instances(pattern="conv_bwd_data-igemm-NHWGC_GKYXC_NHWGK-fp32-add-*_default")[0]
    for seed in range(3):
        torch.manual_seed(seed)
        dy = torch.randn(lt.shape("output", P))
        w = torch.randn(lt.shape("weight", P))
        d = torch.randn(lt.shape("input", P))
        out = inf.conv_bwd_data(dy, w, P, layout=LAY, ds=(d,), op="add", instance=inst)
        ref = ref_conv_bwd_data(dy, w, P, LAY, ds=(d,), op="add")
        assert rel_error(out, ref) <= 1e-5
    assert len(ops._RUNNERS) == 1


def test_a_d_of_another_dtype_gets_its_own_runner(monkeypatch):
    """The kernel specializes on D's dtype, so a float32 D must not reuse a bf16-D runner."""
    monkeypatch.setattr(ops, "_RUNNERS", {})
    lt = inf.parse_layout(LAY)
    inst = get_registry().instances(pattern="conv_bwd_weight-igemm-NHWGC_GKYXC_NHWGK-bf16-bilinear-*_default")[0]
    torch.manual_seed(0)
    x = torch.randn(lt.shape("input", P)).bfloat16()
    dy = torch.randn(lt.shape("output", P)).bfloat16()
    ref = None
    for d_dtype in (torch.bfloat16, torch.float32):
        d = torch.randn(lt.shape("weight", P)).to(d_dtype)
        out = inf.conv_bwd_weight(x, dy, P, layout=LAY, ds=(d,), op="bilinear", alpha=0.5, beta=2.0, instance=inst)
        ref = ref_conv_bwd_weight(x, dy, P, LAY, ds=(d,), op="bilinear", alpha=0.5, beta=2.0)
        assert rel_error(out, ref) <= 1e-2
    assert len(ops._RUNNERS) == 2
