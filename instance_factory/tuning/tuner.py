"""The tuner: verify every runnable instance of a problem against float64, time the correct ones and
cuDNN in the same run, and store one row per (problem, instance) in the tuning database.

Per problem:

1. candidates = ``registry.candidates(op, params, layout, dtype, fused_op)`` (optionally narrowed by
   name patterns), minus those already in the database for this device/software/kernel hash
   (resume), unless ``force``;
2. random operands (seeded, never all zero) and the float64 reference
   (:mod:`instance_factory.reference`, computed on the operands' device);
3. GPU only: compile every candidate in parallel (a thread pool; Triton releases the GIL while it
   compiles) by running it once; a build error or a resource overflow becomes a row, not a crash;
4. verify each candidate before timing it: the result buffer is poisoned with NaN, the instance
   runs through the public checks (``ops.prepare``), and ``||out - ref|| / ||ref||`` must be within
   ``DATA_TYPES[dtype].tolerance``; a wrong or crashing instance is stored as ``failed`` and never
   chosen;
5. time the verified ones through the public op call (result allocation, workspace zeroing and the
   split-K reduce included): on a GPU ``triton.testing.do_bench`` (warm-up, L2 flushed between
   runs), first briefly for all, then again at full length for the ``refine_top`` fastest; on the
   CPU interpreter the median of a few ``time.perf_counter`` runs (the numbers only exercise the
   pipeline);
6. time torch's own convolution backward in the same run (cuDNN with ``cudnn.benchmark`` on and
   channels-last tensors for a channels-last layout; on the CPU, torch's CPU kernel, marked so);
7. write the rows (merge-on-write under the file lock) after each problem, so a killed sweep
   resumes where it stopped.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .database import (
    CPU_DEVICE,
    DeviceInfo,
    TuningDB,
    current_device,
    current_software,
    instance_params_json,
    now_utc,
    problem_fields,
    registry_kernel_hashes,
    user_db_path,
    valid_rows,
)
from .problems import Problem

__all__ = [
    "FatalDeviceError",
    "TuneOptions",
    "Progress",
    "candidates_for",
    "resolve_db",
    "tune",
    "tune_problem",
]


class FatalDeviceError(RuntimeError):
    """The GPU is in an error state (e.g. an illegal memory access): the process must restart."""


@dataclass
class TuneOptions:
    """How a problem is tuned. The GPU defaults keep a ResNet-50 pass in minutes on one H100/H200."""

    instances: str | Sequence[str] | None = None  # name globs / substrings to keep (None: all)
    max_instances: int | None = None  # keep at most this many candidates per problem (spread out)
    warmup_ms: float = 10.0  # do_bench warm-up of the full-length timing
    rep_ms: float = 60.0  # do_bench repetition time of the full-length timing
    quick_rep_ms: float = 8.0  # first, short timing of every verified candidate
    refine_top: int = 6  # this many fastest get the full-length timing (0: everyone)
    cpu_reps: int = 3  # interpreter: timed runs after the verification run
    cudnn: bool = True  # also time torch / cuDNN
    compile_workers: int | None = None  # threads compiling candidates (GPU); None: min(16, cores)
    seed: int = 0
    alpha: float = 1.25  # for scale / bilinear (non-trivial on purpose)
    beta: float = -0.75

    @classmethod
    def make(cls, options: TuneOptions | None = None, **kw: Any) -> TuneOptions:
        base = options or cls()
        if kw:
            unknown = set(kw) - set(cls.__dataclass_fields__)
            if unknown:
                raise TypeError(f"unknown tuning options {sorted(unknown)}")
            base = cls(**{**base.__dict__, **kw})
        return base


# ----------------------------------------------------------------------------------------------
# progress
# ----------------------------------------------------------------------------------------------
class Progress:
    """tqdm when it is installed, else one line per update on stderr with elapsed time and ETA."""

    def __init__(self, total: int, desc: str = "tuning", enabled: bool = True) -> None:
        self.total, self.n, self.desc, self.enabled = max(total, 0), 0, desc, enabled
        self.t0 = time.monotonic()
        self._bar = None
        self._last = 0.0
        if enabled:
            try:
                from tqdm.auto import tqdm  # optional

                self._bar = tqdm(total=self.total, desc=desc, unit="inst", dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update(self, n: int = 1, note: str = "") -> None:
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if note:
                self._bar.set_postfix_str(note[:60], refresh=False)
            return
        now = time.monotonic()
        if now - self._last < 2.0 and self.n < self.total:
            return
        self._last = now
        el = now - self.t0
        eta = el / self.n * (self.total - self.n) if self.n else float("nan")
        pct = 100.0 * self.n / self.total if self.total else 100.0
        print(f"[{self.desc}] {self.n}/{self.total} ({pct:3.0f}%) elapsed {_hms(el)} eta {_hms(eta)}"
              f"{'  ' + note[:70] if note else ''}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _hms(s: float) -> str:
    if not math.isfinite(s):
        return "--:--"
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


# ----------------------------------------------------------------------------------------------
# candidates and resume
# ----------------------------------------------------------------------------------------------
def _match(name: str, patterns: str | Sequence[str]) -> bool:
    import fnmatch

    pats = patterns.split(",") if isinstance(patterns, str) else list(patterns)
    for p in (q.strip() for q in pats):
        if p and (fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else p in name):
            return True
    return False


def _spread(items: list[Any], limit: int | None) -> list[Any]:
    """At most ``limit`` items: round-robin over the kernel families, the family with the fewest
    runnable instances first (the specialized ones, e.g. ``direct`` for depthwise), each family's
    instances in registry order (smallest tiles first), so a small limit still samples the kernels
    most likely to fit."""
    if limit is None or len(items) <= limit:
        return list(items)
    by_alg: dict[str, list[Any]] = {}
    for i in items:
        by_alg.setdefault(i.algorithm, []).append(i)
    groups = sorted(by_alg.values(), key=len)
    out: list[Any] = []
    while len(out) < limit:
        for group in groups:
            if group and len(out) < limit:
                out.append(group.pop(0))
    return out


def candidates_for(problem: Problem, options: TuneOptions | None = None) -> tuple[list[Any], list[tuple[Any, str]]]:
    """(runnable instances, [(declined instance, reason)]) after the options' name filters."""
    from ..registry import get_registry

    opts = options or TuneOptions()
    runnable, declined = get_registry().candidates(problem.op, problem.params, problem.layout,
                                                   problem.dtype, problem.fused_op)
    if opts.instances:
        runnable = [i for i in runnable if _match(i.name, opts.instances)]
    return _spread(runnable, opts.max_instances), declined


