"""Screenshot of the web page for the README: the two-GPU example with three named pods.

    .venv/bin/python scripts/page_screenshot.py [--seconds 120] [--out docs/page.png]

Runs the real daemon on a simulated node (examples/two-gpus.yaml, a fake cgroup tree, a CRI
runtime that names the pods) and varies the simulated load once a second by rewriting the
scenario, so the charts have something to show; then Chromium takes the screenshot.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests import fakeruntime  # noqa: E402
from tests.conftest import DaemonProcess  # noqa: E402
from tests.fakehost import build, container_id, pod_uid, write_scenario  # noqa: E402
from tests.test_page_chromium import HEADLESS, NAMES, PLACEMENT  # noqa: E402


def scenario_at(base: dict, t: float) -> dict:
    """The example with its load moving: GPU 0 shared 75/25 then 40/60, GPU 1 in bursts."""
    s = yaml.safe_load(yaml.safe_dump(base))
    gpu0, gpu1 = s["devices"]
    wave = 0.5 + 0.5 * math.sin(t / 45.0)
    gpu0["utilization_percent"] = round(35 + 45 * wave)
    gpu0["power_watts"] = round(180 + 330 * wave)
    gpu0["memory_used_bytes"] = int((8 + 30 * wave) * 2**30)
    burst = 1.0 if (t // 40) % 2 == 0 else 0.35
    gpu1["utilization_percent"] = round(96 * burst)
    gpu1["power_watts"] = round(140 + 520 * burst + 15 * math.sin(t / 3.0))
    gpu1["memory_used_bytes"] = int((60 + 8 * burst) * 2**30)
    share = 0.75 if t < 80 else 0.4
    s["processes"][0]["sm_util_percent"] = round(80 * share * wave + 5)
    s["processes"][1]["sm_util_percent"] = round(80 * (1 - share) * wave + 5)
    s["processes"][0]["memory_used_bytes"] = int((6 + 24 * wave) * 2**30)
    s["processes"][2]["memory_used_bytes"] = int((58 + 8 * burst) * 2**30)
    s["processes"][2]["sm_util_percent"] = round(94 * burst)
    return s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--out", default=str(REPO / "docs" / "page.png"))
    parser.add_argument("--window", default="1360,1200")
    args = parser.parse_args()
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    if browser is None:
        print("Chromium is not installed", file=sys.stderr)
        return 2
    base = yaml.safe_load((REPO / "examples" / "two-gpus.yaml").read_text())
    with tempfile.TemporaryDirectory(prefix="gpustats-shot-") as tmp:
        root = Path(tmp)
        cgroup, proc = build(root / "host", PLACEMENT)
        server = fakeruntime.serve(root / "containerd.sock", {
            container_id(n): (pod, namespace, pod_uid(n), container)
            for n, (pod, namespace, container) in NAMES.items()})
        scenario = root / "node.yaml"
        write_scenario(scenario, scenario_at(base, 0.0))
        daemon = DaemonProcess(
            ["--simulate", str(scenario), "--cgroup-root", str(cgroup), "--proc-root", str(proc),
             "--runtime-socket", str(root / "containerd.sock"), "--pod-resources-socket", "",
             "--idle-power-watts", "default=95", "--housekeeping-interval", "1",
             "--node-name", "gpu-node-7"], root)
        try:
            daemon.wait_ready()
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < args.seconds:
                write_scenario(scenario, scenario_at(base, elapsed))
                time.sleep(1.0)
            subprocess.run([browser, *HEADLESS, "--virtual-time-budget=5000",
                            f"--window-size={args.window}", f"--screenshot={args.out}",
                            daemon.base + "/"], capture_output=True, timeout=120, check=True)
        finally:
            daemon.stop()
            server.stop(0)
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
