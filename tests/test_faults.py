"""Fault injection at the NVML boundary (the simulator below pynvml) and in host files.

Each case checks the degraded output, that the failure was logged once, and that counters
stayed intact.
"""

import logging
from functools import partial

import pytest
import yaml

from gpustats.export.summary import summary_dict
from tests.support import gpus
from tests.support.gpus import GPU_A as GPU, GPU_B as GPU2
from tests.support.waiting import poll

FIELDS = {  # simulator "unsupported" name -> summary keys that must disappear
    "memory": ["memoryUsed", "memoryTotal"],        # one NVML call gives both
    "utilization": ["dutyCycle"],
    "power": [],                    # the energy counter's rate stands in (below)
    "energy": ["energyJoules"],
    "power_limit": ["powerLimitWatts"],
    "temperature": ["temperatureCelsius"],
    "minor_number": ["minorNumber"],
    "pci_info": ["pciBusId"],
}


@pytest.fixture
def make_daemon(tmp_path, in_process_daemon):
    paths = []

    def _make(scenario, *args):
        path = tmp_path / f"s{len(paths)}.yaml"
        paths.append(path)
        path.write_text(yaml.safe_dump(scenario))
        return in_process_daemon("--simulate", str(path), "--cgroup-root", str(tmp_path / "nocg"),
                                 "--nvml-retry-interval", "0.01", *args), path

    return _make


device = partial(gpus.device, name=None, utilization_percent=50, memory_used_bytes=100,
                 memory_total_bytes=1000, temperature_celsius=40)


def accelerator(snapshot, uuid=GPU):
    return {a["id"]: a for a in summary_dict(snapshot)["node"].get("accelerators", [])}.get(uuid)


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_not_supported_on_each_field_in_turn(field, make_daemon, caplog):
    daemon, _ = make_daemon({"devices": [device(unsupported=[field])]})
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            snapshot = daemon.housekeeper.tick()
    acc = accelerator(snapshot)
    for key in FIELDS[field]:
        assert key not in acc
    baseline = {"make", "id", "index", "memoryTotal", "memoryUsed", "dutyCycle", "powerWatts",
                "powerLimitWatts", "temperatureCelsius", "minorNumber", "pciBusId", "model"}
    assert baseline - set(FIELDS[field]) <= set(acc)            # nothing else went missing
    lines = [r for r in caplog.records if f"{field} is not available" in r.getMessage()]
    assert len(lines) == 1                                      # logged once, not asked again
    errors = dict(((s, r), n) for s, r, n in snapshot.status.collection_errors)
    assert errors[("nvml", "not_supported")] >= 1


def test_without_a_power_call_power_is_the_energy_counters_rate(make_daemon):
    """Issue: a GPU without a power reading showed 0 J active and 0 J per process while it
    drew 300 W. Its power is the counter's rate; active and attributed energy follow."""
    daemon, _ = make_daemon({"devices": [device(unsupported=["power"], power_watts=300)],
                             "processes": [{"pid": 4242, "device": GPU}]},
                            "--idle-power-watts", "100")
    import time
    for _ in range(3):
        snapshot = daemon.housekeeper.tick()
        time.sleep(0.2)                      # measures: real time between hand-driven ticks
    acc = accelerator(snapshot)
    assert acc["powerWatts"] == pytest.approx(300, rel=0.1)
    assert acc["activePowerWatts"] == pytest.approx(200, rel=0.15)
    process = snapshot.processes[0]
    assert process.attributed_energy_joules > 0


def test_neither_power_nor_energy_leaves_active_and_attributed_energy_absent(make_daemon):
    daemon, _ = make_daemon({"devices": [device(unsupported=["power", "energy"])],
                             "processes": [{"pid": 4242, "device": GPU}]})
    for _ in range(3):
        snapshot = daemon.housekeeper.tick()
    acc = accelerator(snapshot)
    for key in ("powerWatts", "energyJoules", "activePowerWatts", "idlePowerWatts"):
        assert key not in acc
    assert daemon.counters.value(("device_active", GPU)) is None
    assert snapshot.processes[0].attributed_energy_joules is None
    assert snapshot.processes[0].attributed_power_watts is None


