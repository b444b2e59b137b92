"""The real daemon, started as a process on a free loopback port, against the simulator."""

import signal
import time

import yaml

from tests.support.fakehost import make_pci_device, metric_value
from tests.support.gpus import GPU_A, GPU_B


def two_gpus(**overrides_b):
    b = {"uuid": GPU_B, "name": "NVIDIA A100-SXM4-40GB", "architecture": "ampere", "minor": 1,
         "pci_bus_id": "00000000:86:00.0", "memory_total_bytes": 42949672960,
         "memory_used_bytes": 1073741824, "utilization_percent": 5, "power_watts": 60,
         "power_limit_watts": 400, "temperature_celsius": 33}
    b.update(overrides_b)
    return {"devices": [
        {"uuid": GPU_A, "name": "NVIDIA H100 80GB HBM3", "architecture": "hopper", "minor": 0,
         "pci_bus_id": "00000000:3B:00.0", "memory_total_bytes": 85520809984,
         "memory_used_bytes": 2147483648, "utilization_percent": 40, "power_watts": 310,
         "power_limit_watts": 700, "temperature_celsius": 51},
        b,
    ]}


def write(path, scenario):
    # Write-then-rename so the daemon never reads a half-written file.
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(scenario))
    tmp.replace(path)


def accelerators(summary):
    return {a["id"]: a for a in summary["node"].get("accelerators", [])}


def test_accelerators_show_scenario_values(start_daemon, tmp_path):
    scenario = tmp_path / "s.yaml"
    write(scenario, two_gpus())
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    summary = daemon.wait_for(lambda s: len(accelerators(s)) == 2)
    a = accelerators(summary)[GPU_A]
    assert a["make"] == "nvidia" and a["model"] == "NVIDIA H100 80GB HBM3"
    assert a["memoryTotal"] == 85520809984 and a["memoryUsed"] == 2147483648
    assert a["dutyCycle"] == 40 and a["powerWatts"] == 310.0
    assert a["powerLimitWatts"] == 700.0 and a["temperatureCelsius"] == 51
    assert a["index"] == 0 and a["minorNumber"] == 0 and a["pciBusId"] == "00000000:3B:00.0"
    assert a["energyJoules"] >= 0
    b = accelerators(summary)[GPU_B]
    assert b["index"] == 1 and b["dutyCycle"] == 5
    assert summary["pods"] == []
    assert summary["node"]["cpu"]["usageCoreNanoSeconds"] > 0
    assert summary["node"]["memory"]["workingSetBytes"] > 0


def test_editing_the_scenario_changes_the_next_tick(start_daemon, tmp_path):
    scenario = tmp_path / "s.yaml"
    write(scenario, two_gpus())
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    daemon.wait_for(lambda s: accelerators(s).get(GPU_B, {}).get("powerWatts") == 60.0)
    write(scenario, two_gpus(power_watts=250, utilization_percent=90))
    summary = daemon.wait_for(lambda s: accelerators(s)[GPU_B].get("powerWatts") == 250.0)
    assert accelerators(summary)[GPU_B]["dutyCycle"] == 90


def test_unsupported_energy_removes_only_energy(start_daemon, tmp_path):
    scenario = tmp_path / "s.yaml"
    write(scenario, two_gpus(unsupported=["energy"]))
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    summary = daemon.wait_for(lambda s: len(accelerators(s)) == 2)
    daemon.wait_ticks(2)
    summary = daemon.get("/stats/summary")[1]
    a, b = accelerators(summary)[GPU_A], accelerators(summary)[GPU_B]
    assert "energyJoules" in a
    assert "energyJoules" not in b
    only_a = set(a) - set(b)
    # The energy no one observed is a part of the counter's: absent without one.
    assert only_a <= {"energyJoules", "unobservedEnergyJoules", "idlePowerWatts",
                      "activePowerWatts"}, only_a
    for key in ("powerWatts", "memoryUsed", "dutyCycle", "temperatureCelsius", "powerLimitWatts"):
        assert key in b
    assert daemon.log().count("energy is not available") == 1


def test_lost_gpu_leaves_the_other_reported(start_daemon, tmp_path):
    scenario = tmp_path / "s.yaml"
    write(scenario, two_gpus())
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    daemon.wait_for(lambda s: len(accelerators(s)) == 2)
    write(scenario, two_gpus(lost=True))
    summary = daemon.wait_for(lambda s: accelerators(s)[GPU_B].get("lost") is True)
    b = accelerators(summary)[GPU_B]
    assert "memoryUsed" not in b and "powerWatts" not in b
    a = accelerators(summary)[GPU_A]
    assert a["powerWatts"] == 310.0 and "lost" not in a
    assert daemon.get("/readyz")[0] == 200


def test_sigterm_stops_within_two_seconds(start_daemon, tmp_path):
    scenario = tmp_path / "s.yaml"
    write(scenario, two_gpus())
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    for sig in (signal.SIGTERM,):
        started = time.monotonic()
        code = daemon.stop(sig)
        assert code == 0
        assert time.monotonic() - started < 2.0


def test_sigint_stops_cleanly(start_daemon, tmp_path):
    daemon = start_daemon("--sysfs-root", str(tmp_path / "nosys"), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    started = time.monotonic()
    assert daemon.stop(signal.SIGINT) == 0
    assert time.monotonic() - started < 2.0


def test_no_gpu_host_serves_node_stats(start_daemon, tmp_path):
    daemon = start_daemon("--sysfs-root", str(tmp_path / "nosys"), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    status, summary = daemon.get("/stats/summary")
    assert status == 200
    assert "accelerators" not in summary["node"] and summary["pods"] == []
    assert summary["node"]["memory"]["usageBytes"] > 0
    log = daemon.log()
    assert "NVML not available" not in log and "NVML loaded" not in log   # never tried


def test_repeated_signals_do_not_break_shutdown(start_daemon, tmp_path):
    daemon = start_daemon("--sysfs-root", str(tmp_path / "nosys"), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    for _ in range(3):
        daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(5) == 0
    log = daemon.log()
    assert "Logging error" not in log and "Traceback" not in log
    assert log.count("shutting down") == 1


def test_simulated_gpus_are_what_the_bus_count_says(start_daemon, tmp_path):
    scenario = tmp_path / "s.yaml"
    write(scenario, two_gpus())
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.2")
    daemon.wait_ready()
    text = daemon.wait_for(lambda t: "gpustats_gpus_on_pci_bus" in t, path="/metrics")
    assert metric_value(text, "gpustats_gpus_on_pci_bus") == 2
    assert "2 NVIDIA GPU(s) on the PCI bus" in daemon.log()


def test_no_gpu_host_says_so_once_at_start(start_daemon, tmp_path):
    sysfs = tmp_path / "sys"
    make_pci_device(sysfs, "0000:00:1f.0", vendor="0x8086", pci_class="0x060100")
    daemon = start_daemon("--sysfs-root", str(sysfs), "--housekeeping-interval", "0.1")
    daemon.wait_ready()
    text = daemon.wait_for(lambda t: (metric_value(t, "gpustats_snapshot_sequence_total") or 0)
                           >= 5, path="/metrics")
    assert metric_value(text, "gpustats_gpus_on_pci_bus") == 0
    assert daemon.log().count("no NVIDIA GPU on the PCI bus") == 1
