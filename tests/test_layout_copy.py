"""``layout_copy``'s batched transposes (the channels-first / group-major <-> channels-last copies
``relayout`` uses): bit-exact against torch's permute on odd sizes (tiles cut on both axes, 3-channel
stems, one-row matrices, vectors of 1-24 elements), every data dtype, the NGCHW -> NHWGC and
GNHWC -> NHWGC views and back, and the checks on mismatched tensors.
Runs in the Triton interpreter on CPU tensors (TRITON_INTERPRET=1) or on a CUDA GPU.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from instance_factory.algorithms import interpreting  # noqa: E402
from instance_factory.kernels.layout_copy import transpose_copier, vector_transpose_copier  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and not interpreting(),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)
DEVICE = "cpu" if interpreting() else "cuda"


def batched_transpose(src, batch, rows, cols):
    dst = torch.empty((batch, cols, rows), dtype=src.dtype, device=src.device)
    transpose_copier(batch, rows, cols)(src, dst)
    return dst


@pytest.mark.parametrize("batch,rows,cols", [(2, 3, 49), (1, 64, 64), (3, 70, 130), (2, 1, 17), (1, 200, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_torch_transpose(batch, rows, cols, dtype):
    src = torch.randn(batch, rows, cols, device=DEVICE).to(dtype)
    got = batched_transpose(src, batch, rows, cols)
    assert got.shape == (batch, cols, rows)
    assert torch.equal(got, src.transpose(1, 2))


def test_ngchw_to_nhwgc_view():
    n, g, c, h, w = 2, 3, 5, 6, 7
    x = torch.randn(n, g, c, h, w, device=DEVICE)
    out = torch.full((n, h, w, g, c), float("nan"), device=DEVICE)  # poisoned: every element is written
    transpose_copier(n, g * c, h * w)(x, out)
    assert torch.equal(out, x.permute(0, 3, 4, 1, 2))


def test_non_contiguous_source_goes_through_torch():
    base = torch.randn(2, 9, 40, device=DEVICE)
    src = base[:, :, ::2]  # [2, 9, 20], not contiguous
    dst = torch.empty(2, 20, 9, device=DEVICE)
    transpose_copier(2, 9, 20)(src, dst)
    assert torch.equal(dst, src.transpose(1, 2))


def test_rejects_mismatched_tensors():
    copy = transpose_copier(2, 4, 8)
    with pytest.raises(ValueError, match=r"\[2, 4, 8\]"):
        copy(torch.randn(2, 4, 9, device=DEVICE), torch.empty(2, 9, 4, device=DEVICE))
    with pytest.raises(ValueError, match="float16"):
        copy(torch.randn(2, 4, 8, device=DEVICE), torch.empty(2, 8, 4, device=DEVICE, dtype=torch.float16))


@pytest.mark.parametrize("batch,rows,cols,vec", [(1, 3, 49, 2), (2, 17, 33, 3), (1, 5, 70, 8), (1, 40, 9, 24), (1, 20, 3, 600),
                                                 (1, 6, 11, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vector_transpose_matches_torch(batch, rows, cols, vec, dtype):
    src = torch.randn(batch, rows, cols, vec, device=DEVICE).to(dtype)
    dst = torch.full((batch, cols, rows, vec), float("nan"), device=DEVICE).to(dtype)  # poisoned
    vector_transpose_copier(batch, rows, cols, vec)(src, dst)
    assert torch.equal(dst, src.transpose(1, 2))


@pytest.mark.parametrize("c", [1, 4, 6])
def test_gnhwc_to_nhwgc_and_back(c):
    g, n, h, w = 5, 2, 3, 7
    x = torch.randn(g, n, h, w, c, device=DEVICE)
    out = torch.full((n, h, w, g, c), float("nan"), device=DEVICE)
    vector_transpose_copier(1, g, n * h * w, c)(x, out)
    assert torch.equal(out, x.permute(1, 2, 3, 0, 4))
    back = torch.full_like(x, float("nan"))
    vector_transpose_copier(1, n * h * w, g, c)(out, back)
    assert torch.equal(back, x)


def test_vector_transpose_rejects_mismatched_tensors():
    with pytest.raises(ValueError, match=r"\[1, 4, 8, 3\]"):
        vector_transpose_copier(1, 4, 8, 3)(torch.randn(1, 4, 8, 2, device=DEVICE), torch.empty(1, 8, 4, 2, device=DEVICE))
