"""Channels-first (NGCW / NGCHW / NGCDHW) and group-major (GNWC / GNHWC / GNDHWC) layouts through
channels-last copies, for both passes.

A GEMM that tiles channels meets one-element-wide channel loads in channels-first tensors (the
channel stride is a whole plane): the H100 rows of sessions 16-17 measured the pointer GEMMs there
at 0.06-0.3x cuDNN on dense 3x3 wgrad and 1.2-3x slower than their channels-last twins on dgrad.
``relayout`` copies the activation operands once into the channels-last twin layout (NHWGC with
the weight layout GKYXC; a GKCYX weight, and D tensors of the weight's shape, through a GKYXC buffer)
and runs the instance that ``lookup`` serves for the twin problem (its tuned row, else the miss
policy); a result in a channels-first activation layout (bwd data's grad_in) is computed in a twin
buffer and copied back. The copies are ``layout_copy``'s batched transpose: an NGC{spatial}
tensor is N matrices [G*C, prod(spatial)]; they cost a read and a write of each activation tensor,
far less than the channels-first GEMM loses on large dense layers.

Group-major tensors hold each group's few channels contiguously and the groups a whole [N, spatial, C]
block apart, so the kernels for few channels per group (depthwise, grouped) read 2-32 bytes a
position there (session 35, H100: depthwise wgrad 0.55x cuDNN, grouped 0.66x, against 3.9x / 1.2x
in NGCHW through relayout). Their twin is the same NHWGC problem: a GN{spatial}C activation is one
[G, N*S] matrix of C-vectors, transposed with the vectors kept whole (``vector_transpose_copier``);
the GKYXC weight needs no copy.

Per pass, the operands' roles: bwd weight reads input (a) and grad_out (b) and writes grad_wei
(weight-shaped D tensors); bwd data reads grad_out (a) and the weight (b) and writes grad_in
(input-shaped D tensors). The kernel hash of each pass's relayout covers the transpose and every
kernel of that pass that can serve the twin, so a change to any of them stales its rows too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..algorithms import ALGORITHMS, Algorithm, RunArgs, Runner, register_algorithm, require_runnable
from ..dtypes import DataType
from ..epilogue import FusedOp
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple, channels_last_twin
from ..problem import ConvParams
from . import import_kernel_modules
from .layout_copy import KERNELS as COPY_KERNELS
from .layout_copy import transpose_copier, vector_transpose_copier
from .twin import twin_checker, twin_resolver

__all__ = ["CHANNELS_FIRST_ONLY", "RelayoutConfig", "bind", "decline", "twin_layout"]

_INNER = ("lookup",)
# per pass: the tensors a (first operand), b (second operand) and the result (and its Ds) are
ROLES = {"conv_bwd_weight": ("input", "output", "weight"), "conv_bwd_data": ("output", "weight", "input")}


@dataclass(frozen=True)
class RelayoutConfig(KernelConfig):
    """inner: how the channels-last instance is chosen ("lookup": the tuned row of the twin problem,
    else the miss policy)."""

    inner: str

    def check(self) -> str | None:
        if self.inner not in _INNER:
            return f"inner={self.inner!r} must be one of {', '.join(_INNER)}"
        return None


def twin_layout(layout: LayoutTriple) -> LayoutTriple:
    """The channels-last layout with the same weight axes order where one exists (GKYXC)."""
    return channels_last_twin(layout.ndim)


def decline(cfg: RelayoutConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp, op: str | None = None) -> str | None:
    """None when this instance can run the problem, else a clear reason. The twin (NHWGC, GKYXC) is
    declared for every dtype and fused op, but some of its problems no instance runs (fp8 compute on
    a few channels): with ``op`` given, the registry's checker (``twin_checker``) is asked."""
    if layout.layout_family == "nhwgc":
        return (f"relayout copies channels-first and group-major tensors to channels-last; {layout.name} is "
                "channels-last already (its own instances run it)")
    if layout.layout_family == "gnhwc" and params.G == 1:
        return (f"with one group {layout.name} holds the same memory as the channels-last layout: its own "
                "instances run it without copies")
    check = twin_checker() if op is not None else None
    if check is not None:
        twin = twin_layout(layout)
        why = check(op, params, twin, dtype.name, fused.name)
        if why is not None:
            return f"relayout runs the channels-last twin ({twin.name}), which no instance can run: {why}"
    return None


Copy = Callable[[torch.Tensor, torch.Tensor], None]


