"""Data-type configurations: the rows of CK's support tables, one name each.

A ``DataType`` names the tensors' storage type, the result type (bwd weight may write fp32 for
bf16 data) and the tensor-core compute mode. Names are registry keys and appear in instance names.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["DATA_TYPES", "DataType", "op_kwargs", "resolve_dtype", "tolerance"]


@dataclass(frozen=True)
class DataType:
    name: str  # registry key, e.g. "bf16_fp32w"
    label: str  # row label in the CK-style table
    data: torch.dtype  # input / grad_out / weight (the operands)
    result: torch.dtype | None  # None: the result has the dtype of the matching forward tensor
    compute: str  # "ieee" (true fp32 FMA), "tf32", "native" (fp16/bf16 tensor cores), "fp8"
    tolerance: float  # max relative error vs float64 accepted by tests and the tuner
    # max |out - ref| / max |ref|: the worst element's error on the reference's scale. 4x the normwise
    # tolerance: measured worst elements sit at 1.6x the normwise error (H200 DB), while one wrong
    # element of typical size costs ~0.2 (max|ref| is ~4.5 rms on 64k elements)
    max_tolerance: float


DATA_TYPES: dict[str, DataType] = {
    d.name: d
    for d in (
        DataType("fp32", "fp32", torch.float32, None, "ieee", 1e-5, 4e-5),
        DataType("fp32_tf32", "fp32 (tf32 compute)", torch.float32, None, "tf32", 2e-3, 8e-3),
        DataType("fp16", "fp16", torch.float16, None, "native", 2e-3, 8e-3),
        DataType("bf16", "bf16", torch.bfloat16, None, "native", 1e-2, 4e-2),
        DataType("bf16_fp32w", "bf16 (fp32 for weight)", torch.bfloat16, torch.float32, "native", 1e-2, 4e-2),
        DataType("fp16_fp8", "fp16 (bf8/fp8 compute)", torch.float16, None, "fp8", 5e-2, 2e-1),
    )
}

_BY_TORCH = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def resolve_dtype(data: torch.dtype, *, compute_dtype: str | None = None,
                  wei_dtype: torch.dtype | None = None) -> DataType:
    """Map the contract's (tensor dtype, compute_dtype=, wei_dtype=) to one DataType row."""
    base = _BY_TORCH.get(data)
    if base is None:
        raise TypeError(f"unsupported tensor dtype {data}; supported: float32, float16, bfloat16")
    name = base
    if compute_dtype is not None:
        cd = str(compute_dtype).lower()
        if cd == "tf32" and base == "fp32":
            name = "fp32_tf32"
        elif cd in ("fp8", "bf8", "fp8_bf8") and base == "fp16":
            name = "fp16_fp8"
        elif cd in ("ieee", "fp32") and base == "fp32":
            name = "fp32"
        elif cd not in (base, str(data).split(".")[-1]):
            raise TypeError(f"compute_dtype={compute_dtype!r} is not available for {data} tensors "
                            "(tf32 takes float32 tensors, fp8 takes float16 tensors)")
    if wei_dtype is not None and wei_dtype != data:
        if data == torch.bfloat16 and wei_dtype == torch.float32:
            name = "bf16_fp32w"
        else:
            raise TypeError(f"wei_dtype={wei_dtype} with {data} data is not a declared combination; "
                            "the only mixed case is bfloat16 data with a float32 weight gradient")
    return DATA_TYPES[name]


def op_kwargs(name: str) -> dict:
    """The public ops' keywords that select data type ``name`` (the inverse of ``resolve_dtype``)."""
    dt = DATA_TYPES[name]
    kwargs: dict = {}
    if dt.compute in ("tf32", "fp8"):
        kwargs["compute_dtype"] = dt.compute
    if dt.result is not None:
        kwargs["wei_dtype"] = dt.result
    return kwargs


def tolerance(name: str) -> float:
    return DATA_TYPES[name].tolerance
