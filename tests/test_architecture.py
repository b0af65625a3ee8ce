"""The package's layers import downward only, and no module imports itself back (docs/ARCHITECTURE.md).

Every module is parsed (AST, imports inside functions included, and ``importlib.import_module`` with
a literal name); each import must go to the same layer or a lower one, and the module graph must have
no cycle. ``instance_factory/__init__.py`` and ``__main__.py`` are the composition root: they wire
the layers together (the lookup's "tune" miss policy, the lazy public names) and may import anything.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "instance_factory"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE
COMPOSITION_ROOT = {"instance_factory", "instance_factory.__main__"}

# Lowest first. A name ending in ".*" covers a package's modules not named on their own; an exact
# name wins over a wildcard (tuning.lookup is run time although tuning.* is the tuning layer).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core types", ("problem", "layouts", "dtypes", "epilogue", "geometry", "kernel_identity", "reference",
                    "version")),
    ("kernel contract", ("algorithms", "fast_launch", "kernel_config")),
    ("kernels", ("kernels", "kernels.*")),
    ("instances", ("instance", "factory", "registry")),
    ("run time", ("ops", "tuning.lookup", "tuning.cost_model", "tuning.problem_distance", "tuning.packed_tiles",
                  "tuning.box_rounding", "tuning.walk_model", "tuning.model_constants", "tuning.roofline",
                  "tuning.row_times", "tuning.tier_index", "tuning.background", "tuning.database", "tuning.schema",
                  "tuning.storage")),
    ("verification harness", ("harness", "harness.*")),
    ("tuning", ("verify", "tuning", "tuning.*")),
    ("report", ("report", "report.*")),
    ("entry points", ("cli", "cli.*", "torch", "torch.*")),
]

# Modules over the size limit for now (none: keep it that way, split a module that grows past it)
OVERSIZED_FOR_NOW: set[str] = set()
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def layer_of(module: str) -> int:
    """Index in LAYERS of a package module (exact name first, then the longest wildcard)."""
    short = module.removeprefix(PACKAGE + ".")
    for i, (_, names) in enumerate(LAYERS):
        if short in names:
            return i
    best = None
    for i, (_, names) in enumerate(LAYERS):
        for name in names:
            prefix = name.removesuffix("*")
            if name.endswith(".*") and short.startswith(prefix) and (best is None or len(prefix) > best[1]):
                best = (i, len(prefix))
    if best is None:
        raise KeyError(f"{module} has no layer: add it to LAYERS in tests/test_architecture.py "
                       f"(and to docs/ARCHITECTURE.md)")
    return best[0]


def _resolve_from(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    if node.level:
        base_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base_parts = base_parts[: len(base_parts) - node.level + 1]
        base = ".".join(base_parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    # ``from pkg import name``: the submodule when ``name`` is one, else the module itself
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def imports_of(module: str, path: Path) -> set[str]:
    """The package modules that ``module`` imports anywhere in its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve_from(module, path, node))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value)
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")} - {module}


GRAPH = {m: imports_of(m, p) for m, p in MODULES.items()}


def test_layer_table_names_real_modules_and_covers_every_module():
    for _, names in LAYERS:
        for name in names:
            target = f"{PACKAGE}.{name.removesuffix('.*')}"
            assert target in MODULES, f"LAYERS names {name!r}, which is not a module of the package"
    for module in MODULES:
        if module not in COMPOSITION_ROOT:
            layer_of(module)  # raises for a module with no layer


def test_imports_go_to_the_same_or_a_lower_layer_only():
    upward = []
    for module, targets in GRAPH.items():
        if module in COMPOSITION_ROOT:
            continue
        for target in sorted(targets):
            if target in COMPOSITION_ROOT:
                upward.append(f"{module} imports the composition root {target} (import the defining module)")
            elif layer_of(target) > layer_of(module):
                upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                              f"({LAYERS[layer_of(target)][0]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that starts and ends on the same module, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle():
    graph = {m: t - COMPOSITION_ROOT for m, t in GRAPH.items() if m not in COMPOSITION_ROOT}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_catch_an_upward_import_and_a_cycle():
    # the walker itself: an upward edge is seen with its layers, a two-module loop is a cycle
    assert layer_of("instance_factory.tuning.lookup") < layer_of("instance_factory.tuning.tuner")
    assert layer_of("instance_factory.kernels.host") > layer_of("instance_factory.algorithms")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    with pytest.raises(KeyError, match="has no layer"):
        layer_of("instance_factory.not_a_module")


def test_no_module_over_the_size_limit():
    too_long = []
    for path in MODULES.values():
        rel = path.relative_to(PACKAGE_DIR).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and rel not in OVERSIZED_FOR_NOW:
            too_long.append(f"{rel}: {lines} lines")
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"


def test_run_time_lookup_never_loads_the_tuner():
    code = ("import sys, instance_factory.tuning.lookup as L, instance_factory.ops; "
            "assert L._TUNE_ON_MISS, 'the composition root did not register the tune policy'; "
            "bad = [m for m in sys.modules if m.startswith(('instance_factory.tuning.tuner', "
            "'instance_factory.tuning.sweep', 'instance_factory.verify'))]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE_DIR.parent)


def test_importing_the_package_does_not_load_triton():
    """The CLI picks the Triton interpreter on a machine without a GPU before triton is first imported
    (cli.backend); a package import that loads triton (lookup once imported relayout to register the
    twin resolver) makes every kernel a GPU kernel there and the quickstart fails on the CPU."""
    code = "import sys, instance_factory; assert 'triton' not in sys.modules, 'the package import loaded triton'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=PACKAGE_DIR.parent)


def test_argparse_lives_only_in_the_cli_package():
    # one place for the command line: the layers below expose typed functions, never parsers
    users = sorted(m for m, p in MODULES.items() if not m.startswith(f"{PACKAGE}.cli")
                   and any(isinstance(n, (ast.Import, ast.ImportFrom)) and "argparse" in
                           ([a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""])
                           for n in ast.walk(ast.parse(p.read_text()))))
    assert not users, f"argparse outside instance_factory/cli/: {users}"


def _triton_names(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "triton"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton" and not node.level:
            names |= {a.asname or a.name for a in node.names}
    return names


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_nothing_in_the_package_patches_triton():
    # compile-only goes through Triton's public warmup (fast_launch.compile_only), never through a
    # replaced Triton attribute: no assignment to, setattr on or del of anything imported from triton
    patches = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        triton_names = _triton_names(tree)
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
                targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
            for t in targets:
                if isinstance(t, (ast.Attribute, ast.Subscript)) and _root_name(t) in triton_names:
                    patches.append(f"{module} line {node.lineno}")
    assert not patches, f"Triton patched at: {patches}"
