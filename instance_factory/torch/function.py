"""Convolution with torch's forward and instance_factory's backward: autograd Functions and functionals.

``conv1d`` / ``conv2d`` / ``conv3d`` take ``torch.nn.functional.convNd``'s arguments (padding as an
int, a tuple, ``"same"`` or ``"valid"``). The forward is torch's convolution; the backward calls the
custom ops ``torch.ops.instance_factory.conv_bwd_data`` / ``conv_bwd_weight`` (the tuned instances)
and sums grad_out for the bias. ``"same"`` padding is asymmetric for even dilated filters: the
forward pads the extra right side first (as torch does), the backward kernels take both pads.

``conv_with_skip`` is the residual pattern: it returns ``(conv(x), x)``, and when the second output
feeds a skip branch, dL/dx = conv_bwd_data(dL/dconv) + dL/dskip is one kernel (fused op ``"add"``).

Under autocast the floating inputs are cast to the autocast dtype first, as torch's own convolution
does, so the backward runs in that dtype and the casts' backward returns fp32 parameter gradients.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import bridge, custom_ops, problems

__all__ = ["conv1d", "conv2d", "conv3d", "conv_nd", "conv_with_skip"]

_Ints = tuple[int, ...]


def _tuple(name: str, value: int | Sequence[int], ndim: int) -> _Ints:
    out = (value,) * ndim if isinstance(value, int) else tuple(value)
    if len(out) != ndim or not all(isinstance(v, int) for v in out):
        raise ValueError(f"{name} must be an int or {ndim} ints for a {ndim}D convolution, got {value!r}")
    return out


def resolve_padding(padding: int | Sequence[int] | str, stride: _Ints, dilation: _Ints,
          filt: Sequence[int]) -> tuple[_Ints, _Ints]:
    """(left, right) pads per spatial dim; ``"same"`` puts the odd element on the right, like torch."""
    ndim = len(stride)
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * ndim, (0,) * ndim
        if padding != "same":
            raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        total = tuple(d * (f - 1) for d, f in zip(dilation, filt))
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    pad = _tuple("padding", padding, ndim)
    return pad, pad


class _Geometry(NamedTuple):
    """A layer's resolved arguments, checked: ``ndim``-tuples, and the right-side pad to apply first
    when the pads are asymmetric (F.pad's argument, else None). Immutable: the cache shares it."""

    stride: _Ints
    pad_l: _Ints
    pad_r: _Ints
    dilation: _Ints
    groups: int
    pre_pad: _Ints | None


def _resolve_geometry(ndim: int, stride: int | Sequence[int], padding: int | Sequence[int] | str,
                      dilation: int | Sequence[int], groups: int, filt: _Ints) -> _Geometry:
    """(stride, left pads, right pads, dilation, groups, pre-pad), checked."""
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    stride_t, dilation_t = _tuple("stride", stride, ndim), _tuple("dilation", dilation, ndim)
    pad_l, pad_r = resolve_padding(padding, stride_t, dilation_t, filt)
    extra = tuple(r - left for left, r in zip(pad_l, pad_r))
    pre_pad = tuple(p for e in reversed(extra) for p in (0, e)) if any(extra) else None
    return _Geometry(stride_t, pad_l, pad_r, dilation_t, groups, pre_pad)


_resolve_geometry_cached = functools.lru_cache(maxsize=4096)(_resolve_geometry)
_HASHABLE = (int, str, tuple)


def _geometry(ndim: int, stride: int | Sequence[int], padding: int | Sequence[int] | str,
              dilation: int | Sequence[int], groups: int, filt: _Ints) -> _Geometry:
    """:func:`_resolve_geometry`, cached for plain ints, strings and tuples (a module's attributes: every
    layer asks each step; a few us of Python a call)."""
    if type(stride) in _HASHABLE and type(padding) in _HASHABLE and type(dilation) in _HASHABLE \
            and type(groups) is int:
        try:
            return _resolve_geometry_cached(ndim, stride, padding, dilation, groups, filt)
        except TypeError:  # a tuple holding something unhashable: the uncached path names what is wrong
            pass
    return _resolve_geometry(ndim, stride, padding, dilation, groups, filt)


def _gradient_ops() -> tuple:
    """The backward's ops: the registered custom ops when compiling, their bodies in eager mode.

    Eager mode skips the dispatcher round trip (the per-call host cost matters for small layers);
    torch.compile must see the custom ops, whose fake kernels it traces.
    """
    if torch.compiler.is_compiling():
        return torch.ops.instance_factory.conv_bwd_data, torch.ops.instance_factory.conv_bwd_weight
    return custom_ops.conv_bwd_data_impl, custom_ops.conv_bwd_weight_impl


def _forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, geo: _Geometry,
             fused_skip: bool = False) -> torch.Tensor:
    """torch's convolution, and what the backward needs saved on ctx."""
    xp = x if geo.pre_pad is None else F.pad(x, geo.pre_pad)  # asymmetric ("same", even dilated filter)
    out = torch.convolution(xp, weight, bias, geo.stride, geo.pad_l, geo.dilation, False, (0,) * len(geo.stride),
                            geo.groups)
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    ctx.save_for_backward(x if need_w else None, weight if need_x else None)
    ctx.geometry = (list(geo.stride), list(geo.pad_l), list(geo.pad_r), list(geo.dilation), geo.groups)
    ctx.input_size = list(x.shape)
    ctx.weight_size = list(weight.shape)
    ctx.weight_channels_last = weight_cl = bridge.is_channels_last(weight)
    ctx.channels_last = bridge.prefers_channels_last(x, weight, weight_cl)
    ctx.has_bias = bias is not None
    if problems.recording():
        problems.note(x, weight, ctx.geometry, ctx.channels_last, ctx.weight_channels_last, need_x, need_w,
                      fused_skip)
    return out


