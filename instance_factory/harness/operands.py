"""Operands of a problem (seeded random, never all zero) and its float64 reference."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..dtypes import DATA_TYPES, op_kwargs
from ..epilogue import FUSED_OPS
from ..layouts import LayoutTriple, parse_layout
from ..ops import _OPERANDS
from ..problem import ConvParams
from ..reference import ref_conv_bwd_data, ref_conv_bwd_weight

__all__ = ["ProblemCase", "custom_pair", "make_case", "make_problem_tensors", "op_call", "ref_norms", "reference_of"]


def make_problem_tensors(op: str, params: ConvParams, layout: str | LayoutTriple, dtype_name: str,
                         n_ds: int = 0, device: str | torch.device = "cpu", seed: int = 0,
                         random: bool = True, generator_device: str | torch.device = "cpu") -> dict[str, Any]:
    """Random operands (never zeros) in the layout: {"a", "b", "ds"} in the op's argument order;
    ``random=False`` leaves them uninitialized (enough to compile: shapes, dtypes, alignment).
    ``generator_device``: where the seeded generator draws (the tuner draws on the GPU itself, so a
    2^31-element operand is not drawn on the CPU and copied)."""
    dt = DATA_TYPES[dtype_name]
    lt = parse_layout(layout, params.ndim)
    (_, a_tensor), (_, b_tensor), result_tensor = _OPERANDS[op]
    gen = torch.Generator(device=generator_device).manual_seed(seed) if random else None

    def rnd(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if gen is None:
            return torch.empty(shape, dtype=dtype, device=device)
        return torch.randn(shape, generator=gen, device=generator_device,
                           dtype=torch.float32).to(device=device, dtype=dtype)

    result_dtype = dt.result or dt.data
    return {
        "a": rnd(lt.shape(a_tensor, params), dt.data),
        "b": rnd(lt.shape(b_tensor, params), dt.data),
        "ds": tuple(rnd(lt.shape(result_tensor, params), result_dtype) for _ in range(n_ds)),
    }


_CUSTOM: tuple[Any, Callable] | None = None


def custom_pair() -> tuple[Any, Callable]:
    """The custom fused op used for ``fused_op="custom"``: E = 0.5*acc + D0 (@triton.jit, torch ref)."""
    global _CUSTOM
    if _CUSTOM is None:
        import triton

        @triton.jit
        def tuner_custom_op(acc, d0):
            return acc * 0.5 + d0

        _CUSTOM = (tuner_custom_op, lambda acc, d0: acc * 0.5 + d0)
    return _CUSTOM


@dataclass
class ProblemCase:
    """One problem's operands, the float64 reference and the public op's arguments."""

    problem: Any  # tuning.problem_sets.Problem (op, params, layout, dtype, fused_op, key, label)
    device: torch.device
    a: torch.Tensor
    b: torch.Tensor
    ds: tuple[torch.Tensor, ...]
    ref: torch.Tensor | None  # None in compile workers (they never check a result)
    kwargs: dict  # compute_dtype / wei_dtype for the public op
    fused_arg: Any  # the op= argument (a name, or the custom @triton.jit function)
    n_ds: int
    alpha: float
    beta: float
    extra: dict = field(default_factory=dict)


def make_case(problem: Any, device: torch.device, *, seed: int = 0, alpha: float = 1.25, beta: float = -0.75,
              reference: bool = True) -> ProblemCase:
    """Operands (seeded random, drawn on ``device``; uninitialized when ``reference`` is False:
    compile workers only need shapes, dtypes and alignment) and the float64 reference."""
    fused = FUSED_OPS[problem.fused_op]
    n_ds = max(fused.min_ds, 1) if fused.name == "custom" else fused.min_ds
    t = make_problem_tensors(problem.op, problem.params, problem.layout, problem.dtype, n_ds, device, seed,
                             random=reference, generator_device=device)
    user_fn, user_ref = custom_pair() if fused.name == "custom" else (None, None)
    case = ProblemCase(problem, device, t["a"], t["b"], t["ds"], None, op_kwargs(problem.dtype),
                       user_fn if user_fn is not None else fused.name, n_ds, alpha, beta)
    if reference:
        case.ref = reference_of(problem.op, problem.params, problem.layout, case.a, case.b, case.ds,
                                problem.fused_op, alpha, beta, user_ref)
    return case


def reference_of(op: str, params: ConvParams, layout: str, a: torch.Tensor, b: torch.Tensor, ds: Sequence,
                 fused_op: str, alpha: float, beta: float, user_ref: Callable | None = None) -> torch.Tensor:
    """float64 result of the problem from :mod:`instance_factory.reference`, on the operands' device."""
    fn = ref_conv_bwd_data if op == "conv_bwd_data" else ref_conv_bwd_weight
    return fn(a, b, params, layout, ds=tuple(ds), op=fused_op, alpha=alpha, beta=beta, user_ref=user_ref)


def ref_norms(case: ProblemCase) -> tuple[float, float]:
    """(||ref||, max|ref|), computed once per problem."""
    got = case.extra.get("ref_norms")
    if got is None:
        ref = case.ref
        got = (float(torch.linalg.vector_norm(ref)), float(ref.abs().max()) if ref.numel() else 0.0)
        case.extra["ref_norms"] = got
    return got


def op_call(case: ProblemCase, inst: Any) -> Callable[[], Any]:
    """The public op call being timed (checks + allocation + launch(es))."""
    from .. import ops

    fn = ops.conv_bwd_data if case.problem.op == "conv_bwd_data" else ops.conv_bwd_weight
    p, lay = case.problem.params, case.problem.layout
    a, b, ds, kw = case.a, case.b, case.ds, case.kwargs
    fused, alpha, beta = case.fused_arg, case.alpha, case.beta
    return lambda: fn(a, b, p, layout=lay, ds=ds, op=fused, alpha=alpha, beta=beta, instance=inst, **kw)
