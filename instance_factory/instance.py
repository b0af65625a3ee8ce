"""Instances: one kernel algorithm + one tile/pipeline config + one supported combination.

The procedural name encodes every parameter and is the registry key and the filter target, e.g.
``conv_bwd_data-igemm-NHWGC_GKYXC_NHWGK-fp16-passthrough-m128_n128_k32_gm8_w4_s3_default``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .algorithms import ALGORITHMS, Algorithm
from .dtypes import DATA_TYPES, DataType
from .epilogue import FUSED_OPS
from .kernel_config import KernelConfig
from .kernel_identity import kernel_code_hash
from .layouts import LayoutTriple, layout_for, parse_layout
from .problem import ConvParams

__all__ = ["PARAM_ABBREVIATIONS", "Instance", "config_tag"]

# One place for the short forms used in names; a value with no abbreviation is written bare.
PARAM_ABBREVIATIONS: dict[str, str] = {
    "block_m": "m",
    "block_n": "n",
    "block_k": "k",
    "group_m": "gm",
    "num_warps": "w",
    "num_stages": "s",
    "split_k": "sk",
    "block_w": "bw",
    "block_h": "bh",
    "block_p": "p",
    "block_ch": "ch",
    "split": "sp",
    "block_t": "t",
    "prefetch": "pf",
    "block_r": "r",
    "block_fy": "fy",
    "block_x": "x",
    "unroll": "u",
    "spec": "",
    "schedule": "",
    "inner": "",
    "mma_rows": "mr",
    "taps_x": "tx",
    "taps_y": "ty",
    "dy_read": "",
    "row_stages": "rs",
    "waves": "wv",
    "rows": "rows",
}
# the value 0 of these parameters means "chosen by the launcher" / "all": written as a word
_ZERO_WORDS = {"split_k": "auto", "split": "auto", "block_t": "all", "block_x": "auto", "unroll": "auto",
               "taps_x": "all"}


def config_tag(alg: Algorithm, cfg: dict[str, Any]) -> str:
    """``m128_n128_k32_gm8_w4_s3_default``: every parameter, in the algorithm's declared order."""
    parts = []
    for p in alg.param_names:
        v = cfg[p]
        parts.append(f"{PARAM_ABBREVIATIONS.get(p, p)}{_ZERO_WORDS[p] if p in _ZERO_WORDS and v == 0 else v}")
    return "_".join(parts)


@functools.cache
def _layout_tag(layout_family: str, ndim: int) -> str:
    return layout_for(layout_family, ndim).name.replace("/", "_")


@functools.cache
def _config_tag_cached(op: str, algorithm: str, config: tuple[tuple[str, Any], ...]) -> str:
    # tens of thousands of instances share a few dozen configs: build each tag once
    return config_tag(ALGORITHMS[(op, algorithm)], dict(config))


@dataclass(frozen=True)
class Instance:
    op: str
    algorithm: str
    layout_family: str  # layout family, e.g. "nhwgc"
    ndim: int
    dtype: str  # DataType name
    fused_op: str
    config: tuple[tuple[str, Any], ...]  # (param, value) in the algorithm's declared order
    source: str = ""  # the YAML file and entry it came from

    @functools.cached_property
    def cfg(self) -> dict[str, Any]:
        """The tile/pipeline parameters as a plain dict (shared: treat as read-only): what the
        database rows store and the CLI prints."""
        return dict(self.config)

    @functools.cached_property
    def kernel_config(self) -> KernelConfig:
        """The same parameters as the algorithm's frozen config dataclass: what ``bind`` (through
        ``RunArgs.cfg``) and ``decline`` read."""
        return self.alg.config.from_values(self.cfg)

    @property
    def alg(self) -> Algorithm:
        return ALGORITHMS[(self.op, self.algorithm)]

    @property
    def layout(self) -> LayoutTriple:
        return layout_for(self.layout_family, self.ndim)

    @property
    def data_type(self) -> DataType:
        return DATA_TYPES[self.dtype]

    @functools.cached_property
    def name(self) -> str:
        return (f"{self.op}-{self.algorithm}-{_layout_tag(self.layout_family, self.ndim)}-{self.dtype}-{self.fused_op}-"
                f"{_config_tag_cached(self.op, self.algorithm, self.config)}")

    @functools.cached_property
    def kernel_hash(self) -> str:
        """Hash of the algorithm's kernel code (:func:`~instance_factory.kernel_identity.kernel_code_hash`)
        and this config: a tuned row or a verification is stale when it changes."""
        blob = json.dumps([kernel_code_hash(self.alg.kernels), self.op, self.algorithm, self.config],
                          default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def combination(self) -> tuple[str, str, str, int, str]:
        return (self.op, self.layout_family, self.dtype, self.ndim, self.fused_op)

    def decline(self, params: ConvParams, layout: str | LayoutTriple | None = None,
                dtype: str | DataType | None = None, fused_op: str | None = None) -> str | None:
        """None when this instance can run the problem, else the reason it declines."""
        lt = self.layout if layout is None else parse_layout(layout)
        if params.ndim != self.ndim:
            return f"instance is for {self.ndim}D problems, the problem is {params.ndim}D"
        if lt.layout_family != self.layout_family:
            return f"instance is for layout {self.layout.name}, the problem uses {lt.name}"
        dname = self.dtype if dtype is None else (dtype if isinstance(dtype, str) else dtype.name)
        if dname != self.dtype:
            return f"instance is for data type {self.dtype}, the problem is {dname}"
        if fused_op is not None and fused_op != self.fused_op:
            return f"instance fuses {self.fused_op!r}, the call asks for {fused_op!r}"
        return self.alg.decline(self.kernel_config, params, lt, self.data_type, FUSED_OPS[self.fused_op])

    def __repr__(self) -> str:
        return f"Instance({self.name})"
