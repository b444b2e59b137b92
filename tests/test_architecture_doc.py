"""docs/ARCHITECTURE.md stays true: its module map names every module of the package, and
every module or file it names exists."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "ARCHITECTURE.md"
PACKAGE = REPO / "gpustats"
# Directories the map names as one entry, for modules that together do one job.
WHOLE_DIRECTORIES = ("demo/", "simulator/")


def _modules() -> set[str]:
    """Every module of the package, as the map writes it (``engine/ledger.py``)."""
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and "_pb2" not in p.name}


def _named(text: str) -> set[str]:
    """Paths in backticks, with a sibling list such as ``fields.py`, `gpm.py`` after a full
    path resolved against that path's directory (within one list item)."""
    names: set[str] = set()
    directory = ""
    for line in text.splitlines():
        if not line.startswith("  "):         # a new list item, heading or paragraph
            directory = ""
        for token in re.findall(r"`([\w/.*-]+)`", line):
            if "/" in token:
                directory = token.rsplit("/", 1)[0] + "/"
                names.add(token)
            elif token.endswith(".py"):
                names.add(directory + token)
    return names


def test_the_module_map_names_every_module():
    named = _named(DOC.read_text())
    missing = sorted(m for m in _modules()
                     if m not in named and not m.startswith(WHOLE_DIRECTORIES)
                     and m not in {"__main__.py"})
    assert not missing, f"modules missing from docs/ARCHITECTURE.md: {missing}"


def test_every_module_it_names_exists():
    named = _named(DOC.read_text())
    modules = _modules()
    stale = sorted(n for n in named if n.endswith(".py") and "_pb2" not in n
                   and n not in modules and not (REPO / n).exists())
    assert not stale, f"docs/ARCHITECTURE.md names modules that do not exist: {stale}"


def test_the_reader_of_names_is_not_vacuous():
    assert _named("- `sources/nvml/fields.py`, `gpm.py` — x") == {
        "sources/nvml/fields.py", "sources/nvml/gpm.py"}
    assert "engine/ledger.py" in _named(DOC.read_text())
