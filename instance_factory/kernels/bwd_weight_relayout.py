"""conv_bwd_weight for channels-first layouts (NGCW / NGCHW / NGCDHW) through a channels-last copy.

The wgrad GEMM reduces over positions and tiles over channels; with channels-first tensors a tile's
channel loads are one element wide (the channel stride is the plane size), and the H100 rows of
session 16 measured the pointer GEMMs there at 0.06-0.3x cuDNN on dense 3x3 layers, while the same
layers channels-last run at ~1x. ``relayout`` copies input and grad_out once into the channels-last
twin layout (NHWGC with the same weight layout GKYXC; a GKCYX weight and its D tensors go through a
small GKYXC buffer) and runs the instance that ``lookup`` serves for the twin problem (its tuned row,
else the miss policy). The copies (``layout_copy``'s batched transpose: an NGCHW tensor is N
matrices [G*C, H*W]) cost two reads and two writes of the activations; on large dense layers that is
far less than the channels-first GEMM loses.

Its kernel hash covers the transpose and every bwd-weight kernel that can serve the twin, so a change
to any of them stales relayout's rows too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..algorithms import ALGORITHMS, Algorithm, RunArgs, Runner, register_algorithm
from ..dtypes import DataType
from ..epilogue import FusedOp
from ..kernel_config import KernelConfig
from ..layouts import LayoutTriple, layout_for
from ..problem import ConvParams
from . import import_kernel_modules
from .layout_copy import KERNELS as COPY_KERNELS
from .layout_copy import transpose_copier

__all__ = ["ALGORITHM", "RelayoutConfig", "bind", "decline", "set_twin_resolver", "twin_layout"]

OP_NAME = "conv_bwd_weight"
_INNER = ("lookup",)


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
    return layout_for("nhwgc", layout.ndim)


def _perm(src: str, dst: str) -> tuple[int, ...]:
    """The permute() that turns a tensor of axes ``src`` (e.g. NGCHW) into axes ``dst`` (NHWGC)."""
    return tuple(src.index(axis) for axis in dst)


def decline(cfg: RelayoutConfig, params: ConvParams, layout: LayoutTriple, dtype: DataType,
            fused: FusedOp) -> str | None:
    """None when this instance can run the problem, else a clear reason. The twin (NHWGC, GKYXC) is
    declared for every dtype and fused op, and the pointer GEMMs run any of its problems."""
    if layout.channels_last:
        return (f"relayout copies channels-first tensors to channels-last; {layout.name} is channels-last "
                "already (its own instances run it)")
    return None


# The run-time layer (tuning.lookup) sets how the twin's instance is chosen: kernels sit below it.
_TWIN_RESOLVER: list = []


def set_twin_resolver(resolve) -> None:
    """``resolve(op, params, layout=, dtype=, fused_op=, device=)`` -> the twin problem's Instance."""
    _TWIN_RESOLVER[:] = [resolve]


def bind(args: RunArgs) -> Runner:
    """Choose the twin problem's instance once and bind it to twin-shaped tensors; the runner copies
    input and grad_out to channels-last on every call and runs it."""
    if not _TWIN_RESOLVER:
        raise RuntimeError("bwd-weight relayout needs instance_factory.tuning.lookup imported (it chooses the "
                           "channels-last twin's instance)")
    p, lt, dt = args.params, args.layout, args.dtype
    why = decline(args.cfg, p, lt, dt, args.fused)
    if why is not None:
        raise ValueError(f"bwd-weight relayout instance cannot run {p.key()}: {why}")
    twin = twin_layout(lt)
    inst = _TWIN_RESOLVER[0](OP_NAME, p, layout=twin, dtype=dt, fused_op=args.fused.name, device=args.a.device)
    spatial_in, spatial_out = math.prod(p.input), math.prod(p.output)
    copy_x = transpose_copier(p.N, p.G * p.C, spatial_in)  # NGC{spatial} -> N{spatial}GC
    copy_dy = transpose_copier(p.N, p.G * p.K, spatial_out)
    same_weight = lt.weight == twin.weight
    w_perm, w_back = _perm(lt.weight, twin.weight), _perm(twin.weight, lt.weight)

    w_layout_shape = lt.shape("weight", p)  # callers may pass the weight with G folded (torch's [G*K, C, ...])

    def like(t: torch.Tensor, perm: tuple[int, ...]) -> torch.Tensor:
        return t.reshape(w_layout_shape).permute(perm).contiguous()

    def twin_empty(tensor: str, like_t: torch.Tensor) -> torch.Tensor:  # the inner bind reads shapes only
        return torch.empty(twin.shape(tensor, p), dtype=like_t.dtype, device=like_t.device)

    x0, dy0 = twin_empty("input", args.a), twin_empty("output", args.b)
    out0 = args.out if same_weight else twin_empty("weight", args.out)
    x_shape, dy_shape, w_shape = x0.shape, dy0.shape, out0.shape
    ds0 = tuple(args.ds) if same_weight else tuple(twin_empty("weight", d) for d in args.ds)
    inner = inst.alg.bind(RunArgs(params=p, layout=twin, dtype=dt, fused=args.fused, user_fn=args.user_fn,
                                  alpha=args.alpha, beta=args.beta, a=x0, b=dy0, ds=ds0, out=out0,
                                  cfg=inst.kernel_config))

    def run(x: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, ds: tuple, alpha: float, beta: float) -> None:
        xc = torch.empty(x_shape, dtype=x.dtype, device=x.device)  # per call: the runner holds no buffers
        dyc = torch.empty(dy_shape, dtype=dy.dtype, device=dy.device)
        copy_x(x, xc)
        copy_dy(dy, dyc)
        if same_weight:
            inner(xc, dyc, out, ds, alpha, beta)
            return
        buf = torch.empty(w_shape, dtype=out.dtype, device=out.device)
        inner(xc, dyc, buf, tuple(like(d, w_perm) for d in ds), alpha, beta)
        out.view(w_layout_shape).copy_(buf.permute(w_back))

    run.inner_instance = inst.name  # which channels-last instance serves (reports, tests)
    return run


# families that decline every channels-last problem never serve the twin: their changes leave
# relayout's rows alone
CHANNELS_FIRST_ONLY = ("cfirst",)

# every other bwd-weight kernel can serve the twin: their modules first (factory imports this one last)
import_kernel_modules()

ALGORITHM = register_algorithm(Algorithm(
    op=OP_NAME, name="relayout", config=RelayoutConfig, decline=decline, bind=bind,
    description="channels-first bwd weight through channels-last copies of input and grad_out, run by the "
                "instance lookup serves for the channels-last twin problem",
    kernels=(*COPY_KERNELS, *dict.fromkeys(k for (op, name), alg in list(ALGORITHMS.items())
                                           if op == OP_NAME and name not in CHANNELS_FIRST_ONLY
                                           for k in alg.kernels))))
