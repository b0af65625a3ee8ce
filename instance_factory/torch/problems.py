"""Which backward problems a model will run: recorded during a forward pass.

```python
with record_backward_problems() as found:
    model(x)
for p in found:                      # BackwardProblem(op, params, layout, dtype)
    print(p.op, p.params.key(), p.layout, p.dtype)
```

Useful to tune a model's layers ahead (``instance-factory tune --problem KEY``), to see which ones
the tuning database lacks, or to compile their kernels before the first training step. The record
follows the very rules the backward uses (layout bridge, dtype, which gradients are needed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..dtypes import resolve_dtype
from ..problem import ConvParams
from . import bridge
from .custom_ops import kernel_dtype
from .precision import compute_dtype_for

__all__ = ["BackwardProblem", "record_backward_problems"]


@dataclass(frozen=True)
class BackwardProblem:
    """One call the backward will make: ``instance_factory.<op>(..., params, layout=layout)`` on ``dtype``."""

    op: str  # "conv_bwd_data" or "conv_bwd_weight"
    params: ConvParams
    layout: str  # CK triple
    dtype: str  # data type name (DATA_TYPES), e.g. "bf16"
    fused_op: str = "passthrough"  # "add" (one D) for conv_bwd_data under conv_with_skip


_RECORDERS: list[list[BackwardProblem]] = []


def recording() -> bool:
    """Whether a :func:`record_backward_problems` block is open (checked on every forward)."""
    return bool(_RECORDERS)


def note(x: torch.Tensor, weight: torch.Tensor, geometry: tuple, act_channels_last: bool,
         weight_channels_last: bool, need_input_grad: bool, need_weight_grad: bool, fused_skip: bool = False) -> None:
    """Record the backward calls of one convolution (geometry: stride, pad_l, pad_r, dilation, groups);
    ``fused_skip``: its conv_bwd_data adds a skip gradient (fused op ``"add"``)."""
    stride, pad_l, pad_r, dilation, groups = geometry
    params, layout, _ = bridge.ck_problem(tuple(x.shape), tuple(weight.shape), tuple(stride), tuple(pad_l),
                                          tuple(pad_r), tuple(dilation), groups, act_channels_last,
                                          weight_channels_last)
    dtype = resolve_dtype(kernel_dtype(x.dtype), compute_dtype=compute_dtype_for(x.dtype, x.device)).name
    ops = [op for op, need in (("conv_bwd_data", need_input_grad), ("conv_bwd_weight", need_weight_grad)) if need]
    for found in _RECORDERS:
        for op in ops:
            fused = "add" if fused_skip and op == "conv_bwd_data" else "passthrough"
            problem = BackwardProblem(op, params, layout, dtype, fused)
            if problem not in found:
                found.append(problem)


@contextlib.contextmanager
def record_backward_problems() -> Iterator[list[BackwardProblem]]:
    """Collect, in first-use order and without repeats, the backward problems of the convolutions
    of this package that run forward inside the block (with gradients enabled)."""
    found: list[BackwardProblem] = []
    _RECORDERS.append(found)
    try:
        yield found
    finally:
        _RECORDERS.remove(found)
