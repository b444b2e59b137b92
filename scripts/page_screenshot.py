"""Screenshot of the web page for the README: the demo node (``gpustats --demo``).

    .venv/bin/python scripts/page_screenshot.py [--seconds 120] [--out docs/page.png]

Runs the real daemon with ``--demo`` (three simulated GPUs, one in MIG mode, five named pods
whose load moves), lets the charts fill for ``--seconds``, then Chromium takes the screenshot.
Needs the installed package (or the repository on PYTHONPATH) and Chromium; nothing else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--hide-scrollbars", "--mute-audio")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base: str, daemon: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited with {daemon.returncode}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=2) as resp:  # nosec B310
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the daemon was not ready in time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--out", default=str(REPO / "docs" / "page.png"))
    parser.add_argument("--window", default="1360,1640")
    args = parser.parse_args()
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    if browser is None:
        print("Chromium is not installed", file=sys.stderr)
        return 2
    base = f"http://127.0.0.1:{free_port()}"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "gpustats", "--demo", "--listen", base.removeprefix("http://"),
         "--housekeeping-interval", "1", "--log-level", "warning"], env=env)
    try:
        wait_ready(base, daemon)
        time.sleep(args.seconds)
        subprocess.run([browser, *HEADLESS, "--virtual-time-budget=5000",
                        f"--window-size={args.window}", f"--screenshot={args.out}",
                        base + "/"], capture_output=True, timeout=120, check=True)
    finally:
        daemon.send_signal(signal.SIGTERM)      # the demo removes its temporary host
        daemon.wait(30)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