def resolve_db(db: Any = None, device: DeviceInfo | None = None) -> TuningDB:
    """``None``/``"user"``: the user tier for the device; ``"system"``: the shipped tier's file for the
    device (what a maintainer regenerates); a path or a TuningDB: that file."""
    from .database import system_db_path

    dev = device or current_device()
    if isinstance(db, TuningDB):
        return db
    if db is None or db == "user":
        return TuningDB(user_db_path(dev.kind))
    if db == "system":
        return TuningDB(system_db_path(dev.kind))
    return TuningDB(db)


def done_pairs(db: TuningDB, device: DeviceInfo) -> set[tuple[str, str]]:
    """(problem key, instance) pairs with a row of any status for this device, software and kernel."""
    df = db.read()
    if len(df) == 0:
        return set()
    hashes = registry_kernel_hashes()
    df = valid_rows(df, device=device, software=current_software(), kernel_hashes=hashes, ok_only=False)
    return set(zip(df["problem_key"], df["instance"]))


# ----------------------------------------------------------------------------------------------
# operands, reference, error
# ----------------------------------------------------------------------------------------------
@dataclass
class _Case:
    problem: Problem
    device: torch.device
    a: torch.Tensor
    b: torch.Tensor
    ds: tuple[torch.Tensor, ...]
    ref: torch.Tensor
    kwargs: dict  # compute_dtype / wei_dtype for the public op
    fused_arg: Any  # the op= argument (a name, or the tuner's @triton.jit custom function)
    n_ds: int
    alpha: float
    beta: float
    extra: dict = field(default_factory=dict)


def _custom_pair() -> tuple[Any, Callable]:
    """The custom fused op the tuner uses for ``fused_op="custom"``: E = 0.5*acc + D0."""
    global _CUSTOM
    if _CUSTOM is None:
        import triton

        @triton.jit
        def tuner_custom_op(acc, d0):
            return acc * 0.5 + d0

        _CUSTOM = (tuner_custom_op, lambda acc, d0: acc * 0.5 + d0)
    return _CUSTOM


