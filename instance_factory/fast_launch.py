"""Launch a Triton kernel again and again with the same grid, scalars and constexprs, cheaply.

``fn[grid](*args, **kwargs)`` re-binds and re-specializes every argument on every call: about
32 us of host time for our ~45-argument kernels on an H200 host (tools/overhead_probe.py), which
is longer than many small convolutions take on the GPU. A ``BoundKernel`` makes its first call
through that normal path (which compiles and returns the ``CompiledKernel``) and later calls go
straight to the compiled kernel's launcher (~9 us), as Triton's own ``run`` does after its cache
lookup. That shortcut is only taken while everything Triton specializes on still matches the
first call: the same device, every tensor 16-byte aligned as it was, and no launch hooks
(profilers) installed. Otherwise, and always in the interpreter, each call takes the normal path.

Compile-only: inside ``with compile_only():`` a ``BoundKernel`` called from that thread compiles its
kernel (or loads it from Triton's cache) through Triton's public ``kernel.warmup(*args, grid=...,
**constexprs)`` and launches nothing; calls from other threads are unaffected. The tuner compiles
candidates ahead this way. In the interpreter there is nothing to compile: ``warmup`` returns at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .algorithms import interpreting

__all__ = ["BoundKernel", "compile_only", "compile_only_supported"]


try:
    from triton import knobs as _knobs
except ImportError:  # a Triton without knobs: no shortcut
    _knobs = None


def _launch_hooks_installed() -> bool:
    """A profiler's launch hook is set (Triton >= 3.5 keeps hooks in HookChains, empty by default)."""
    rt = _knobs.runtime
    for hook in (rt.launch_enter_hook, rt.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


_MODE = threading.local()  # .compile_only: BoundKernel calls from this thread only compile


def compile_only_supported() -> bool:
    """Whether this Triton's kernels compile without launching (a public ``warmup``, Triton >= 3.6)."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    return callable(getattr(JITFunction, "warmup", None))


@contextmanager
def compile_only(enabled: bool = True) -> Iterator[None]:
    """While inside (when ``enabled``), ``BoundKernel`` calls from this thread compile and do not
    launch. The caller checks :func:`compile_only_supported` first. Host work around the kernels
    (allocations, zeroing a workspace) still runs."""
    prev = getattr(_MODE, "compile_only", False)
    _MODE.compile_only = enabled or prev
    try:
        yield
    finally:
        _MODE.compile_only = prev


class BoundKernel:
    """``fn`` with its grid and keyword arguments (constexprs, num_warps, ...) fixed.

    Call it with the kernel's positional arguments. The caller guarantees that the non-tensor
    positional arguments and the tensors' dtypes are the same on every call (they come from one
    problem plan); tensor addresses may change.
    """

    __slots__ = ("fn", "grid", "kwargs", "_fast", "_tensor_pos", "_device", "_tail", "_stream_of", "_device_now")

    def __init__(self, fn: Any, grid: tuple[int, ...], **kwargs: Any) -> None:
        self.fn = fn
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.kwargs = kwargs
        self._fast: Any = None  # the CompiledKernel, once the shortcut is known to be safe
        self._tensor_pos: tuple[int, ...] = ()
        self._device = -1
        self._tail: tuple = ()  # constexpr values in signature order, after the positional args
        self._stream_of: Any = None  # Triton's own current-stream and current-device getters
        self._device_now: Any = None

    def __call__(self, *args: Any) -> None:
        if getattr(_MODE, "compile_only", False):
            self.fn.warmup(*args, grid=self.grid, **self.kwargs)
            return
        ck = self._fast
        if ck is not None:
            bits = 0
            for i in self._tensor_pos:
                bits |= args[i].data_ptr()
            if bits & 15 == 0 and self._device_now() == self._device and not _launch_hooks_installed():
                g0, g1, g2 = self.grid
                stream = self._stream_of(self._device)
                ck.run(g0, g1, g2, stream, ck.function, ck.packed_metadata, None, None, None, *args, *self._tail)
                return
        compiled = self.fn[self.grid](*args, **self.kwargs)
        if self._fast is None and not interpreting():
            self._enable_shortcut(compiled, args)

    def _enable_shortcut(self, compiled: Any, args: tuple) -> None:
        """Remember the compiled kernel when the first call was an ordinary, fully aligned one."""
        names = getattr(self.fn, "arg_names", None)
        needed = ("run", "function", "packed_metadata")
        if _knobs is None or compiled is None or names is None or not all(hasattr(compiled, a) for a in needed):
            return
        try:
            from triton.runtime import driver

            stream_of, device_now = driver.active.get_current_stream, driver.active.get_current_device
        except (ImportError, AttributeError):
            return
        rest = names[len(args):]
        if any(n not in self.kwargs for n in rest):
            return  # a defaulted parameter: leave binding to Triton
        tensors = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        if any(args[i].data_ptr() % 16 for i in tensors) or not all(args[i].is_cuda for i in tensors):
            return
        self._tail = tuple(self.kwargs[n] for n in rest)
        self._tensor_pos = tensors
        self._device = device_now()
        self._stream_of, self._device_now = stream_of, device_now
        self._fast = compiled
