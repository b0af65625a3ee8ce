"""float32 convolutions at the precision PyTorch gives its cuDNN convolutions.

PyTorch runs float32 cuDNN convolutions, backward passes included, on TF32 tensor cores unless told
otherwise (``torch.backends.cudnn.conv.fp32_precision == "tf32"`` by default in the torch versions
that have the ``fp32_precision`` settings, ``torch.backends.cudnn.allow_tf32 == True`` in older
ones). A converted layer does the same: float32 CUDA tensors run the ``fp32_tf32`` kernels while that
setting says TF32, and the IEEE fp32 kernels when a user sets ``"ieee"`` (or ``allow_tf32 = False``).
CPU tensors (the Triton interpreter) stay IEEE, as PyTorch's CPU convolutions do, and float64 tensors
always take the IEEE fp32 kernels (gradcheck).
"""

from __future__ import annotations

import torch

__all__ = ["compute_dtype_for", "cudnn_conv_tf32"]

_LEVELS = ("tf32", "ieee")


def cudnn_conv_tf32() -> bool:
    """Whether PyTorch would run a float32 cuDNN convolution in TF32 now: the first of the cuDNN conv,
    cuDNN and global ``fp32_precision`` settings that is not ``"none"``, or ``allow_tf32`` on a torch
    without that API. All ``"none"``: IEEE."""
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    conv_level = getattr(conv, "fp32_precision", None)
    if conv_level is None:  # an older torch: only the legacy flag
        return bool(cudnn.allow_tf32)
    for level in (conv_level, getattr(cudnn, "fp32_precision", "none"), getattr(torch.backends, "fp32_precision",
                                                                                  "none")):
        if level in _LEVELS:
            return level == "tf32"
    return False


def compute_dtype_for(dtype: torch.dtype, device: torch.device) -> str | None:
    """The public ops' ``compute_dtype`` for a converted layer's tensors: ``"tf32"`` for float32 on a
    CUDA device while :func:`cudnn_conv_tf32`, else None (the tensor dtype's own kernels)."""
    if dtype != torch.float32 or device.type != "cuda":
        return None
    return "tf32" if cudnn_conv_tf32() else None
