"""The kernel families ("algorithms") an instance can name, and what each must provide.

A kernel module registers one ``Algorithm`` per family: the ordered tile/pipeline parameters its
instances carry, a check that culls impossible configs at expansion time, a check that says why an
instance declines a problem, and ``bind``: given one problem's RunArgs it does all the per-problem
host work once (grid, scalars, tables, constexprs) and returns a ``Runner`` that fills a
preallocated result from the per-call tensors. The public ops cache runners per problem plan, so a
repeated call costs only the tensor checks, the allocation and the launches. The factory, the
registry, the public ops and the tuner only talk to kernels through this table.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .dtypes import DataType
from .epilogue import FusedOp
from .geometry import ConvGeometry
from .layouts import LayoutTriple
from .problem import ConvParams

__all__ = ["ALGORITHMS", "Algorithm", "RunArgs", "Runner", "interpreting", "register_algorithm"]


def interpreting() -> bool:
    """True when Triton runs in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass
class RunArgs:
    """Everything a launcher needs; the public op has already checked every field."""

    params: ConvParams
    layout: LayoutTriple
    dtype: DataType
    fused: FusedOp
    user_fn: Any  # @triton.jit function for fused.name == "custom", else None
    alpha: float
    beta: float
    a: torch.Tensor  # bwd data: grad_out; bwd weight: input
    b: torch.Tensor  # bwd data: weight;   bwd weight: grad_out
    ds: tuple[torch.Tensor, ...]
    out: torch.Tensor  # preallocated result (grad_in or grad_wei) in its final dtype
    cfg: dict[str, Any]  # the instance's tile/pipeline parameters
    geo: ConvGeometry | None = None  # built from params and layout when not given

    def __post_init__(self) -> None:
        if self.geo is None:
            self.geo = ConvGeometry.build(self.params, self.layout)


DeclineFn = Callable[[dict, ConvParams, LayoutTriple, DataType, FusedOp], "str | None"]
# run(a, b, out, ds, alpha, beta): same shapes, dtypes and device as the RunArgs it was bound to
Runner = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, tuple, float, float], None]


@dataclass(frozen=True)
class Algorithm:
    op: str  # "conv_bwd_data" | "conv_bwd_weight"
    name: str  # e.g. "igemm", "splitk_atomic", "direct"
    param_names: tuple[str, ...]  # the order in which instance names encode the parameters
    check_config: Callable[[dict], str | None]  # impossible tile -> reason (expansion-time cull)
    decline: DeclineFn  # problem this instance cannot run -> reason
    bind: Callable[[RunArgs], Runner]
    description: str = ""
    # the @triton.jit kernels ``bind`` launches: the instances' kernel_hash covers their code and
    # whatever jit code they call, not host code (kernel_identity.py)
    kernels: tuple[Any, ...] = ()

    def launch(self, args: RunArgs) -> None:
        """Bind and run once (verification, tests); hot paths keep the runner from ``bind``."""
        self.bind(args)(args.a, args.b, args.out, tuple(args.ds), float(args.alpha), float(args.beta))


ALGORITHMS: dict[tuple[str, str], Algorithm] = {}

def register_algorithm(alg: Algorithm) -> Algorithm:
    ALGORITHMS[(alg.op, alg.name)] = alg
    return alg