_CUSTOM: tuple[Any, Callable] | None = None


def _randn(shape: Sequence[int], dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32).to(dtype)


def _make_case(problem: Problem, device: torch.device, opts: TuneOptions) -> _Case:
    from ..dtypes import DATA_TYPES
    from ..epilogue import FUSED_OPS
    from ..layouts import parse_layout

    p, lt = problem.params, parse_layout(problem.layout, problem.params.ndim)
    dt = DATA_TYPES[problem.dtype]
    fused = FUSED_OPS[problem.fused_op]
    n_ds = max(fused.min_ds, 1) if fused.name == "custom" else fused.min_ds
    gen = torch.Generator(device=device).manual_seed(opts.seed)
    a_t, b_t, r_t = (("output", "weight", "input") if problem.op == "conv_bwd_data"
                     else ("input", "output", "weight"))
    res_dtype = dt.result or dt.data
    a = _randn(lt.shape(a_t, p), dt.data, device, gen)
    b = _randn(lt.shape(b_t, p), dt.data, device, gen)
    ds = tuple(_randn(lt.shape(r_t, p), res_dtype, device, gen) for _ in range(n_ds))
    user_fn, user_ref = _custom_pair() if fused.name == "custom" else (None, None)
    kwargs: dict[str, Any] = {}
    cd = {"tf32": "tf32", "fp8": "fp8"}.get(dt.compute)
    if cd:
        kwargs["compute_dtype"] = cd
    if dt.result is not None:
        kwargs["wei_dtype"] = dt.result
    ref = _reference(problem, lt, a, b, ds, opts.alpha, opts.beta, user_ref)
    return _Case(problem, device, a, b, ds, ref, kwargs, user_fn if user_fn is not None else fused.name,
                 n_ds, opts.alpha, opts.beta)


