"""DESIGN.md's layering, checked by reading every module's imports."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpustats"

# layer -> gpustats layers it may import (itself always allowed)
PURE = {"model"}
RULES = {
    "model": set(),
    "attribution": PURE,
    "health": PURE,
    "saturation": PURE,
    "hostfs": set(),
    "sdnotify": set(),
    "fdlimit": set(),     # the open-file limit shared by serving and kept cgroup files
    "malloc_arenas": set(),   # glibc's malloc arenas, capped once before threads start
    "documents": {"hostfs"},     # untrusted YAML and JSON, read and loaded with bounds
    "config": {"documents"},
    "sources": {"model", "hostfs", "documents"},
    "simulator": {"documents"},  # a tool below pynvml, not a source: no other layer
    "engine": {"model", "attribution", "health", "saturation", "sources", "hostfs"},
    "export": {"model", "engine.store"},
    "web": {"export", "engine.store", "model"},
    "serving": {"fdlimit"},   # the HTTP listeners (waitress), handed the apps by cli
    "cli": None,   # wires everything
    "__main__": None,
    "__init__": set(),
}
THIRD_PARTY_OWNERS = {"pynvml": ("sources.nvml", "simulator"), "grpc": "sources.", "flask": "web",
                      "waitress": ("cli", "serving"), "prometheus_client": ("export", "sources.dcgm")}


def _layer(module: str) -> str:
    return module.split(".")[0]


def _modules():
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"] or ["__init__"]
        yield ".".join(parts), path


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_layers_import_only_what_design_allows():
    violations = []
    for module, path in _modules():
        allowed = RULES.get(_layer(module), set())
        if allowed is None:
            continue
        for imported in _imports(path):
            if not imported.startswith("gpustats."):
                continue
            target = imported.removeprefix("gpustats.")
            if _layer(target) == _layer(module):
                continue
            if not any(target == a or target.startswith(a + ".") or _layer(target) == a
                       for a in allowed):
                violations.append(f"{module} imports {imported}")
    assert not violations, "\n".join(violations)


def test_third_party_boundaries():
    violations = []
    for module, path in _modules():
        for imported in _imports(path):
            top = imported.split(".")[0]
            owners = THIRD_PARTY_OWNERS.get(top)
            if owners is None:
                continue
            owners = owners if isinstance(owners, tuple) else (owners,)
            if not any(module == o or module.startswith(o) for o in owners):
                violations.append(f"{module} imports {top}")
    assert not violations, "\n".join(violations)


def test_rules_are_not_vacuous():
    modules = dict(_modules())
    assert "sources.nvml.sweep" in modules and "engine.collector" in modules
    assert any("pynvml" == i for i in _imports(modules["sources.nvml.sweep"]))


def test_nvml_source_is_the_real_boundary_only():
    """The simulator lives in its own package; nothing under sources/nvml knows it exists."""
    for module, path in _modules():
        if module.startswith("sources."):
            assert not any(i.startswith("gpustats.simulator") for i in _imports(path)), module
