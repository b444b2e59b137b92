"""Splitting a GPU by the engine time its driver measured per process (DRM fdinfo)."""

import pytest

from gpustats.attribution import DeviceTickInput, attribute_device, idle_tick
from gpustats.model.attribution import SHARE_ENGINE_TIME, SHARE_EQUAL, SHARE_EXCLUSIVE
from gpustats.model.device import ProcessReading


def _tick(*processes, active=100.0, dt=5.0, unseen=False):
    return attribute_device(DeviceTickInput(
        device_uuid="amd-1", dt_seconds=dt, tick_energy_joules=active + 50.0,
        active_energy_joules=active, idle_power_watts=10.0, active_power_watts=active / dt,
        processes=processes, unseen_holders=unseen))


def test_three_to_one_engine_time_splits_75_25():
    result = {p.pid: p for p in _tick(ProcessReading(pid=1, engine_busy_seconds=3.0),
                                      ProcessReading(pid=2, engine_busy_seconds=1.0)).processes}
    assert result[1].energy_joules == pytest.approx(75.0)
    assert result[2].energy_joules == pytest.approx(25.0)
    assert result[1].share_method == SHARE_ENGINE_TIME
    assert result[1].sm_util_percent == pytest.approx(60.0)      # 3 s of a 5 s tick


def test_no_engine_time_splits_equally_and_one_process_is_exclusive():
    equal = _tick(ProcessReading(pid=1, engine_busy_seconds=0.0),
                  ProcessReading(pid=2, engine_busy_seconds=0.0)).processes
    assert [p.energy_joules for p in equal] == [50.0, 50.0]
    assert {p.share_method for p in equal} == {SHARE_EQUAL}
    alone = _tick(ProcessReading(pid=1, engine_busy_seconds=0.5)).processes
    assert alone[0].energy_joules == 100.0 and alone[0].share_method == SHARE_EXCLUSIVE


def test_a_process_without_measured_time_falls_back_to_the_sampled_rules():
    mixed = _tick(ProcessReading(pid=1, engine_busy_seconds=3.0), ProcessReading(pid=2))
    assert {p.share_method for p in mixed.processes} == {SHARE_EQUAL}


def test_idle_tick_by_engine_time():
    held = (ProcessReading(pid=1, engine_busy_seconds=0.0),)
    busy = (ProcessReading(pid=1, engine_busy_seconds=0.2),)
    assert idle_tick(True, held, None, 0)
    assert not idle_tick(True, busy, None, 0)
    assert not idle_tick(True, held, None, 3)


def test_with_an_unreadable_process_each_is_billed_its_engine_time_over_the_tick_only():
    """A process no capability lets the daemon read may have used the GPU: the known ones get
    their engine time over the tick's, and what they leave stays unattributed."""
    result = {p.pid: p for p in _tick(ProcessReading(pid=1, engine_busy_seconds=2.0),
                                      ProcessReading(pid=2, engine_busy_seconds=1.0),
                                      unseen=True).processes}
    assert result[1].energy_joules == pytest.approx(40.0)        # 2 s of a 5 s tick
    assert result[2].energy_joules == pytest.approx(20.0)        # 40 J left unattributed
    alone = _tick(ProcessReading(pid=1, engine_busy_seconds=1.0), unseen=True).processes
    assert alone[0].energy_joules == pytest.approx(20.0)
    idle = _tick(ProcessReading(pid=1, engine_busy_seconds=0.0), unseen=True).processes
    assert idle[0].energy_joules == 0.0
    full = {p.pid: p for p in _tick(ProcessReading(pid=1, engine_busy_seconds=6.0),
                                    ProcessReading(pid=2, engine_busy_seconds=4.0),
                                    unseen=True).processes}
    assert full[1].energy_joules == pytest.approx(60.0)          # the tick is covered: 6:4


def test_the_accountant_bounds_shares_where_a_reading_names_unreadable_pids():
    """From the DRM sweep's reading to the split: ``unreadable_pids`` leaves the known process
    its engine time over the tick's, the rest unattributed."""
    from gpustats.engine.counters import EnergyCounters
    from gpustats.engine.energy import EnergyAccountant
    from gpustats.model.device import DeviceIdentity, DeviceReading

    accountant = EnergyAccountant(lambda uuid: 100.0, EnergyCounters())
    identity = DeviceIdentity(index=0, uuid="amd-1", vendor="amd")

    def reading(at, unreadable):
        return DeviceReading(identity=identity, monotonic_seconds=at, power_watts=300.0,
                             processes=(ProcessReading(pid=1, engine_busy_seconds=2.5),),
                             unreadable_pids=unreadable)
    for unreadable, billed in (((), 1000.0), ((9,), 500.0)):
        accountant.account(reading(0.0, unreadable))
        result = accountant.account(reading(5.0, unreadable))
        assert result.tick_active_energy_joules == pytest.approx(1000.0)    # 200 W × 5 s
        assert result.processes[0].energy_joules == pytest.approx(billed)   # 2.5 s of 5 s
        accountant.forget_missing(set())
