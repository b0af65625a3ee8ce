"""The public operations ``conv_bwd_data`` and ``conv_bwd_weight``: checks, instance choice, launch.

Every check happens before any launch, and each error names the problem: the tensor and the shape
its layout needs, a dtype or device mismatch, a non-contiguous tensor, a D of the wrong shape, a
combination not declared in configs/, or an instance that cannot run the problem (with its reason).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .algorithms import RunArgs, Runner, interpreting
from .dtypes import DataType, resolve_dtype
from .epilogue import FusedOp, resolve_fused_op
from .geometry import ConvGeometry
from .instance import Instance
from .layouts import LayoutTriple, parse_layout
from .problem import ConvParams
from .registry import get_registry

__all__ = ["conv_bwd_data", "conv_bwd_weight", "prepare"]

# which tensors each op takes, in the contract's order, and what the result is
_OPERANDS = {
    "conv_bwd_data": (("grad_out", "output"), ("weight", "weight"), "input"),
    "conv_bwd_weight": (("input", "input"), ("grad_out", "output"), "weight"),
}


def _check_tensor(name: str, t: Any, want_shape: tuple[int, ...], lt: LayoutTriple, tensor: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != want_shape:
        letters = getattr(lt, tensor)
        raise ValueError(f"{name} has shape {tuple(t.shape)}, but layout {letters} with these params needs "
                         f"({', '.join(letters)}) = {want_shape}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous in its layout's shape {want_shape} "
                         f"(got strides {tuple(t.stride())}); call .contiguous() first")


def _check_device(tensors: dict[str, torch.Tensor]) -> torch.device:
    devices = {n: t.device for n, t in tensors.items()}
    first_name, dev = next(iter(devices.items()))
    for n, d in devices.items():
        if d != dev:
            raise ValueError(f"{n} is on {d} but {first_name} is on {dev}; all tensors must share a device")
    if dev.type == "cpu" and not interpreting():
        raise RuntimeError("CPU tensors run only in the Triton interpreter: set TRITON_INTERPRET=1 before "
                           "importing triton, or move the tensors to a CUDA device")
    if dev.type == "cuda" and interpreting():
        raise RuntimeError("TRITON_INTERPRET=1 is set, so Triton runs on the CPU: pass CPU tensors or unset it")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unsupported device {dev}; use a CUDA device (or CPU with TRITON_INTERPRET=1)")
    return dev


def _resolve_instance(instance: Any, op: str, params: ConvParams, lt: LayoutTriple, dt: DataType,
                      fused: FusedOp, device: torch.device, compute_dtype: str | None,
                      wei_dtype: torch.dtype | None) -> Instance:
    if instance is None:
        from .tuning import lookup as lookup_module  # late: the tuning package reads the registry too

        if _HOT.clear not in lookup_module.CLEAR_HOOKS:  # a new lookup answer must reach the hot cache
            lookup_module.CLEAR_HOOKS.append(_HOT.clear)
            _LOOKUP[0] = lookup_module
        return lookup_module.lookup(op, params, layout=lt.name, dtype=dt.data, fused_op=fused.name,
                      compute_dtype=compute_dtype, wei_dtype=wei_dtype, device=device)
    inst = get_registry().get(instance) if isinstance(instance, str) else instance
    if not isinstance(inst, Instance):
        raise TypeError(f"instance must be None, an instance name or an Instance, got {type(instance).__name__}")
    if inst.op != op:
        raise ValueError(f"instance {inst.name} is a {inst.op} instance and cannot run {op}")
    reason = inst.decline(params, lt, dt, fused.name)
    if reason is not None:
        raise ValueError(f"instance {inst.name} cannot run {op} {params.key()} ({lt.name}, {dt.name}, "
                         f"{fused.name}): {reason}")
    return inst


@dataclass(frozen=True)
class _Plan:
    """What one (op, params, layout, dtypes, fused op, #Ds) needs, checked once and then cached."""

    lt: LayoutTriple
    dt: DataType
    fused: FusedOp
    user_fn: Any
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    result_shape: tuple[int, ...]
    result_dtype: torch.dtype
    geo: ConvGeometry


_PLANS: dict[tuple, _Plan] = {}
_ACCEPTED: set[tuple[str, tuple]] = set()  # (instance name, plan key) pairs that passed decline()


def _build_plan(op: str, a: torch.Tensor, b: torch.Tensor, params: ConvParams, layout: str | LayoutTriple,
                n_ds: int, fused_op: Any, wei_dtype: torch.dtype | None, compute_dtype: str | None) -> _Plan:
    if not isinstance(params, ConvParams):
        raise TypeError(f"params must be an instance_factory.ConvParams, got {type(params).__name__}")
    lt = parse_layout(layout, params.ndim)
    (_, a_tensor), (_, b_tensor), result_tensor = _OPERANDS[op]
    if wei_dtype is not None and op != "conv_bwd_weight":
        raise TypeError("wei_dtype= applies to conv_bwd_weight only")
    dt = resolve_dtype(a.dtype, compute_dtype=compute_dtype, wei_dtype=wei_dtype)
    fused, user_fn = resolve_fused_op(fused_op, n_ds)
    if not get_registry().is_declared(op, lt, dt.name, params.ndim, fused.name):
        raise ValueError(f"{op} is not declared for layout {lt.name}, dtype {dt.name} ({dt.label}), "
                         f"{params.ndim}D, fused op {fused.name!r}: see configs/{op}.yaml")
    return _Plan(lt, dt, fused, user_fn, lt.shape(a_tensor, params), lt.shape(b_tensor, params),
                 lt.shape(result_tensor, params), dt.result or dt.data, ConvGeometry.build(params, lt))


def _check_call(op: str, plan: _Plan, a: torch.Tensor, b: torch.Tensor, ds: tuple) -> torch.device:
    """Per-call tensor checks against a cached plan; the slow, message-building checks run only on failure."""
    ok = (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == plan.a_shape
          and b.shape == plan.b_shape and a.dtype == b.dtype and a.is_contiguous() and b.is_contiguous())
    if ok:
        dev = a.device
        ok = b.device == dev and dev.type == _DEVICE_TYPE[interpreting()]
        for d in ds:
            ok = ok and isinstance(d, torch.Tensor) and d.shape == plan.result_shape and d.is_contiguous() \
                and d.dtype in (plan.result_dtype, torch.float32) and d.device == dev
        if ok:
            return dev
    # find and name the problem
    (a_name, a_tensor), (b_name, b_tensor), result_tensor = _OPERANDS[op]
    _check_tensor(a_name, a, plan.a_shape, plan.lt, a_tensor)
    _check_tensor(b_name, b, plan.b_shape, plan.lt, b_tensor)
    if a.dtype != b.dtype:
        raise TypeError(f"{a_name} is {a.dtype} but {b_name} is {b.dtype}; both operands must share a dtype")
    for i, d in enumerate(ds):
        _check_tensor(f"ds[{i}]", d, plan.result_shape, plan.lt, result_tensor)
        if d.dtype not in (plan.result_dtype, torch.float32):
            raise TypeError(f"ds[{i}] is {d.dtype}; a D must have the result's dtype {plan.result_dtype} "
                            "or float32")
    return _check_device({a_name: a, b_name: b, **{f"ds[{i}]": d for i, d in enumerate(ds)}})


_DEVICE_TYPE = {False: "cuda", True: "cpu"}  # the device type Triton runs on, by interpreting()


def _plan_for(op: str, a: Any, b: Any, params: ConvParams, layout: str | LayoutTriple, ds: tuple, fused_op: Any,
              wei_dtype: torch.dtype | None, compute_dtype: str | None) -> tuple[tuple | None, _Plan]:
    """The cached plan of this problem description (key None when it cannot be cached)."""
    key = (op, params, layout, a.dtype if isinstance(a, torch.Tensor) else None, len(ds), fused_op, wei_dtype,
           compute_dtype)
    try:
        return key, _PLANS[key]
    except KeyError:
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"{_OPERANDS[op][0][0]} must be a torch.Tensor, got {type(a).__name__}") from None
        plan = _PLANS[key] = _build_plan(op, a, b, params, layout, len(ds), fused_op, wei_dtype, compute_dtype)
        return key, plan
    except TypeError:  # unhashable description: check without caching
        return None, _build_plan(op, a, b, params, layout, len(ds), fused_op, wei_dtype, compute_dtype)


