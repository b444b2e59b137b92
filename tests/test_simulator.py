"""The simulator below pynvml, exercised through pynvml's public wrappers."""

import ctypes
import threading
import time

import pynvml
import pytest
import yaml

from gpustats.simulator import SimulatedNvml
from gpustats.simulator.scenario import load_scenario, parse_scenario
from tests.support.clock import Clock
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A, GPU_B as B


@pytest.fixture
def simulate(installed_nvml):
    return installed_nvml


def test_pynvml_calls_cfunctype_attributes_of_the_installed_object(simulate):
    sim, _ = simulate({"devices": [{"uuid": A}]})
    assert isinstance(sim.lib.nvmlDeviceGetCount_v2, ctypes._CFuncPtr)
    before = sim.calls
    assert pynvml.nvmlDeviceGetCount() == 1
    assert sim.calls == before + 1


def test_identity_and_readings(simulate):
    simulate({"devices": [{"uuid": A, "name": "NVIDIA H100 80GB HBM3", "minor": 3,
                           "pci_bus_id": "00000000:3B:00.0", "memory_total_bytes": 1000,
                           "memory_used_bytes": 250, "utilization_percent": 40,
                           "power_watts": 310.5, "power_limit_watts": 700,
                           "temperature_celsius": 51, "architecture": "ampere"}],
              "driver_version": "575.1"})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlSystemGetDriverVersion() == "575.1"
    assert pynvml.nvmlDeviceGetUUID(h) == A
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetMinorNumber(h) == 3
    assert pynvml.nvmlDeviceGetPciInfo(h).busId == "00000000:3B:00.0"
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    assert (mem.total, mem.used, mem.free) == (1000, 250, 750)
    assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used == 250
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 40
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 310500
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h) == 700000
    assert pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 51
    assert pynvml.nvmlDeviceGetArchitecture(h) == pynvml.NVML_DEVICE_ARCH_AMPERE
    assert pynvml.nvmlDeviceGetHandleByUUID(A) is not None


def test_energy_integrates_power_over_time_and_resets(simulate):
    clock = Clock()
    sim, path = simulate({"devices": [{"uuid": A, "power_watts": 200}]}, monotonic=clock)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    clock.now += 10
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == 2_000_000     # 200 W × 10 s
    path.write_text(yaml.safe_dump({"devices": [{"uuid": A, "power_watts": 100}],
                                    "driver_reloads": 1}))
    assert sim.reload()
    clock.now += 5
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) == 500_000             # restarted at 0


def test_idle_cycle_alternates_power_and_the_counter_integrates_each_phase(simulate):
    clock = Clock()
    simulate({"devices": [{"uuid": A, "power_watts": 300, "utilization_percent": 40, "idle_cycle": {
        "watts": 100, "idle_seconds": 20, "busy_seconds": 40}}]}, monotonic=clock)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 100_000                         # idle first
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 0
    clock.now += 30
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 300_000
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu == 40
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == 5_000_000     # 20×100 + 10×300
    clock.now += 40                                                             # 70 s: idle again
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 100_000
    # 30 s busy, then 10 s of the second period's idle
    assert pynvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == 5_000_000 + 10_000_000
    power_field = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_POWER_AVERAGE])[0]
    assert power_field.value.uiVal == 100_000


def test_idle_cycle_can_start_busy():
    from gpustats.simulator.idle_cycle import IdleCycle, energy_joules, mean_watts, power_at
    cycle = IdleCycle(watts=50, idle_seconds=10, busy_seconds=30, idle_first=False)
    assert [power_at(250, cycle, t) for t in (0, 29.9, 30, 39.9, 40)] == [250, 250, 50, 50, 250]
    assert energy_joules(250, cycle, 0, 80) == 2 * (30 * 250 + 10 * 50)
    assert energy_joules(250, cycle, 35, 45) == 5 * 50 + 5 * 250
    assert energy_joules(250, cycle, 45, 35) == 0.0
    assert mean_watts(250, cycle) == (30 * 250 + 10 * 50) / 40
    assert power_at(250, None, 35) == 250 and energy_joules(250, None, 0, 2) == 500


