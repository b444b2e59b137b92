"""Attribution math: one test per rule (pure, no I/O). Properties: test_attribution_properties."""

import pytest

from gpustats.attribution import (
    DeviceTickInput, active_energy_joules, active_power, attribute_device, integrated_energy,
    learned_idle_power, mig_activity, tick_energy_joules,
)
from gpustats.model.attribution import (
    SHARE_EQUAL, SHARE_EXCLUSIVE, SHARE_MIG_ACTIVITY, SHARE_MIG_ASSUMED, SHARE_MIG_EQUAL,
    SHARE_SM_UTIL,
)
from gpustats.model.device import GpmReading, MigInstanceReading, ProcessReading, ProcessSample


def proc(pid, gi=None):
    return ProcessReading(pid=pid, memory_used_bytes=1, gpu_instance_id=gi)


def sample(pid, sm, ts=1):
    return ProcessSample(pid=pid, timestamp_us=ts, sm_util_percent=sm)


def tick(processes=(), samples=None, active=100.0, dt=5.0, **kw):
    return DeviceTickInput(device_uuid="GPU-a", dt_seconds=dt, tick_energy_joules=active + 50,
                           active_energy_joules=active, idle_power_watts=10.0,
                           active_power_watts=active / dt, processes=tuple(processes),
                           samples=samples, **kw)


def test_idle_is_the_lowest_power_that_held():
    assert learned_idle_power(None, (120.0,), 3) is None          # not held long enough yet
    assert learned_idle_power(None, (120.0, 100.0, 110.0), 3) == 120.0
    assert learned_idle_power(120.0, (90.0, 90.0, 95.0), 3) == 95.0
    assert learned_idle_power(95.0, (300.0, 310.0, 305.0), 3) == 95.0   # only decreases
    assert learned_idle_power(95.0, (90.0, 0.0, 90.0), 3) == 90.0      # a 0 W glitch is no idle
    assert learned_idle_power(95.0, (0.0, 0.0, 0.0), 3) == 0.0         # a held 0 W is
    assert active_power(300.0, 70.0) == 230.0
    assert active_power(50.0, 70.0) == 0.0                      # never negative
    assert active_power(None, 70.0) is None


def test_tick_energy_counter_integrated_reset_glitch():
    counter = tick_energy_joules(1_000_000, 2_500_000, 300.0, 300.0, 5.0, 700.0)
    assert (counter.joules, counter.source, counter.counter_reset) == (1500.0, "counter", False)
    integrated = tick_energy_joules(None, None, 200.0, 300.0, 5.0)
    assert integrated.joules == 1250.0 and integrated.source == "integrated"
    reset = tick_energy_joules(9_000_000, 1_000, 300.0, 300.0, 5.0, 700.0)
    assert reset.counter_reset and reset.joules == 1500.0        # integrated, not negative
    glitch = tick_energy_joules(0, 10**12, 300.0, 300.0, 5.0, 700.0)
    assert glitch.counter_reset and glitch.joules == 1500.0      # not a huge delta
    assert tick_energy_joules(1, 2, None, None, 0.0).joules is None
    assert integrated_energy(None, None, 5.0) is None
    assert active_energy_joules(1500.0, 100.0, 5.0) == 1000.0
    assert active_energy_joules(100.0, 100.0, 5.0) == 0.0


def test_exclusive_gets_everything():
    result = attribute_device(tick([proc(1)], samples=()))
    (p,) = result.processes
    assert (p.share, p.share_method, p.energy_joules, p.power_watts) == \
        (1.0, SHARE_EXCLUSIVE, 100.0, 20.0)
    assert result.sharing_mode == "exclusive"


def test_time_sliced_by_sm_utilization():
    samples = (sample(1, 75), sample(2, 25), sample(1, 75, 2), sample(2, 25, 2), sample(9, 50))
    result = attribute_device(tick([proc(1), proc(2)], samples))
    by_pid = {p.pid: p for p in result.processes}
    assert by_pid[1].energy_joules == pytest.approx(75.0)
    assert by_pid[2].energy_joules == pytest.approx(25.0)
    assert by_pid[1].share_method == SHARE_SM_UTIL and result.sharing_mode == "time-slicing"
    assert by_pid[1].sm_util_percent == 75.0


@pytest.mark.parametrize("samples", [None, (), (sample(1, 0), sample(2, 0))])
def test_no_usable_samples_split_equally_and_say_so(samples):
    result = attribute_device(tick([proc(1), proc(2), proc(3)], samples))
    assert {p.share_method for p in result.processes} == {SHARE_EQUAL}
    assert sum(p.energy_joules for p in result.processes) == pytest.approx(100.0)


def test_mps_is_time_sliced_with_flag():
    result = attribute_device(tick([proc(1), proc(2)], (sample(1, 60), sample(2, 20)), mps=True))
    assert result.sharing_mode == "mps"
    assert [p.share for p in result.processes] == pytest.approx([0.75, 0.25])


def test_no_processes_attributes_nothing():
    result = attribute_device(tick([], ()))
    assert result.processes == () and result.tick_active_energy_joules == 100.0