def _reference(problem: Problem, lt: Any, a: torch.Tensor, b: torch.Tensor, ds: tuple, alpha: float,
               beta: float, user_ref: Callable | None) -> torch.Tensor:
    """float64 result of the problem from :mod:`instance_factory.reference`, on the operands' device."""
    from ..reference import ref_conv_bwd_data, ref_conv_bwd_weight

    fn = ref_conv_bwd_data if problem.op == "conv_bwd_data" else ref_conv_bwd_weight
    return fn(a, b, problem.params, lt.name, ds=ds, op=problem.fused_op, alpha=alpha, beta=beta,
              user_ref=user_ref)


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(||out - ref|| / ||ref||, max|out - ref| / max|ref|) in float64 on the tensors' device; NaN or
    inf anywhere in ``out`` gives inf (never passes)."""
    o = out.double()
    if o.shape != ref.shape:
        raise ValueError(f"shape mismatch: result {tuple(o.shape)} vs reference {tuple(ref.shape)}")
    if not bool(torch.isfinite(o).all()):
        return math.inf, math.inf
    diff = o - ref
    rn = float(torch.linalg.vector_norm(ref))
    dn = float(torch.linalg.vector_norm(diff))
    rm = float(ref.abs().max()) if ref.numel() else 0.0
    dm = float(diff.abs().max()) if diff.numel() else 0.0
    rel = (0.0 if dn == 0.0 else math.inf) if rn == 0.0 else dn / rn
    mrel = (0.0 if dm == 0.0 else math.inf) if rm == 0.0 else dm / rm
    return rel, mrel


# ----------------------------------------------------------------------------------------------
# running one instance
# ----------------------------------------------------------------------------------------------
def _op_fn(op: str) -> Callable:
    from .. import ops

    return ops.conv_bwd_data if op == "conv_bwd_data" else ops.conv_bwd_weight


def _call(case: _Case, inst: Any) -> Callable[[], Any]:
    """The public op call being timed (checks + allocation + launch(es))."""
    fn = _op_fn(case.problem.op)
    p, lay = case.problem.params, case.problem.layout
    a, b, ds, kw = case.a, case.b, case.ds, case.kwargs
    fused, alpha, beta = case.fused_arg, case.alpha, case.beta
    return lambda: fn(a, b, p, layout=lay, ds=ds, op=fused, alpha=alpha, beta=beta, instance=inst, **kw)


def _run_verified(case: _Case, inst: Any) -> torch.Tensor:
    """One run through ``ops.prepare`` into a NaN-poisoned result buffer."""
    from ..ops import prepare

    _, args = prepare(case.problem.op, case.a, case.b, case.problem.params, layout=case.problem.layout,
                      ds=case.ds, fused_op=case.fused_arg, alpha=case.alpha, beta=case.beta, instance=inst,
                      **case.kwargs)
    args.out.fill_(float("nan"))
    inst.alg.launch(args)
    if args.out.is_cuda:
        torch.cuda.synchronize(args.out.device)
    return args.out


_FATAL_MARKERS = ("illegal memory access", "illegal instruction", "unspecified launch failure",
                  "misaligned address", "device-side assert", "an illegal", "uncorrectable ECC",
                  "CUDA error: unknown error")


def classify_error(exc: BaseException) -> tuple[str, str, bool]:
    """(status, reason, fatal) for an exception raised by compiling or running an instance."""
    name = type(exc).__name__
    text = f"{name}: {exc}".replace("\n", " ").strip()
    text = " ".join(text.split())[:400]
    mod = type(exc).__module__ or ""
    if name == "OutOfResources" or "out of resource" in text.lower():
        return "oom", text, False
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower():
        return "oom", text, False
    if name in ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct") or (
            mod.startswith("triton.compiler")) or "PTXASError" in name or "ptxas" in text.lower():
        return "compile_error", text, False
    fatal = any(m.lower() in text.lower() for m in _FATAL_MARKERS)
    return "failed", text, fatal


# ----------------------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------------------
@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    method: str


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _time_gpu(fn: Callable[[], Any], warmup_ms: float, rep_ms: float) -> Timing:
    import triton.testing

    try:
        times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    except (AssertionError, TypeError):  # an older Triton without return_mode="all"
        med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return Timing(med, p20, p80, max(1, int(rep_ms / max(med, 1e-6))), "do_bench")
    times = [float(t) for t in times]
    return Timing(statistics.median(times), _quantile(times, 0.2), _quantile(times, 0.8), len(times),
                  "do_bench")


def _time_cpu(fn: Callable[[], Any], reps: int) -> Timing:
    times = []
    for _ in range(max(1, reps)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing(statistics.median(times), _quantile(times, 0.2), _quantile(times, 0.8), len(times),
                  "perf_counter (Triton interpreter on CPU)")


def _torch_conv_fn(case: _Case) -> tuple[Callable[[], Any], str]:
    """torch's own conv backward for the problem (cuDNN on a GPU), with the fused op in torch."""
    from ..dtypes import DATA_TYPES
    from ..layouts import parse_layout

    pr = case.problem
    p, lt = pr.params, parse_layout(pr.layout, pr.params.ndim)
    dt = DATA_TYPES[pr.dtype]
    dev = case.device
    dtype = dt.data
    if dev.type == "cpu":
        dtype = torch.float32 if dtype == torch.float16 else dtype
    sym = p.left_pad == p.right_pad
    in_len = p.input if sym else tuple(i + lp + rp for i, lp, rp in zip(p.input, p.left_pad, p.right_pad))
    pad = list(p.left_pad) if sym else [0] * p.ndim
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn((p.N, p.G * p.C, *in_len), generator=g, device=dev).to(dtype)
    w = torch.randn((p.G * p.K, p.C, *p.filter), generator=g, device=dev).to(dtype)
    dy = torch.randn((p.N, p.G * p.K, *p.output), generator=g, device=dev).to(dtype)
    if lt.channels_last and p.ndim in (2, 3):
        mf = torch.channels_last if p.ndim == 2 else torch.channels_last_3d
        x, w, dy = (t.contiguous(memory_format=mf) for t in (x, w, dy))
    mask = [True, False, False] if pr.op == "conv_bwd_data" else [False, True, False]
    ds = [torch.randn_like(x if pr.op == "conv_bwd_data" else w) for _ in range(case.n_ds)]
    alpha, beta, op = case.alpha, case.beta, pr.fused_op
    stride, dil, zeros, G = list(p.stride), list(p.dilation), [0] * p.ndim, p.G
    idx = 0 if pr.op == "conv_bwd_data" else 1

    def fn() -> Any:
        r = torch.ops.aten.convolution_backward(dy, x, w, None, stride, pad, dil, False, zeros, G, mask)[idx]
        if op == "scale":
            r = r * alpha
        elif op == "bilinear":
            r = alpha * r + beta * ds[0]
        elif op in ("add", "custom"):
            for t in ds:
                r = r + t
        elif op == "add_relu":
            r = torch.relu(r + ds[0])
        return r

    if dev.type == "cuda":
        impl = "cudnn" + ("" if op == "passthrough" else "+torch epilogue") + ("" if sym else " (pre-padded)")
    else:
        impl = f"torch-cpu ({str(dtype).replace('torch.', '')})"
    return fn, impl


