"""Idle learned only from idle, where the performance state says so: the GPU with no compute
process sitting in its lowest performance state, P8 or a lower one."""

from __future__ import annotations

import pytest

from gpustats.attribution import idle_performance_state, idle_tick
from gpustats.engine.counters import EnergyCounters
from gpustats.engine.energy import IDLE_HOLD_TICKS, EnergyAccountant
from gpustats.model.device import (
    AccountedRun, DeviceIdentity, DeviceReading, ProcessReading, ProcessSample,
)
from gpustats.sources.nvml.sweep import _pstate
from tests.support.gpus import GPU_A as A
from tests.support.sweepers import SimulatedSweepers

WORKER = ProcessReading(pid=7, memory_used_bytes=1 << 30)
ENDED = ProcessReading(pid=8, listed=False, accounted=AccountedRun(seconds=1.0,
                                                                    gpu_utilization_percent=0))


def sample(pid: int, sm: int) -> ProcessSample:
    return ProcessSample(pid=pid, timestamp_us=1, sm_util_percent=sm)


@pytest.mark.parametrize("state, lowest, idle", [
    (8, None, True),          # supported states unknown: P8 and lower states
    (12, None, True),
    (5, None, False),
    (0, None, False),
    (None, None, False),      # not read: cannot tell
    (8, 8, True),             # its lowest state
    (12, 12, True),
    (8, 12, False),           # it can go lower still: not at its floor yet
    (0, 0, False),            # a GPU that stays in P0 (A100, H100) never idles by P-state
    (2, 2, False),            # nor one whose lowest is a working state
])
def test_the_idle_performance_state(state, lowest, idle):
    assert idle_performance_state(state, lowest) is idle


@pytest.mark.parametrize("known, processes, samples, duty, pstate, lowest, idle", [
    (True, (), None, 0, None, None, True),          # 0 % duty, as before
    (True, (), None, 0, 0, 0, True),                # P0 takes nothing away from 0 % duty
    (True, (), None, None, 8, 8, True),             # duty not read: its P-state says idle
    (True, (), None, 3, 8, 8, True),                # a display's few percent at its floor
    (True, (), None, 40, 0, 8, False),              # working
    (True, (), None, None, 0, 8, False),            # duty unknown, not at its floor
    (True, (), None, None, None, None, False),      # neither: cannot tell
    (True, (), None, None, 8, 12, False),           # P8 of a GPU that goes to P12
    (False, (), None, 0, 8, 8, False),              # process list unreadable
    (True, (WORKER,), None, None, 8, 8, False),     # a compute process: not by P-state
    (True, (WORKER,), (sample(7, 0),), 0, None, None, True),   # an idle context, as before
    (True, (WORKER,), (sample(7, 30),), 0, 8, 8, False),
    (True, (ENDED,), (), 0, None, None, False),     # one ran during the tick (accounting)
])
def test_which_ticks_are_idle(known, processes, samples, duty, pstate, lowest, idle):
    assert idle_tick(known, processes, samples, duty, False, pstate, lowest) is idle


def test_an_unknown_performance_state_is_absent_never_p0():
    assert _pstate(32) is None and _pstate(None) is None and _pstate(16) is None
    assert _pstate(0) == 0 and _pstate(15) == 15


def reading(t: float, watts: float, pstate: int | None, lowest: int | None = 8,
            processes=()) -> DeviceReading:
    return DeviceReading(identity=DeviceIdentity(index=0, uuid=A), monotonic_seconds=t,
                         power_watts=watts, energy_counter_millijoules=int(t * watts * 1000),
                         utilization_percent=None, processes=processes,
                         performance_state=pstate, lowest_performance_state=lowest,
                         unsupported_fields=frozenset({"utilization"}))


def learned(readings) -> float | None:
    accountant = EnergyAccountant(lambda uuid: None, EnergyCounters())
    out = None
    for r in readings:
        out = accountant.account(r).idle_power_watts
    return out


def test_a_gpu_without_a_duty_cycle_learns_its_idle_at_its_lowest_state():
    ticks = IDLE_HOLD_TICKS + 1
    assert learned(reading(t, 60.0, 8) for t in range(ticks)) == 60.0
    assert learned(reading(t, 60.0, 0) for t in range(ticks)) is None         # P0: not idle
    assert learned(reading(t, 60.0, None) for t in range(ticks)) is None      # not read
    assert learned(reading(t, 60.0, 8, processes=(WORKER,)) for t in range(ticks)) is None


@pytest.fixture
def swept(tmp_path):
    sweepers = SimulatedSweepers(tmp_path)
    yield lambda scenario, **kw: sweepers.start(scenario, **kw)
    sweepers.close()


def sweep(s, seconds: float = 1.0):
    s.clock.now += seconds
    (r,) = s.sweeper.sweep()
    return r


def test_the_sweep_reads_the_state_each_tick_and_the_supported_ones_once(swept):
    s = swept({"devices": [{"uuid": A, "pstate": 2, "supported_pstates": [0, 2, 8, 12]}]},
              slow_every=1)
    for _ in range(3):
        r = sweep(s)
        assert (r.performance_state, r.lowest_performance_state) == (2, 12)
    calls = s.sim.calls_by_function
    assert calls["nvmlDeviceGetPerformanceState"] == 3
    assert calls["nvmlDeviceGetSupportedPerformanceStates"] == 1


def test_a_gpu_without_performance_states_has_none(swept):
    s = swept({"devices": [{"uuid": A, "unsupported": ["pstate"]}]}, slow_every=1)
    for _ in range(3):
        r = sweep(s)
    assert (r.performance_state, r.lowest_performance_state) == (None, None)
    assert s.sim.calls_by_function["nvmlDeviceGetPerformanceState"] == 1        # not asked again
    assert s.sim.calls_by_function["nvmlDeviceGetSupportedPerformanceStates"] == 1


def test_the_simulated_gpu_drops_to_its_lowest_state_while_it_idles(swept):
    s = swept({"devices": [{"uuid": A, "power_watts": 300, "supported_pstates": [0, 8],
                            "unsupported": ["utilization"],
                            "idle_cycle": {"watts": 60, "idle_seconds": 10,
                                           "busy_seconds": 10}}]})
    idle = sweep(s, 1.0)
    busy = sweep(s, 10.0)
    assert (idle.performance_state, busy.performance_state) == (8, 0)
    assert idle.utilization_percent is None
