"""The backward passes as torch.library custom ops on PyTorch-shaped tensors, with fake kernels.

``torch.ops.instance_factory.conv_bwd_data`` and ``torch.ops.instance_factory.conv_bwd_weight`` take
PyTorch's ``(N, G*C, *sp)`` / ``(G*K, C, *f)`` tensors, map them onto a CK layout triple through
:mod:`.bridge`, and call the public ops with ``instance=None`` (the tuned instance, via lookup). The
fake kernels give torch.compile the result's shape, dtype and strides without running anything, so
a compiled model traces through the backward without graph breaks.

float64 tensors run the true-fp32 kernels and are cast back (gradients of fp32 accuracy): that is
what lets ``torch.autograd.gradcheck`` check the backward in float64. float32 CUDA tensors follow
PyTorch's cuDNN convolution precision (:mod:`.precision`): TF32 by default, IEEE when set so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import ops
from ..problem import ConvParams
from . import bridge
from .precision import compute_dtype_for

__all__ = ["conv_bwd_data", "conv_bwd_data_impl", "conv_bwd_weight", "conv_bwd_weight_impl", "kernel_dtype"]

_KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels run for tensors of ``dtype`` (float64 runs the fp32 kernels)."""
    if dtype in _KERNEL_DTYPES:
        return dtype
    if dtype == torch.float64:
        return torch.float32
    raise TypeError(f"instance_factory convolution backward supports float32, float16, bfloat16 (and float64 "
                    f"through the fp32 kernels), not {dtype}")


@dataclass(frozen=True)
class _Repeat:
    """What a repeat eager call of one problem needs: the bound runner and the PyTorch-side shapes and
    strides under which the operands and the result are exactly the CK tensors the runner was bound to."""

    run: Any
    a_shape: tuple[int, ...]
    a_strides: tuple[int, ...]
    b_shape: tuple[int, ...]
    b_strides: tuple[int, ...]
    out_shape: tuple[int, ...]
    out_strides: tuple[int, ...]


# (pass, sizes, geometry, formats, dtype, device) -> _Repeat. A training step calls each layer's backward
# with the same shapes every step; the bridge's views, casts and checks (~10 torch calls, most of a
# small layer's host time) are then skipped, and the runner gets the PyTorch tensors themselves.
_REPEAT: dict[tuple, _Repeat] = {}
_MAX_REPEAT = 4096