def test_edit_changes_next_reading_and_bad_edit_keeps_previous(simulate, caplog):
    sim, path = simulate({"devices": [{"uuid": A, "power_watts": 100}]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    path.write_text(yaml.safe_dump({"devices": [{"uuid": A, "power_watts": 250}]}))
    assert sim.reload()
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 250000
    path.write_text("devices: [ {uuid: ")
    assert not sim.reload()
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 250000
    assert any("keeping the previous scenario" in r.getMessage() for r in caplog.records)


def test_unsupported_missing_and_lost(tmp_path, simulate):
    simulate({"devices": [{"uuid": A, "unsupported": ["energy"], "lost": False},
                          {"uuid": B, "lost": True}],
              "missing_functions": ["nvmlDeviceGetTemperature"]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    assert pynvml.nvmlDeviceGetPowerUsage(h) > 0                   # only that call
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetTemperature(h, 0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(1)


def test_init_failures_then_success(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"devices": [{"uuid": A}], "init_failures": 2}))
    sim = SimulatedNvml(str(path))
    sim.install()
    try:
        for _ in range(2):
            with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
                pynvml.nvmlInit()
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 1
        pynvml.nvmlShutdown()
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
    finally:
        sim.uninstall()


def test_many_processes_two_call_pattern_and_samples(simulate):
    procs = [{"pid": 1000 + i, "device": A, "memory_used_bytes": i,
              **({"sm_util_percent": 10} if i % 2 else {})} for i in range(50)]
    simulate({"devices": [{"uuid": A}, {"uuid": B}], "processes": procs})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    listed = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    assert sorted(p.pid for p in listed) == list(range(1000, 1050))
    assert all(p.gpuInstanceId == 0xFFFFFFFF for p in listed)
    samples = pynvml.nvmlDeviceGetProcessUtilization(h, 0)
    assert len(samples) == 25 and all(s.smUtil == 10 for s in samples)
    newest = max(s.timeStamp for s in samples)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetProcessUtilization(h, newest + 10**9)
    h2 = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h2) == []
    with pytest.raises(pynvml.NVMLError_NotFound):                  # idle GPU
        pynvml.nvmlDeviceGetProcessUtilization(h2, 0)


def test_mig_handles_and_processes(simulate):
    simulate({"devices": [{"uuid": A, "name": "NVIDIA H100 80GB HBM3", "mig_instances": [
        {"gpu_instance_id": 7, "profile": "1g.10gb", "uuid": "MIG-x", "memory_total_bytes": 100},
        {"gpu_instance_id": 9, "profile": "3g.40gb"}]}],
        "processes": [{"pid": 5, "device": A, "gpu_instance_id": 7, "memory_used_bytes": 30},
                      {"pid": 6, "device": A, "gpu_instance_id": 9}]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
    m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert pynvml.nvmlDeviceGetUUID(m) == "MIG-x"
    assert pynvml.nvmlDeviceGetName(m) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert pynvml.nvmlDeviceGetGpuInstanceId(m) == 7
    assert pynvml.nvmlDeviceGetMemoryInfo(m).used == 30
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(m)] == [5]
    assert {p.gpuInstanceId for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)} == {7, 9}
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 2)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetUtilizationRates(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetProcessUtilization(h, 0)


def test_events_once_then_timeout(simulate):
    simulate({"devices": [{"uuid": A}, {"uuid": B, "events_supported": False}],
              "xid_events": [{"device": A, "xid": 79}, {"device": A, "type": "double_bit_ecc"}]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlDeviceGetSupportedEventTypes(h), es)
    got = [pynvml.nvmlEventSetWait_v2(es, 100) for _ in range(2)]
    assert got[0].eventType == pynvml.nvmlEventTypeXidCriticalError and got[0].eventData == 79
    assert got[1].eventType == pynvml.nvmlEventTypeDoubleBitEccError
    assert pynvml.nvmlDeviceGetUUID(got[0].device) == A
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 50)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetSupportedEventTypes(pynvml.nvmlDeviceGetHandleByIndex(1))
    pynvml.nvmlEventSetFree(es)


def _xid_set(index=0):
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    es = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    return es


def test_an_event_wait_blocks_instead_of_polling(simulate):
    """A driver blocks in nvmlEventSetWait; the simulator used to wake 20 times a second to
    look at its scenario, the largest share of an idle daemon's CPU."""
    sim, _ = simulate({"devices": [{"uuid": A}]})
    es = _xid_set()
    looks = []
    check = sim._maybe_reload
    sim._maybe_reload = lambda: looks.append(1) or check()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 400)
    assert len(looks) <= 3       # on the call and once it timed out (polling: every 50 ms)
    pynvml.nvmlEventSetFree(es)


def test_a_reload_wakes_a_blocked_event_wait(simulate):
    sim, path = simulate({"devices": [{"uuid": A}]})
    es = _xid_set()
    outcome = []

    def wait():
        started = time.monotonic()
        try:
            pynvml.nvmlEventSetWait_v2(es, 10_000)
        except pynvml.NVMLError as exc:
            outcome.append((type(exc), time.monotonic() - started))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)            # measures: 50 ms for the waiter to block (no sign outside)
    write_scenario(path, {"devices": [{"uuid": A, "lost": True}]})
    assert sim.reload()
    waiter.join(5)
    assert outcome and outcome[0][0] is pynvml.NVMLError_GpuIsLost
    assert outcome[0][1] < 5                               # woken, not timed out
    pynvml.nvmlEventSetFree(es)