def test_mig_by_activity_then_equal_within_instance():
    inp = tick([proc(1, 7), proc(2, 7), proc(3, 8)], None, mig_enabled=True,
               mig_activity={7: 0.6, 8: 0.2, 9: 0.9})   # 9 has no processes: not busy
    result = attribute_device(inp)
    by_pid = {p.pid: p for p in result.processes}
    assert by_pid[1].energy_joules == pytest.approx(37.5)
    assert by_pid[2].energy_joules == pytest.approx(37.5)
    assert by_pid[3].energy_joules == pytest.approx(25.0)
    assert by_pid[1].share_method == SHARE_MIG_ACTIVITY and result.sharing_mode == "mig"


def test_mig_no_activity_known_is_an_equal_split_over_busy_instances():
    result = attribute_device(tick([proc(1, 7), proc(3, 8)], None, mig_enabled=True,
                                   mig_activity={}))
    assert [p.energy_joules for p in result.processes] == pytest.approx([50.0, 50.0])
    assert {p.share_method for p in result.processes} == {SHARE_MIG_EQUAL}


def test_an_instance_without_activity_does_not_erase_the_others():
    """Three busy instances, one without GPM: the other two keep their 60/20 ratio, and the
    unknown one is assumed as active as their mean (40)."""
    result = attribute_device(tick([proc(1, 7), proc(2, 8), proc(3, 9)], None,
                                   mig_enabled=True, mig_activity={7: 0.6, 8: 0.2}))
    by_pid = {p.pid: p for p in result.processes}
    assert by_pid[1].energy_joules / by_pid[2].energy_joules == pytest.approx(3.0)
    assert [by_pid[i].energy_joules for i in (1, 2, 3)] == pytest.approx([50.0, 50 / 3, 100 / 3])
    assert by_pid[3].share_method == SHARE_MIG_ASSUMED
    assert by_pid[1].share_method == SHARE_MIG_ACTIVITY
    # Once the GPM-less instance is idle again, the split is the plain 75/25 by activity.
    idle_third = attribute_device(tick([proc(1, 7), proc(2, 8)], None, mig_enabled=True,
                                       mig_activity={7: 0.6, 8: 0.2}))
    assert [p.energy_joules for p in idle_third.processes] == pytest.approx([75.0, 25.0])


def test_mig_activity_sources():
    instances = (MigInstanceReading(7, gpm=GpmReading(graphics_active_percent=40)),
                 MigInstanceReading(8, gpm=GpmReading(sm_active_percent=10)),
                 MigInstanceReading(9))
    assert mig_activity(instances, None) == {7: 0.4, 8: 0.1}
    # The exporter wins where it has the instance; GPM fills the others.
    assert mig_activity(instances, {7: 0.9, 8: float("nan")}) == {7: 0.9, 8: 0.1}
    assert mig_activity(instances, {7: 3.0}) == {7: 1.0, 8: 0.1}        # clamped


def test_reset_without_power_samples_uses_the_new_counter_when_plausible():
    # Driver reload: the counter restarts near zero; no power samples to integrate.
    reset = tick_energy_joules(9_000_000, 800_000, None, None, 5.0, 700.0)
    assert (reset.joules, reset.source, reset.counter_reset) == (800.0, "counter", True)
    # A new value beyond 2 x limit x dt is not energy of this tick either.
    assert tick_energy_joules(9_000_000, 8_000_000, None, None, 5.0, 700.0).joules is None


def test_glitch_bound_without_a_power_limit_is_absolute():
    # Samples of 50 W at both ends but a real 600 W burst in between: still counter energy.
    burst = tick_energy_joules(0, 3_000_000, 50.0, 50.0, 5.0, None)
    assert (burst.joules, burst.source, burst.counter_reset) == (3000.0, "counter", False)
    huge = tick_energy_joules(0, 20_000_000, 50.0, 50.0, 5.0, None)     # 4 kW for 5 s
    assert huge.counter_reset and huge.joules == 250.0


def test_garbage_samples_are_clamped_and_deduplicated():
    samples = (sample(1, 250), sample(1, 250), sample(2, -40), sample(2, 100, 2))
    by_pid = {p.pid: p for p in attribute_device(tick([proc(1), proc(2)], samples)).processes}
    assert by_pid[1].share == pytest.approx(0.5)      # 100 once, not 250 twice
    assert by_pid[2].share == pytest.approx(0.5)      # 0 + 100
    assert by_pid[1].sm_util_percent == 100.0 and by_pid[2].sm_util_percent == 50.0


def test_unknown_active_energy_gives_shares_without_energy():
    result = attribute_device(tick([proc(1), proc(2)], (sample(1, 30),), active=float("nan")))
    assert result.tick_active_energy_joules is None
    assert [(p.share, p.energy_joules, p.power_watts) for p in result.processes] == \
        [(1.0, None, None), (0.0, None, None)]


def test_mig_process_without_instance_is_not_placed():
    result = attribute_device(tick([proc(1, 7), proc(2)], None, mig_enabled=True))
    assert [(p.pid, p.energy_joules) for p in result.processes] == [(1, 100.0)]