def _time_torch(case: _Case, opts: TuneOptions) -> tuple[float | None, str, str]:
    """(median ms or None, implementation label, error)."""
    from ..dtypes import DATA_TYPES

    try:
        fn, impl = _torch_conv_fn(case)
        if case.device.type == "cuda":
            tf32 = DATA_TYPES[case.problem.dtype].compute == "tf32"
            with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=tf32):
                t = _time_gpu(fn, opts.warmup_ms, opts.rep_ms)
        else:
            fn()
            t = _time_cpu(fn, opts.cpu_reps)
        return t.median_ms, impl, ""
    except Exception as exc:  # torch lacking a kernel for a dtype on this device, OOM, ...
        return None, "", f"{type(exc).__name__}: {exc}"[:200]


# ----------------------------------------------------------------------------------------------
# one problem
# ----------------------------------------------------------------------------------------------
def _torch_device(device: Any) -> torch.device:
    from ..algorithms import interpreting

    if device is None:
        if torch.cuda.is_available() and not interpreting():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    if isinstance(device, int):
        return torch.device("cuda", device)
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


#: tests only: run the GPU pipeline (parallel compile, short then refined timing) on CPU tensors
_SIMULATE_GPU_PIPELINE = False


def tune_problem(problem: Problem, instances: Sequence[Any], *, device: Any = None,
                 options: TuneOptions | None = None, progress: Progress | None = None) -> list[dict]:
    """Verify and time ``instances`` on ``problem``; returns one row per instance (not stored).

    Raises :class:`FatalDeviceError` (after recording the rows so far in ``.rows``) when the GPU is
    left in an error state.
    """
    from ..dtypes import DATA_TYPES

    opts = options or TuneOptions()
    tdev = _torch_device(device)
    dinfo = current_device(tdev)
    sw = current_software()
    dt = DATA_TYPES[problem.dtype]
    base = {**problem_fields(problem.op, problem.params, problem.layout, problem.dtype, problem.fused_op),
            **dinfo.as_columns(), **sw.as_columns(), "tolerance": dt.tolerance}
    rows: dict[str, dict] = {}

    def row(inst: Any, status: str, reason: str = "", **kw: Any) -> dict:
        r = {**base, "instance": inst.name, "algorithm": inst.algorithm,
             "instance_params": instance_params_json(inst.cfg), "kernel_hash": inst.kernel_hash,
             "status": status, "reason": reason, "timestamp": now_utc(), **kw}
        rows[inst.name] = r
        return r

    def tick(inst: Any) -> None:
        if progress is not None:
            progress.update(1, f"{problem.label} {problem.op[5:]} {problem.dtype}")

    if not instances:
        return []
    if tdev.type == "cuda":
        with torch.cuda.device(tdev):
            return _tune_problem_on(problem, instances, tdev, opts, row, tick, rows, dt)
    return _tune_problem_on(problem, instances, tdev, opts, row, tick, rows, dt)