def _choose(op: str, plan: _Plan, key: tuple | None, params: ConvParams, instance: Any, device: torch.device,
            compute_dtype: str | None, wei_dtype: torch.dtype | None) -> Instance:
    if instance is None:
        return _resolve_instance(None, op, params, plan.lt, plan.dt, plan.fused, device, compute_dtype, wei_dtype)
    name = instance if isinstance(instance, str) else getattr(instance, "name", None)
    if key is None or (name, key) not in _ACCEPTED:
        inst = _resolve_instance(instance, op, params, plan.lt, plan.dt, plan.fused, device, compute_dtype,
                                 wei_dtype)
        if key is not None:
            _ACCEPTED.add((name, key))
        return inst
    return get_registry().get(instance) if isinstance(instance, str) else instance


def _resolve(op: str, a: Any, b: Any, params: ConvParams, layout: str | LayoutTriple, ds: tuple, fused_op: Any,
             wei_dtype: torch.dtype | None, compute_dtype: str | None,
             instance: Any) -> tuple[tuple | None, _Plan, torch.device, Instance, torch.Tensor]:
    """Plan (cached), per-call tensor checks, instance choice and the result allocation."""
    key, plan = _plan_for(op, a, b, params, layout, ds, fused_op, wei_dtype, compute_dtype)
    device = _check_call(op, plan, a, b, ds)
    inst = _choose(op, plan, key, params, instance, device, compute_dtype, wei_dtype)
    return key, plan, device, inst, torch.empty(plan.result_shape, dtype=plan.result_dtype, device=device)