def _backward(ctx, grad_out: torch.Tensor, skip: torch.Tensor | None) -> tuple:
    x, weight = ctx.saved_tensors
    bwd_data, bwd_weight = _gradient_ops()
    geometry = ctx.geometry
    grad_x = grad_w = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_x = bwd_data(grad_out, weight, ctx.input_size, *geometry, ctx.channels_last, skip)
    elif skip is not None:
        grad_x = skip
    if ctx.needs_input_grad[1]:
        grad_w = bwd_weight(x, grad_out, ctx.weight_size, *geometry, ctx.channels_last, ctx.weight_channels_last)
    if ctx.has_bias and ctx.needs_input_grad[2]:
        grad_b = grad_out.sum([0, *range(2, grad_out.dim())])
    return grad_x, grad_w, grad_b


class _Conv(torch.autograd.Function):
    # the geometry travels as one argument: autograd checks and unwraps every argument of apply
    @staticmethod
    def forward(ctx, x, weight, bias, geo):
        return _forward(ctx, x, weight, bias, geo)

    @staticmethod
    def backward(ctx, grad_out):
        return (*_backward(ctx, grad_out, None), None)


class _ConvWithSkip(torch.autograd.Function):
    """(conv(x), x): the gradient reaching the second output is added inside conv_bwd_data."""

    @staticmethod
    def forward(ctx, x, weight, bias, geo):
        return _forward(ctx, x, weight, bias, geo, fused_skip=True), x

    @staticmethod
    def backward(ctx, grad_out, grad_skip):
        return (*_backward(ctx, grad_out, grad_skip), None)


def _prepare(ndim: int, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             stride: int | Sequence[int], padding: int | Sequence[int] | str, dilation: int | Sequence[int],
             groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, _Geometry]:
    """Checked arguments (autocast casts applied, pads resolved) for the Functions."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        name, t = ("input", x) if not isinstance(x, torch.Tensor) else ("weight", weight)
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if weight.dim() != ndim + 2:
        raise ValueError(f"a {ndim}D convolution needs a weight of {ndim + 2} dims (out_channels, in_channels/"
                         f"groups, *kernel), got shape {tuple(weight.shape)}")
    if x.dim() not in (ndim + 1, ndim + 2):
        raise ValueError(f"a {ndim}D convolution needs an input of {ndim + 1} or {ndim + 2} dims "
                         f"([N,] C, *spatial), got shape {tuple(x.shape)}")
    geo = _geometry(ndim, stride, padding, dilation, groups, tuple(weight.shape[2:]))
    device = x.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        x, weight = x.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    return x, weight, bias, geo


def conv_nd(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
            dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """An ``ndim``-D convolution (torch's forward) whose backward runs instance_factory's kernels."""
    x, w, b, geo = _prepare(ndim, input, weight, bias, stride, padding, dilation, groups)
    if x.dim() == ndim + 1:  # unbatched input, as torch accepts it
        return _Conv.apply(x.unsqueeze(0), w, b, geo).squeeze(0)
    return _Conv.apply(x, w, b, geo)


def conv_with_skip(ndim: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                   stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                   dilation: int | Sequence[int] = 1, groups: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(conv(input), input)``: feed the second output to the residual (skip) branch so that its
    gradient is summed into dL/dinput inside conv_bwd_data (fused op ``"add"``), not by autograd.

    When autocast casts ``input``, the skip branch gets the uncast input and autograd sums the two
    gradients as usual (the fused sum would be in the lower precision).
    """
    if not isinstance(input, torch.Tensor) or input.dim() != ndim + 2:
        raise ValueError(f"conv_with_skip needs a batched {ndim}D input of {ndim + 2} dims (N, C, *spatial), "
                         f"got {getattr(input, 'shape', type(input).__name__)}")
    args = _prepare(ndim, input, weight, bias, stride, padding, dilation, groups)
    if args[0] is not input:
        return _Conv.apply(*args), input
    return _ConvWithSkip.apply(*args)


def conv1d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """``torch.nn.functional.conv1d`` with instance_factory's backward."""
    return conv_nd(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """``torch.nn.functional.conv2d`` with instance_factory's backward."""
    return conv_nd(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """``torch.nn.functional.conv3d`` with instance_factory's backward."""
    return conv_nd(3, input, weight, bias, stride, padding, dilation, groups)
