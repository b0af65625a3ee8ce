"""Fused elementwise ops (CK's multiple-D epilogues): names, checks, and the in-register Triton code.

E = f(acc, D0, D1, ...) is applied to the fp32 accumulator before the one store of the result,
so a residual-gradient add costs no extra pass over memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

__all__ = ["FUSED_OPS", "MAX_DS", "FusedOp", "apply_epilogue", "resolve_fused_op"]

MAX_DS = 4  # D tensors a kernel can take; more is a clear error, not a silent drop


@dataclass(frozen=True)
class FusedOp:
    name: str
    code: int  # the kernel's constexpr selector
    min_ds: int
    max_ds: int
    formula: str


FUSED_OPS: dict[str, FusedOp] = {
    o.name: o
    for o in (
        FusedOp("passthrough", 0, 0, 0, "E = acc"),
        FusedOp("scale", 1, 0, 0, "E = alpha*acc"),
        FusedOp("bilinear", 2, 1, 1, "E = alpha*acc + beta*D0"),
        FusedOp("add", 3, 1, MAX_DS, "E = acc + D0 + D1 + ..."),
        FusedOp("add_relu", 4, 1, 1, "E = max(acc + D0, 0)"),
        FusedOp("custom", 5, 0, MAX_DS, "E = user_fn(acc, D0, D1, ...)"),
    )
}


def resolve_fused_op(op: Any, n_ds: int) -> tuple[FusedOp, Any]:
    """Return (FusedOp, user_fn or None) for the contract's ``op=`` and the number of Ds given."""
    user_fn = None
    if isinstance(op, str):
        spec = FUSED_OPS.get(op)
        if spec is None or spec.name == "custom":
            names = ", ".join(n for n in FUSED_OPS if n != "custom")
            raise ValueError(f"unknown fused op {op!r}: use one of {names} or a @triton.jit function")
    elif isinstance(op, triton.runtime.jit.JITFunction) or hasattr(op, "fn") and callable(op):
        spec, user_fn = FUSED_OPS["custom"], op
    else:
        raise TypeError(f"op must be a fused-op name or a @triton.jit function, got {type(op).__name__}")
    if not spec.min_ds <= n_ds <= spec.max_ds:
        want = str(spec.min_ds) if spec.min_ds == spec.max_ds else f"{spec.min_ds} to {spec.max_ds}"
        raise ValueError(f"fused op {spec.name!r} ({spec.formula}) takes {want} D tensors, got {n_ds}")
    return spec, user_fn


@triton.jit
def _noop_fn(acc):
    return acc


@triton.jit
def _load_d(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def apply_epilogue(acc, offs, mask, d0, d1, d2, d3, alpha, beta,
                   OP: tl.constexpr, NUM_DS: tl.constexpr, USER_FN: tl.constexpr):
    """acc (fp32 tile) -> E; ``offs``/``mask`` address the result tile, shared by every D."""
    if OP == 1:
        acc = acc * alpha
    elif OP == 2:
        acc = alpha * acc + beta * _load_d(d0, offs, mask)
    elif OP == 3:
        acc = acc + _load_d(d0, offs, mask)
        if NUM_DS >= 2:
            acc = acc + _load_d(d1, offs, mask)
        if NUM_DS >= 3:
            acc = acc + _load_d(d2, offs, mask)
        if NUM_DS >= 4:
            acc = acc + _load_d(d3, offs, mask)
    elif OP == 4:
        acc = tl.maximum(acc + _load_d(d0, offs, mask), 0.0)
    elif OP == 5:
        if NUM_DS == 0:
            acc = USER_FN(acc)
        elif NUM_DS == 1:
            acc = USER_FN(acc, _load_d(d0, offs, mask))
        elif NUM_DS == 2:
            acc = USER_FN(acc, _load_d(d0, offs, mask), _load_d(d1, offs, mask))
        elif NUM_DS == 3:
            acc = USER_FN(acc, _load_d(d0, offs, mask), _load_d(d1, offs, mask),
                          _load_d(d2, offs, mask))
        else:
            acc = USER_FN(acc, _load_d(d0, offs, mask), _load_d(d1, offs, mask),
                          _load_d(d2, offs, mask), _load_d(d3, offs, mask))
    return acc


def epilogue_args(ds: tuple, placeholder: Any) -> list:
    """The four D pointer slots a kernel takes: the given Ds, then a harmless placeholder."""
    return list(ds) + [placeholder] * (MAX_DS - len(ds))


def user_fn_or_noop(user_fn: Any) -> Any:
    return _noop_fn if user_fn is None else user_fn
