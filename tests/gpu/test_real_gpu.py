"""Real NVML against nvidia-smi, the energy counter against integrated power, and overhead."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.gpu.conftest import nvidia_smi

REPO = Path(__file__).resolve().parents[2]


def test_identity_memory_power_agree_with_nvidia_smi(real_daemon):
    real_daemon.collector.tick()
    snapshot = real_daemon.collector.tick()
    rows = nvidia_smi("uuid,name,memory.total,memory.used,power.draw,pci.bus_id,index")
    smi = {r[0]: r for r in rows}
    assert len(snapshot.devices) == len(rows)
    for device in snapshot.devices:
        ident = device.identity
        row = smi[ident.uuid]
        assert ident.name == row[1]
        assert ident.memory_total_bytes // 2**20 == int(row[2])          # MiB, exact
        assert abs(device.memory_used_bytes // 2**20 - int(row[3])) <= 2  # moves between reads
        assert ident.pci_bus_id.lower().endswith(row[5].lower()[-12:])
        assert ident.index == int(row[6])
        smi_watts = float(row[4])
        assert device.power_watts == pytest.approx(smi_watts, rel=0.05, abs=3.0)


def test_energy_counter_matches_integrated_power():
    """The hardware counter's delta over 30 s is within 5% of the integral of sampled power."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        try:
            e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except pynvml.NVMLError_NotSupported:
            pytest.skip("this GPU has no energy counter")
        work = subprocess.Popen([sys.executable, "-m", "tests.gpu.workload", "--seconds", "32",
                                 "--duty", "0.6"], cwd=str(REPO))
        integrated = 0.0
        t_prev = time.monotonic()
        p_prev = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        t_start = t_prev
        while time.monotonic() - t_start < 30.0:
            time.sleep(0.1)
            t = time.monotonic()
            p = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            integrated += (p + p_prev) / 2 * (t - t_prev)
            t_prev, p_prev = t, p
        e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        work.wait(60)
    finally:
        pynvml.nvmlShutdown()
    counter_joules = (e1 - e0) / 1000.0
    print(f"energy counter {counter_joules:.1f} J, integrated power {integrated:.1f} J")
    assert counter_joules == pytest.approx(integrated, rel=0.05)


def _matmul_rate(seconds: float, tmp_path: Path, name: str) -> float:
    report = tmp_path / f"{name}.json"
    subprocess.run([sys.executable, "-m", "tests.gpu.workload", "--seconds", str(seconds),
                    "--duty", "1.0", "--report", str(report)], cwd=str(REPO), check=True)
    return json.loads(report.read_text())["per_second"]


def test_overhead_of_one_second_ticks(real_daemon, tmp_path):
    """A matmul loop keeps >= 99% of its throughput while the daemon ticks every second."""
    _matmul_rate(5, tmp_path, "warmup")
    without = _matmul_rate(20, tmp_path, "without")
    stop = threading.Event()

    def ticking():
        while not stop.is_set():
            real_daemon.collector.tick()
            stop.wait(1.0)

    thread = threading.Thread(target=ticking)
    thread.start()
    try:
        with_daemon = _matmul_rate(20, tmp_path, "with")
    finally:
        stop.set()
        thread.join()
    ratio = with_daemon / without
    print(f"matmul/s without {without:.1f}, with daemon ticking {with_daemon:.1f}, "
          f"ratio {ratio:.4f}")
    assert ratio >= 0.99