def _tune_problem_on(problem: Problem, instances: Sequence[Any], tdev: torch.device, opts: TuneOptions,
                     row: Callable, tick: Callable, rows: dict[str, dict], dt: Any) -> list[dict]:
    case = _make_case(problem, tdev, opts)
    on_gpu = tdev.type == "cuda" or _SIMULATE_GPU_PIPELINE

    # 1. compile in parallel (GPU): each candidate runs once; failures become rows
    pending = list(instances)
    if on_gpu:
        try:
            pending = _compile_all(case, pending, opts, row, tick)
        except FatalDeviceError as exc:
            exc.rows = list(rows.values())  # type: ignore[attr-defined]
            raise

    # 2. verify before timing
    verified: list[Any] = []
    for inst in pending:
        try:
            out = _run_verified(case, inst)
            rel, mrel = _errors(out, case.ref)
            del out
        except Exception as exc:
            status, reason, fatal = classify_error(exc)
            row(inst, status, reason)
            tick(inst)
            if fatal:
                raise _fatal(exc, rows) from exc
            continue
        if not rel <= dt.tolerance:  # NaN-safe
            row(inst, "failed", f"wrong result: rel_err {rel:.3g} > tolerance {dt.tolerance:g}",
                rel_err=rel, max_rel_err=mrel)
            tick(inst)
            continue
        row(inst, "ok", rel_err=rel, max_rel_err=mrel)
        verified.append(inst)

    # 3. time the verified ones
    times: dict[str, Timing] = {}
    for inst in verified:
        try:
            fn = _call(case, inst)
            times[inst.name] = (_time_gpu(fn, min(opts.warmup_ms, 5.0), opts.quick_rep_ms) if on_gpu
                                else _time_cpu(fn, opts.cpu_reps))
        except Exception as exc:
            status, reason, fatal = classify_error(exc)
            rows[inst.name].update(status=status, reason=f"while timing: {reason}")
            if fatal:
                tick(inst)
                raise _fatal(exc, rows) from exc
        tick(inst)
    if on_gpu and times:
        order = sorted(times, key=lambda n: times[n].median_ms)
        top = order if opts.refine_top <= 0 else order[: opts.refine_top]
        by_name = {i.name: i for i in verified}
        for name in top:
            try:
                times[name] = _time_gpu(_call(case, by_name[name]), opts.warmup_ms, opts.rep_ms)
            except Exception as exc:
                status, reason, fatal = classify_error(exc)
                rows[name].update(status=status, reason=f"while timing: {reason}")
                times.pop(name)
                if fatal:
                    raise _fatal(exc, rows) from exc

    # 4. torch / cuDNN in the same run
    cudnn_ms, impl, cerr = (None, "", "")
    if opts.cudnn and times:
        cudnn_ms, impl, cerr = _time_torch(case, opts)
        if cudnn_ms is None:
            impl = f"unavailable: {cerr}"[:200]

    p = problem.params
    flops = p.flops()
    res_bytes = (dt.result or dt.data).itemsize
    nbytes = p.bytes_moved(problem.op, dt.data.itemsize, case.n_ds, res_bytes)
    for name, t in times.items():
        r = rows[name]
        if r["status"] != "ok":
            continue
        r.update(median_ms=t.median_ms, p20_ms=t.p20_ms, p80_ms=t.p80_ms, reps=t.reps, timing=t.method,
                 tflops=flops / (t.median_ms * 1e9), gbps=nbytes / (t.median_ms * 1e6),
                 cudnn_ms=cudnn_ms, cudnn_impl=impl,
                 speedup=(cudnn_ms / t.median_ms) if cudnn_ms else None)
    for r in rows.values():  # a verified instance that then failed to time is not "ok"
        if r["status"] == "ok" and r.get("median_ms") is None:
            r.update(status="failed", reason=r.get("reason") or "not timed")
    return list(rows.values())


def _fatal(exc: BaseException, rows: dict[str, dict], culprit: str | None = "") -> FatalDeviceError:
    if culprit is None:
        hint = ("it happened while compiling in parallel, so the culprit is unknown: rerun with "
                "--compile-workers 1 (TuneOptions.compile_workers=1) to pin it")
    else:
        hint = "the rows so far are saved; rerun the sweep: it resumes and skips the instance that broke it"
        if culprit:
            hint += f" ({culprit})"
    err = FatalDeviceError(f"the GPU is in an error state after {type(exc).__name__}: {exc}; the process must "
                           f"restart; {hint}")
    err.rows = list(rows.values())  # type: ignore[attr-defined]
    return err


