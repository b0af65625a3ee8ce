"""Verify instances against the float64 reference: the main job's check and the GPU check's engine.

Every run draws fresh random operands (never zeros), poisons the result buffer with NaN first
(so an unwritten element fails), and accepts a result only when
(:func:`instance_factory.harness.checks.verdict`)

* it is finite everywhere (NaN or inf anywhere fails),
* ``||out - ref|| / ||ref||`` is within the data type's ``tolerance``, and
* the worst element, ``max|out - ref| / max|ref|``, is within its ``max_tolerance`` (4x the
  normwise one): a handful of wrong elements hardly moves the norm (one zeroed element of 65,536
  in bf16 gives a normwise error under 1e-2) but costs 0.2-1.0 here.

The tuner uses the same two functions (:mod:`instance_factory.harness.checks`), so what the main
job passes is what the tuner stores as ok.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .algorithms import interpreting
from .dtypes import DATA_TYPES, op_kwargs
from .harness.operands import make_problem_tensors, reference_of
from .instance import Instance
from .ops import prepare
from .problem import ConvParams
from .reference import result_errors
from .registry import get_registry, spread_over_algorithms
from .tuning import lookup as _lookup  # noqa: F401  (sets relayout's twin resolver)

__all__ = ["Case", "VerifyResult", "builtin_cases", "format_table", "verify_case",
           "verify_instance"]


@dataclass(frozen=True)
class Case:
    """One problem to verify: op, params, layout, data type name, fused op, number of Ds."""

    op: str
    params: ConvParams
    layout: str
    dtype: str
    fused_op: str = "passthrough"
    n_ds: int = 0
    label: str = ""

    @property
    def title(self) -> str:
        return self.label or f"{self.op} {self.params.key()}"


@dataclass
class VerifyResult:
    case: Case
    instance: str
    error: float
    tolerance: float
    seconds: float
    note: str = ""
    max_error: float = math.nan  # max|out - ref| / max|ref|
    max_tolerance: float = math.nan

    @property
    def passed(self) -> bool:
        return self.error <= self.tolerance and self.max_error <= self.max_tolerance  # NaN compares False


def verify_instance(inst: Instance, case: Case, device: str | torch.device, seed: int = 0,
                    user_fn: Any = None, user_ref: Callable | None = None, alpha: float = 1.5,
                    beta: float = -0.5) -> VerifyResult:
    """Run one instance on one case through the public checks and compare with float64."""
    t = make_problem_tensors(case.op, case.params, case.layout, case.dtype, case.n_ds, device, seed)
    dt = DATA_TYPES[case.dtype]
    fused = user_fn if case.fused_op == "custom" else case.fused_op
    kwargs = op_kwargs(case.dtype)
    _, args = prepare(case.op, t["a"], t["b"], case.params, layout=case.layout, ds=t["ds"], fused_op=fused,
                      alpha=alpha, beta=beta, instance=inst, **kwargs)
    run = inst.alg.bind(args)
    run_args = (args.a, args.b, args.out, args.ds, args.alpha, args.beta)
    if not interpreting():
        # the first call compiles through Triton's own binder; the verified second call takes the
        # cached direct launch that every later public call uses (fast_launch.BoundKernel)
        run(*run_args)
    args.out.fill_(float("nan"))
    start = time.perf_counter()
    run(*run_args)
    if args.out.is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    ref = reference_of(case.op, case.params, case.layout, t["a"], t["b"], t["ds"], case.fused_op, alpha, beta,
                       user_ref)
    rel, mrel = result_errors(args.out, ref)
    return VerifyResult(case, inst.name, rel, dt.tolerance, seconds, max_error=mrel, max_tolerance=dt.max_tolerance)


def verify_case(case: Case, device: str | torch.device, max_instances: int | None = None,
                **kw: Any) -> list[VerifyResult]:
    """Verify up to ``max_instances`` runnable instances (spread over the algorithms) on one case."""
    runnable, declined = get_registry().candidates(case.op, case.params, case.layout, case.dtype, case.fused_op)
    if not runnable:
        reasons = "; ".join(sorted({r for _, r in declined}))[:300]
        return [VerifyResult(case, "-", float("nan"), DATA_TYPES[case.dtype].tolerance, 0.0,
                             note=f"no instance can run it: {reasons}")]
    chosen = spread_over_algorithms(runnable, max_instances)
    out = []
    for inst in chosen:
        try:
            out.append(verify_instance(inst, case, device, **kw))
        except Exception as exc:  # a crash is a failure to report, not a reason to stop the table
            out.append(VerifyResult(case, inst.name, float("nan"), DATA_TYPES[case.dtype].tolerance, 0.0,
                                    note=f"{type(exc).__name__}: {exc}"[:300]))
    return out


def builtin_cases(on_gpu: bool) -> list[Case]:
    """A small problem set touching every op, ndim, layout family, grouped/depthwise and a fused op."""
    if on_gpu:
        n, c, k, hw = 8, 64, 64, 28
    else:
        n, c, k, hw = 2, 8, 8, 6
    P = ConvParams
    return [
        Case("conv_bwd_data", P(2, 1, n, k, c, (3, 3), (hw, hw), (1, 1), (1, 1), (1, 1), (1, 1)),
             "NHWGC/GKYXC/NHWGK", "fp16", label="2D 3x3 s1"),
        Case("conv_bwd_data", P(2, 2, n, k, c, (3, 3), (hw + 1, hw), (2, 2), (1, 1), (1, 0), (0, 1)),
             "NHWGC/GKYXC/NHWGK", "bf16", "add", 1, label="2D 3x3 s2 G2 +residual"),
        Case("conv_bwd_data", P(1, 1, n, k, c, (3,), (hw * 2,), (1,), (2,), (2,), (2,)),
             "GNWC/GKXC/GNWK", "fp32", label="1D dil2 fp32"),
        Case("conv_bwd_data", P(3, 1, 2, k // 2, c // 2, (3, 3, 3), (5, 5, 5), (2, 2, 2), (1, 1, 1), (1, 1, 1),
                                (1, 1, 1)), "NGCDHW/GKCZYX/NGKDHW", "fp16", label="3D s2 channels-first"),
        Case("conv_bwd_data", P(2, 8 if not on_gpu else 64, n, 1, 1, (3, 3), (hw, hw), (1, 1), (1, 1), (1, 1),
                                (1, 1)), "NHWGC/GKYXC/NHWGK", "fp16", label="2D depthwise"),
        Case("conv_bwd_weight", P(2, 1, n, k, c, (3, 3), (hw, hw), (1, 1), (1, 1), (1, 1), (1, 1)),
             "NHWGC/GKYXC/NHWGK", "bf16_fp32w", label="2D 3x3 bf16->fp32 weight"),
        Case("conv_bwd_weight", P(2, 4, n, 4, 4, (3, 3), (hw, hw), (2, 2), (1, 1), (1, 1), (1, 1)),
             "NGCHW/GKYXC/NGKHW", "fp16", "bilinear", 1, label="2D grouped 4x4 bilinear"),
        Case("conv_bwd_weight", P(3, 1, 2, k // 2, c // 2, (3, 3, 3), (5, 5, 5), (1, 1, 1), (1, 1, 1),
                                  (1, 1, 1), (1, 1, 1)), "NDHWGC/GKZYXC/NDHWGK", "fp32", label="3D fp32"),
    ]


def format_table(results: Iterable[VerifyResult]) -> str:
    rows = [("problem", "instance", "rel. error", "tol", "result")]
    for r in results:
        note = r.note or (f"worst element {r.max_error:.2e} > {r.max_tolerance:.0e}"
                          if r.error <= r.tolerance and not r.max_error <= r.max_tolerance else "")
        status = "PASS" if r.passed else "FAIL" + (f" ({note})" if note else "")
        rows.append((r.case.title, r.instance, f"{r.error:.2e}", f"{r.tolerance:.0e}", status))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for j, row in enumerate(rows):
        lines.append("  ".join(row[i].ljust(widths[i]) for i in range(4)) + "  " + row[4])
        if j == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ------")
    return "\n".join(lines)
