"""ruff and mypy, as configured in pyproject.toml and run by .ci/run, are clean: lint on the
whole tree, types on the package (skip without them)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LINTED = ("gpustats", "bench", "oracles", "tests", "scripts")       # as .ci/run lints


def test_ci_lints_what_this_test_lints():
    assert f"ruff check {' '.join(LINTED)}" in (REPO_ROOT / ".ci" / "run").read_text()


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    return path


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_tree_is_clean(tool):
    args = ["check", *LINTED] if tool == "ruff" else ["gpustats"]
    done = subprocess.run([_tool(tool), *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