def test_function_not_found(make_daemon, caplog):
    # An old driver: no field values either, so energy has no other way in.
    daemon, _ = make_daemon({"devices": [device()],
                             "missing_functions": ["nvmlDeviceGetTotalEnergyConsumption",
                                                   "nvmlDeviceGetTemperature",
                                                   "nvmlDeviceGetFieldValues"]})
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            snapshot = daemon.housekeeper.tick()
    acc = accelerator(snapshot)
    assert "energyJoules" not in acc and "temperatureCelsius" not in acc
    assert acc["powerWatts"] == 300.0
    assert ("nvml", "function_not_found", 3) in snapshot.status.collection_errors
    # Attribution falls back to integrated power; the GPU was never seen idle, so all of it
    # is active (no busy reading stands in for its idle).
    assert acc["activePowerWatts"] == 300.0 and "idlePowerWatts" not in acc


def test_init_failing_intermittently_then_loading(make_daemon, caplog):
    daemon, _ = make_daemon({"devices": [device()], "init_failures": 2})
    with caplog.at_level(logging.WARNING):
        first = daemon.housekeeper.tick()
        assert accelerator(first) is None and not first.status.nvml_loaded
        snapshot = poll(lambda: (got := daemon.housekeeper.tick()).status.nvml_loaded and got,
                        timeout=5) or daemon.housekeeper.tick()
    assert snapshot.status.nvml_loaded and accelerator(snapshot)["powerWatts"] == 300.0
    assert len([r for r in caplog.records if "NVML not available" in r.getMessage()]) == 2


def test_gpu_lost_on_one_of_two_keeps_counters(make_daemon, caplog):
    daemon, path = make_daemon({"devices": [device(), device(uuid=GPU2, minor=1)]})
    daemon.housekeeper.tick()
    before = daemon.housekeeper.tick()
    energy_before = accelerator(before, GPU2)["energyJoules"]
    path.write_text(yaml.safe_dump({"devices": [device(), device(uuid=GPU2, minor=1, lost=True)]}))
    assert daemon.simulator.reload()
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            snapshot = daemon.housekeeper.tick()
    lost = accelerator(snapshot, GPU2)
    assert lost["lost"] is True and "powerWatts" not in lost
    assert lost["energyJoules"] >= energy_before                # counter kept, not reset
    assert accelerator(snapshot, GPU)["powerWatts"] == 300.0
    assert len([r for r in caplog.records if "is lost" in r.getMessage()]) == 1


def test_process_utilization_not_found_is_idle(make_daemon):
    # Two processes, no samples (NOT_FOUND): equal split, compute utilization observed as 0.
    daemon, _ = make_daemon({"devices": [device()],
                             "processes": [{"pid": 11, "device": GPU}, {"pid": 12, "device": GPU}]},
                            "--idle-power-watts", "100")
    for _ in range(3):
        snapshot = daemon.housekeeper.tick()
    procs = {p.pid: p for p in snapshot.processes}
    assert procs[11].share_method == "equal-split"
    assert procs[11].compute_utilization_percent == 0.0
    assert procs[11].attributed_energy_joules == pytest.approx(procs[12].attributed_energy_joules)


def test_malformed_stat_files_degrade_one_value(tmp_path):
    from gpustats.hostfs import HostRoots
    from gpustats.sources.cgroups import CgroupReader

    root = tmp_path / "cg"
    scope = root / "kubepods" / "pod2fc932ce-fdcc-454b-97bd-aadfdeb4c340" / ("a" * 64)
    scope.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("")
    (scope / "cpu.stat").write_text("usage_usec not-a-number\nuser_usec 3\n")
    (scope / "memory.current").write_text("garbage\n")
    (scope / "memory.stat").write_text("anon\n\x00\x01 junk\n")
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    found = reader.discover()
    usage = reader.usage("a", found.containers["a" * 64].cgroup)
    assert usage.cpu is None and usage.memory is None        # absent, not 0, no exception
    (scope / "memory.current").write_text("4096\n")
    usage = reader.usage("a", found.containers["a" * 64].cgroup)
    assert usage.memory.usage_bytes == 4096 and usage.memory.working_set_bytes is None
