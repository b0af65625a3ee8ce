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


@pytest.fixture
def bound_kernels(monkeypatch):
    """``bound_kernels(module)`` -> a list that receives, for every ``BoundKernel`` the module builds from
    then on, its launch keywords (constexprs, num_warps, ...) plus ``grid``: what a bind chose."""

    def spy_on(module) -> list[dict]:
        made: list[dict] = []
        real = module.BoundKernel

        def spy(kernel, grid, **kw):
            made.append({**kw, "grid": grid})
            return real(kernel, grid, **kw)

        monkeypatch.setattr(module, "BoundKernel", spy)
        return made

    return spy_on
