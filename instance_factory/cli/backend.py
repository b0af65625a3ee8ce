"""Which Triton backend the program runs on: the GPU, or the interpreter on a machine without one."""

from __future__ import annotations

import os

__all__ = ["choose_backend", "on_gpu"]


def choose_backend() -> None:
    """Use the Triton interpreter on a machine without a GPU (must run before triton is imported)."""
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
