"""The tuner: verify every runnable instance of a problem against float64, time the correct ones and
cuDNN in the same run, and store one row per (problem, instance) in the tuning database.

Per problem:

1. candidates = ``registry.candidates(op, params, layout, dtype, fused_op)`` (optionally narrowed by
   name patterns), minus those already in the database for this device/software/kernel hash
   (resume), unless ``force``; on a GPU they are ordered likely-fast first
   (:func:`order_candidates`: the ``direct`` family first when C and K per group are <= 8, else the
   tensor-core tiles that fit the problem's GEMM best);
2. random operands (seeded, never all zero) and the float64 reference
   (:mod:`instance_factory.reference`, computed once per problem on the operands' device and shared
   by every candidate);
3. GPU only: compile every candidate ahead, without running it. ``compile_mode="process"`` (the
   default on a GPU): a pool of worker processes, started once per :func:`tune` call, compiles the
   whole plan in order into Triton's on-disk cache while this process measures (so compiling
   problem i+1 overlaps measuring problem i, and the GIL, which Triton holds for about half of a
   compile, is not shared); ``"thread"``: a thread pool per problem. A kernel a worker could not
   build becomes a ``compile_error`` row; anything else a worker could not do is simply compiled
   again by the first real run here;
4. the first real run of each candidate is its verification: the result buffer is poisoned with
   NaN, the instance runs through the public checks (``ops.prepare``) and ``||out - ref|| /
   ||ref||`` must be within ``DATA_TYPES[dtype].tolerance``; a wrong or crashing instance is stored
   as ``failed`` and never chosen. On a GPU the kernel is loaded first (from the cache the workers
   filled; compiled here if they did not get to it) without running, and then that first run is
   timed with CUDA events: when it exceeds the hard cap ``max(hard_cap_factor x best, best +
   hard_cap_margin_ms)`` (best: the fastest single run of the problem so far) the candidate is
   stored as ``pruned`` without being verified (an igemm tile of 128 channels on a depthwise layer
   runs for 40-580 ms where ``direct`` needs 0.2 ms);
5. GPU: each verified candidate is timed once more through the public op call (CUDA events, the GPU
   kept busy while the launch is queued, so only GPU time counts);
6. GPU: candidates whose single run exceeds ``max(prune_factor x best, best + prune_margin_ms)``
   (best: the fastest single run of the problem, or the best time the database already holds for
   it when a sweep resumes) are
   stored as ``pruned`` (median_ms = that single run, timing ``single-run (pruned)``) and never
   reach ``do_bench``; a pruned row never wins a lookup, a merge or the report (they read ``ok``
   rows only), and a resumed sweep skips it like any measured row (``--force`` redoes it);
7. time the rest through the public op call (result allocation, workspace zeroing and the split-K
   reduce included): on a GPU ``triton.testing.do_bench`` (warm-up, L2 flushed between runs), first
   briefly for all (fastest single run first), then again at full length for the ``refine_top``
   fastest; on the CPU interpreter the median of a few ``time.perf_counter`` runs (the numbers only
   exercise the pipeline; no pruning there);
8. time torch's own convolution backward in the same run (cuDNN with ``cudnn.benchmark`` on and
   channels-last tensors for a channels-last layout; on the CPU, torch's CPU kernel, marked so);
9. write the rows (merge-on-write under the file lock) after each problem, so a killed sweep
   resumes where it stopped.

``TuneOptions.deadline`` (``tune --max-minutes``): no new candidate, problem or ``do_bench`` starts
after it; the problem in progress keeps the rows it finished (a candidate verified but not yet timed
gets no row, so a rerun measures it), its cuDNN timing and the database write still happen, and
:func:`tune` returns with ``stopped_early`` set.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..verify import verdict
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
from .problem_sets import Problem

__all__ = [
    "FatalDeviceError",
    "ProblemRows",
    "TuneOptions",
    "TuneResult",
    "Progress",
    "candidates_for",
    "order_candidates",
    "resolve_db",
    "tune",
    "tune_problem",
]

PRUNED_TIMING = "single-run (pruned)"
COMPILE_MODES = ("auto", "process", "thread")


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
    compile_workers: int | None = None  # compiling processes/threads (GPU); None: min(16, cores - 1)
    compile_mode: str = "auto"  # "process", "thread", or "auto" (process on a GPU, thread simulated)
    compile_timeout_s: float = 900.0  # stop waiting for a problem's compiles after this (then inline)
    prune: bool = True  # GPU: skip do_bench of candidates far slower than the best single run
    prune_factor: float = 5.0  # pruned when single run > max(prune_factor x best, best + margin)
    prune_margin_ms: float = 0.05
    hard_cap_factor: float = 50.0  # not even verified when the first run > max(factor x best, ...)
    hard_cap_margin_ms: float = 1.0  # (absolute slack: the first run may include a module load)
    deadline: float | None = None  # time.time() after which no new measurement starts (None: none)
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
        if base.compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode must be one of {COMPILE_MODES}, not {base.compile_mode!r}")
        return base


def _now() -> float:
    """Wall-clock seconds (a test seam: deadline tests replace it)."""
    return time.time()


def _past(deadline: float | None) -> bool:
    return deadline is not None and _now() >= deadline


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - _now())


class ProblemRows(list):
    """The rows of one problem (a list), with ``stopped`` (the deadline cut it short) and ``stats``
    (seconds per phase, instance counts)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stopped = False
        self.stats: dict = {}