def _repeat_call(key: tuple, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """The result through the cached runner when ``a`` and ``b`` look as they did when it was bound."""
    hit = _REPEAT.get(key)
    if hit is None or a.stride() != hit.a_strides or b.stride() != hit.b_strides or a.shape != hit.a_shape \
            or b.shape != hit.b_shape or b.dtype != a.dtype or b.device != a.device:
        return None
    ops.recheck_database()  # may clear _REPEAT (new rows): then take the full path
    if key not in _REPEAT:
        return None
    out = torch.empty_strided(hit.out_shape, hit.out_strides, dtype=a.dtype, device=a.device)
    ops._launch(hit.run, a.device, a, b, out, (), 1.0, 1.0)
    return out


def _remember(key: tuple, op: str, params: ConvParams, layout: str, a: torch.Tensor, b: torch.Tensor,
              ck_a: torch.Tensor, ck_b: torch.Tensor, ck_out: torch.Tensor, out: torch.Tensor,
              compute_dtype: str | None) -> None:
    """Cache the runner of the call just made when no copy or cast was needed on either side (the CK
    tensors are the PyTorch ones, viewed), so the runner can take the PyTorch tensors directly."""
    same = (ck_a.data_ptr() == a.data_ptr() and ck_b.data_ptr() == b.data_ptr() and out.data_ptr() ==
            ck_out.data_ptr() and a.dtype == b.dtype == out.dtype == ck_out.dtype)
    run = ops.hot_runner(op, params, layout, ck_a.dtype, ck_a.device, compute_dtype=compute_dtype) if same else None
    if run is None:
        return
    from ..tuning import lookup  # late, like ops: a new lookup answer must reach this cache too

    if _REPEAT.clear not in lookup.CLEAR_HOOKS:
        lookup.CLEAR_HOOKS.append(_REPEAT.clear)
    if len(_REPEAT) >= _MAX_REPEAT:
        _REPEAT.clear()
    _REPEAT[key] = _Repeat(run, tuple(a.shape), a.stride(), tuple(b.shape), b.stride(), tuple(out.shape),
                           out.stride())


def conv_bwd_data_impl(grad_out: torch.Tensor, weight: torch.Tensor, input_size: list[int], stride: list[int],
                       padding_l: list[int], padding_r: list[int], dilation: list[int], groups: int,
                       channels_last: bool, skip: torch.Tensor | None = None) -> torch.Tensor:
    """dL/dx in PyTorch's shape and ``channels_last`` format; ``skip`` (dL/dx of a residual branch) is
    added in the kernel's epilogue (fused op ``"add"``)."""
    key = None
    cd = compute_dtype_for(grad_out.dtype, grad_out.device)
    if skip is None:
        key = ("data", *input_size, *weight.shape, *stride, *padding_l, *padding_r, *dilation, groups, channels_last,
               grad_out.dtype, grad_out.device, cd)
        out = _repeat_call(key, grad_out, weight)
        if out is not None:
            return out
    params, layout, weight_cl = bridge.ck_problem(tuple(input_size), tuple(weight.shape), tuple(stride),
                                                  tuple(padding_l), tuple(padding_r), tuple(dilation), groups,
                                                  channels_last, bridge.is_channels_last(weight))
    dtype = kernel_dtype(grad_out.dtype)
    dy = bridge.activation_to_ck(_as(grad_out, dtype), groups, channels_last)
    w = bridge.weight_to_ck(_as(weight, dtype), groups, weight_cl)
    if skip is None:
        dx = ops.conv_bwd_data(dy, w, params, layout=layout, compute_dtype=cd)
    else:
        d = bridge.activation_to_ck(skip if skip.dtype == torch.float32 else _as(skip, dtype), groups, channels_last)
        dx = ops.conv_bwd_data(dy, w, params, layout=layout, ds=(d,), op="add", compute_dtype=cd)
    result = bridge.in_format(_as(bridge.activation_from_ck(dx, channels_last), grad_out.dtype), channels_last)
    if key is not None:
        _remember(key, "conv_bwd_data", params, layout, grad_out, weight, dy, w, dx, result, cd)
    return result


def conv_bwd_weight_impl(input: torch.Tensor, grad_out: torch.Tensor, weight_size: list[int], stride: list[int],
                         padding_l: list[int], padding_r: list[int], dilation: list[int], groups: int,
                         channels_last: bool, weight_channels_last: bool) -> torch.Tensor:
    """dL/dW in PyTorch's ``(G*K, C, *f)`` shape, channels-last when ``weight_channels_last``."""
    cd = compute_dtype_for(input.dtype, input.device)
    key = ("weight", *input.shape, *weight_size, *stride, *padding_l, *padding_r, *dilation, groups, channels_last,
           weight_channels_last, input.dtype, input.device, cd)
    out = _repeat_call(key, input, grad_out)
    if out is not None:
        return out
    params, layout, ck_weight_cl = bridge.ck_problem(tuple(input.shape), tuple(weight_size), tuple(stride),
                                                     tuple(padding_l), tuple(padding_r), tuple(dilation), groups,
                                                     channels_last, weight_channels_last)
    dtype = kernel_dtype(input.dtype)
    x = bridge.activation_to_ck(_as(input, dtype), groups, channels_last)
    dy = bridge.activation_to_ck(_as(grad_out, dtype), groups, channels_last)
    dw = ops.conv_bwd_weight(x, dy, params, layout=layout, compute_dtype=cd)
    result = bridge.in_format(_as(bridge.weight_from_ck(dw, ck_weight_cl), input.dtype), weight_channels_last)
    _remember(key, "conv_bwd_weight", params, layout, input, grad_out, x, dy, dw, result, cd)
    return result


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


conv_bwd_data = torch.library.custom_op("instance_factory::conv_bwd_data", conv_bwd_data_impl, mutates_args=())
conv_bwd_weight = torch.library.custom_op("instance_factory::conv_bwd_weight", conv_bwd_weight_impl,
                                          mutates_args=())


@conv_bwd_data.register_fake
def _conv_bwd_data_fake(grad_out, weight, input_size, stride, padding_l, padding_r, dilation, groups,
                        channels_last, skip=None):
    return bridge.empty_in_format(tuple(input_size), channels_last, grad_out.dtype, grad_out.device)


@conv_bwd_weight.register_fake
def _conv_bwd_weight_fake(input, grad_out, weight_size, stride, padding_l, padding_r, dilation, groups,
                          channels_last, weight_channels_last):
    return bridge.empty_in_format(tuple(weight_size), weight_channels_last, input.dtype, input.device)
