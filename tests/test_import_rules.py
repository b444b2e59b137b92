"""The layering of docs/ARCHITECTURE.md ("Floors"), checked by reading every module's imports."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpustats"

# layer -> gpustats layers it may import (itself always allowed)
PURE = {"model"}
RULES = {
    "model": set(),
    "attribution": PURE | {"engine_time"},
    "engine_time": PURE,         # shares by the engine time DRM drivers measure (pure)
    "health": PURE,
    "saturation": PURE,
    "hostfs": set(),
    "kept_files": {"hostfs"},    # cgroup stat files kept open, read with hostfs's bounds
    "dir_changes": set(),        # the inotify watch of cgroup directories
    "sdnotify": set(),
    "fdlimit": set(),     # the open-file limit shared by serving and kept cgroup files
    "malloc_arenas": set(),   # glibc's malloc arenas, capped once before threads start
    "documents": {"hostfs"},     # untrusted YAML and JSON, read and loaded with bounds
    "config": {"documents", "config_values", "usage.tariff"},
    "config_values": {"documents", "usage.tariff"},    # the options' value parsers (pure)
    # usage kept on the node (SQLite) and its reports; the tariffs the options parse
    "usage": {"model", "documents"},
    # the subcommands: usage, top
    "commands": {"usage", "config", "documents", "engine.statedir"},
    "sources": {"model", "hostfs", "kept_files", "dir_changes", "documents"},
    "simulator": {"documents"},  # a tool below pynvml, not a source: no other layer
    "engine": {"model", "attribution", "engine_time", "health", "saturation", "sources",
               "hostfs"},
    "export": {"model", "engine.store"},
    "web": {"export", "engine.store", "model", "usage"},
    # NVSentinel's GpuService over gRPC: the web layer's peer, with the providers' store
    "deviceapi": {"export", "engine.store", "engine.provider_health", "model"},
    "serving": {"fdlimit", "serving_poll"},   # the HTTP listeners (waitress), handed the apps
    "serving_poll": set(),    # one turn of the serving loop
    "watch_streams": {"fdlimit", "peers", "peer_unread"},   # GPU watch streams, off the workers
    "peers": set(),       # who is at the other end of a connection
    "peer_unread": set(),   # what a connection's reader has not read, as the kernel says
    "fakehost": set(),    # fake host trees, for the demo and the tests
    "demo": {"fakehost", "config"},   # the demo node, wired in by cli
    "cli": None,   # wires everything
    "__main__": None,
    "__init__": set(),
}
THIRD_PARTY_OWNERS = {"pynvml": ("sources.nvml", "simulator"), "grpc": ("sources.", "deviceapi"),
                      "flask": "web",
                      "waitress": ("cli", "serving", "serving_poll"),
                      "prometheus_client": ("export", "sources.dcgm"),
                      "requests": "sources.dcgm", "urllib3": "sources.dcgm",
                      "psutil": ("sources.node", "sources.psutil_root")}


def _owned_by(module: str, owner: str) -> bool:
    """``owner`` names a package ("sources.nvml": its own modules only, not a sibling such as
    "sources.nvml_extra"), or ends in "." for every module below it ("sources.")."""
    if owner.endswith("."):
        return module.startswith(owner)
    return module == owner or module.startswith(owner + ".")


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
            if not any(_owned_by(module, o) for o in owners):
                violations.append(f"{module} imports {top}")
    assert not violations, "\n".join(violations)


def test_rules_are_not_vacuous():
    modules = dict(_modules())
    assert "sources.nvml.sweep" in modules and "engine.collector" in modules
    assert any(i == "pynvml" for i in _imports(modules["sources.nvml.sweep"]))


def test_nvml_source_is_the_real_boundary_only():
    """The simulator lives in its own package; nothing under sources/nvml knows it exists."""
    for module, path in _modules():
        if module.startswith("sources."):
            assert not any(i.startswith("gpustats.simulator") for i in _imports(path)), module


def test_pynvml_is_imported_only_beside_the_query_layer():
    """Only modules of the NVML source package (query.py's level, not a package below it) and
    the simulator that stands in for the driver import pynvml."""
    importers = {module for module, path in _modules()
                 if any(i.split(".")[0] == "pynvml" for i in _imports(path))}
    assert "sources.nvml.query" in importers
    stray = {m for m in importers
             if not (m.startswith("simulator.")
                     or (m.startswith("sources.nvml.") and m.count(".") == 2))}
    assert not stray, stray


def test_ownership_means_the_package_not_a_name_prefix():
    assert _owned_by("sources.nvml.sweep", "sources.nvml")
    assert not _owned_by("sources.nvml_extra", "sources.nvml")
    assert _owned_by("sources.dcgm", "sources.")
