"""PyTorch integration: convolution layers and functionals whose backward runs the tuned kernels.

```python
from instance_factory.torch import convert
model = convert(torchvision.models.resnet50()).cuda().to(memory_format=torch.channels_last)
loss = model(x).sum(); loss.backward()      # conv_bwd_data / conv_bwd_weight through lookup
```

Importing this package registers ``torch.ops.instance_factory.conv_bwd_data`` and
``torch.ops.instance_factory.conv_bwd_weight`` (custom ops with fake kernels, for torch.compile).
Inside this package ``import torch`` is the real torch (absolute imports).
"""

from __future__ import annotations

from . import custom_ops  # noqa: F401  (registers the torch.ops.instance_factory ops)
from .function import conv1d, conv2d, conv3d, conv_nd, conv_with_skip
from .modules import Conv1d, Conv2d, Conv3d, ResidualConv, convert
from .problems import BackwardProblem, record_backward_problems

__all__ = [
    "BackwardProblem",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ResidualConv",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_nd",
    "conv_with_skip",
    "convert",
    "record_backward_problems",
]
