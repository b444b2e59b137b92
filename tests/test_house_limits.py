"""The limits the house sets itself (docs/ARCHITECTURE.md, "Checks and tests"), checked by
reading the tree: no function above cyclomatic complexity 20, no product module above 500 lines
(the simulator aside), test modules share helpers only through ``tests/support``, and a test
sleeps a fixed time only where the duration is the point (marked so, and few).

Some modules still over a limit are being reworked elsewhere; they are listed below with the
figure each has today. The lists only shrink: a listed one that grows fails, a new one fails,
and so does a listed one already back within its limit (strike it from the list).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "gpustats"
MAX_COMPLEXITY = 20
MAX_LINES = 500
# "module:qualified name" → its cyclomatic complexity today.
COMPLEX = {
    "engine/collector.py:Housekeeper.tick": 27,
    "export/summary.py:summary_dict": 27,
}
# A test's fixed sleep ends its line with this marker and what the duration is for.
SLEEP_MARK = "# measures:"
MAX_SLEEPS = 65
# module → its lines today.
LONG = {
    "serving.py": 695,
    "sources/nvml/sweep.py": 595,
    "attribution.py": 528,
    "engine/state_files.py": 518,
}


def _decisions(node: ast.AST) -> int:
    """Decision points in ``node`` and below, nested functions and classes left to their own
    count. Counted as radon's ``cc`` counts them: +1 for each ``if``, conditional expression,
    ``assert``, loop (+1 more for its ``else``), comprehension ``for`` and its ``if``s,
    ``except`` handler, a ``try``'s ``else``, ``match`` case but the wildcard, and each extra
    operand of ``and``/``or``."""
    total = 0
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(child, ast.Try):
            total += len(child.handlers) + bool(child.orelse)
        elif isinstance(child, ast.BoolOp):
            total += len(child.values) - 1
        elif isinstance(child, (ast.If, ast.IfExp, ast.Assert)):
            total += 1
        elif isinstance(child, ast.Match):
            wild = any(getattr(c.pattern, "pattern", False) is None for c in child.cases)
            total += max(0, len(child.cases) - wild)
        elif isinstance(child, (ast.For, ast.AsyncFor, ast.While)):
            total += 1 + bool(child.orelse)
        elif isinstance(child, ast.comprehension):
            total += 1 + len(child.ifs)
        total += _decisions(child)
    return total


def complexities(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, cyclomatic complexity) of every function and method in ``tree``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + node.name
            yield name, 1 + _decisions(node)
            yield from complexities(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from complexities(node, prefix + node.name + ".")
        else:
            yield from complexities(node, prefix)


def _product_modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), path


def _over(found: dict[str, int], listed: dict[str, int], limit: int) -> list[str]:
    """What breaks the shrinking list: a new offender, a listed one grown, or one within."""
    problems = [f"{name}: {value} (limit {limit})" for name, value in found.items()
                if value > limit and name not in listed]
    problems += [f"{name}: {found[name]}, listed at {value}" for name, value in listed.items()
                 if name in found and found[name] > value]
    problems += [f"{name}: {found.get(name)} is within {limit}: strike it from the list"
                 for name in listed if found.get(name, 0) <= limit]
    return problems


def test_no_function_above_complexity_20():
    found = {f"{module}:{name}": value for module, path in _product_modules()
             for name, value in complexities(ast.parse(path.read_text(), str(path)))}
    assert not _over(found, COMPLEX, MAX_COMPLEXITY), _over(found, COMPLEX, MAX_COMPLEXITY)


def test_no_product_module_above_500_lines():
    found = {module: len(path.read_text().splitlines()) for module, path in _product_modules()
             if not module.startswith("simulator/")}
    assert not _over(found, LONG, MAX_LINES), _over(found, LONG, MAX_LINES)


def test_the_complexity_count_is_radons():
    """The counter on a function with one of each decision point."""
    source = (
        "def f(xs):\n"
        "    if xs and xs[0] or not xs:\n"           # if, and, or: 3
        "        return [x for x in xs if x if x]\n"  # comprehension and two ifs: 3
        "    for x in xs:\n"                         # for with else: 2
        "        pass\n"
        "    else:\n"
        "        pass\n"
        "    try:\n"                                 # two handlers and else: 3
        "        pass\n"
        "    except ValueError:\n"
        "        pass\n"
        "    except KeyError:\n"
        "        pass\n"
        "    else:\n"
        "        pass\n"
        "    assert xs\n"                            # 1
        "    def inner():\n"                         # counted on its own: 1 + 1
        "        return 1 if xs else 2\n"
        "    return inner\n")
    assert dict(complexities(ast.parse(source))) == {"f": 13, "f.inner": 2}


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


def _sleeps(tree: ast.AST) -> Iterator[int]:
    """The line of every ``time.sleep(…)`` (or ``sleep(…)`` imported from ``time``) call."""
    from_time = {alias.asname or alias.name for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module == "time"
                 for alias in node.names if alias.name == "sleep"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "sleep" \
                and isinstance(func.value, ast.Name) and func.value.id == "time" \
                or isinstance(func, ast.Name) and func.id in from_time:
            yield node.lineno


def test_fixed_sleeps_only_where_a_duration_is_measured():
    """Waiting for something is waiting on it (``tests/support/waiting.py``, the daemon's
    ``wait_for`` and ``wait_ticks``); a fixed ``time.sleep`` is kept only where a test measures
    a duration (or a fake is slow on purpose), its line marked ``# measures: <what>``, and
    there are at most 65 of them."""
    unmarked, marked = [], []
    for path in sorted(TESTS.rglob("*.py")):
        lines = path.read_text().splitlines()
        for line in _sleeps(ast.parse("\n".join(lines), str(path))):
            where = f"{path.relative_to(TESTS.parent)}:{line}"
            (marked if SLEEP_MARK in lines[line - 1] else unmarked).append(where)
    assert not unmarked, f"unmarked fixed sleeps: {unmarked}"
    assert len(marked) <= MAX_SLEEPS, marked
