"""The cached launch path: bound runners per problem plan, BoundKernel's launch-hook rule and its
compile-only mode.

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


def test_compile_only_calls_warmup_instead_of_launching_in_this_thread_only():
    import threading

    class Kernel:  # records how BoundKernel reaches Triton: kernel[grid](...) or kernel.warmup(...)
        def __init__(self):
            self.calls = []

        def __getitem__(self, grid):
            return lambda *args, **kw: self.calls.append(("launch", args))

        def warmup(self, *args, grid, **kw):
            self.calls.append(("warmup", args, grid, kw))

    fn = Kernel()
    k = fast_launch.BoundKernel(fn, (4,), BLOCK=16, num_warps=2)
    k(1)
    with fast_launch.compile_only():
        k(2)
        with fast_launch.compile_only(False):  # an inner "not here" keeps the outer mode
            k(3)
        other = threading.Thread(target=k, args=(4,))
        other.start()
        other.join()  # the mode is per thread: another thread still launches
    with fast_launch.compile_only(False):
        k(5)
    k(6)
    assert [c[:2] for c in fn.calls] == [("launch", (1,)), ("warmup", (2,)), ("warmup", (3,)), ("launch", (4,)),
                                         ("launch", (5,)), ("launch", (6,))]
    assert fn.calls[1][2:] == ((4, 1, 1), {"BLOCK": 16, "num_warps": 2})


def test_compile_only_launches_nothing_in_the_interpreter():
    assert fast_launch.compile_only_supported()
    k = fast_launch.BoundKernel(_add_one, (1,), BLOCK=16)
    x = torch.ones(10)
    out = torch.full((10,), float("nan"))
    with fast_launch.compile_only():
        k(x, out, 10)  # nothing to compile in the interpreter, and nothing runs
    assert out.isnan().all() and k._fast is None
    k(x, out, 10)
    assert torch.equal(out, x + 1)


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
