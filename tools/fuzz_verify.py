"""Differential fuzzing: random conv problems, every kernel family that accepts them, against float64.

    python tools/fuzz_verify.py --seconds 600 --out /tmp/fuzz          # CPU: the Triton interpreter
    python tools/fuzz_verify.py --cases 200 --seed 7 --per-family 2    # GPU: more instances a family
    python tools/fuzz_verify.py --torch --seconds 600                   # instance_factory.torch's layers
    python tools/fuzz_verify.py --errors --cases 2000                   # bad input: a clear error, no launch

Each case draws a problem the repo's problem sets do not hold: 1D / 2D / 3D, odd channel counts,
grouped and depthwise, one-position outputs, strides over the filter, dilations,
asymmetric pads (each at most the dilated filter's extent less one, CK's rule), any of the four layout
families, a data type and a fused op with its Ds. For every kernel family with an instance that does
not decline the problem, ``--per-family`` random instances, and the one ``instance=None`` serves (the miss
policy's pick, through ``lookup``), run through ``verify.verify_instance`` (fresh
operands, a NaN-poisoned result, the normwise and worst-element checks). A family whose decline lets
through a problem it then computes wrongly, or crashes on, shows up as a FAIL row with a reproducer.

``--torch`` fuzzes what autograd users get instead: a random ``instance_factory.torch.Conv1d/2d/3d``
(groups, stride, padding as ints / tuples / "same" / "valid", dilation, bias, padding_mode, channels-last
or contiguous input, float32 / float16 / bfloat16) runs forward and backward, and its input, weight and
bias gradients are compared with torch's own convolution's in float64 on the same data, with the data
type's tolerance (the serving path: lookup and the miss policy choose every kernel).

``--errors`` breaks one thing in a valid call of the public op (``instance=None``) instead: a tensor's shape
off by one along a random axis, its rank, its dtype, a non-contiguous view, a D of the wrong shape or dtype, a
wrong number of Ds for the fused op, alpha / beta that are not numbers. Each must raise ``ValueError`` or
``TypeError`` before any launch, with a message; a call that returns, or raises anything else (an error from
inside Triton or torch), is a FAIL.

Writes fuzz.jsonl (``--torch``: fuzz_torch.jsonl, ``--errors``: fuzz_errors.jsonl; one row per run) to --out,
prints each failure as it happens and the counts last (per family in the default mode). Exit status 1 when
anything failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FAMILIES = ("nhwgc", "gnhwc", "ngchw", "ngchw_kcyx")
DATA = ("fp32", "fp16", "bf16", "fp32_tf32")
WEIGHT_ONLY_DATA = ("bf16_fp32w",)
FUSED = (("passthrough", 0), ("passthrough", 0), ("scale", 0), ("bilinear", 1), ("add", 1), ("add", 2),
         ("add_relu", 1))


def random_params(rng: random.Random, large: bool):
    """A random ConvParams with every output length >= 1 and pads within CK's bounds; ``large`` (the GPU's
    default) draws channel counts and planes past one tile of the kernels (masks, several programs)."""
    from instance_factory.problem import ConvParams

    ndim = rng.choice((1, 2, 2, 3))
    kind = rng.choice(("dense", "grouped", "depthwise"))
    if kind == "depthwise":
        g, c, k = rng.choice((3, 8, 13, 32) + ((72, 200) if large else ())), 1, 1
    elif kind == "grouped":
        g = rng.choice((2, 3, 4, 8) + ((32,) if large else ()))
        widths = (1, 2, 4, 8, 16) + ((24, 32, 40) if large else ())
        c, k = rng.choice(widths), rng.choice(widths)
        c, k = (c, c) if rng.random() < 0.6 else (c, k)
    else:
        g = 1
        c = rng.choice((1, 3, 5, 8, 16, 24, 33) + ((64, 100, 128) if large else ()))
        k = rng.choice((1, 4, 7, 8, 16, 24, 40) + ((64, 96, 160) if large else ()))
    n = rng.choice((1, 2, 3) + ((8,) if large else ()))
    sizes = {1: (5, 40), 2: (3, 12), 3: (2, 6)}[ndim] if not large else {1: (5, 300), 2: (3, 40), 3: (2, 12)}[ndim]
    flt, inp, strides, dils, lps, rps = [], [], [], [], [], []
    for _ in range(ndim):
        f = rng.choice((1, 1, 2, 3, 3, 5) + ((7,) if ndim == 1 else ()))
        s = rng.choice((1, 1, 1, 2, 2, 3))
        d = rng.choice((1, 1, 1, 2))
        extent = (f - 1) * d + 1
        lp = rng.randint(0, extent - 1)
        rp = rng.randint(0, extent - 1)
        lo = max(1, extent - lp - rp)  # at least one output position
        flt.append(f)
        inp.append(rng.randint(lo, max(lo, sizes[1])))
        strides.append(s)
        dils.append(d)
        lps.append(lp)
        rps.append(rp)
    return ConvParams(ndim, g, n, k, c, tuple(flt), tuple(inp), tuple(strides), tuple(dils), tuple(lps), tuple(rps))


def random_case(rng: random.Random, large: bool):
    from instance_factory.layouts import layout_for
    from instance_factory.verify import Case

    op = rng.choice(("conv_bwd_data", "conv_bwd_weight"))
    p = random_params(rng, large)
    dtype = rng.choice(DATA + (WEIGHT_ONLY_DATA if op == "conv_bwd_weight" else ()))
    fused, n_ds = rng.choice(FUSED)
    layout = layout_for(rng.choice(FAMILIES), p.ndim)
    return Case(op, p, layout.name, dtype, fused, n_ds)


def record(log, row: dict) -> bool:
    """One run's row into the log (flushed: a killed run keeps what it found); a failure printed at once."""
    log.write(json.dumps(row) + "\n")
    log.flush()
    if not row["passed"]:
        print(f"FAIL {json.dumps(row)}", flush=True)
    return row["passed"]


