"""A node of three vendors' GPUs (an NVIDIA H100, an AMD Instinct MI300X, an Intel Data Center
GPU Flex 170 on xe) in a real headless Chromium: every card shows its model and memory, its
health from its own driver, and no NVIDIA wording on the AMD and Intel cards; the header
counts three healthy GPUs and names no missing NVIDIA GPU."""

from __future__ import annotations

import re
import struct
import subprocess

from tests.support.browser import HEADLESS, chromium
from tests.support.fakehost import write_scenario

GIB = 1 << 30
H100 = "GPU-7f1c2a4e-0d3b-4c55-9a61-2b8e6f0c1d01"
MI300X = "amd-5a7c1f0e3d2b4a69"
FLEX = "intel-0000:4d:00.0"
SCENARIO = {"devices": [
    {"uuid": H100, "name": "NVIDIA H100 80GB HBM3", "minor": 0, "pci_bus_id": "00000000:19:00.0",
     "memory_total_bytes": 80 * GIB, "power_watts": 420, "power_limit_watts": 700,
     "utilization_percent": 60},
    {"uuid": "GPU-5a7c1f0e3d2b4a69", "vendor": "amd", "name": "AMD Instinct MI300X",
     "pci_bus_id": "0000:05:00.0", "pci_device_id": 0x74A1, "pci_class": 0x120000,
     "memory_total_bytes": 192 * GIB, "power_watts": 640, "power_limit_watts": 750,
     "temperature_celsius": 58, "utilization_percent": 85},
    # No name: the daemon names an Intel card from its PCI device ID.
    {"uuid": "GPU-8086a1b2-56c0-4f00-9e11-0000004d0000", "vendor": "intel", "driver": "xe",
     "pci_bus_id": "0000:4d:00.0", "pci_device_id": 0x56C0, "memory_total_bytes": 16 * GIB,
     "power_watts": 120, "power_limit_watts": 150, "temperature_celsius": 61},
]}
# Each card's title (each vendor numbers its GPUs from 0), model and memory.
CARDS = {H100: ("NVIDIA GPU 0", "NVIDIA H100 80GB HBM3", "80.0 GiB"),
         MI300X: ("AMD GPU 0", "AMD Instinct MI300X", "192.0 GiB"),
         FLEX: ("Intel GPU 0", "Intel Data Center GPU Flex 170", "16.0 GiB")}
NVIDIA_WORDS = re.compile(r"nvidia|nvml|\bxid|\bmig\b|performance state|\bP\d+\b", re.I)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_mixed_node_shows_each_vendors_cards_in_its_own_words(start_daemon, tmp_path):
    binary = chromium()
    scenario = tmp_path / "mixed.yaml"
    write_scenario(scenario, SCENARIO)
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.5",
                          "--pod-resources-socket", "", "--runtime-socket", "")
    daemon.wait_ready()
    daemon.wait_for(lambda body: {g["uuid"]: g.get("health", {}).get("healthy")
                                  for g in body["gpus"]} == dict.fromkeys(CARDS, True),
                    path="/api/v1/gpus")
    daemon.wait_ticks(3)                               # a few ticks of history for the charts
    url = daemon.base + "/"
    dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120).stdout
    cards = dict(re.findall(r'<section class="gpu" data-uuid="([^"]+)">(.*?)</section>', dom,
                            re.S))
    assert set(cards) == set(CARDS), sorted(cards)
    for uuid, (title, model, memory) in CARDS.items():
        text = _text(cards[uuid])
        assert f"{title} {model}" in text and f"/ {memory}" in text, (uuid, text[:600])
        assert "healthy" in text and "unknown" not in text, text[:600]
        if uuid != H100:
            assert not NVIDIA_WORDS.search(text), (uuid, NVIDIA_WORDS.search(text), text[:600])
    header = _text(dom.split('<div class="gpus"', 1)[0])
    assert "3 (3 healthy)" in header and not NVIDIA_WORDS.search(header.split("GPUs", 1)[1])

    shot = tmp_path / "mixed-node.png"
    subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000", "--window-size=1280,1600",
                    f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24]) == (1280, 1600)
    assert len(data) > 40_000            # a page with text and charts, not a blank one
