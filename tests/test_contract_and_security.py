"""The running daemon against its own OpenAPI document (schemathesis), and bandit."""

import subprocess

import pytest

from tests.support.paths import REPO_ROOT, find_tool


def _schemathesis_and_daemon(start_daemon):
    """schemathesis (skipping without it) and a daemon on the two-GPU example, ready."""
    tool = find_tool("schemathesis")
    if tool is None:
        pytest.skip("schemathesis not installed")
    daemon = start_daemon("--simulate", str(REPO_ROOT / "examples" / "two-gpus.yaml"),
                          "--housekeeping-interval", "0.5")
    daemon.wait_ready()
    return tool, daemon


def test_schemathesis_against_running_daemon(start_daemon, tmp_path):
    tool, daemon = _schemathesis_and_daemon(start_daemon)
    result = subprocess.run([tool, "run", f"{daemon.base}/openapi.json", "--checks", "all",
                             "--max-examples", "40", "--seed", "1",
                             "--exclude-operation-id", "getUsage"],
                            capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "No issues found" in result.stdout


def test_schemathesis_against_the_usage_api(start_daemon, tmp_path):
    """``/api/v1/usage`` with every check but the acceptance of schema-valid requests: a
    schema cannot say that ``month`` excludes ``from`` and ``to``, nor that ``to`` comes after
    ``from``, and the daemon answers those 400 (malformed requests are checked all the same)."""
    tool, daemon = _schemathesis_and_daemon(start_daemon)
    daemon.wait_ticks(2)                                  # the usage database has rows
    result = subprocess.run([tool, "run", f"{daemon.base}/openapi.json", "--checks", "all",
                             "--exclude-checks", "positive_data_acceptance",
                             "--max-examples", "60", "--seed", "1",
                             "--include-operation-id", "getUsage"],
                            capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout[-4000:]
    assert "No issues found" in result.stdout


def test_bandit_clean_at_medium_severity():
    bandit = find_tool("bandit")
    if bandit is None:
        pytest.skip("bandit not installed")
    result = subprocess.run([bandit, "-r", str(REPO_ROOT / "gpustats"), "-ll", "-q"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
