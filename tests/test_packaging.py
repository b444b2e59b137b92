"""The wheel as pip builds it: metadata users and indexes read, the licence, a quiet build."""

import ast
import configparser
import email
import re
import subprocess
import sys
import zipfile
from importlib.metadata import packages_distributions

import pytest

from tests.support.paths import REPO_ROOT

SOURCE = "https://github.com/gpustats/gpustats"


def _name(requirement):
    """The normalized distribution name of a Requires-Dist line (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The wheel `pip wheel -v` builds from the checkout, and everything the build printed."""
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps",
                             "--no-cache-dir", "-w", str(out), str(REPO_ROOT)],
                            capture_output=True, text=True, timeout=600)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    wheel = next(out.glob("gpustats-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(meta_name))
        licence = next((archive.read(n).decode() for n in names
                        if n.endswith(".dist-info/licenses/LICENSE")), None)
    return log, names, metadata, licence


def test_build_prints_no_deprecation(built):
    log = built[0]
    noisy = [line for line in log.splitlines() if "deprecat" in line.lower()]
    assert noisy == [], "\n".join(noisy)


def test_license_is_an_spdx_expression_with_its_text_in_the_wheel(built):
    _, _, metadata, licence = built
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["License"] is None          # the superseded free-text field
    assert licence == (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence


def test_classifiers_and_project_urls(built):
    metadata = built[2]
    classifiers = metadata.get_all("Classifier") or []
    for wanted in ("Operating System :: POSIX :: Linux", "Programming Language :: Python :: 3",
                   "Topic :: System :: Monitoring"):
        assert wanted in classifiers
    # PEP 639: the expression replaces licence classifiers.
    assert not [c for c in classifiers if c.startswith("License ::")]
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert urls.get("Source") == SOURCE and urls.get("Documentation", "").startswith(SOURCE)


def _imported_top_level_modules():
    names = set()
    for path in (REPO_ROOT / "gpustats").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"gpustats", "__future__"}


def test_every_imported_package_is_declared(built):
    metadata = built[2]
    declared = {_name(r) for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r}
    assert {"jinja2", "werkzeug", "flask"} <= declared
    owners = packages_distributions()
    imported = {}
    for module in _imported_top_level_modules():
        assert module in owners, f"{module} is imported but installed by no distribution"
        imported[module] = {_name(d) for d in owners[module]}
    undeclared = {m: d for m, d in imported.items() if not d & declared}
    assert undeclared == {}


def test_pyproject_is_the_one_source_of_metadata():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    assert not {"metadata", "options"} & {s.split(".")[0] for s in cfg.sections()}
    assert not (REPO_ROOT / "setup.py").exists()