def _copiers(tensor: str, p: ConvParams, lt: LayoutTriple, twin: LayoutTriple) -> tuple[Copy, Copy] | None:
    """(to the twin layout, back) for one tensor, or None where both layouts hold it alike."""
    if tensor == "weight":  # GKC{taps} <-> GK{taps}C: G*K matrices [C, taps]
        if lt.weight == twin.weight:
            return None
        rows, cols, batch = p.C, math.prod(p.filter), p.G * p.K
        return transpose_copier(batch, rows, cols), transpose_copier(batch, cols, rows)
    channels = p.C if tensor == "input" else p.K
    positions = math.prod(getattr(p, tensor))
    if lt.layout_family == "gnhwc":  # GN{spatial}C <-> N{spatial}GC: one matrix [G, N*S] of C-vectors
        rows, cols = p.G, p.N * positions
        return vector_transpose_copier(1, rows, cols, channels), vector_transpose_copier(1, cols, rows, channels)
    # NGC{spatial} <-> N{spatial}GC: N matrices [G*C, prod(spatial)]
    rows, cols, batch = p.G * channels, positions, p.N
    return transpose_copier(batch, rows, cols), transpose_copier(batch, cols, rows)


def bind(args: RunArgs, op: str) -> Runner:
    """Choose the twin problem's instance once and bind it to twin-shaped tensors; the runner copies
    the channels-first operands to channels-last on every call, runs it, and copies the result back
    where its layouts differ."""
    resolve = twin_resolver()  # the run-time layer (tuning.lookup) sets it: kernels sit below it
    if resolve is None:
        raise RuntimeError("relayout needs instance_factory.tuning.lookup imported (it chooses the channels-last "
                           "twin's instance)")
    p, lt, dt = args.params, args.layout, args.dtype
    require_runnable(decline(args.cfg, p, lt, dt, args.fused, op), f"{op} relayout", p)
    twin = twin_layout(lt)
    inst = resolve(op, p, layout=twin, dtype=dt, fused_op=args.fused.name, device=args.a.device)
    copy_a, copy_b, copy_out = (_copiers(t, p, lt, twin) for t in ROLES[op])
    shape_a, shape_b, shape_out = (twin.shape(t, p) for t in ROLES[op])

    def twin_empty(t: torch.Tensor, copiers: tuple[Copy, Copy] | None, shape: tuple[int, ...]) -> torch.Tensor:
        """``t`` itself where both layouts hold it alike, else a new twin-shaped buffer (the runner holds none)."""
        return t if copiers is None else torch.empty(shape, dtype=t.dtype, device=t.device)

    def to_twin(t: torch.Tensor, copiers: tuple[Copy, Copy] | None, shape: tuple[int, ...]) -> torch.Tensor:
        buf = twin_empty(t, copiers, shape)
        if copiers is not None:
            copiers[0](t, buf)
        return buf

    inner = inst.alg.bind(RunArgs(
        params=p, layout=twin, dtype=dt, fused=args.fused, user_fn=args.user_fn, alpha=args.alpha, beta=args.beta,
        a=twin_empty(args.a, copy_a, shape_a), b=twin_empty(args.b, copy_b, shape_b),
        ds=tuple(twin_empty(d, copy_out, shape_out) for d in args.ds), out=twin_empty(args.out, copy_out, shape_out),
        cfg=inst.kernel_config))

    def run(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        a2, b2 = to_twin(a, copy_a, shape_a), to_twin(b, copy_b, shape_b)
        ds2 = tuple(to_twin(d, copy_out, shape_out) for d in ds)
        buf = twin_empty(out, copy_out, shape_out)
        inner(a2, b2, buf, ds2, alpha, beta)
        if copy_out is not None:
            copy_out[1](buf, out)

    run.inner_instance = inst.name  # which channels-last instance serves (reports, tests)
    return run


# families that decline every channels-last problem never serve the twin: their changes leave
# relayout's rows alone
CHANNELS_FIRST_ONLY = ("cfirst", "dwplane")

# every other kernel of a pass can serve its twin: their modules first (factory imports this one last)
import_kernel_modules()


def _package_kernel(kernel: object) -> bool:
    """A kernel of this package: a family registered from elsewhere (a plug-in, a test's stand-in)
    before this module loads must not enter relayout's kernel set, or relayout's hash, and with it
    every relayout row, would depend on import order."""
    return getattr(getattr(kernel, "fn", None), "__module__", "").startswith(__name__.rsplit(".", 1)[0] + ".")


def _register(op: str, description: str) -> None:
    served = dict.fromkeys(k for (alg_op, name), alg in list(ALGORITHMS.items())
                           if alg_op == op and name not in CHANNELS_FIRST_ONLY and name != "relayout"
                           for k in alg.kernels if _package_kernel(k))
    register_algorithm(Algorithm(
        op=op, name="relayout", config=RelayoutConfig, bind=lambda args: bind(args, op),
        decline=lambda cfg, params, layout, dtype, fused: decline(cfg, params, layout, dtype, fused, op),
        description=description, kernels=(*COPY_KERNELS, *served)))


_register("conv_bwd_weight", "channels-first bwd weight through channels-last copies of input and grad_out, run by "
          "the instance lookup serves for the channels-last twin")
_register("conv_bwd_data", "channels-first bwd data through a channels-last copy of grad_out, run by the instance "
          "lookup serves for the channels-last twin, grad_in copied back")