MAX_INTERPRETED_MACS = 200_000  # the interpreter's budget per layer: a few seconds a pass on a CPU core


def random_module_case(rng: random.Random, large: bool = False) -> dict:
    """Arguments of a random nn.ConvNd whose output is non-empty, and its input's shape and format; unless
    ``large``, redrawn until the forward's multiply-adds fit the interpreter's budget."""
    while True:
        case = _module_case(rng)
        macs = (case["batch"] * case["cout"] * case["cin"] // case["groups"] * math.prod(case["kernel"])
                * math.prod(case["spatial"]))
        if large or macs <= MAX_INTERPRETED_MACS:
            return case


def _module_case(rng: random.Random) -> dict:
    ndim = rng.choice((1, 2, 2, 3))
    groups = rng.choice((1, 1, 2, 3, 4))
    depthwise = groups > 1 and rng.random() < 0.3
    cin = groups * (1 if depthwise else rng.choice((1, 2, 3, 4, 8)))
    cout = groups * (rng.choice((1, 2)) if depthwise else rng.choice((1, 2, 4, 5, 8)))
    kernel = tuple(rng.choice((1, 2, 3, 3, 5)) for _ in range(ndim))
    dilation = tuple(rng.choice((1, 1, 2)) for _ in range(ndim))
    padding_kind = rng.choice(("int", "tuple", "same", "valid"))
    stride = (1,) * ndim if padding_kind == "same" else tuple(rng.choice((1, 1, 2, 3)) for _ in range(ndim))
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    if padding_kind == "int":
        padding = rng.randint(0, min(extent) // 2)
    elif padding_kind == "tuple":
        padding = tuple(rng.randint(0, e // 2) for e in extent)
    else:
        padding = padding_kind
    pads = ((padding,) * ndim if isinstance(padding, int) else padding if isinstance(padding, tuple)
            else (0,) * ndim)
    size = {1: (4, 30), 2: (3, 10), 3: (2, 6)}[ndim]
    spatial = tuple(rng.randint(max(size[0], e - 2 * p), max(size[1], e - 2 * p)) for e, p in zip(extent, pads))
    padding_mode = rng.choice(("zeros", "zeros", "zeros", "reflect", "circular")) if padding != "valid" else "zeros"
    if padding_mode == "reflect" and any(p >= s for p, s in zip(pads, spatial)):
        padding_mode = "zeros"  # torch's reflect pad needs pad < size
    if padding_mode != "zeros" and padding == "same" and any(e > s for e, s in zip(extent, spatial)):
        padding_mode = "zeros"
    return dict(ndim=ndim, cin=cin, cout=cout, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                groups=groups, bias=rng.random() < 0.7, padding_mode=padding_mode, batch=rng.choice((1, 2, 3)),
                spatial=spatial, channels_last=ndim > 1 and rng.random() < 0.5,
                dtype=rng.choice(("float32", "float16", "bfloat16")))


def run_module_case(case: dict, seed: int, device: str) -> dict:
    """Gradients of instance_factory.torch's ConvNd against torch's own in float64: relative errors by name."""
    import torch
    from torch import nn

    from instance_factory import torch as inf_torch

    dtype = getattr(torch, case["dtype"])
    gen = torch.Generator().manual_seed(seed)
    cls = {1: inf_torch.Conv1d, 2: inf_torch.Conv2d, 3: inf_torch.Conv3d}[case["ndim"]]
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"], groups=case["groups"],
              bias=case["bias"], padding_mode=case["padding_mode"])
    ours = cls(case["cin"], case["cout"], case["kernel"], **kw)
    ref = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[case["ndim"]](case["cin"], case["cout"], case["kernel"], **kw)
    x64 = torch.randn(case["batch"], case["cin"], *case["spatial"], generator=gen, dtype=torch.float64)
    with torch.no_grad():  # the data rounded to the data type once: both sides see the same operands
        w = torch.randn(ours.weight.shape, generator=gen, dtype=torch.float64).to(dtype)
        b = torch.randn(case["cout"], generator=gen, dtype=torch.float64).to(dtype) if case["bias"] else None
    x = x64.to(dtype)
    ours = ours.to(device=device, dtype=dtype)
    with torch.no_grad():
        ours.weight.copy_(w)
        if b is not None:
            ours.bias.copy_(b)
    xi = x.to(device, copy=True)
    if case["channels_last"]:
        fmt = torch.channels_last if case["ndim"] == 2 else torch.channels_last_3d
        xi = xi.contiguous(memory_format=fmt)
        ours = ours.to(memory_format=fmt)
    xi.requires_grad_(True)
    y = ours(xi)
    gy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    y.backward(gy.to(dtype).to(device))
    ref = ref.to(torch.float64)
    with torch.no_grad():
        ref.weight.copy_(w.double())
        if b is not None:
            ref.bias.copy_(b.double())
    xr = x.detach().double().requires_grad_(True)
    ref(xr).backward(gy.to(dtype).double())
    pairs = {"grad_input": (xi.grad, xr.grad), "grad_weight": (ours.weight.grad, ref.weight.grad)}
    if b is not None:
        pairs["grad_bias"] = (ours.bias.grad, ref.bias.grad)
    out = {}
    for name, (got, want) in pairs.items():
        got = got.double().cpu()
        err = float("nan") if not torch.isfinite(got).all() else float(
            (got - want).norm() / want.norm().clamp_min(1e-30))
        out[name] = err
    return out


def module_tolerance(dtype: str, device: str) -> float:
    """The tolerance of the kernels a layer's backward runs: float32 on a GPU at PyTorch's cuDNN precision (TF32
    by default, ``instance_factory.torch.precision``), true fp32 on the CPU."""
    import torch

    from instance_factory.dtypes import resolve_dtype
    from instance_factory.torch.precision import compute_dtype_for

    data = getattr(torch, dtype)
    return resolve_dtype(data, compute_dtype=compute_dtype_for(data, torch.device(device))).tolerance


def torch_main(args: argparse.Namespace, device: str, out: Path) -> int:
    rng = random.Random(args.seed)
    start = time.monotonic()
    fails, done = 0, 0
    with open(out / "fuzz_torch.jsonl", "w") as log:
        while done < args.cases and time.monotonic() - start <= args.seconds:
            done += 1
            case = random_module_case(rng, large=args.large if args.large is not None else device == "cuda")
            try:
                errs = run_module_case(case, rng.randrange(2**31), device)
                tol = module_tolerance(case["dtype"], device)
                passed = all(e <= tol for e in errs.values())  # NaN compares False
                row = dict(case, errors=errs, passed=passed, note="")
            except Exception as exc:  # a crash in the backward: the fuzzer's finding
                row = dict(case, errors={}, passed=False, note=f"{type(exc).__name__}: {exc}"[:400])
            fails += not record(log, row)
    print(f"\n{done} layers in {time.monotonic() - start:.0f} s, {fails} failed")
    return 1 if fails else 0


MUTATIONS = ("shape", "rank", "dtype", "strides", "d_shape", "d_dtype", "n_ds", "scalar")


def broken_call(case, mutation: str, rng: random.Random) -> tuple[str, object]:
    """(what was broken, a zero-argument call of the public op with it) for a valid ``case``."""
    import torch

    import instance_factory as inf
    from instance_factory.dtypes import op_kwargs
    from instance_factory.epilogue import FUSED_OPS
    from instance_factory.harness.operands import make_problem_tensors

    n_ds = case.n_ds if mutation not in ("d_shape", "d_dtype") else max(case.n_ds, 1)
    fused = case.fused_op if n_ds == case.n_ds else ("bilinear" if case.fused_op in ("passthrough", "scale")
                                                     else case.fused_op)
    t = make_problem_tensors(case.op, case.params, case.layout, case.dtype, n_ds, "cpu", rng.randrange(2**31))
    a, b, ds = t["a"], t["b"], list(t["ds"])
    kw = dict(layout=case.layout, ds=ds, op=fused, **op_kwargs(case.dtype))
    which = rng.choice(("a", "b"))
    victim = a if which == "a" else b
    what = mutation
    if mutation == "shape":
        axis = rng.randrange(victim.dim())
        shape = list(victim.shape)
        shape[axis] += rng.choice((-1, 1)) if shape[axis] > 1 else 1
        victim = torch.randn(shape).to(victim.dtype)
        what = f"{which} axis {axis} {tuple(victim.shape)}"
    elif mutation == "rank":
        victim = victim.unsqueeze(0) if rng.random() < 0.5 else victim.reshape(-1, *victim.shape[2:])
        what = f"{which} rank {victim.dim()}"
    elif mutation == "dtype":
        choices = [d for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32)
                   if d != victim.dtype]
        victim = victim.to(rng.choice(choices))
        what = f"{which} {victim.dtype}"
    elif mutation == "strides":
        dims = [i for i in range(victim.dim()) if victim.shape[i] > 1]
        if len(dims) < 2:
            return "", None  # every view of this tensor is contiguous
        i, j = rng.sample(dims, 2)
        victim = victim.transpose(i, j).contiguous().transpose(i, j)  # the same shape, other strides
        what = f"{which} strides {victim.stride()}"
    elif mutation == "d_shape":
        d = ds[0]
        axis = rng.randrange(d.dim())
        shape = list(d.shape)
        shape[axis] += 1
        ds[0] = torch.randn(shape).to(d.dtype)
        what = f"D0 axis {axis}"
    elif mutation == "d_dtype":
        ds[0] = ds[0].to(torch.float64)
        what = "D0 float64"
    elif mutation == "n_ds":
        arity = FUSED_OPS[fused]
        if arity.min_ds == 0:  # a D for an op that takes none
            kw["ds"] = ds + [torch.randn(a.shape)]
        elif arity.min_ds < arity.max_ds:  # one past the most (add)
            kw["ds"] = ds + [ds[0]] * (arity.max_ds + 1 - len(ds))
        else:  # none where it needs some
            kw["ds"] = []
        what = f"{len(kw['ds'])} Ds for {fused}"
    elif mutation == "scalar":
        kw["alpha"] = rng.choice(("2", None, [1.0], torch.ones(3)))
        what = f"alpha {kw['alpha']!r}"[:60]
    if which == "a":
        a = victim
    else:
        b = victim
    fn = inf.conv_bwd_data if case.op == "conv_bwd_data" else inf.conv_bwd_weight
    return what, lambda: fn(a, b, case.params, **kw)


def errors_main(args: argparse.Namespace, out: Path, large: bool) -> int:
    rng = random.Random(args.seed)
    start = time.monotonic()
    fails, done = 0, 0
    with open(out / "fuzz_errors.jsonl", "w") as log:
        while done < args.cases and time.monotonic() - start <= args.seconds:
            case = random_case(rng, large)
            mutation = rng.choice(MUTATIONS)
            what, call = broken_call(case, mutation, rng)
            if call is None:
                continue
            done += 1
            row = dict(op=case.op, layout=case.layout, dtype=case.dtype, fused=case.fused_op,
                       problem=case.params.key(), mutation=mutation, broken=what)
            try:
                call()
                row.update(passed=False, note="returned a result")
            except (ValueError, TypeError) as exc:
                row.update(passed=bool(str(exc).strip()), note=f"{type(exc).__name__}: {exc}"[:300])
            except Exception as exc:  # an error from inside Triton or torch, not a named check
                row.update(passed=False, note=f"{type(exc).__name__}: {exc}"[:300])
            fails += not record(log, row)
    print(f"\n{done} broken calls in {time.monotonic() - start:.0f} s, {fails} failed")
    return 1 if fails else 0


def pick_instances(runnable: list, per_family: int, rng: random.Random) -> list:
    by_alg: dict[str, list] = {}
    for inst in runnable:
        by_alg.setdefault(inst.algorithm, []).append(inst)
    return [inst for alg in sorted(by_alg) for inst in rng.sample(by_alg[alg], min(per_family, len(by_alg[alg])))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=10**9, help="stop after this many cases")
    ap.add_argument("--seconds", type=float, default=300.0, help="stop after this long (checked between runs)")
    ap.add_argument("--per-family", type=int, default=1, help="random instances per accepting family")
    ap.add_argument("--out", default=os.environ.get("OUT", "fuzz_out"))
    ap.add_argument("--large", action=argparse.BooleanOptionalAction, default=None,
                    help="channels and planes past one tile (default: on a GPU only)")
    ap.add_argument("--torch", action="store_true", help="fuzz instance_factory.torch's ConvNd layers instead")
    ap.add_argument("--errors", action="store_true", help="fuzz bad input to the public ops instead")
    args = ap.parse_args(argv)

    import torch

    on_gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
    if not on_gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    import warnings

    from instance_factory.registry import get_registry
    from instance_factory.tuning.lookup import TuningMissWarning, lookup
    from instance_factory.verify import verify_instance

    warnings.simplefilter("ignore", TuningMissWarning)  # relayout's twin lookups on a device nobody tuned

    device = "cuda" if on_gpu else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.torch:
        return torch_main(args, device, out)
    if args.errors:
        return errors_main(args, out, large=bool(args.large))
    rng = random.Random(args.seed)
    start = time.monotonic()
    fails, per_family, declined_all = 0, Counter(), 0
    with open(out / "fuzz.jsonl", "w") as log:
        n_case = 0
        while n_case < args.cases and time.monotonic() - start <= args.seconds:
            n_case += 1
            case = random_case(rng, large=args.large if args.large is not None else on_gpu)
            runnable, declined = get_registry().candidates(case.op, case.params, case.layout, case.dtype,
                                                           case.fused_op)
            if not runnable:
                declined_all += 1
                continue
            served = lookup(case.op, case.params, layout=case.layout, dtype=case.dtype, fused_op=case.fused_op,
                            device=device)  # what instance=None runs: the miss policy's pick
            for inst in [served, *pick_instances(runnable, args.per_family, rng)]:
                if time.monotonic() - start > args.seconds:
                    break
                try:
                    res = verify_instance(inst, case, device, seed=rng.randrange(2**31))
                    row = dict(error=res.error, max_error=res.max_error, passed=res.passed, note="")
                except Exception as exc:  # a crash inside a kernel or its launcher: the fuzzer's finding
                    row = dict(error=None, max_error=None, passed=False, note=f"{type(exc).__name__}: {exc}"[:400])
                row.update(case=n_case, op=case.op, layout=case.layout, dtype=case.dtype, fused=case.fused_op,
                           n_ds=case.n_ds, problem=case.params.key(), instance=inst.name, algorithm=inst.algorithm)
                per_family[(inst.algorithm, row["passed"])] += 1
                fails += not record(log, row)
    print(f"\n{n_case} cases in {time.monotonic() - start:.0f} s ({declined_all} with no runnable instance)")
    print(f"{'family':16s} {'pass':>6s} {'fail':>6s}")
    for alg in sorted({a for a, _ in per_family}):
        print(f"{alg:16s} {per_family[(alg, True)]:6d} {per_family[(alg, False)]:6d}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