def _real(name: str, value: Any) -> float:
    """``value`` as a float, when it is a real number (int, float, bool, a NumPy scalar); else a TypeError: a string
    such as "2" or a tensor is a caller's mistake, not a scale factor."""
    if type(value) is float or isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{name} must be a real number (int or float), got {type(value).__name__} {value!r}"[:200])


def prepare(op: str, a: torch.Tensor, b: torch.Tensor, params: ConvParams, *, layout: str | LayoutTriple,
            ds: Sequence[torch.Tensor] = (), fused_op: Any = "passthrough", alpha: float = 1.0,
            beta: float = 1.0, wei_dtype: torch.dtype | None = None, compute_dtype: str | None = None,
            instance: Any = None) -> tuple[Instance, RunArgs]:
    """Check everything, choose the instance, allocate the result: what a launch needs.

    The checks that depend only on the problem description are done once per distinct description
    and cached; each call re-checks the tensors themselves (shape, dtype, device, contiguity).
    """
    ds = tuple(ds)
    key, plan, device, inst, out = _resolve(op, a, b, params, layout, ds, fused_op, wei_dtype, compute_dtype,
                                            instance)
    args = RunArgs(params=params, layout=plan.lt, dtype=plan.dt, fused=plan.fused, user_fn=plan.user_fn,
                   alpha=_real("alpha", alpha), beta=_real("beta", beta), a=a, b=b, ds=ds, out=out,
                   cfg=inst.kernel_config, geo=plan.geo)
    return inst, args


# bound runners per (plan key, instance, device, D dtypes): the per-problem host work done once
_RUNNERS: dict[tuple, Runner] = {}
_MAX_RUNNERS = 4096


# instance=None calls without Ds: (problem description, device) -> (plan, runner), everything that
# depends only on the problem in one dict hit (the plan, lookup and runner caches each re-hash the
# description). lookup.clear_cache() empties it, so a database write or a new policy takes effect.
_HOT: dict[tuple, tuple[_Plan, Runner]] = {}
_LOOKUP: list[Any] = [None]  # the lookup module, once a call has needed it (set before _HOT fills)


def _hot_key(op: str, params: ConvParams, layout: str | LayoutTriple, dtype: torch.dtype, device: torch.device,
             fused_op: Any, wei_dtype: torch.dtype | None, compute_dtype: str | None) -> tuple:
    return op, params, layout, dtype, device, fused_op, wei_dtype, compute_dtype


def hot_runner(op: str, params: ConvParams, layout: str | LayoutTriple, dtype: torch.dtype,
               device: torch.device, *, compute_dtype: str | None = None) -> Runner | None:
    """The bound runner that an ``instance=None`` call without Ds and with default arguments (but
    ``compute_dtype``) last used for this problem (the hot cache), or None. Callers that keep it must
    drop it when the lookup cache clears (``tuning.lookup.CLEAR_HOOKS``) and call
    :func:`recheck_database` before each use."""
    hot = _HOT.get(_hot_key(op, params, layout, dtype, device, "passthrough", None, compute_dtype))
    return None if hot is None else hot[1]


