"""Functions stay short enough to read at once: none in mazegym/, algos/ or runners/ runs over MAX_LINES lines, and
no module defines one twice."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mazegym", "algos", "runners")
MAX_LINES = 80
"""The most lines a function may span, its signature and docstring included (benchmarks/ and scripts/ excepted)."""

ALLOWED: dict[str, set[str]] = {}
"""Functions allowed over :data:`MAX_LINES`, by file."""


def long_functions(path: Path, limit: int = MAX_LINES) -> list[str]:
    """``name (N lines)`` of every function or method in the file that spans more than ``limit`` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_is_longer_than_the_limit():
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            found = [f for f in long_functions(path) if f.split(" ")[0] not in ALLOWED.get(name, set())]
            if found:
                offenders[name] = found
    assert offenders == {}


def test_every_allowed_function_is_still_long():
    """An allow-list entry goes once its function is split (else it would silently allow a new long one)."""
    stale = {
        name: sorted(allowed - {f.split(" ")[0] for f in long_functions(ROOT / name)})
        for name, allowed in ALLOWED.items()
    }
    assert {k: v for k, v in stale.items() if v} == {}


def defined_twice(path: Path) -> list[str]:
    """Names the module defines more than once at its top level (functions and classes): the later one silently wins."""
    names = [n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return sorted({name for name in names if names.count(name) > 1})


def test_no_module_defines_a_function_or_class_twice():
    offenders = {
        path.relative_to(ROOT).as_posix(): defined_twice(path)
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_scan_counts_signature_docstring_and_nested_functions(tmp_path):
    source = tmp_path / "m.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    nested = "\n".join(f"        y{i} = {i}" for i in range(80))
    source.write_text(f"def short():\n{body}\n\n\ndef outer():\n    def inner():\n{nested}\n")
    assert long_functions(source) == ["outer (82 lines)", "inner (81 lines)"]
