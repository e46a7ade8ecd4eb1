"""The package layering, read from the source (ast; nothing is imported): the driver layer
imports no stage of the pipeline, and the schedulers import neither the runtime nor the host
layer at run time."""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterator

import pytest

import fuser

#: the package under test (the installed one where CI runs against a wheel)
PKG = Path(fuser.__file__).resolve().parent

#: top-level packages outside the standard library that the driver may import
DRIVER_THIRD_PARTY = frozenset({"torch", "numpy", "pycuda"})
#: fuser modules the driver may import: its own and the leaf `fuser.options`
DRIVER_FUSER = ("fuser.driver", "fuser.options")
#: what the schedulers must not import at run time (a TYPE_CHECKING import is fine)
SCHEDULER_FORBIDDEN = ("fuser.runtime", "fuser.host", "fuser.kernel")

DRIVER_MODULES = sorted((PKG / "driver").rglob("*.py")) + [PKG / "options.py"]
SCHEDULER_MODULES = sorted((PKG / "scheduler").rglob("*.py"))


def _module_name(path: Path) -> str:
    """The dotted name of the module at `path` under fuser/."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an `if` tests ``TYPE_CHECKING`` (bare or as ``typing.TYPE_CHECKING``)."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _nodes(node: ast.AST, *, run_time_only: bool) -> Iterator[ast.AST]:
    """Every node below `node`, without the bodies of ``if TYPE_CHECKING:`` when
    `run_time_only` (their ``else:`` runs, so it stays)."""
    for child in ast.iter_child_nodes(node):
        if run_time_only and isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield stmt
                yield from _nodes(stmt, run_time_only=True)
            continue
        yield child
        yield from _nodes(child, run_time_only=run_time_only)


def _imports(path: Path, *, run_time_only: bool = False) -> Iterator[tuple[int, tuple[str, ...]]]:
    """(line, names) for each name the module at `path` imports, anywhere in it (function
    bodies included). ``from a import b`` gives ``("a", "a.b")``: b may be a module of a or a
    name in it; relative imports are resolved against the module's package."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _nodes(tree, run_time_only=run_time_only):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, (alias.name,)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                yield node.lineno, (base, f"{base}.{alias.name}")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    """Whether module `name` is one of `prefixes` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _driver_may_import(name: str) -> bool:
    """Whether a driver module may import module `name`."""
    top = name.partition(".")[0]
    if top == "fuser":
        return _within(name, DRIVER_FUSER)
    return top in sys.stdlib_module_names or top in DRIVER_THIRD_PARTY


def test_the_driver_modules_are_found():
    names = {_module_name(p) for p in DRIVER_MODULES}
    assert {"fuser.driver", "fuser.driver.nvrtc", "fuser.driver.launch", "fuser.driver.kernel_cache"} <= names


@pytest.mark.parametrize("path", DRIVER_MODULES, ids=_module_name)
def test_the_driver_imports_nothing_of_the_pipeline(path: Path):
    bad = [(line, names[-1]) for line, names in _imports(path) if not any(map(_driver_may_import, names))]
    assert not bad, f"{_module_name(path)} imports above the driver layer (line, name): {bad}"


@pytest.mark.parametrize("path", SCHEDULER_MODULES, ids=_module_name)
def test_schedulers_import_no_runtime_or_host_at_run_time(path: Path):
    bad = [
        (line, names[-1])
        for line, names in _imports(path, run_time_only=True)
        if any(_within(n, SCHEDULER_FORBIDDEN) for n in names)
    ]
    assert not bad, f"{_module_name(path)} imports the runtime or host layer at run time (line, name): {bad}"