def recheck_database() -> None:
    """The hot path's throttled check for rows another process wrote (clears the caches on a change)."""
    if _LOOKUP[0] is not None:
        _LOOKUP[0].recheck_files()


def _launch(run: Runner, device: torch.device, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, ds: tuple,
            alpha: float, beta: float) -> None:
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # Triton launches on the current device: make it the tensors' one
            run(a, b, out, ds, alpha, beta)
    else:
        run(a, b, out, ds, alpha, beta)


def _call(op: str, a: Any, b: Any, params: ConvParams, layout: str | LayoutTriple, ds: Sequence[torch.Tensor],
          fused_op: Any, alpha: float, beta: float, wei_dtype: torch.dtype | None, compute_dtype: str | None,
          instance: Any) -> torch.Tensor:
    """The public ops' body: checks, instance choice, allocation, then the cached runner."""
    ds = ds if type(ds) is tuple else tuple(ds)
    hot_key = None
    if instance is None and not ds and isinstance(a, torch.Tensor):
        hot_key = _hot_key(op, params, layout, a.dtype, a.device, fused_op, wei_dtype, compute_dtype)
        try:
            hot = _HOT.get(hot_key)
        except TypeError:  # unhashable description
            hot, hot_key = None, None
        if hot is not None:
            recheck_database()  # another process's new rows: clears _HOT through the lookup cache
            hot = _HOT.get(hot_key)
        if hot is not None:
            plan, run = hot
            device = _check_call(op, plan, a, b, ds)
            out = torch.empty(plan.result_shape, dtype=plan.result_dtype, device=device)
            _launch(run, device, a, b, out, ds, _real("alpha", alpha), _real("beta", beta))
            return out
    alpha, beta = _real("alpha", alpha), _real("beta", beta)  # before the lookup: a bad call never launches
    key, plan, device, inst, out = _resolve(op, a, b, params, layout, ds, fused_op, wei_dtype, compute_dtype,
                                            instance)
    rkey = None if key is None else (key, inst.name, device, *(d.dtype for d in ds))
    run = _RUNNERS.get(rkey) if rkey is not None else None
    if run is None:
        args = RunArgs(params=params, layout=plan.lt, dtype=plan.dt, fused=plan.fused, user_fn=plan.user_fn,
                       alpha=alpha, beta=beta, a=a, b=b, ds=ds, out=out, cfg=inst.kernel_config, geo=plan.geo)
        run = inst.alg.bind(args)
        if rkey is not None:
            if len(_RUNNERS) >= _MAX_RUNNERS:
                _RUNNERS.clear()
                _HOT.clear()
            _RUNNERS[rkey] = run
    _launch(run, device, a, b, out, ds, alpha, beta)
    if hot_key is not None and key is not None:
        _HOT[hot_key] = (plan, run)
    return out


def conv_bwd_data(grad_out: torch.Tensor, weight: torch.Tensor, params: ConvParams, *,
                  layout: str | LayoutTriple, ds: Sequence[torch.Tensor] = (), op: Any = "passthrough",
                  alpha: float = 1.0, beta: float = 1.0, instance: Any = None,
                  compute_dtype: str | None = None) -> torch.Tensor:
    """dL/dIn = f(conv_bwd_data(grad_out, weight), D0, D1, ...), returned in the input layout."""
    return _call("conv_bwd_data", grad_out, weight, params, layout, ds, op, alpha, beta, None, compute_dtype,
                 instance)


def conv_bwd_weight(input: torch.Tensor, grad_out: torch.Tensor, params: ConvParams, *,
                    layout: str | LayoutTriple, ds: Sequence[torch.Tensor] = (), op: Any = "passthrough",
                    alpha: float = 1.0, beta: float = 1.0, wei_dtype: torch.dtype | None = None,
                    instance: Any = None, compute_dtype: str | None = None) -> torch.Tensor:
    """dL/dW = f(conv_bwd_weight(input, grad_out), D0, ...), returned in the weight layout."""
    return _call("conv_bwd_weight", input, grad_out, params, layout, ds, op, alpha, beta, wei_dtype, compute_dtype,
                 instance)
