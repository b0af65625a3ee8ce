"""nn.Conv1d/2d/3d with instance_factory's backward, ``convert`` for whole models, and the residual module.

The Conv classes subclass torch's and only replace ``_conv_forward``, so the constructor, attributes,
``state_dict`` and ``padding_mode`` handling are torch's own. ``convert`` therefore swaps a layer by
changing its class in place: same object, same parameters, hooks kept, no copy.
"""

from __future__ import annotations

import torch
from torch import nn

from .function import conv_nd, conv_with_skip

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ResidualConv", "convert"]


class _ConvMixin:
    """``_conv_forward`` for nn.ConvNd subclasses; ``_ndim`` is set by each class."""

    _ndim: int

    def _padded(self, input: torch.Tensor) -> tuple[torch.Tensor, object]:
        """torch's padding_mode rule: non-zero modes pad explicitly, then the convolution pads nothing."""
        if self.padding_mode != "zeros":
            return nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode), 0
        return input, self.padding

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        input, padding = self._padded(input)
        return conv_nd(self._ndim, input, weight, bias, self.stride, padding, self.dilation, self.groups)

    def forward_with_skip(self, input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(self(input), input)``: give the second output to the residual branch and its gradient is
        added inside this layer's conv_bwd_data (fused op ``"add"``)."""
        if self.padding_mode != "zeros":  # the explicit pad sits between the two uses of input: no fusion
            return self(input), input
        return conv_with_skip(self._ndim, input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                              self.groups)


class Conv1d(_ConvMixin, nn.Conv1d):
    """``torch.nn.Conv1d`` whose backward runs instance_factory's tuned kernels."""

    _ndim = 1


class Conv2d(_ConvMixin, nn.Conv2d):
    """``torch.nn.Conv2d`` whose backward runs instance_factory's tuned kernels."""

    _ndim = 2


class Conv3d(_ConvMixin, nn.Conv3d):
    """``torch.nn.Conv3d`` whose backward runs instance_factory's tuned kernels."""

    _ndim = 3


_SWAPS: dict[type, type] = {nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.Conv3d: Conv3d}


def convert(model: nn.Module) -> nn.Module:
    """Swap every ``nn.Conv1d/2d/3d`` in ``model`` (the model itself included) for this package's class,
    in place, and return ``model``. Parameters, buffers and hooks stay the same objects.

    Only those exact classes are swapped: subclasses of them (which may override forward) and
    transposed convolutions are left alone.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert expects a torch.nn.Module, got {type(model).__name__}")
    for module in model.modules():
        new_cls = _SWAPS.get(type(module))
        if new_cls is not None:
            module.__class__ = new_cls
    return model


class ResidualConv(nn.Module):
    """``body(conv(x)) + shortcut(x)`` with dL/dx computed in one kernel: the shortcut's input
    gradient is added in ``conv``'s conv_bwd_data epilogue (fused op ``"add"``) instead of by autograd.

    ``conv`` is an nn.Conv1d/2d/3d (converted in place if it is torch's); ``body`` and ``shortcut``
    are modules (default: identity). A ResNet bottleneck is ``ResidualConv(conv1, rest, downsample)``
    followed by the final ReLU.
    """

    def __init__(self, conv: nn.Module, body: nn.Module | None = None, shortcut: nn.Module | None = None) -> None:
        super().__init__()
        if type(conv) in _SWAPS:
            convert(conv)
        if not isinstance(conv, _ConvMixin):
            raise TypeError(f"ResidualConv needs an nn.Conv1d/2d/3d (or this package's), got {type(conv).__name__}")
        self.conv = conv
        self.body = body if body is not None else nn.Identity()
        self.shortcut = shortcut if shortcut is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, skip = self.conv.forward_with_skip(x)
        return self.body(h) + self.shortcut(skip)