def _compile_all(case: _Case, insts: list[Any], opts: TuneOptions, row: Callable, tick: Callable) -> list[Any]:
    """Run every instance once so Triton builds them (in a thread pool: Triton releases the GIL while
    compiling); failures become rows; return the instances that ran.

    A fatal device error (the context is dead) raises FatalDeviceError. With one worker the culprit is
    the first instance that hit it and gets a ``failed`` row (a resumed sweep skips it); with several
    threads the culprit is ambiguous, so no fatal row is written and the message says to rerun with
    ``--compile-workers 1``.
    """
    workers = opts.compile_workers or min(16, os.cpu_count() or 1)
    dev = case.device

    def build(inst: Any) -> tuple[Any, BaseException | None]:
        try:
            with torch.cuda.device(dev):  # pool threads start on device 0
                _call(case, inst)()
            return inst, None
        except BaseException as exc:  # noqa: BLE001 - recorded as the instance's row
            return inst, exc

    ok: list[Any] = []
    if workers <= 1:
        for inst in insts:
            _, exc = build(inst)
            if exc is None:
                try:
                    torch.cuda.synchronize(dev)
                except Exception as sync_exc:  # the launch itself broke the context
                    exc = sync_exc
            if exc is None:
                ok.append(inst)
                continue
            status, reason, fatal = classify_error(exc)
            row(inst, status, f"while compiling: {reason}")
            tick(inst)
            if fatal:
                raise _fatal(exc, {}, culprit=inst.name)
        return ok
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="if-compile") as pool:
        results = list(pool.map(build, insts))
    fatal_exc: BaseException | None = None
    for inst, exc in results:
        if exc is None:
            ok.append(inst)
            continue
        status, reason, fatal = classify_error(exc)
        if fatal:
            fatal_exc = fatal_exc or exc
            continue
        row(inst, status, f"while compiling: {reason}")
        tick(inst)
    try:
        torch.cuda.synchronize(dev)
    except Exception as exc:  # a kernel launched by the pool broke the context
        fatal_exc = fatal_exc or exc
    if fatal_exc is not None:
        raise _fatal(fatal_exc, {}, culprit=None)
    return ok


# ----------------------------------------------------------------------------------------------
# many problems
# ----------------------------------------------------------------------------------------------
def tune(problems: Iterable[Problem] | Problem, *, db: Any = None, device: Any = None, force: bool = False,
         options: TuneOptions | None = None, progress: bool = True,
         todo: dict[str, list[str]] | None = None, **option_kw: Any) -> list[dict]:
    """Tune each problem and store its rows in ``db`` (default: the user tier); returns the new rows.

    Without ``force``, instances that already have a row for this device, software and kernel hash
    are skipped (a problem with none left is skipped whole). ``todo`` (problem key -> instance names)
    replaces that computation (sweep workers get it from the parent).
    """
    opts = TuneOptions.make(options, **option_kw)
    if isinstance(problems, Problem):
        problems = [problems]
    problems = list(problems)
    tdev = _torch_device(device)
    dinfo = current_device(tdev)
    target = resolve_db(db, dinfo)
    plan = plan_work(problems, target, dinfo, opts, force=force) if todo is None else _plan_from_todo(
        problems, todo)
    total = sum(len(v) for _, v in plan)
    bar = Progress(total, desc=f"tune {dinfo.kind}", enabled=progress and total > 0)
    written: list[dict] = []
    try:
        for problem, insts in plan:
            if not insts:
                continue
            try:
                rows = tune_problem(problem, insts, device=tdev, options=opts, progress=bar)
            except FatalDeviceError as exc:
                target.add(getattr(exc, "rows", []))
                raise
            target.add(rows)
            written.extend(rows)
    finally:
        bar.close()
    return written


def plan_work(problems: Sequence[Problem], db: TuningDB, device: DeviceInfo, opts: TuneOptions, *,
              force: bool = False) -> list[tuple[Problem, list[Any]]]:
    """(problem, instances still to measure) for each problem, in order."""
    done = set() if force else done_pairs(db, device)
    plan = []
    for pr in problems:
        runnable, _ = candidates_for(pr, opts)
        key = pr.key
        plan.append((pr, [i for i in runnable if (key, i.name) not in done]))
    return plan


def _plan_from_todo(problems: Sequence[Problem], todo: dict[str, list[str]]) -> list[tuple[Problem, list[Any]]]:
    from ..registry import get_registry

    reg = get_registry()
    return [(pr, [reg.get(n) for n in todo.get(pr.key, [])]) for pr in problems]


def default_device_info() -> DeviceInfo:
    try:
        return current_device()
    except Exception:
        return CPU_DEVICE


def db_path_for(db: Any) -> Path:
    return resolve_db(db, default_device_info()).path