def test_a_scheduled_xid_ends_a_long_wait_when_due(simulate):
    simulate({"devices": [{"uuid": A}],
              "xid_events": [{"device": A, "xid": 31, "after_seconds": 0.3}]})
    es = _xid_set()
    started = time.monotonic()
    event = pynvml.nvmlEventSetWait_v2(es, 10_000)
    assert event.eventData == 31
    assert time.monotonic() - started < 5
    pynvml.nvmlEventSetFree(es)


def test_reload_checks_follow_the_injected_clock(simulate):
    clock = Clock()
    sim, path = simulate({"devices": [{"uuid": A, "power_watts": 100}]}, monotonic=clock)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    write_scenario(path, {"devices": [{"uuid": A, "power_watts": 250}]})
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 100000     # the clock has not moved
    clock.now += 0.2
    assert pynvml.nvmlDeviceGetPowerUsage(h) == 250000


def test_gpm_metrics(simulate):
    clock = Clock()
    simulate({"devices": [{"uuid": A, "gpm": {"sm_active_percent": 55,
                                               "pcie_tx_bytes_per_second": 2 * 1024 * 1024}}]},
             monotonic=clock)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    clock.now += 1
    pynvml.nvmlGpmSampleGet(h, s2)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = 3
    mg.sample1, mg.sample2 = s1, s2
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    mg.metrics[1].metricId = pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
    mg.metrics[2].metricId = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
    pynvml.nvmlGpmMetricsGet(mg)
    assert mg.metrics[0].nvmlReturn == 0 and mg.metrics[0].value == 55
    assert mg.metrics[1].value == pytest.approx(2.0)                  # MiB/s
    assert mg.metrics[2].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    mg.version = 99
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(mg)


def test_scenario_validation(tmp_path):
    with pytest.raises(ValueError, match="uuid: required"):
        parse_scenario({"devices": [{}]})
    with pytest.raises(ValueError, match="duplicate"):
        parse_scenario({"devices": [{"uuid": A}, {"uuid": A}]})
    with pytest.raises(ValueError, match="not a device UUID"):
        parse_scenario({"devices": [{"uuid": A}], "processes": [{"pid": 1, "device": B}]})
    with pytest.raises(ValueError, match="unknown names"):
        parse_scenario({"devices": [{"uuid": A, "unsupported": ["warp"]}]})
    for cycle, message in (({"watts": 90, "idle_seconds": 0, "busy_seconds": 5}, "must be > 0"),
                           ({"watts": 90, "idle_seconds": 5}, "busy_seconds: expected a number"),
                           ({"watts": 90, "idle_seconds": 5, "busy_seconds": 5,
                             "start": "later"}, "start: expected idle or busy"),
                           ({"watt": 90}, "unknown keys")):
        with pytest.raises(ValueError, match=message):
            parse_scenario({"devices": [{"uuid": A, "idle_cycle": cycle}]})
    for infinite in ("INFINITY", float("inf"), float("nan")):   # found by test_parser_properties
        with pytest.raises(ValueError, match="init_failures: expected a finite number"):
            parse_scenario({"devices": [], "init_failures": infinite})
    with pytest.raises(ValueError, match=r"s\.yaml: cannot read"):
        load_scenario(str(tmp_path / "s.yaml"))


def test_examples_parse():
    from tests.support.paths import REPO_ROOT
    for path in (REPO_ROOT / "examples").glob("*.yaml"):
        assert load_scenario(str(path)).devices


