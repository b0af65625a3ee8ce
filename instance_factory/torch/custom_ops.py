"""The backward passes as torch.library custom ops on PyTorch-shaped tensors, with fake kernels.

``torch.ops.instance_factory.conv_bwd_data`` and ``torch.ops.instance_factory.conv_bwd_weight`` take
PyTorch's ``(N, G*C, *sp)`` / ``(G*K, C, *f)`` tensors, map them onto a CK layout triple through
:mod:`.bridge`, and call the public ops with ``instance=None`` (the tuned instance, via lookup). The
fake kernels give torch.compile the result's shape, dtype and strides without running anything, so
a compiled model traces through the backward without graph breaks.

float64 tensors run the true-fp32 kernels and are cast back (gradients of fp32 accuracy): that is
what lets ``torch.autograd.gradcheck`` check the backward in float64.
"""

from __future__ import annotations

import torch

from .. import ops
from . import bridge

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


def conv_bwd_data_impl(grad_out: torch.Tensor, weight: torch.Tensor, input_size: list[int], stride: list[int],
                       padding_l: list[int], padding_r: list[int], dilation: list[int], groups: int,
                       channels_last: bool, skip: torch.Tensor | None = None) -> torch.Tensor:
    """dL/dx in PyTorch's shape and ``channels_last`` format; ``skip`` (dL/dx of a residual branch) is
    added in the kernel's epilogue (fused op ``"add"``)."""
    params, layout, weight_cl = bridge.ck_problem(tuple(input_size), tuple(weight.shape), tuple(stride),
                                                  tuple(padding_l), tuple(padding_r), tuple(dilation), groups,
                                                  channels_last, bridge.is_channels_last(weight))
    dtype = kernel_dtype(grad_out.dtype)
    dy = bridge.activation_to_ck(grad_out.to(dtype), groups, channels_last)
    w = bridge.weight_to_ck(weight.to(dtype), groups, weight_cl)
    if skip is None:
        dx = ops.conv_bwd_data(dy, w, params, layout=layout)
    else:
        d = bridge.activation_to_ck(skip if skip.dtype == torch.float32 else skip.to(dtype), groups, channels_last)
        dx = ops.conv_bwd_data(dy, w, params, layout=layout, ds=(d,), op="add")
    return bridge.in_format(bridge.activation_from_ck(dx, channels_last).to(grad_out.dtype), channels_last)


def conv_bwd_weight_impl(input: torch.Tensor, grad_out: torch.Tensor, weight_size: list[int], stride: list[int],
                         padding_l: list[int], padding_r: list[int], dilation: list[int], groups: int,
                         channels_last: bool, weight_channels_last: bool) -> torch.Tensor:
    """dL/dW in PyTorch's ``(G*K, C, *f)`` shape, channels-last when ``weight_channels_last``."""
    params, layout, ck_weight_cl = bridge.ck_problem(tuple(input.shape), tuple(weight_size), tuple(stride),
                                                     tuple(padding_l), tuple(padding_r), tuple(dilation), groups,
                                                     channels_last, weight_channels_last)
    dtype = kernel_dtype(input.dtype)
    x = bridge.activation_to_ck(input.to(dtype), groups, channels_last)
    dy = bridge.activation_to_ck(grad_out.to(dtype), groups, channels_last)
    dw = ops.conv_bwd_weight(x, dy, params, layout=layout)
    return bridge.in_format(bridge.weight_from_ck(dw, ck_weight_cl).to(input.dtype), weight_channels_last)


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
