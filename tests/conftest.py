"""Test setup: the Triton interpreter on CPU-only machines; GPU tests skipped without a GPU."""

import os

import pytest

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if _HAS_CUDA and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (not the Triton interpreter)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