def test_mig_reconfiguration_destroys_creates_and_tells_event_sets_that_asked(simulate):
    mig = {"uuid": A, "mig_instances": [{"gpu_instance_id": 1, "uuid": "MIG-1"},
                                        {"gpu_instance_id": 2, "uuid": "MIG-2"}]}
    sim, path = simulate({"devices": [mig, {"uuid": B}]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetSupportedEventTypes(h) & pynvml.nvmlEventMigConfigChange
    old = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    mig_set, xid_set = pynvml.nvmlEventSetCreate(), pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventMigConfigChange, mig_set)
    pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, xid_set)
    mig["mig_instances"] = [{"gpu_instance_id": 1, "uuid": "MIG-1"},
                            {"gpu_instance_id": 5, "uuid": "MIG-5", "profile": "1g.10gb"}]
    write_scenario(path, {"devices": [mig, {"uuid": B}]})
    assert sim.reload()
    event = pynvml.nvmlEventSetWait_v2(mig_set, 0)
    assert event.eventType == pynvml.nvmlEventMigConfigChange
    assert pynvml.nvmlDeviceGetUUID(event.device) == A
    with pytest.raises(pynvml.NVMLError_Timeout):            # once per change
        pynvml.nvmlEventSetWait_v2(mig_set, 0)
    with pytest.raises(pynvml.NVMLError_Timeout):            # not asked for there
        pynvml.nvmlEventSetWait_v2(xid_set, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):    # the destroyed instance's handle
        pynvml.nvmlDeviceGetUUID(old)
    new = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)
    assert pynvml.nvmlDeviceGetUUID(new) == "MIG-5"
    assert pynvml.nvmlDeviceGetGpuInstanceId(new) == 5
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)) == "MIG-1"
    for es in (mig_set, xid_set):
        pynvml.nvmlEventSetFree(es)


def test_a_gpu_without_mig_events_does_not_offer_them(simulate):
    simulate({"devices": [{"uuid": A, "unsupported": ["mig_events"],
                           "mig_instances": [{"gpu_instance_id": 1}]}]})
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert not pynvml.nvmlDeviceGetSupportedEventTypes(h) & pynvml.nvmlEventMigConfigChange


def test_an_interrupt_ends_a_blocked_event_wait_and_never_takes_an_event(simulate):
    """The daemon's stop wakes its health thread here instead of waiting out a long slice; a
    due event is still delivered first, and a wait that does not block leaves it pending."""
    sim, _ = simulate({"devices": [{"uuid": A}],
                       "xid_events": [{"device": A, "xid": 79, "after_seconds": 0.3}]})
    es = _xid_set()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 0)
    sim.interrupt_event_waits()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 0)               # does not block: the interrupt stays
    started = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 10_000)           # pending: returns at once
    assert time.monotonic() - started < 1.0
    threading.Timer(0.05, sim.interrupt_event_waits).start()
    started = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 10_000)           # blocked, then woken
    assert time.monotonic() - started < 1.0
    time.sleep(0.3)                           # measures: a while with nobody waiting
    sim.interrupt_event_waits()
    assert pynvml.nvmlEventSetWait_v2(es, 10_000).eventData == 79
    pynvml.nvmlEventSetFree(es)


@pytest.mark.parametrize("scenario, words", [
    ({"devices": [{"uuid": "GPU-1", "power_wats": 300}]},
     "devices[0]: unknown key 'power_wats' (did you mean 'power_watts'?)"),
    ({"devices": [{"uuid": "GPU-1"}], "processes": [{"pid": 1, "device": "GPU-1", "smutil": 5}]},
     "processes[0]: unknown key 'smutil'"),
    ({"devices": [{"uuid": "GPU-1", "mig_instances": [{"gpu_instance_id": 1, "profil": "x"}]}]},
     "devices[0].mig_instances[0]: unknown key 'profil' (did you mean 'profile'?)"),
    ({"devices": [], "xid_event": []}, "scenario: unknown key 'xid_event' (did you mean "
                                       "'xid_events'?)"),
    ({"devices": [{"uuid": "GPU-1"}], "xid_events": [{"device": "GPU-1", "xid": 79,
                                                      "after": 3}]},
     "xid_events[0]: unknown key 'after'"),
])
def test_an_unknown_scenario_key_is_refused_by_name(scenario, words):
    with pytest.raises(ValueError) as refused:
        parse_scenario(scenario)
    assert str(refused.value).startswith(words), refused.value


def test_a_misspelt_key_in_a_scenario_file_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("devices:\n  - {uuid: GPU-1, vendor: amd, power_wats: 300}\n")
    with pytest.raises(ValueError, match=r"s\.yaml: devices\[0\]: unknown key 'power_wats' "
                                         r"\(did you mean 'power_watts'\?\)"):
        load_scenario(str(path))
