"""Running processes and their utilization samples: one NVML call each per GPU and tick, into
arrays kept per device (grown when NVML asks for more), read the same as pynvml's wrappers."""

import pytest

from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A
from tests.support.sweepers import SimulatedSweepers

GIB = 1024 ** 3
PROCESSES = "nvmlDeviceGetComputeRunningProcesses_v3"
SAMPLES = "nvmlDeviceGetProcessUtilization"


@pytest.fixture
def swept(tmp_path):
    sweepers = SimulatedSweepers(tmp_path)
    # sample time stamps follow the hand-moved clock
    yield lambda scenario: sweepers.start(scenario, wall_epoch=1.7e9)
    sweepers.close()


@pytest.fixture
def simulate(swept):
    return lambda scenario: swept(scenario)[1:]


def _scenario(processes: int, **process_fields) -> dict:
    return {"devices": [{"uuid": A, "power_watts": 300}],
            "processes": [{"pid": 1000 + n, "device": A, "memory_used_bytes": (n + 1) * GIB,
                           "sm_util_percent": 10 + n % 50, **process_fields}
                          for n in range(processes)]}


def _tick(sim, sweeper, clock):
    """One sweep; its reading and the simulated driver calls it made."""
    before = dict(sim.calls_by_function)
    clock.now += 1.0
    (reading,) = sweeper.sweep()
    return reading, {k: v - before.get(k, 0) for k, v in sim.calls_by_function.items()}


def test_one_call_each_per_tick(simulate):
    sim, sweeper, clock = simulate(_scenario(4))
    _tick(sim, sweeper, clock)
    reading, calls = _tick(sim, sweeper, clock)
    assert calls[PROCESSES] == 1 and calls[SAMPLES] == 1
    assert [(p.pid, p.memory_used_bytes, p.gpu_instance_id) for p in reading.processes] == [
        (1000 + n, (n + 1) * GIB, None) for n in range(4)]
    assert sorted((s.pid, s.sm_util_percent) for s in reading.process_samples) == [
        (1000 + n, 10 + n) for n in range(4)]


def test_more_processes_than_the_array_holds_are_all_read(simulate):
    sim, sweeper, clock = simulate(_scenario(40))
    reading, calls = _tick(sim, sweeper, clock)
    assert len(reading.processes) == 40 and len(reading.process_samples) == 40
    assert calls[PROCESSES] == 2 and calls[SAMPLES] == 2      # too small once, then grown
    reading, calls = _tick(sim, sweeper, clock)
    assert len(reading.processes) == 40 and calls[PROCESSES] == 1 and calls[SAMPLES] == 1


def test_memory_the_driver_cannot_give_is_absent(simulate):
    sim, sweeper, clock = simulate(_scenario(2, memory_used_bytes=None))
    reading, _ = _tick(sim, sweeper, clock)
    assert [p.memory_used_bytes for p in reading.processes] == [None, None]


def test_no_sample_newer_than_the_last_is_an_empty_tuple(simulate):
    sim, sweeper, clock = simulate(_scenario(2))
    _tick(sim, sweeper, clock)
    before = dict(sim.calls_by_function)
    (reading,) = sweeper.sweep()                 # the same instant: nothing newer
    assert reading.process_samples == ()
    assert sim.calls_by_function[SAMPLES] - before[SAMPLES] == 1


def test_a_driver_without_the_v3_symbol_lists_no_processes_and_says_why(simulate):
    sim, sweeper, clock = simulate({**_scenario(2), "missing_functions": [PROCESSES]})
    reading, _ = _tick(sim, sweeper, clock)
    reading, _ = _tick(sim, sweeper, clock)
    assert reading.processes == ()
    assert "processes" in reading.unsupported_fields


def _rewrite(path, sim, scenario: dict) -> None:
    write_scenario(path, scenario)
    assert sim.reload()


def test_an_unchanged_list_gives_the_same_readings_and_any_change_new_ones(swept):
    path, sim, sweeper, clock = swept(_scenario(3))
    first, _ = _tick(sim, sweeper, clock)
    again, _ = _tick(sim, sweeper, clock)
    assert again.processes is first.processes               # the driver's bytes were the same

    _rewrite(path, sim, _scenario(3, memory_used_bytes=5 * GIB))     # only memory moved
    moved, _ = _tick(sim, sweeper, clock)
    assert [p.memory_used_bytes for p in moved.processes] == [5 * GIB] * 3

    _rewrite(path, sim, _scenario(1, memory_used_bytes=5 * GIB))     # two processes ended
    ended, _ = _tick(sim, sweeper, clock)
    assert [p.pid for p in ended.processes] == [1000]


def test_a_list_that_shrinks_after_the_array_grew_has_no_stale_entries(swept):
    path, sim, sweeper, clock = swept(_scenario(40))
    grown, _ = _tick(sim, sweeper, clock)
    assert len(grown.processes) == 40
    _rewrite(path, sim, _scenario(2))
    shrunk, _ = _tick(sim, sweeper, clock)
    assert [p.pid for p in shrunk.processes] == [1000, 1001]
    _rewrite(path, sim, {**_scenario(0)})
    idle, _ = _tick(sim, sweeper, clock)
    assert idle.processes == ()
