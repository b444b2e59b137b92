"""The page in a real headless Chromium against the daemon on a simulated node with pods."""

from __future__ import annotations

import re
import struct
import subprocess
import time
from pathlib import Path

import yaml

from tests.support import fakeruntime
from tests.support.browser import HEADLESS, chromium
from tests.support.fakehost import build, container_id, pod_uid
from tests.support.paths import REPO_ROOT

# pid -> (pod number, container number) and the names the runtime gives them.
PLACEMENT = {4242: (1, 1), 4243: (2, 2), 5151: (3, 3)}
NAMES = {1: ("llm-train-0", "ml", "trainer"), 2: ("notebook-ada", "research", "jupyter"),
         3: ("embed-serve-7f9c", "serve", "server")}


def start_node(start_daemon, tmp_path: Path, *extra: str):
    """The two-GPU example with three named pods on it; returns (daemon, runtime server)."""
    cgroup, proc = build(tmp_path / "host", PLACEMENT)
    socket = tmp_path / "containerd.sock"
    server = fakeruntime.serve(socket, {
        container_id(n): (pod, namespace, pod_uid(n), container)
        for n, (pod, namespace, container) in NAMES.items()})
    daemon = start_daemon("--simulate", str(REPO_ROOT / "examples" / "two-gpus.yaml"),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--runtime-socket", str(socket), "--pod-resources-socket", "",
                          "--idle-power-watts", "120", "--housekeeping-interval", "0.5", *extra)
    daemon.wait_ready()
    daemon.wait_for(lambda s: {p["podRef"]["name"] for p in s["pods"]}
                    == {n[0] for n in NAMES.values()}
                    and all(p.get("accelerators") for p in s["pods"]))
    return daemon, server


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_page_in_headless_chromium(start_daemon, tmp_path):
    binary = chromium()
    daemon, server = start_node(start_daemon, tmp_path)
    try:
        time.sleep(2.0)                       # a few ticks of history for the charts
        url = daemon.base + "/"
        dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        assert "NVIDIA H100 80GB HBM3" in dom
        assert dom.count('class="model"') == 2            # every GPU's card
        for pod, _namespace, _container in NAMES.values():
            assert pod in dom
        # The script ran: charts were drawn as SVG with paths (3 per GPU, one for the pods).
        charts = re.findall(r'<figure class="chart" data-key="(\w+)"', dom)
        assert sorted(charts) == sorted(["duty", "power", "memory"] * 2 + ["energy"])
        assert dom.count("<path") >= 10
        for pod, _namespace, _container in NAMES.values():
            assert re.search(r"<div class=\"legend\">.*?" + re.escape(pod), dom, re.S)

        shot = tmp_path / "page.png"
        subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000",
                        "--window-size=1280,1400", f"--screenshot={shot}", url],
                       capture_output=True, text=True, timeout=120)
        data = shot.read_bytes()
        assert png_size(data) == (1280, 1400)
        assert len(data) > 40_000           # a page with text and charts, not a blank one
    finally:
        server.stop(0)


def test_page_without_history_still_shows_the_tables(start_daemon, tmp_path):
    binary = chromium()
    daemon, server = start_node(start_daemon, tmp_path, "--history-duration", "0")
    try:
        dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=3000", "--dump-dom",
                              daemon.base + "/"], capture_output=True, text=True,
                             timeout=120).stdout
        assert "llm-train-0" in dom and "NVIDIA H100 80GB HBM3" in dom
        assert 'class="chart"' not in dom
        assert daemon.get("/api/v1/history")[0] == 404
    finally:
        server.stop(0)


def test_docs_screenshot_is_committed_and_shown():
    shot = REPO_ROOT / "docs" / "page.png"
    width, height = png_size(shot.read_bytes())
    assert width >= 1000 and height >= 800
    assert "docs/page.png" in (REPO_ROOT / "README.md").read_text()
    assert yaml.safe_load((REPO_ROOT / "examples" / "two-gpus.yaml").read_text())["devices"]


def test_daemon_history_end_to_end(start_daemon, tmp_path):
    """The history the real daemon records after each tick, as a client sees it."""
    daemon, server = start_node(start_daemon, tmp_path, "--history-duration", "30")
    try:
        body = daemon.wait_for(
            lambda b: all(len(c["points"]) >= 3 for c in b["containers"]) and b["containers"],
            path="/api/v1/history")
        assert [g["model"] for g in body["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
        assert {c["pod"] for c in body["containers"]} == {n[0] for n in NAMES.values()}
        trainer = next(c for c in body["containers"] if c["pod"] == "llm-train-0")
        last = trainer["points"][-1]
        assert last["attributedPowerWatts"] > 0 and last["processMemoryUsed"] == 2**30
        energies = [p["attributedEnergyJoules"] for p in trainer["points"]
                    if "attributedEnergyJoules" in p]        # absent before two readings
        assert len(energies) >= 2 and energies == sorted(energies)   # a counter: never back
        status, recent = daemon.get("/api/v1/history?seconds=1")
        assert status == 200 and 1 <= len(recent["gpus"][0]["points"]) <= 3
        status, error = daemon.get("/api/v1/history?seconds=31")
        assert status == 400 and "1 to 30" in error["message"]
    finally:
        server.stop(0)
