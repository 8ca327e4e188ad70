"""The package layering holds (mazegym <- algos <- runners) and docs/ARCHITECTURE.md names only what exists."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "mazegym": {"algos", "runners", "torch", "transformers", "peft", "vllm", "ray"},
    "algos": {"runners"},
}
"""Top-level packages each package must never import (anywhere: module level or inside functions)."""


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every absolute import in the file, function-local imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_go_one_way(package):
    offenders = {str(p.relative_to(ROOT)): sorted(imported_packages(p) & FORBIDDEN[package])
                 for p in sorted((ROOT / package).rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_scan_sees_function_local_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import numpy\n\ndef f():\n    from runners.local import train\n    import torch.nn\n")
    assert imported_packages(source) == {"numpy", "runners", "torch"}


ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"


def test_every_file_the_architecture_page_names_exists():
    text = ARCHITECTURE.read_text()
    names = set(re.findall(r"`([\w/]+\.py)`", text))
    files = [str(p.relative_to(ROOT)) for pkg in ("mazegym", "algos", "runners") for p in (ROOT / pkg).rglob("*.py")]
    missing = sorted(n for n in names if not any(f == n or f.endswith("/" + n) for f in files))
    assert names and missing == []


def test_every_dotted_name_the_architecture_page_uses_exists():
    text = ARCHITECTURE.read_text()
    dotted = set(re.findall(r"`((?:mazegym|algos|runners)(?:\.\w+)+)", text))
    missing = []
    for name in sorted(dotted):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # longest importable module prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert dotted and missing == []
