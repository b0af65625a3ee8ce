"""The kernel families ("algorithms") an instance can name, and what each must provide.

A kernel module registers one ``Algorithm`` per family: its ``config`` class (a frozen dataclass of
the tile/pipeline parameters its instances carry, in order, whose ``check`` culls impossible configs
at expansion time: kernel_config.py), a check that says why an instance declines a problem, and
``bind``: given one problem's RunArgs it does all the per-problem host work once (grid, scalars,
tables, constexprs) and returns a ``Runner`` that fills a preallocated result from the per-call
tensors. The public ops cache runners per problem plan, so a repeated call costs only the tensor
checks, the allocation and the launches. The factory, the registry, the public ops and the tuner
only talk to kernels through this table.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from .dtypes import DataType
from .epilogue import FusedOp
from .geometry import ConvGeometry
from .kernel_config import KernelConfig
from .layouts import LayoutTriple
from .problem import ConvParams

__all__ = ["ALGORITHMS", "Algorithm", "RunArgs", "Runner", "interpreting", "register_algorithm"]


def require_runnable(why: str | None, label: str, params: Any) -> None:
    """The bind-time error of an instance whose decline gave ``why`` (None: it can run the problem)."""
    if why is not None:
        raise ValueError(f"{label} instance cannot run {params.key()}: {why}")


def interpreting() -> bool:
    """True when Triton runs in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_GPU_EMULATED: ContextVar[bool] = ContextVar("gpu_emulated", default=False)


def gpu_emulated() -> bool:
    """True inside :func:`emulating_gpu`: lookups choose as on a GPU (``tuning.database.emulated``), so a
    family that cannot launch in the interpreter (Gluon's bdring) still counts as a candidate."""
    return _GPU_EMULATED.get()


@contextmanager
def emulating_gpu() -> Iterator[None]:
    """Inside, :func:`gpu_emulated` is True (this thread / task only)."""
    token = _GPU_EMULATED.set(True)
    try:
        yield
    finally:
        _GPU_EMULATED.reset(token)


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
    cfg: KernelConfig  # the instance's tile/pipeline parameters (Instance.kernel_config)
    geo: ConvGeometry | None = None  # built from params and layout when not given

    def __post_init__(self) -> None:
        if not isinstance(self.cfg, KernelConfig):  # a plain dict: build it with alg.config.from_values
            raise TypeError(f"RunArgs.cfg must be the algorithm's KernelConfig (alg.config.from_values(...)), "
                            f"not {type(self.cfg).__name__}")
        if self.geo is None:
            self.geo = ConvGeometry.build(self.params, self.layout)


DeclineFn = Callable[[KernelConfig, ConvParams, LayoutTriple, DataType, FusedOp], "str | None"]
# run(a, b, out, ds, alpha, beta): same shapes, dtypes and device as the RunArgs it was bound to
Runner = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, tuple, float, float], None]


@dataclass(frozen=True)
class Algorithm:
    """One algorithm of one op, as its kernel module registers it.

    ``config`` is the algorithm's :class:`~instance_factory.kernel_config.KernelConfig` subclass;
    ``param_names`` and ``check_config`` (a mapping or config -> None, or why it is an impossible
    tile) follow from it.
    """

    op: str  # "conv_bwd_data" | "conv_bwd_weight"
    name: str  # e.g. "igemm", "splitk_atomic", "direct"
    config: type[KernelConfig]  # the parameters (in the order instance names encode them) and their checks
    decline: DeclineFn  # (config, problem...) this instance cannot run -> reason
    bind: Callable[[RunArgs], Runner]
    description: str = ""
    # the @triton.jit kernels ``bind`` launches: the instances' kernel_hash covers their code and
    # whatever jit code they call, not host code (kernel_identity.py)
    kernels: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.config, type) and issubclass(self.config, KernelConfig)):
            raise TypeError(f"algorithm {self.op}/{self.name}: config must be a KernelConfig subclass, "
                            f"not {self.config!r}")

    @property
    def param_names(self) -> tuple[str, ...]:
        """The parameters, in the order instance names encode them."""
        return self.config.param_names()

    @property
    def check_config(self) -> Callable[[Mapping[str, Any]], str | None]:
        """None when a mapping (or config) sets every parameter and makes a possible tile, else why
        not (the expansion-time cull)."""
        return self.config.validate

    def launch(self, args: RunArgs) -> None:
        """Bind and run once (verification, tests); hot paths keep the runner from ``bind``."""
        self.bind(args)(args.a, args.b, args.out, tuple(args.ds), float(args.alpha), float(args.beta))


ALGORITHMS: dict[tuple[str, str], Algorithm] = {}

def register_algorithm(alg: Algorithm) -> Algorithm:
    ALGORITHMS[(alg.op, alg.name)] = alg
    return alg
