"""The "background" miss policy (instance_factory/tuning/background.py): the call is served at once by the
cost model, a child process tunes the problem into the user tier, and later calls serve the tuned winner.
Interpreter, tiny problems; the child is a real ``instance-factory tune`` process."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import subprocess
import sys
import time
import warnings

import pytest
import torch
from tuning_helpers import isolated_tiers

import instance_factory
from instance_factory.problem import ConvParams
from instance_factory.reference import ref_conv_bwd_data, rel_error
from instance_factory.tuning import background
from instance_factory.tuning import lookup as L
from instance_factory.tuning.database import current_device, read_db, user_db_path
from instance_factory.tuning.problem_sets import Problem

LAYOUT = "NHWGC/GKYXC/NHWGK"
CHILD_ARGS = ["--cpu-reps", "1", "--no-cudnn"]


@pytest.fixture
def tiers(tmp_path):
    with isolated_tiers(tmp_path) as t:
        background.configure(max_instances=2, max_minutes=2.0, extra_args=CHILD_ARGS)
        yield t
    background._SETTINGS.clear()


def _params(k: int, c: int) -> ConvParams:
    # a geometry per test: the background state is per process and per problem key
    return ConvParams(2, 1, 1, k, c, (3, 3), (5, 4), (1, 1), (1, 1), (1, 1), (1, 1))


def _user_file() -> str:
    return str(user_db_path(current_device().kind))


def test_served_at_once_then_the_tuned_winner(tiers):
    p = _params(8, 16)
    torch.manual_seed(0)
    dy = torch.randn(1, *p.output, 1, 8, dtype=torch.float16)
    w = torch.randn(1, 8, 3, 3, 16, dtype=torch.float16)
    os.environ["INSTANCE_FACTORY_MISS_POLICY"] = "background"
    key = Problem("conv_bwd_data", p, LAYOUT, "fp16").key
    t0 = time.monotonic()
    with pytest.warns(L.TuningMissWarning, match="tuning it in the background"):
        out = instance_factory.conv_bwd_data(dy, w, p, layout=LAYOUT)
    assert time.monotonic() - t0 < 30  # the call did not wait for the child (it runs for seconds)
    ref = ref_conv_bwd_data(dy.double(), w.double(), p, LAYOUT)
    assert rel_error(out, ref) < 2e-3
    assert key in background.status()["queued"] + background.status()["running"]

    assert background.wait(timeout=300), background.status()
    assert key in background.status()["done"], background.status()
    rows = read_db(_user_file())
    assert set(rows["problem_key"]) == {key} and (rows["status"] == "ok").sum() >= 1
    L._NEXT_CHECK[0] = 0.0  # the next lookup checks the tier files now instead of within RECHECK_S
    choice = L.explain("conv_bwd_data", p, layout=LAYOUT, dtype=torch.float16)
    best = rows[rows["status"] == "ok"].sort_values(["median_ms", "instance"]).instance.iloc[0]
    assert choice.source == "exact (user tier)" and choice.instance.name == best
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # served from the tuned row: no miss warning
        out = instance_factory.conv_bwd_data(dy, w, p, layout=LAYOUT)
    assert rel_error(out, ref) < 2e-3
    assert not background.submit(key, user_db_path(current_device().kind))  # never queued twice


def test_a_live_claim_is_left_to_its_owner(tiers):
    """Processes sharing a user tier tune each problem once: a claim held by a running process wins."""
    p = _params(8, 24)
    key = Problem("conv_bwd_weight", p, LAYOUT, "fp16").key
    user_db = user_db_path(current_device().kind)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claim = background._claim_path(user_db, key)
        claim.write_text(f"{background.socket.gethostname()} {owner.pid} {time.time():.0f}\n{key}\n")
        assert L.explain("conv_bwd_weight", p, layout=LAYOUT, dtype="fp16", policy="background").source in (
            "heuristic", "model")
        assert background.wait(timeout=60)
        assert key in background.status()["claimed"] and not os.path.exists(_user_file())
    finally:
        owner.kill()
        owner.wait()


def test_a_dead_owners_claim_is_taken_over(tiers):
    p = _params(16, 8)
    key = Problem("conv_bwd_data", p, LAYOUT, "fp16").key
    user_db = user_db_path(current_device().kind)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid names no process now
    claim = background._claim_path(user_db, key)
    claim.write_text(f"{background.socket.gethostname()} {gone.pid} {time.time():.0f}\n{key}\n")
    L.explain("conv_bwd_data", p, layout=LAYOUT, dtype="fp16", policy="background")
    assert background.wait(timeout=300), background.status()
    assert key in background.status()["done"], background.status()
    assert not claim.exists() and key in set(read_db(_user_file())["problem_key"])


def test_a_failing_child_is_reported_with_its_log(tiers):
    background.configure(extra_args=["--no-such-option"])
    p = _params(24, 8)
    key = Problem("conv_bwd_data", p, LAYOUT, "fp16").key
    L.explain("conv_bwd_data", p, layout=LAYOUT, dtype="fp16", policy="background")
    assert background.wait(timeout=120)
    failed = [f for f in background.status()["failed"] if f.startswith(key)]
    assert failed and "log:" in failed[0]
    log = failed[0].split("log: ", 1)[1].rstrip(")")
    assert "--no-such-option" in open(log).read()


def test_untuned_explain_and_custom_epilogues_queue_nothing(tiers):
    p = _params(8, 40)
    key = Problem("conv_bwd_data", p, LAYOUT, "fp16").key
    L.explain("conv_bwd_data", p, layout=LAYOUT, dtype="fp16", policy="background", untuned=True)
    assert key not in str(background.status())
    assert not background.submit(key.replace("|passthrough|", "|custom|"), user_db_path(current_device().kind))


def test_policy_name_is_checked():
    with pytest.raises(ValueError, match="background"):
        L._policy("backgrund")
    assert L._policy("background") == "background"


def test_a_child_counts_as_done_only_with_a_verified_instance():
    ok = "measured 3 instances (2 ok, 0 pruned, 1 failed) in 4.0 s = 45.0 instances/min (30.0 benchmarked/min)"
    none = "measured 3 instances (0 ok, 0 pruned, 3 failed) in 4.0 s = 45.0 instances/min (0.0 benchmarked/min)"
    assert background._served(ok) and not background._served(none) and not background._served("Traceback ...")
    assert background._served("1 already tuned (skipped); measured 0 instances")


def test_a_converted_layer_trains_on_then_gets_its_tuned_kernels(tiers):
    """instance_factory.torch under the background policy: the first backward runs at once on the cost
    model's choices with torch's gradients, the children tune both passes, and the next backward is
    served from the user tier (no miss warning), with the same gradients."""
    from instance_factory.torch import Conv2d
    from instance_factory.torch.problems import record_backward_problems

    os.environ["INSTANCE_FACTORY_MISS_POLICY"] = "background"
    torch.manual_seed(1)
    conv = Conv2d(8, 16, 3, padding=1, bias=False).half()
    ref = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False).half()
    ref.load_state_dict(conv.state_dict())
    # channels-last: a channels-first layer may be served by relayout, whose channels-last twin is a
    # problem of its own (its first lookup warns and queues it in turn: timing-dependent, so not here)
    x = torch.randn(1, 8, 5, 6, dtype=torch.float16).to(memory_format=torch.channels_last)

    def grads(layer):
        xi = x.clone().requires_grad_()
        layer.weight.grad = None
        layer(xi).float().square().sum().backward()
        return xi.grad.double(), layer.weight.grad.double()

    want = [g.double() for g in grads(ref)]  # torch's own backward (float16 on the CPU)
    with record_backward_problems() as found, pytest.warns(L.TuningMissWarning, match="background"):
        first = grads(conv)
    assert {p.op for p in found} == {"conv_bwd_data", "conv_bwd_weight"}
    assert all(rel_error(g, w) < 2e-3 for g, w in zip(first, want))
    assert background.wait(timeout=400), background.status()
    keys = {Problem(p.op, p.params, p.layout, p.dtype, p.fused_op).key for p in found}
    assert keys <= set(background.status()["done"]) and keys <= set(read_db(_user_file())["problem_key"])
    L._NEXT_CHECK[0] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", L.TuningMissWarning)
        again = grads(conv)
    assert all(rel_error(g, w) < 2e-3 for g, w in zip(again, want))
    for p in found:
        assert L.explain(p.op, p.params, layout=p.layout, dtype=p.dtype).source == "exact (user tier)"
