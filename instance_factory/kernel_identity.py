"""Kernel identity: a hash of the device code a kernel family runs, and of nothing else.

A tuned row or a verification is valid only for the kernel it measured, so each instance carries
``kernel_hash`` = hash(kernel code, op, algorithm, config). The kernel code is the algorithm's
``Algorithm.kernels`` (the ``@triton.jit`` kernels its ``bind`` launches) and every ``@triton.jit``
function they call, transitively (the epilogue, shared index helpers), plus the module-level
constants they read. Host code (launchers, binds, checks, registration) is not part of it: a host
refactor keeps the shipped tuning rows and GPU evidence valid. This is the idea of Triton's own
``JITFunction.cache_key`` without its line numbers and version-specific parts, so the same code
hashes the same on the GPU machines (Python 3.12, Triton 3.6) and here (3.11, newer Triton).

Each function's source counts by its code lines: docstrings, comment-only and blank lines do not
count (editing a kernel's notes must not stale its rows); line based, not ``ast.unparse``, whose
output differs between Python versions.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import textwrap
import types
from collections.abc import Iterable
from typing import Any

__all__ = ["code_lines", "jit_closure", "kernel_code_hash"]

_CONSTANT_TYPES = (bool, int, float, str)


def _jit_types() -> tuple[type, ...]:
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # older Triton: the interpreter wraps JITFunction itself
        return (JITFunction,)
    return (JITFunction, InterpretedFunction)


_JIT_TYPES = _jit_types()


def code_lines(text: str) -> list[str]:
    """The code lines of Python source ``text``: no docstrings, comment-only or blank lines."""
    text = textwrap.dedent(text)
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return [line.rstrip() for n, line in enumerate(text.splitlines(), 1)
            if n not in doc_lines and line.strip() and not line.lstrip().startswith("#")]


def _python_fn(obj: Any) -> types.FunctionType | None:
    """The Python function behind a ``@triton.jit`` object (a JITFunction, or the interpreter's
    InterpretedFunction under TRITON_INTERPRET=1: both hash the same), else None."""
    fn = getattr(obj, "fn", None)
    if not isinstance(fn, types.FunctionType) or not isinstance(obj, _JIT_TYPES):
        return None
    return fn


def _names(fn: types.FunctionType) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def jit_closure(kernels: Iterable[Any]) -> tuple[dict[str, types.FunctionType], dict[str, Any]]:
    """({"module.name": function} of the kernels and every jit function they reach,
    {"module.name": value} of the module-level constants those functions read)."""
    functions: dict[str, types.FunctionType] = {}
    constants: dict[str, Any] = {}
    todo = list(kernels)
    while todo:
        fn = _python_fn(todo.pop())
        if fn is None or f"{fn.__module__}.{fn.__name__}" in functions:
            continue
        functions[f"{fn.__module__}.{fn.__name__}"] = fn
        for name in _names(fn):
            value = fn.__globals__.get(name)
            if _python_fn(value) is not None:
                todo.append(value)
            elif isinstance(value, _CONSTANT_TYPES) and not name.startswith("__"):
                constants[f"{fn.__module__}.{name}"] = value
    return functions, constants


def _bare(qualified: str) -> str:
    return qualified.rsplit(".", 1)[1]


@functools.cache
def _hash_of(kernels: tuple[Any, ...]) -> str:
    # names without their module: moving a kernel or a helper to another module keeps the hash
    functions, constants = jit_closure(kernels)
    blob = {"functions": sorted((_bare(q), code_lines(inspect.getsource(f))) for q, f in functions.items()),
            "constants": sorted((_bare(q), repr(v)) for q, v in constants.items())}
    return hashlib.sha256(json.dumps(blob).encode()).hexdigest()


def kernel_code_hash(kernels: Iterable[Any]) -> str:
    """Hash of the device code of ``kernels`` (see the module docstring); order does not matter,
    nor the modules the code lives in."""
    ks = tuple(sorted(kernels, key=lambda k: f"{k.fn.__module__}.{k.fn.__name__}"))
    if not ks:
        raise ValueError("a kernel family must name the @triton.jit kernels it launches (Algorithm.kernels)")
    return _hash_of(ks)
