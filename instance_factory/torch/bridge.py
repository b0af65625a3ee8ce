"""Layout bridge: PyTorch's convolution tensors as CK layout triples, without copies where strides allow.

PyTorch holds activations as ``(N, G*C, *spatial)`` and weights as ``(G*K, C, *filter)``, either
contiguous (channels-first) or channels-last (the channel axis innermost). Both are CK layouts once
the group axis is split off:

* channels-last activation ``(N, *sp, G*C)`` in memory is ``N[D]HWGC`` (and ``N[D]HWGK``);
* contiguous activation ``(N, G*C, *sp)`` is ``NGC[D]HW`` (and ``NGK[D]HW``);
* channels-last weight ``(G*K, *f, C)`` in memory is ``GK[Z]YXC``; a contiguous one is ``GKC[Z]YX``.

CK pairs ``N[D]HWGC`` only with ``GK[Z]YXC``, so a channels-last activation with a contiguous weight
costs one copy of the (small) weight; any other stride pattern costs one copy of that tensor.
"""

from __future__ import annotations

import functools

import torch

from ..layouts import layout_for
from ..problem import ConvParams

__all__ = [
    "activation_from_ck",
    "activation_to_ck",
    "ck_problem",
    "conv_params",
    "empty_in_format",
    "in_format",
    "is_channels_last",
    "layout_name",
    "prefers_channels_last",
    "weight_from_ck",
    "weight_to_ck",
]


_CHANNELS_LAST_FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def is_channels_last(t: torch.Tensor) -> bool:
    """True when the channel axis (dim 1) is innermost and the rest is dense (size-1 dims ignored)."""
    fmt = _CHANNELS_LAST_FORMATS.get(t.dim())
    if fmt is not None and t.numel():  # torch's own flag: the same answer without a view (~3 us a call)
        return t.is_contiguous(memory_format=fmt)
    return t.movedim(1, -1).is_contiguous()


def prefers_channels_last(x: torch.Tensor, weight: torch.Tensor, weight_channels_last: bool | None = None) -> bool:
    """The activation format for a convolution of ``x``: the one its strides already have.

    When ``x`` is both (one channel, or all spatial sizes 1) or neither (a copy either way), the
    weight's format decides (``weight_channels_last``, when the caller knows it), so that the weight
    needs no copy either.
    """
    cl, cf = is_channels_last(x), x.is_contiguous()
    if cl != cf:
        return cl
    return is_channels_last(weight) if weight_channels_last is None else weight_channels_last


@functools.lru_cache(maxsize=64)
def layout_name(ndim: int, act_channels_last: bool, weight_channels_last: bool) -> str:
    """The CK triple for these formats (a channels-last activation always takes a ``GK..C`` weight)."""
    if act_channels_last:
        layout_family = "nhwgc"
    else:
        layout_family = "ngchw" if weight_channels_last else "ngchw_kcyx"
    return layout_for(layout_family, ndim).name


@functools.lru_cache(maxsize=4096)
def conv_params(input_size: tuple[int, ...], weight_size: tuple[int, ...], stride: tuple[int, ...],
                padding_l: tuple[int, ...], padding_r: tuple[int, ...], dilation: tuple[int, ...],
                groups: int) -> ConvParams:
    """ConvParams of a PyTorch convolution: input (N, G*C, *sp), weight (G*K, C, *f); cached per shape."""
    ndim = len(input_size) - 2
    n, gc, *spatial = input_size
    gk, c, *filt = weight_size
    if groups < 1 or gc % groups or gk % groups or gc // groups != c:
        raise ValueError(f"groups={groups} does not fit input channels {gc} and weight {tuple(weight_size)} "
                         f"(needs input channels = groups * weight.shape[1] and weight.shape[0] % groups == 0)")
    return ConvParams(ndim, groups, n, gk // groups, c, tuple(filt), tuple(spatial), stride, dilation, padding_l,
                      padding_r)


def ck_problem(input_size: tuple[int, ...], weight_size: tuple[int, ...], stride: tuple[int, ...],
               padding_l: tuple[int, ...], padding_r: tuple[int, ...], dilation: tuple[int, ...], groups: int,
               act_channels_last: bool, weight_channels_last: bool) -> tuple[ConvParams, str, bool]:
    """(ConvParams, CK layout triple, whether the CK weight is ``GK..C``) of one backward pass."""
    params = conv_params(input_size, weight_size, stride, padding_l, padding_r, dilation, groups)
    ck_weight_cl = act_channels_last or weight_channels_last
    return params, layout_name(params.ndim, act_channels_last, ck_weight_cl), ck_weight_cl


def activation_to_ck(t: torch.Tensor, groups: int, channels_last: bool) -> torch.Tensor:
    """``(N, G*C, *sp)`` as ``(N, *sp, G, C)`` (channels-last) or ``(N, G, C, *sp)``; a view when strides allow."""
    n, gc, *sp = t.shape
    if channels_last:
        return t.movedim(1, -1).contiguous().view(n, *sp, groups, gc // groups)
    return t.contiguous().view(n, groups, gc // groups, *sp)


def activation_from_ck(v: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """Inverse of :func:`activation_to_ck`: a view with PyTorch's ``(N, G*C, *sp)`` shape."""
    if channels_last:
        return v.flatten(-2).movedim(-1, 1)
    return v.flatten(1, 2)


def weight_to_ck(w: torch.Tensor, groups: int, channels_last: bool) -> torch.Tensor:
    """``(G*K, C, *f)`` as ``(G, K, *f, C)`` (``GK..C``) or ``(G, K, C, *f)`` (``GKC..``); a view when possible."""
    gk, c, *f = w.shape
    if channels_last:
        return w.movedim(1, -1).contiguous().view(groups, gk // groups, *f, c)
    return w.contiguous().view(groups, gk // groups, c, *f)


def weight_from_ck(v: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """Inverse of :func:`weight_to_ck`: a view with PyTorch's ``(G*K, C, *f)`` shape."""
    if channels_last:
        return v.flatten(0, 1).movedim(-1, 1)
    return v.flatten(0, 1)


def _strides(shape: tuple[int, ...], channels_last: bool) -> tuple[int, ...]:
    """Dense strides of ``shape`` with the channel axis (dim 1) innermost or in its place."""
    order = [0, *range(2, len(shape)), 1] if channels_last else list(range(len(shape)))
    strides = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= shape[d]
    return tuple(strides)


def empty_in_format(shape: tuple[int, ...], channels_last: bool, dtype: torch.dtype,
                    device: torch.device) -> torch.Tensor:
    """An uninitialized tensor with exactly the strides :func:`in_format` returns (fake kernels use it)."""
    return torch.empty_strided(shape, _strides(tuple(shape), channels_last), dtype=dtype, device=device)


def in_format(t: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``t`` with the canonical dense strides of its format: no copy when only size-1 dims' strides differ.

    Results must carry exactly the strides the fake (meta) kernels promise, or torch.compile's
    stride assertions fail; a copy happens only when ``t`` is laid out in the other format.
    """
    want = _strides(tuple(t.shape), channels_last)
    if t.stride() == want:
        return t
    if all(s == w for n, s, w in zip(t.shape, t.stride(), want) if n > 1):
        return t.as_strided(t.shape, want, t.storage_offset())
    return empty_in_format(tuple(t.shape), channels_last, t.dtype, t.device).copy_(t)
