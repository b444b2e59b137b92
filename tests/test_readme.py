"""The README's quick start stays true: exactly two set-up commands, and CI runs the second."""

import re

from tests.support.paths import REPO_ROOT


def _quick_start_commands():
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)\n```", section, re.S)


def test_quick_start_has_exactly_two_commands():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert commands[0].rstrip().endswith("gpustats")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert _quick_start_commands()[1] in ci
