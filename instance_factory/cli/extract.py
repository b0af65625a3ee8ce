"""``instance-factory extract``: a problem set from a torchvision model (or wav2vec2).

    instance-factory extract resnet50 --batch 128 -o configs/problem_sets/resnet50.yaml
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("extract", help="write a problem set from a torchvision model (or wav2vec2)")
    p.add_argument("model", help="torchvision model name (resnet50, mobilenet_v2, r3d_18, ...) or wav2vec2")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--input", help="input shape without batch, e.g. 3x224x224 (default by model)")
    p.add_argument("--name", help="problem set name (default: the model)")
    p.add_argument("--description")
    p.add_argument("-o", "--output", help="YAML file to write (default: stdout)")
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from ..tuning.extract import extract_model, extract_torchvision, wav2vec2_conv_layers, write_problem_set

    shape = tuple(int(v) for v in ns.input.split("x")) if ns.input else None
    if ns.model in ("wav2vec2", "wav2vec2_base", "wav2vec2_large"):
        variant = "large" if ns.model.endswith("large") else "base"
        entries = extract_model(lambda: wav2vec2_conv_layers(variant), shape or (1, 250000), ns.batch)
    else:
        entries = extract_torchvision(ns.model, ns.batch, shape)
    name = ns.name or ns.model
    desc = ns.description or f"{ns.model}: every distinct conv layer, batch {ns.batch}"
    src = " ".join(["instance-factory extract", ns.model, "--batch", str(ns.batch)] +
                   (["--input", ns.input] if ns.input else []))
    if ns.output:
        write_problem_set(ns.output, name, desc, entries, source=src)
        print(f"wrote {len(entries)} distinct conv layers ({sum(e['count'] for e in entries)} in the model) "
              f"to {ns.output}")
    else:
        from ..tuning.extract import problem_set_yaml

        sys.stdout.write(problem_set_yaml(name, desc, entries, source=src))
    return 0
