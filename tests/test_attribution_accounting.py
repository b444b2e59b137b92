"""The tick's active energy split with processes NVML's accounting saw end during it (pure)."""

import pytest

from gpustats.attribution import DeviceTickInput, attribute_device
from gpustats.model.attribution import SHARE_ACCOUNTING, SHARE_EQUAL, SHARE_SM_UTIL
from gpustats.model.device import AccountedRun, ProcessReading, ProcessSample


def listed(pid):
    return ProcessReading(pid=pid, memory_used_bytes=1)


def ended(pid, seconds, util=60.0):
    return ProcessReading(pid=pid, listed=False, accounted=AccountedRun(seconds, util))


def sample(pid, sm):
    return ProcessSample(pid=pid, timestamp_us=1, sm_util_percent=sm)


def split(processes, samples=None, dt=5.0, lived=None):
    result = attribute_device(DeviceTickInput(
        device_uuid="GPU-a", dt_seconds=dt, tick_energy_joules=150.0, active_energy_joules=100.0,
        idle_power_watts=10.0, active_power_watts=100.0 / dt, processes=tuple(processes),
        samples=samples, lived_seconds=lived or {}))
    return {p.pid: (round(p.energy_joules, 6), p.share_method) for p in result.processes}


def test_alone_it_is_billed_for_the_part_of_the_tick_it_ran():
    assert split([ended(7, 5.0)]) == {7: (100.0, SHARE_ACCOUNTING)}
    assert split([ended(7, 2.0)]) == {7: (40.0, SHARE_ACCOUNTING)}    # the rest: unattributed
    assert split([ended(7, 9.0)]) == {7: (100.0, SHARE_ACCOUNTING)}   # never more than the tick


def test_with_sampled_processes_each_weighs_utilization_times_the_time_it_ran():
    # 60 % for the whole tick against 20 % for the whole tick: 3 to 1.
    assert split([listed(1), ended(7, 5.0)], samples=(sample(1, 20),)) == {
        1: (25.0, SHARE_SM_UTIL), 7: (75.0, SHARE_ACCOUNTING)}
    # 60 % for a fifth of the tick against 20 % for all of it: 0.12 to 0.2 (37.5 %), but
    # never more than the fifth of the tick it ran; as for a process that started late, the
    # rest stays unattributed.
    assert split([listed(1), ended(7, 1.0)], samples=(sample(1, 20),)) == {
        1: (62.5, SHARE_SM_UTIL), 7: (20.0, SHARE_ACCOUNTING)}


def test_an_idle_bystander_with_samples_gets_nothing():
    assert split([listed(1), ended(7, 5.0)], samples=(sample(1, 0),)) == {
        1: (0.0, SHARE_SM_UTIL), 7: (100.0, SHARE_ACCOUNTING)}
    assert split([listed(1), ended(7, 5.0)], samples=()) == {    # no sample since: idle
        1: (0.0, SHARE_SM_UTIL), 7: (100.0, SHARE_ACCOUNTING)}


def test_without_a_sample_source_a_listed_process_is_assumed_as_busy_as_the_known():
    # 60 % assumed for the listed one over the whole tick, 60 % for a fifth for the other.
    assert split([listed(1), ended(7, 1.0)]) == {
        1: (round(100 / 1.2, 6), SHARE_EQUAL),
        7: (round(20 / 1.2, 6), SHARE_ACCOUNTING)}


def test_a_listed_process_started_during_the_tick_weighs_the_part_it_lived():
    assert split([listed(1), ended(7, 5.0)], samples=(sample(1, 60),), lived={1: 2.5}) == {
        1: (round(100 / 3, 6), SHARE_SM_UTIL),
        7: (round(200 / 3, 6), SHARE_ACCOUNTING)}


def test_utilization_nvml_does_not_give_is_assumed_not_zero():
    assert split([listed(1), ended(7, 5.0, util=None)], samples=(sample(1, 40),)) == {
        1: (50.0, SHARE_SM_UTIL), 7: (50.0, SHARE_ACCOUNTING)}
    assert split([ended(7, 2.5, util=None), ended(8, 5.0, util=None)]) == {
        7: (round(100 / 3, 6), SHARE_ACCOUNTING),
        8: (round(200 / 3, 6), SHARE_ACCOUNTING)}


def test_no_weight_at_all_is_an_equal_split():
    assert split([listed(1), ended(7, 5.0, util=0.0)], samples=()) == {
        1: (50.0, SHARE_EQUAL), 7: (50.0, SHARE_EQUAL)}


def test_its_utilization_is_the_accounting_figure():
    result = attribute_device(DeviceTickInput(
        device_uuid="GPU-a", dt_seconds=5.0, tick_energy_joules=150.0, active_energy_joules=100.0,
        idle_power_watts=10.0, active_power_watts=20.0, processes=(ended(7, 5.0, util=35.0),),
        samples=()))
    (p,) = result.processes
    assert p.sm_util_percent == 35.0 and p.power_watts == pytest.approx(20.0)
