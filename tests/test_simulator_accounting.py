"""The simulator's performance states and accounting records, through pynvml's wrappers."""

import pynvml
import pytest

from gpustats.simulator import SimulatedNvml
from gpustats.simulator.scenario import parse_scenario
from gpustats.sources.nvml.process_reads import ProcessReads
from tests.support.clock import Clock
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A

EPOCH = 1.7e9


@pytest.fixture
def simulate(tmp_path):
    sims = []

    def _simulate(scenario):
        path = tmp_path / f"s{len(sims)}.yaml"
        write_scenario(path, scenario)
        clock = Clock()
        sim = SimulatedNvml(str(path), monotonic=clock, wall=lambda: EPOCH + clock.now)
        sim.install()
        sims.append(sim)
        pynvml.nvmlInit()
        return sim, path, clock, pynvml.nvmlDeviceGetHandleByIndex(0)

    yield _simulate
    for sim in reversed(sims):
        pynvml.nvmlShutdown()
        sim.uninstall()


def test_performance_states(simulate):
    _, _, _, h = simulate({"devices": [{"uuid": A, "pstate": 2,
                                        "supported_pstates": [12, 0, 2, 8]}]})
    assert pynvml.nvmlDeviceGetPerformanceState(h) == 2
    assert pynvml.nvmlDeviceGetSupportedPerformanceStates(h) == [0, 2, 8, 12]
    _, _, _, h = simulate({"devices": [{"uuid": A}]})
    assert pynvml.nvmlDeviceGetPerformanceState(h) == 0
    assert pynvml.nvmlDeviceGetSupportedPerformanceStates(h) == [0]
    _, _, _, h = simulate({"devices": [{"uuid": A, "unsupported": ["pstate"]}]})
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPerformanceState(h)


def test_accounting_off_answers_not_supported(simulate):
    _, _, _, h = simulate({"devices": [{"uuid": A}]})
    assert pynvml.nvmlDeviceGetAccountingMode(h) == pynvml.NVML_FEATURE_DISABLED
    for call in (pynvml.nvmlDeviceGetAccountingPids, pynvml.nvmlDeviceGetAccountingBufferSize):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(h)
    _, _, _, h = simulate({"devices": [{"uuid": A, "unsupported": ["accounting"]}]})
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAccountingMode(h)


def test_records_of_listed_between_ticks_and_departed_processes(simulate):
    scenario = {"devices": [{"uuid": A, "accounting": True, "accounting_buffer_size": 5}],
                "processes": [{"pid": 7, "device": A, "sm_util_percent": 30,
                               "memory_used_bytes": 1024},
                              {"pid": 9, "device": A, "sm_util_percent": 70,
                               "between_ticks": True}]}
    sim, path, clock, h = simulate(scenario)
    start = clock.now
    assert pynvml.nvmlDeviceGetAccountingMode(h) == pynvml.NVML_FEATURE_ENABLED
    assert pynvml.nvmlDeviceGetAccountingBufferSize(h) == 5
    clock.now = start + 2.0
    assert pynvml.nvmlDeviceGetAccountingPids(h) == [7, 9]
    listed = pynvml.nvmlDeviceGetAccountingStats(h, 7)
    assert (listed.isRunning, listed.time, listed.gpuUtilization) == (1, 0, 30)
    assert listed.maxMemoryUsage == 1024
    # pynvml's wrapper fails on a record without memory (it assigns None to a c_ulonglong):
    # the sweep reads records itself.
    run = ProcessReads().accounting_stats(h, 9)
    assert (run.isRunning, run.startTime, run.time, run.gpuUtilization) == (
        0, int((EPOCH + start) * 1e6), 2000, 70)
    assert run.maxMemoryUsage == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    assert pynvml.nvmlDeviceGetAccountingPids(h) == [7, 9]     # no time passed: no new run
    clock.now = start + 3.0
    assert pynvml.nvmlDeviceGetAccountingPids(h) == [7, 9, 9]
    run = ProcessReads().accounting_stats(h, 9)                 # the PID's latest record
    assert (run.startTime, run.time) == (int((EPOCH + start + 2.0) * 1e6), 1000)
    write_scenario(path, {**scenario, "processes": scenario["processes"][1:]})
    assert sim.reload()
    clock.now = start + 4.5
    assert pynvml.nvmlDeviceGetAccountingPids(h) == [7, 9, 9, 9]
    ended = pynvml.nvmlDeviceGetAccountingStats(h, 7)
    # Dated when the scenario changed (here its last read, at 3 s), not at the read after.
    assert (ended.isRunning, ended.time) == (0, 1000)
    clock.now = start + 5.0
    assert pynvml.nvmlDeviceGetAccountingPids(h) == [7, 9, 9, 9, 9]
    clock.now = start + 6.0
    assert pynvml.nvmlDeviceGetAccountingPids(h) == [9, 9, 9, 9, 9]   # 5 kept: the oldest went
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetAccountingStats(h, 8)


def test_scenario_keys_are_checked():
    for device, message in (({"pstate": 16}, "pstate: must be <= 15"),
                            ({"pstate": -1}, "pstate: must be >= 0"),
                            ({"supported_pstates": [0, 32]}, r"supported_pstates\[1\]"),
                            ({"supported_pstates": []}, "must not be empty"),
                            ({"accounting_buffer_size": 0}, "must be >= 1")):
        with pytest.raises(ValueError, match=message):
            parse_scenario({"devices": [{"uuid": A, **device}]})
    device = parse_scenario({"devices": [{"uuid": A, "pstate": 8}]}).devices[0]
    assert (device.pstate, device.supported_pstates, device.accounting) == (8, (0, 8), False)