class TuneResult(list):
    """The rows :func:`tune` wrote (a list), with ``stopped_early`` (the deadline stopped it before the
    plan was done) and ``stats`` (seconds per phase summed over the problems, rows per status)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stopped_early = False
        self.stats: dict = {}


def _add_stats(total: dict, part: dict) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v


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
# candidates, their order, and resume
# ----------------------------------------------------------------------------------------------
def _match(name: str, patterns: str | Sequence[str]) -> bool:
    import fnmatch

    pats = patterns.split(",") if isinstance(patterns, str) else list(patterns)
    for p in (q.strip() for q in pats):
        if p and (fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else p in name):
            return True
    return False


def candidates_for(problem: Problem, options: TuneOptions | None = None) -> tuple[list[Any], list[tuple[Any, str]]]:
    """(runnable instances, [(declined instance, reason)]) after the options' name filters."""
    from ..registry import get_registry, spread_over_families

    opts = options or TuneOptions()
    runnable, declined = get_registry().candidates(problem.op, problem.params, problem.layout,
                                                   problem.dtype, problem.fused_op)
    if opts.instances:
        runnable = [i for i in runnable if _match(i.name, opts.instances)]
    return spread_over_families(runnable, opts.max_instances), declined


#: C and K per group up to this: a few-channel problem, where the ``direct`` family is meant to win
FEW_CHANNELS = 8


