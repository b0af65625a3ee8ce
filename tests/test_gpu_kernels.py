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
