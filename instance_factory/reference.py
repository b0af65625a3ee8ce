"""float64 references for grouped conv forward, bwd data and bwd weight, any layout, with fused ops.

Built on torch's convolution in float64 (on the operands' device) through autograd, so asymmetric padding, groups,
stride and dilation all come from one well-tested path. Tests and GPU verification share these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .layouts import LayoutTriple, parse_layout
from .problem import ConvParams

__all__ = [
    "apply_fused_op_ref",
    "from_canonical",
    "ref_conv_bwd_data",
    "ref_conv_bwd_weight",
    "ref_conv_fwd",
    "rel_error",
    "result_errors",
    "to_canonical",
]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _canon_letters(tensor: str, ndim: int) -> str:
    sp = {1: "W", 2: "HW", 3: "DHW"}[ndim] if tensor != "weight" else {1: "X", 2: "YX", 3: "ZYX"}[ndim]
    return {"input": "NGC", "output": "NGK", "weight": "GKC"}[tensor] + sp


def to_canonical(t: torch.Tensor, lt: LayoutTriple, tensor: str) -> torch.Tensor:
    """Permute a tensor stored in its layout to the canonical (N,G,C,sp)/(G,K,C,sp) order."""
    src = getattr(lt, tensor)
    dst = _canon_letters(tensor, lt.ndim)
    return t.permute([src.index(ch) for ch in dst])


def from_canonical(t: torch.Tensor, lt: LayoutTriple, tensor: str) -> torch.Tensor:
    """Inverse of :func:`to_canonical`; returns a contiguous tensor in the layout's shape."""
    src = _canon_letters(tensor, lt.ndim)
    dst = getattr(lt, tensor)
    return t.permute([src.index(ch) for ch in dst]).contiguous()


def _torch_layout(x: torch.Tensor, w: torch.Tensor, p: ConvParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Canonical grouped tensors -> torch's (N, G*C, sp) and (G*K, C, sp)."""
    xt = x.reshape(p.N, p.G * p.C, *p.input)
    wt = w.reshape(p.G * p.K, p.C, *p.filter)
    return xt, wt


def _pad(xt: torch.Tensor, p: ConvParams) -> torch.Tensor:
    pads: list[int] = []
    for lp, rp in zip(reversed(p.left_pad), reversed(p.right_pad)):
        pads += [lp, rp]
    return F.pad(xt, pads)


def _fwd_canonical(x: torch.Tensor, w: torch.Tensor, p: ConvParams) -> torch.Tensor:
    xt, wt = _torch_layout(x, w, p)
    y = _CONV[p.ndim](_pad(xt, p), wt, stride=p.stride, dilation=p.dilation, groups=p.G)
    return y.reshape(p.N, p.G, p.K, *p.output)


def ref_conv_fwd(x: torch.Tensor, w: torch.Tensor, p: ConvParams, layout: str) -> torch.Tensor:
    lt = parse_layout(layout, p.ndim)
    xc = to_canonical(x.detach().double(), lt, "input")
    wc = to_canonical(w.detach().double(), lt, "weight")
    return from_canonical(_fwd_canonical(xc, wc, p), lt, "output")


def _bwd(p: ConvParams, lt: LayoutTriple, x: torch.Tensor | None, w: torch.Tensor | None,
         dy: torch.Tensor, want: str) -> torch.Tensor:
    dyc = to_canonical(dy.detach().double(), lt, "output")
    if want == "input":
        xc = torch.zeros((p.N, p.G, p.C, *p.input), dtype=torch.float64, device=dyc.device, requires_grad=True)
        wc = to_canonical(w.detach().double(), lt, "weight")  # type: ignore[union-attr]
        leaf = xc
    else:
        xc = to_canonical(x.detach().double(), lt, "input")  # type: ignore[union-attr]
        wc = torch.zeros((p.G, p.K, p.C, *p.filter), dtype=torch.float64, device=dyc.device, requires_grad=True)
        leaf = wc
    y = _fwd_canonical(xc, wc, p)
    (g,) = torch.autograd.grad(y, leaf, grad_outputs=dyc)
    return from_canonical(g, lt, want)


def apply_fused_op_ref(acc: torch.Tensor, op: Any, ds: Sequence[torch.Tensor], alpha: float,
                       beta: float, user_ref: Callable | None = None) -> torch.Tensor:
    """E = f(acc, D...) in float64. A user Triton function needs a torch twin ``user_ref``."""
    d = [t.detach().double() for t in ds]
    if op == "passthrough":
        return acc
    if op == "scale":
        return alpha * acc
    if op == "bilinear":
        return alpha * acc + beta * d[0]
    if op == "add":
        out = acc
        for t in d:
            out = out + t
        return out
    if op == "add_relu":
        return torch.clamp_min(acc + d[0], 0.0)
    if user_ref is None:
        raise ValueError("a user-written fused op needs its torch twin (user_ref=) for the reference")
    return user_ref(acc, *d)


def ref_conv_bwd_data(grad_out: torch.Tensor, weight: torch.Tensor, p: ConvParams, layout: str, *,
                      ds: Sequence[torch.Tensor] = (), op: Any = "passthrough", alpha: float = 1.0,
                      beta: float = 1.0, user_ref: Callable | None = None) -> torch.Tensor:
    """dL/dIn in float64, in the input layout, with the fused op applied."""
    lt = parse_layout(layout, p.ndim)
    acc = _bwd(p, lt, None, weight, grad_out, "input")
    return apply_fused_op_ref(acc, op, ds, alpha, beta, user_ref)


def ref_conv_bwd_weight(x: torch.Tensor, grad_out: torch.Tensor, p: ConvParams, layout: str, *,
                        ds: Sequence[torch.Tensor] = (), op: Any = "passthrough", alpha: float = 1.0,
                        beta: float = 1.0, user_ref: Callable | None = None) -> torch.Tensor:
    """dL/dW in float64, in the weight layout, with the fused op applied."""
    lt = parse_layout(layout, p.ndim)
    acc = _bwd(p, lt, x, None, grad_out, "weight")
    return apply_fused_op_ref(acc, op, ds, alpha, beta, user_ref)


def result_errors(out: torch.Tensor, ref: torch.Tensor,
                  ref_norms: tuple[float, float] | None = None) -> tuple[float, float]:
    """(||out - ref|| / ||ref||, max|out - ref| / max|ref|) in float64 on the tensors' device; NaN or
    inf anywhere in ``out`` gives (inf, inf). ``ref_norms``: the reference's (norm, max|ref|) if known
    (the tuner computes them once per problem)."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: result {tuple(out.shape)} vs reference {tuple(ref.shape)}")
    o = out.detach().to(device=ref.device, dtype=torch.float64)
    if not bool(torch.isfinite(o).all()):
        return math.inf, math.inf
    diff = o.sub_(ref) if o.data_ptr() != out.data_ptr() else o - ref
    if ref_norms is None:
        ref_norms = (float(torch.linalg.vector_norm(ref)), float(ref.abs().max()) if ref.numel() else 0.0)
    rn, rm = ref_norms
    dn = float(torch.linalg.vector_norm(diff))
    dm = float(diff.abs().max()) if diff.numel() else 0.0
    rel = (0.0 if dn == 0.0 else math.inf) if rn == 0.0 else dn / rn
    mrel = (0.0 if dm == 0.0 else math.inf) if rm == 0.0 else dm / rm
    return rel, mrel


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; NaN/inf anywhere gives inf (never passes)."""
    return result_errors(out, ref.detach().double())[0]
