"""Extract a problem set (every distinct conv layer) from a torch model with forward hooks.

The model runs once on the ``meta`` device (no memory, no compute), and a pre-hook on every
``nn.Conv1d/2d/3d`` records its input shape and hyper-parameters as a ConvParams. Identical layers
are merged (``count``). The conv that reads the model input gets ``passes: [conv_bwd_weight]``:
training never needs the gradient of the input images / audio.

torchvision is optional: :func:`extract_torchvision` imports it lazily and says how to get it. The
1D wav2vec2 feature encoder is built in (:func:`wav2vec2_conv_layers`), so the audio set needs no
torchaudio.

CLI: ``instance-factory extract resnet50 --batch 128 -o configs/problem_sets/resnet50.yaml``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..problem import ConvParams

__all__ = [
    "extract_convs",
    "extract_model",
    "extract_torchvision",
    "problem_set_yaml",
    "wav2vec2_conv_layers",
    "write_problem_set",
]

VIDEO_MODELS = ("r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v1_b", "mvit_v2_s", "swin3d_t")


def _conv_params(mod: Any, x_shape: Sequence[int]) -> ConvParams:
    import torch.nn as nn

    nd = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[type(mod)] if type(mod) in (
        nn.Conv1d, nn.Conv2d, nn.Conv3d) else len(mod.kernel_size)
    n, _, *spatial = (int(v) for v in x_shape)
    k = tuple(int(v) for v in mod.kernel_size)
    s = tuple(int(v) for v in mod.stride)
    d = tuple(int(v) for v in mod.dilation)
    if isinstance(mod.padding, str):
        if mod.padding == "valid":
            lp = rp = (0,) * nd
        else:  # "same": torch puts the odd element on the right
            tot = [di * (ki - 1) for di, ki in zip(d, k)]
            lp = tuple(t // 2 for t in tot)
            rp = tuple(t - t // 2 for t in tot)
    else:
        lp = rp = tuple(int(v) for v in mod.padding)
    if getattr(mod, "padding_mode", "zeros") != "zeros":
        # torch pads explicitly (reflect/replicate/circular) and then convolves with no padding
        spatial = [i + a + b for i, a, b in zip(spatial, lp, rp)]
        lp = rp = (0,) * nd
    g = int(mod.groups)
    return ConvParams(nd, g, n, int(mod.out_channels) // g, int(mod.in_channels) // g, k, tuple(spatial),
                      s, d, lp, rp)


def extract_convs(model: Any, example_input: Any) -> list[dict]:
    """Run ``model(example_input)`` with hooks; return distinct conv layers as problem-set entries."""
    import torch
    import torch.nn as nn

    found: dict[ConvParams, dict] = {}
    handles = []

    def hook_for(name: str):
        def pre_hook(mod: Any, inputs: tuple) -> None:
            x = inputs[0]
            p = _conv_params(mod, tuple(x.shape))
            ent = found.get(p)
            if ent is None:
                ent = found[p] = {"name": name, "count": 0, "reads_model_input": False}
            ent["count"] += 1
            if x is example_input:
                ent["reads_model_input"] = True
        return pre_hook

    for name, mod in model.named_modules():
        if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            handles.append(mod.register_forward_pre_hook(hook_for(name)))
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for h in handles:
            h.remove()
    out = []
    for p, ent in found.items():
        e: dict[str, Any] = {"name": ent["name"], "count": ent["count"]}
        if ent["reads_model_input"]:
            e["passes"] = ["conv_bwd_weight"]
        e.update(p.as_dict())
        out.append(e)
    return out


def extract_model(model_fn: Any, input_shape: Sequence[int], batch: int) -> list[dict]:
    """Build ``model_fn()`` on the meta device and extract with a (batch, *input_shape) input."""
    import torch

    with torch.device("meta"):
        model = model_fn()
        x = torch.empty((batch, *input_shape))
    model.eval()
    return extract_convs(model, x)


def _torchvision() -> Any:
    try:
        import torchvision  # noqa: F401
        import torchvision.models as models
    except Exception as exc:  # ImportError, or a torchvision built for another torch
        raise ImportError(
            "extracting a torchvision model needs torchvision (pip install torchvision, the build that "
            f"matches your torch); importing it failed: {type(exc).__name__}: {exc}"
        ) from exc
    return models


def extract_torchvision(model_name: str, batch: int, input_shape: Sequence[int] | None = None) -> list[dict]:
    """Distinct conv layers of ``torchvision.models.get_model(model_name)`` at ``batch``.

    Default input: 3x16x112x112 for video models, 3x224x224 otherwise.
    """
    models = _torchvision()
    if input_shape is None:
        input_shape = (3, 16, 112, 112) if model_name in VIDEO_MODELS else (3, 224, 224)
    return extract_model(lambda: models.get_model(model_name, weights=None), input_shape, batch)


def wav2vec2_conv_layers(variant: str = "base") -> Any:
    """wav2vec 2.0's conv layers as a torch module: the 7-layer feature encoder (512 channels,
    kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2, no padding, on raw 16 kHz audio) followed by the
    grouped convolutional positional embedding (kernel 128, padding 64, 16 groups, on 768 channels for
    base / 1024 for large), exactly as in fairseq and torchaudio. Input: (N, 1, samples).
    """
    import torch.nn as nn

    dim = {"base": 768, "large": 1024}[variant]

    class W2V2Convs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            spec = [(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2
            layers, c_in = [], 1
            for k, s in spec:
                layers += [nn.Conv1d(c_in, 512, k, stride=s, bias=False), nn.GELU()]
                c_in = 512
            self.feature_extractor = nn.Sequential(*layers)
            self.feature_projection = nn.Linear(512, dim)
            self.pos_conv = nn.Conv1d(dim, dim, 128, padding=64, groups=16)

        def forward(self, x: Any) -> Any:
            f = self.feature_extractor(x)  # (N, 512, T)
            h = self.feature_projection(f.transpose(1, 2)).transpose(1, 2)
            return self.pos_conv(h)

    return W2V2Convs()


def problem_set_yaml(name: str, description: str, entries: list[dict], *, source: str = "",
                     dtypes: Sequence[str] = ("bf16", "fp16"),
                     passes: Sequence[str] = ("conv_bwd_data", "conv_bwd_weight")) -> str:
    """A problem-set file: a header, then one flow-style line per layer (diff-friendly)."""
    import yaml

    def flow(v: Any) -> str:
        return yaml.safe_dump(v, default_flow_style=True, width=10**6, sort_keys=False).strip()

    lines = [f"# {description}"]
    if source:
        lines.append(f"# generated by: {source}")
    lines += [f"name: {name}", f"description: {flow(description)}", f"dtypes: {flow(list(dtypes))}",
              f"passes: {flow(list(passes))}", "problems:"]
    for e in entries:
        lines.append(f"  - {flow(e)}")
    return "\n".join(lines) + "\n"


def write_problem_set(path: str | os.PathLike, name: str, description: str, entries: list[dict],
                      **kw: Any) -> None:
    with open(path, "w") as f:
        f.write(problem_set_yaml(name, description, entries, **kw))
