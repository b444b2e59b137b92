"""The limits the house sets itself (docs/ARCHITECTURE.md, "Checks and tests"), checked by
reading the tree: test modules share helpers only through ``tests/support``."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _test_module_names() -> set[str]:
    return {p.stem for p in TESTS.rglob("test_*.py")}


def _imported(tree: ast.AST) -> set[str]:
    """Every module name an ``import`` or ``from … import`` names (relative ones by their
    last part)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}".lstrip(".") for alias in node.names)
    return found


def test_no_test_module_imports_another():
    """A helper two test modules need lives in ``tests/support``, never in a test module."""
    names = _test_module_names()
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        for module in _imported(ast.parse(path.read_text(), str(path))):
            if module.split(".")[-1] in names or any(
                    part in names for part in module.split(".")[:-1]):
                offenders.append(f"{path.relative_to(TESTS.parent)} imports {module}")
    assert not offenders, offenders