def _gemm_mn(problem: Problem, inst: Any) -> tuple[int, int] | None:
    """The (M, N) a tensor-core instance tiles with (block_m, block_n); None for other families."""
    cfg = inst.cfg
    if "block_m" not in cfg or "block_n" not in cfg:
        return None
    p = problem.params
    if problem.op == "conv_bwd_data":  # M = N*prod(in) per stride phase, N = C
        return max(1, p.N * math.prod(p.input) // max(1, math.prod(p.stride))), p.C
    # bwd weight: M = K, N = C per tap (C*taps with the taps folded into the columns: two_stage)
    return p.K, p.C * (math.prod(p.filter) if inst.algorithm == "two_stage" else 1)


def _tile_waste(inst: Any, mn: tuple[int, int]) -> float:
    """Padded tile area / useful area (1: the tiles fit the GEMM exactly)."""
    m, n = mn
    bm, bn = inst.cfg["block_m"], inst.cfg["block_n"]
    return (-(-m // bm) * bm / m) * (-(-n // bn) * bn / n)


def order_candidates(problem: Problem, instances: Sequence[Any]) -> list[Any]:
    """``instances`` likely-fast first, so the pruning rule has a good best time early.

    Few-channel problems (C and K per group <= FEW_CHANNELS): the ``direct`` family first, then the
    tensor-core families; otherwise the tensor-core families first. Within a group, tiles with less
    padding waste on the problem's GEMM (tile area / useful area, in half-octave steps) first;
    ties keep registry order. Only the order changes, never the set.
    """
    p = problem.params
    few = p.C <= FEW_CHANNELS and p.K <= FEW_CHANNELS

    def key(item: tuple[int, Any]) -> tuple[int, int, int]:
        idx, inst = item
        mn = _gemm_mn(problem, inst)
        if mn is None:  # direct (or another non-tiled family)
            return (0 if few else 2, 0, idx)
        waste = _tile_waste(inst, mn)
        return (1 if few else 0, round(2 * math.log2(waste)), idx)

    return [inst for _, inst in sorted(enumerate(instances), key=key)]


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
    ref: torch.Tensor | None  # None in compile workers (they never check a result)
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


def _make_case(problem: Problem, device: torch.device, opts: TuneOptions, *, reference: bool = True) -> _Case:
    """Operands (seeded random; uninitialized when ``reference`` is False: compile workers only
    need shapes, dtypes and alignment) and the float64 reference, once per problem."""
    from ..dtypes import DATA_TYPES, op_kwargs
    from ..epilogue import FUSED_OPS
    from ..layouts import parse_layout

    p, lt = problem.params, parse_layout(problem.layout, problem.params.ndim)
    dt = DATA_TYPES[problem.dtype]
    fused = FUSED_OPS[problem.fused_op]
    n_ds = max(fused.min_ds, 1) if fused.name == "custom" else fused.min_ds
    gen = torch.Generator(device=device).manual_seed(opts.seed) if reference else None
    a_t, b_t, r_t = (("output", "weight", "input") if problem.op == "conv_bwd_data"
                     else ("input", "output", "weight"))
    res_dtype = dt.result or dt.data

    def make(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        if not reference:
            return torch.empty(tuple(shape), dtype=dtype, device=device)
        return _randn(shape, dtype, device, gen)

    a = make(lt.shape(a_t, p), dt.data)
    b = make(lt.shape(b_t, p), dt.data)
    ds = tuple(make(lt.shape(r_t, p), res_dtype) for _ in range(n_ds))
    user_fn, user_ref = _custom_pair() if fused.name == "custom" else (None, None)
    kwargs = op_kwargs(problem.dtype)
    ref = _reference(problem, lt, a, b, ds, opts.alpha, opts.beta, user_ref) if reference else None
    return _Case(problem, device, a, b, ds, ref, kwargs, user_fn if user_fn is not None else fused.name,
                 n_ds, opts.alpha, opts.beta)


def _reference(problem: Problem, lt: Any, a: torch.Tensor, b: torch.Tensor, ds: tuple, alpha: float,
               beta: float, user_ref: Callable | None) -> torch.Tensor:
    """float64 result of the problem from :mod:`instance_factory.reference`, on the operands' device."""
    from ..reference import ref_conv_bwd_data, ref_conv_bwd_weight

    fn = ref_conv_bwd_data if problem.op == "conv_bwd_data" else ref_conv_bwd_weight
    return fn(a, b, problem.params, lt.name, ds=ds, op=problem.fused_op, alpha=alpha, beta=beta,
              user_ref=user_ref)


def _ref_norms(case: _Case) -> tuple[float, float]:
    """(||ref||, max|ref|), computed once per problem."""
    got = case.extra.get("ref_norms")
    if got is None:
        ref = case.ref
        got = (float(torch.linalg.vector_norm(ref)), float(ref.abs().max()) if ref.numel() else 0.0)
        case.extra["ref_norms"] = got
    return got


def _errors(out: torch.Tensor, ref: torch.Tensor, norms: tuple[float, float] | None = None) -> tuple[float, float]:
    """(normwise, worst-element) relative errors: :func:`instance_factory.verify.result_errors`."""
    from ..verify import result_errors

    return result_errors(out, ref, norms)


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


def _run_verified(case: _Case, inst: Any, timed: bool = False) -> tuple[torch.Tensor, float | None]:
    """One run through ``ops.prepare`` into a NaN-poisoned result buffer: (result, launch ms if
    ``timed`` else None)."""
    from ..ops import prepare

    _, args = prepare(case.problem.op, case.a, case.b, case.problem.params, layout=case.problem.layout,
                      ds=case.ds, fused_op=case.fused_arg, alpha=case.alpha, beta=case.beta, instance=inst,
                      **case.kwargs)
    args.out.fill_(float("nan"))
    ms = None
    if timed:
        ms = _single_run_ms(lambda: inst.alg.launch(args), case, inst, "warm-up")
    else:
        inst.alg.launch(args)
    if args.out.is_cuda:
        torch.cuda.synchronize(args.out.device)
    return args.out, ms


#: GPU clock cycles the stream is kept busy before a single timed run (about 1 ms), so the launch's
#: CPU overhead is queued behind it and only GPU time lands between the two events
_BUSY_CYCLES = 2_000_000


def _single_run_ms(fn: Callable[[], Any], case: _Case, inst: Any, stage: str) -> float:
    """Milliseconds of one run of ``fn`` (``stage``: "warm-up" = the verification run, "single" = one
    public op call): CUDA events on a GPU, perf_counter otherwise. Tests replace this."""
    if case.device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    busy = getattr(torch.cuda, "_sleep", None)
    if busy is not None:
        busy(_BUSY_CYCLES)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


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
# compiling ahead without running: Triton's JIT launch with warmup=True compiles and returns
# ----------------------------------------------------------------------------------------------
_COMPILE_ONLY = threading.local()  # .on: launches from this thread only compile
_PATCH_LOCK = threading.Lock()
_PATCHED: list[Any] = []  # [original JITFunction.__getitem__] once installed


def _install_compile_only() -> bool:
    """Make ``kernel[grid](...)`` compile without launching (``run(..., warmup=True)``) in threads whose
    ``_COMPILE_ONLY.on`` is set, by wrapping ``JITFunction.__getitem__`` (so no launch fast path can
    bypass it); other threads are unaffected. False when this Triton's ``run`` has no ``warmup``
    parameter (then compiling ahead runs the kernels, as before)."""
    with _PATCH_LOCK:
        if _PATCHED:
            return True
        try:
            import inspect

            from triton.runtime.jit import JITFunction

            orig = JITFunction.__getitem__
            if "warmup" not in inspect.signature(JITFunction.run).parameters:
                return False
        except Exception:
            return False

        def getitem(self: Any, grid: Any) -> Any:
            if getattr(_COMPILE_ONLY, "on", False):
                return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=True, **kwargs)
            return orig(self, grid)

        getitem.__wrapped__ = orig  # type: ignore[attr-defined]
        JITFunction.__getitem__ = getitem
        _PATCHED.append(orig)
        return True


@contextmanager
def _compile_only_here(enabled: bool):
    """Launches from this thread only compile while inside (when ``enabled``)."""
    if not enabled:
        yield
        return
    prev = getattr(_COMPILE_ONLY, "on", False)
    _COMPILE_ONLY.on = True
    try:
        yield
    finally:
        _COMPILE_ONLY.on = prev


def _compile_workers(opts: TuneOptions) -> int:
    """``compile_workers``, else min(16, usable cores - 1): one core stays with the measuring."""
    if opts.compile_workers:
        return max(1, opts.compile_workers)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 2
    return max(1, min(16, cores - 1))


# --- worker processes ---------------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def precompile_fits(params: Any, workers: int, device: torch.device) -> bool:
    """Whether ``workers`` compile processes may each hold one problem's operands (they build real
    tensors to launch) in a quarter of the device's memory; larger problems compile in the measuring
    process on their first run instead (a 2^31-element problem times 15 workers would not fit)."""
    if getattr(device, "type", "") != "cuda":
        return True
    # every operand at 4 bytes (fp32 weight gradients), doubled for Ds and workspaces
    per_problem = 8 * (params.numel("input") + params.numel("weight") + params.numel("output"))
    return per_problem * workers <= torch.cuda.get_device_properties(device).total_memory // 4


def _precompile_init(device: str) -> None:
    """Worker process start: lower priority (the parent measures), pick the device, compile-only."""
    os.environ["INSTANCE_FACTORY_COMPILE_WORKER"] = "1"
    try:
        os.nice(10)
    except (AttributeError, OSError):
        pass
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    _WORKER["device"] = dev
    _WORKER["compile_only"] = _install_compile_only()


def _precompile_one(problem: Problem, name: str, seed: int, alpha: float, beta: float) -> dict | None:
    """Compile one instance for one problem (launch in compile-only mode); returns {"error": (status,
    reason) or None, "s": seconds}, or None when it cannot compile without running. The case
    (uninitialized operands) is kept per problem."""
    from ..registry import get_registry

    t0 = time.monotonic()
    dev = _WORKER.get("device", torch.device("cpu"))
    if dev.type == "cuda" and not _WORKER.get("compile_only"):
        return None  # never run kernels beside the measuring: the parent compiles it on its first run
    if _WORKER.get("key") != problem.key:
        _WORKER.pop("case", None)
        _WORKER["case"] = _make_case(problem, dev, TuneOptions(seed=seed, alpha=alpha, beta=beta),
                                     reference=False)
        _WORKER["key"] = problem.key
    inst = get_registry().get(name)
    try:
        with _compile_only_here(_WORKER.get("compile_only", False)):
            _call(_WORKER["case"], inst)()
        err = None
    except Exception as exc:  # recorded by the parent (compile errors) or redone there (the rest)
        status, reason, _ = classify_error(exc)
        err = (status, reason)
    return {"error": err, "s": time.monotonic() - t0}


class _Precompiler:
    """Worker processes compiling a whole plan ahead, in plan order, into Triton's on-disk cache
    (shared with this process, which then loads each kernel instead of compiling it)."""

    def __init__(self, device: torch.device, plan: Sequence[tuple[Problem, list[Any]]], opts: TuneOptions):
        self.workers = _compile_workers(opts)
        self.broken = ""
        self.jobs: dict[str, list[tuple[Any, Future]]] = {}
        ctx = mp.get_context("spawn")
        self.pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_precompile_init,
                                        initargs=(str(device),))
        for problem, insts in plan:
            if insts and precompile_fits(problem.params, self.workers, device):
                self.jobs[problem.key] = [
                    (inst, self.pool.submit(_precompile_one, problem, inst.name, opts.seed, opts.alpha, opts.beta))
                    for inst in order_candidates(problem, insts)]

    def results(self, problem: Problem, timeout: float | None) -> tuple[dict[str, dict | None], bool]:
        """{instance name: the worker's answer, or None (not compiled ahead: the first run compiles)}
        and whether waiting was cut short by ``timeout``."""
        jobs = self.jobs.pop(problem.key, [])
        if not jobs:
            return {}, False
        done, not_done = wait([f for _, f in jobs], timeout=timeout)
        out: dict[str, dict | None] = {}
        for inst, fut in jobs:
            if fut not in done:
                fut.cancel()
                out[inst.name] = None
                continue
            try:
                out[inst.name] = fut.result()
            except Exception as exc:  # BrokenProcessPool (a worker died), pickling, ...
                if not self.broken:
                    self.broken = f"{type(exc).__name__}: {exc}"[:300]
                    warnings.warn(f"instance_factory tuner: compile workers failed ({self.broken}); "
                                  "compiling in the measuring process instead", RuntimeWarning, stacklevel=2)
                out[inst.name] = None
        return out, bool(not_done)

    def close(self) -> None:
        for jobs in self.jobs.values():
            for _, fut in jobs:
                fut.cancel()
        self.jobs.clear()
        procs = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:  # nothing they still do is needed; Triton's cache writes are atomic
            try:
                p.terminate()
            except Exception:
                pass


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


#: tests only: run the GPU pipeline (compile ahead, single runs, pruning, short then refined timing)
#: on CPU tensors
_SIMULATE_GPU_PIPELINE = False


def _gpu_pipeline(tdev: torch.device) -> bool:
    return tdev.type == "cuda" or _SIMULATE_GPU_PIPELINE


def _resolved_compile_mode(tdev: torch.device, opts: TuneOptions) -> str:
    """"process" or "thread". Worker processes must never run kernels next to the measuring (their
    operands are uninitialized), so on a GPU they need this Triton's compile-only launch."""
    mode = opts.compile_mode
    if mode == "auto":
        mode = "process" if tdev.type == "cuda" else "thread"
    if mode == "process" and tdev.type == "cuda" and not _install_compile_only():
        mode = "thread"
    return mode


def tune_problem(problem: Problem, instances: Sequence[Any], *, device: Any = None,
                 options: TuneOptions | None = None, progress: Progress | None = None,
                 prior_best_ms: float | None = None, _precompiler: _Precompiler | None = None) -> ProblemRows:
    """Verify and time ``instances`` on ``problem``; returns one row per finished instance (not
    stored), as a :class:`ProblemRows` (``stopped``: the deadline cut it short; ``stats``).
    ``prior_best_ms``: the problem's best time already in the database (a resumed sweep), the
    starting point of the pruning rule.

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
        return ProblemRows()
    prior = prior_best_ms if prior_best_ms is not None and prior_best_ms > 0 else math.inf
    if tdev.type == "cuda":
        with torch.cuda.device(tdev):
            return _tune_problem_on(problem, instances, tdev, opts, row, tick, rows, dt, _precompiler, prior)
    return _tune_problem_on(problem, instances, tdev, opts, row, tick, rows, dt, _precompiler, prior)


def _tune_problem_on(problem: Problem, instances: Sequence[Any], tdev: torch.device, opts: TuneOptions,
                     row: Callable, tick: Callable, rows: dict[str, dict], dt: Any,
                     precompiler: _Precompiler | None, prior: float) -> ProblemRows:
    stats: dict[str, float] = {}
    t0 = time.monotonic()
    case = _make_case(problem, tdev, opts)
    on_gpu = _gpu_pipeline(tdev)
    prune = on_gpu and opts.prune
    stopped = False
    t1 = time.monotonic()
    stats["setup_s"] = t1 - t0

    # 1. compile ahead (GPU): failures become rows
    pending = order_candidates(problem, instances) if on_gpu else list(instances)
    if on_gpu:
        try:
            pending, stopped = _compile_all(case, pending, opts, row, tick, precompiler, stats)
        except FatalDeviceError as exc:
            exc.rows = _finished(rows)  # type: ignore[attr-defined]
            raise
    t2 = time.monotonic()
    stats["compile_s"] = t2 - t1

    # 2. the first run verifies (and on a GPU is timed against the hard cap); then one timed run.
    # On a GPU the kernel is first loaded (or compiled, if compiling ahead did not get to it) without
    # running, so that no compile or load lands inside the timed first run.
    preload = tdev.type == "cuda" and _install_compile_only()
    best = prior  # the fastest single run so far (or the best time a resumed sweep already has)
    single: dict[str, float] = {}
    pruned_ms: dict[str, float] = {}  # pruned instance -> the single run its row reports
    verified: list[Any] = []
    load_s = 0.0
    for inst in pending:
        if stopped or _past(opts.deadline):
            stopped = True
            break
        try:
            if preload:
                tl = time.monotonic()
                with _compile_only_here(True):
                    _call(case, inst)()
                load_s += time.monotonic() - tl
            out, warm_ms = _run_verified(case, inst, timed=prune)
        except Exception as exc:
            status, reason, fatal = classify_error(exc)
            row(inst, status, reason)
            tick(inst)
            if fatal:
                raise _fatal(exc, rows, culprit=inst.name) from exc
            continue
        if prune and warm_ms is not None and math.isfinite(best) and warm_ms > _hard_cap(best, opts):
            del out
            row(inst, "pruned", f"not verified: its first run took {warm_ms:.4g} ms > hard cap "
                f"{_hard_cap(best, opts):.4g} ms = max({opts.hard_cap_factor:g} x best so far "
                f"{best:.4g} ms, best + {opts.hard_cap_margin_ms:g} ms)")
            pruned_ms[inst.name] = warm_ms
            tick(inst)
            continue
        try:
            rel, mrel = _errors(out, case.ref, _ref_norms(case))
        except Exception as exc:
            status, reason, fatal = classify_error(exc)
            row(inst, status, f"while verifying: {reason}")
            tick(inst)
            if fatal:
                raise _fatal(exc, rows, culprit=inst.name) from exc
            continue
        finally:
            del out
        wrong = verdict(rel, mrel, problem.dtype)  # normwise and worst element; NaN-safe
        if wrong:
            row(inst, "failed", wrong, rel_err=rel, max_rel_err=mrel)
            tick(inst)
            continue
        row(inst, "ok", rel_err=rel, max_rel_err=mrel)
        if prune:
            try:
                ms = _single_run_ms(_call(case, inst), case, inst, "single")
            except Exception as exc:
                status, reason, fatal = classify_error(exc)
                rows[inst.name].update(status=status, reason=f"while timing: {reason}")
                tick(inst)
                if fatal:
                    raise _fatal(exc, rows, culprit=inst.name) from exc
                continue
            single[inst.name] = ms
            best = min(best, ms)
        verified.append(inst)
    t3 = time.monotonic()
    stats["verify_s"] = t3 - t2 - load_s
    stats["load_s"] = load_s

    # 3. prune by the single runs, then time the rest (fastest single run first)
    if prune and math.isfinite(best):
        cap = _soft_cap(best, opts)
        keep = []
        for inst in verified:
            ms = single[inst.name]
            if ms > cap:
                pruned_ms[inst.name] = ms
                rows[inst.name].update(
                    status="pruned",
                    reason=f"verified; single run {ms:.4g} ms > {cap:.4g} ms = max({opts.prune_factor:g} x "
                           f"best so far {best:.4g} ms, best + {opts.prune_margin_ms:g} ms): not benchmarked")
                tick(inst)
            else:
                keep.append(inst)
        verified = sorted(keep, key=lambda i: single[i.name])
    elif prune:
        verified = sorted(verified, key=lambda i: single[i.name])
    times: dict[str, Timing] = {}
    for inst in verified:
        if stopped or _past(opts.deadline):
            stopped = True
            break
        try:
            fn = _call(case, inst)
            times[inst.name] = (_time_gpu(fn, min(opts.warmup_ms, 5.0), opts.quick_rep_ms) if on_gpu
                                else _time_cpu(fn, opts.cpu_reps))
        except Exception as exc:
            status, reason, fatal = classify_error(exc)
            rows[inst.name].update(status=status, reason=f"while timing: {reason}")
            if fatal:
                tick(inst)
                raise _fatal(exc, rows, culprit=inst.name) from exc
        tick(inst)
    if on_gpu and times and not stopped:
        order = sorted(times, key=lambda n: times[n].median_ms)
        top = order if opts.refine_top <= 0 else order[: opts.refine_top]
        by_name = {i.name: i for i in verified}
        for name in top:
            if _past(opts.deadline):
                stopped = True
                break
            try:
                times[name] = _time_gpu(_call(case, by_name[name]), opts.warmup_ms, opts.rep_ms)
            except Exception as exc:
                status, reason, fatal = classify_error(exc)
                rows[name].update(status=status, reason=f"while timing: {reason}")
                times.pop(name)
                if fatal:
                    raise _fatal(exc, rows, culprit=name) from exc
    t4 = time.monotonic()
    stats["bench_s"] = t4 - t3

    # 4. torch / cuDNN in the same run
    cudnn_ms, impl, cerr = (None, "", "")
    if opts.cudnn and (times or pruned_ms):
        cudnn_ms, impl, cerr = _time_torch(case, opts)
        if cudnn_ms is None:
            impl = f"unavailable: {cerr}"[:200]
    stats["cudnn_s"] = time.monotonic() - t4

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
    for name, ms in pruned_ms.items():  # the single run, marked: a pruned row never wins
        r = rows[name]
        if r["status"] == "pruned" and ms > 0:
            r.update(median_ms=ms, p20_ms=ms, p80_ms=ms, reps=1, timing=PRUNED_TIMING,
                     tflops=flops / (ms * 1e9), gbps=nbytes / (ms * 1e6), cudnn_ms=cudnn_ms, cudnn_impl=impl)
    out = ProblemRows()
    for r in rows.values():
        if r["status"] == "ok" and r.get("median_ms") is None:
            if stopped:  # verified, but the deadline came before its timing: no row, a rerun redoes it
                continue
            r.update(status="failed", reason=r.get("reason") or "not timed")  # a timing that failed
        out.append(r)
    out.stopped = stopped
    stats.update(instances=len(out), ok=sum(r["status"] == "ok" for r in out),
                 pruned=sum(r["status"] == "pruned" for r in out))
    stats["failed"] = stats["instances"] - stats["ok"] - stats["pruned"]
    out.stats = stats
    return out


def _soft_cap(best: float, opts: TuneOptions) -> float:
    return max(opts.prune_factor * best, best + opts.prune_margin_ms)


def _hard_cap(best: float, opts: TuneOptions) -> float:
    return max(opts.hard_cap_factor * best, best + opts.hard_cap_margin_ms)


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
    err.rows = _finished(rows)  # type: ignore[attr-defined]
    return err


def _finished(rows: dict[str, dict]) -> list[dict]:
    """The rows worth keeping when a problem is abandoned: not the verified-but-untimed ones (an ok
    row needs a time; a rerun measures them)."""
    return [r for r in rows.values() if not (r["status"] == "ok" and r.get("median_ms") is None)]


def _compile_all(case: _Case, insts: list[Any], opts: TuneOptions, row: Callable, tick: Callable,
                 precompiler: _Precompiler | None, stats: dict) -> tuple[list[Any], bool]:
    """Compile every instance ahead; failures become rows. Returns (the instances to measure, in
    order; whether the deadline stopped the wait).

    With worker processes (``precompiler``) this waits for this problem's compiles (started when
    the sweep began) until the deadline or ``compile_timeout_s``; an instance not compiled by then is
    compiled by its first run here. Otherwise a thread pool compiles them now: in compile-only mode
    when this Triton allows it (no kernel runs), else by running each once (old behaviour).
    """
    timeout = opts.compile_timeout_s
    left = _remaining(opts.deadline)
    if left is not None:
        timeout = min(timeout, left)
    if precompiler is not None:
        answers, cut = precompiler.results(case.problem, timeout)
        ok: list[Any] = []
        for inst in insts:
            ans = answers.get(inst.name)
            if ans is not None:
                stats["compile_cpu_s"] = stats.get("compile_cpu_s", 0.0) + ans["s"]
                stats["precompiled"] = stats.get("precompiled", 0) + 1
            if ans is not None and ans["error"] is not None and ans["error"][0] == "compile_error":
                row(inst, "compile_error", f"while compiling: {ans['error'][1]}")
                tick(inst)
                continue
            ok.append(inst)
        return ok, cut and _past(opts.deadline)
    return _compile_threads(case, insts, opts, row, tick, timeout)


def _compile_threads(case: _Case, insts: list[Any], opts: TuneOptions, row: Callable, tick: Callable,
                     timeout: float | None) -> tuple[list[Any], bool]:
    """Compile in a thread pool (Triton releases the GIL for part of a compile).

    Compile-only (the kernels do not run): a thread that has not finished by ``timeout`` is left
    behind (it only compiles) and its instance compiles on its first run. Running mode (a Triton
    without compile-only, or the CPU simulation): the pool is always waited for, and a fatal device
    error raises FatalDeviceError: with one worker the culprit is the first instance that hit it and
    gets a ``failed`` row (a resumed sweep skips it); with several threads the culprit is ambiguous,
    so no fatal row is written and the message says to rerun with ``--compile-workers 1``.
    """
    workers = _compile_workers(opts)
    dev = case.device
    compile_only = dev.type == "cuda" and _install_compile_only()

    def build(inst: Any) -> tuple[Any, BaseException | None]:
        try:
            with torch.cuda.device(dev), _compile_only_here(compile_only):  # pool threads start on device 0
                _call(case, inst)()
            return inst, None
        except BaseException as exc:  # noqa: BLE001 - recorded as the instance's row
            return inst, exc

    ok: list[Any] = []
    if workers <= 1:
        for inst in insts:
            if _past(opts.deadline):
                return ok, True
            _, exc = build(inst)
            if exc is None and not compile_only:
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
        return ok, False
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="if-compile")
    futures = [pool.submit(build, inst) for inst in insts]
    try:
        if compile_only:
            done, _ = wait(futures, timeout=timeout)
        else:  # kernels may be running: never leave them behind
            done, _ = wait(futures)
    finally:
        pool.shutdown(wait=not compile_only, cancel_futures=True)
    fatal_exc: BaseException | None = None
    for inst, fut in zip(insts, futures):
        if fut not in done or fut.cancelled():
            ok.append(inst)  # compiles on its first run
            continue
        _, exc = fut.result()
        if exc is None:
            ok.append(inst)
            continue
        status, reason, fatal = classify_error(exc)
        if fatal:
            fatal_exc = fatal_exc or exc
            continue
        row(inst, status, f"while compiling: {reason}")
        tick(inst)
    if not compile_only:
        try:
            torch.cuda.synchronize(dev)
        except Exception as exc:  # a kernel launched by the pool broke the context
            fatal_exc = fatal_exc or exc
    if fatal_exc is not None:
        raise _fatal(fatal_exc, {}, culprit=None)
    return ok, False


# ----------------------------------------------------------------------------------------------
# many problems
# ----------------------------------------------------------------------------------------------
def tune(problems: Iterable[Problem] | Problem, *, db: Any = None, device: Any = None, force: bool = False,
         options: TuneOptions | None = None, progress: bool = True,
         todo: dict[str, list[str]] | None = None, **option_kw: Any) -> TuneResult:
    """Tune each problem and store its rows in ``db`` (default: the user tier); returns the new rows
    as a :class:`TuneResult` (a list with ``stopped_early`` and ``stats``).

    Without ``force``, instances that already have a row for this device, software and kernel hash
    are skipped (a problem with none left is skipped whole). ``todo`` (problem key -> instance names)
    replaces that computation (sweep workers get it from the parent). The rows of each problem are
    written as soon as it is done; with ``deadline`` set nothing new starts after it.
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
    result = TuneResult()
    if total == 0:
        return result
    bar = Progress(total, desc=f"tune {dinfo.kind}", enabled=progress)
    precompiler = None
    try:
        if _gpu_pipeline(tdev) and _resolved_compile_mode(tdev, opts) == "process" and not _past(opts.deadline):
            t0 = time.monotonic()
            precompiler = _Precompiler(tdev, plan, opts)
            result.stats["pool_start_s"] = time.monotonic() - t0
        prior = _prior_best(target, dinfo) if _gpu_pipeline(tdev) and opts.prune else {}
        for problem, insts in plan:
            if not insts:
                continue
            if _past(opts.deadline):
                result.stopped_early = True
                break
            try:
                rows = tune_problem(problem, insts, device=tdev, options=opts, progress=bar,
                                    prior_best_ms=prior.get(problem.key), _precompiler=precompiler)
            except FatalDeviceError as exc:
                target.add(getattr(exc, "rows", []))
                raise
            t0 = time.monotonic()
            target.add(rows)
            result.stats["db_write_s"] = result.stats.get("db_write_s", 0.0) + time.monotonic() - t0
            _add_stats(result.stats, rows.stats)
            result.extend(rows)
            if rows.stopped:
                result.stopped_early = True
                break
    finally:
        if precompiler is not None:
            precompiler.close()
        bar.close()
    return result


def _prior_best(db: TuningDB, device: DeviceInfo) -> dict[str, float]:
    """problem key -> the fastest valid ``ok`` time ``db`` already holds (resumed sweeps prune against it)."""
    df = db.read()
    if len(df) == 0:
        return {}
    df = valid_rows(df, device=device, software=current_software(), kernel_hashes=registry_kernel_hashes())
    if len(df) == 0:
        return {}
    return {k: float(v) for k, v in df.groupby("problem_key")["median_ms"].min().items() if v == v and v > 0}


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
