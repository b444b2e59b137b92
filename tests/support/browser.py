"""A real headless Chromium for tests: its path (or a skip naming why it cannot run here) and
the flags it runs with."""

import shutil
import subprocess

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--hide-scrollbars", "--mute-audio")


def chromium() -> str:
    """The browser's path, or a skip naming why it cannot run here."""
    binary = next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)
    if binary is None:
        pytest.skip("Chromium is not installed (Debian package 'chromium')")
    try:
        probe = subprocess.run([binary, *HEADLESS, "--dump-dom", "data:text/html,<p>ok</p>"],
                               capture_output=True, text=True, timeout=90)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"Chromium cannot run here: {exc}")
    if "<p>ok</p>" not in probe.stdout:
        pytest.skip(f"Chromium cannot run here: {probe.stderr.strip()[-300:]}")
    return binary
