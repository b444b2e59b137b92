"""--energy-every: the energy counter read every N ticks, power integrated in between; the
daemon's counters stay within 1% of the hardware counter."""

import time

import pynvml
import pytest
import yaml

from gpustats.export.summary import summary_dict
from gpustats.sources.nvml.energy_reads import DeferredEnergy
from tests.support.gpus import GPU_A as A


def test_every_one_reports_the_hardware_counter_unchanged():
    d = DeferredEnergy(1)
    assert all(d.due(A, t) for t in range(5))
    for value in (100, 250, 250, 900):
        assert d.hardware(A, value, 0.0, 300.0) == value
    assert d.hardware(A, 10, 1.0, 300.0) == 10          # a reset passes through


def test_estimates_between_reads_and_the_hardware_takes_over():
    d = DeferredEnergy(3)
    assert d.due(A, 7)                                   # nothing read yet: always due
    assert d.hardware(A, 1_000_000, 10.0, 300.0) == 1_000_000
    assert not d.due(A, 1) and not d.due(A, 2) and d.due(A, 3)
    assert d.estimate(A, 11.0, 300.0) == 1_300_000       # 300 W for 1 s
    assert d.estimate(A, 12.0, 100.0) == 1_500_000       # trapezoid: 200 W mean for 1 s
    assert d.hardware(A, 1_520_000, 13.0, 100.0) == 1_520_000
    # An estimate that ran ahead holds flat until the hardware passes it.
    assert d.estimate(A, 14.0, 500.0) == 1_820_000
    assert d.hardware(A, 1_700_000, 15.0, 100.0) == 1_820_000
    assert d.estimate(A, 16.0, 100.0) == 1_820_000       # 1.7e6 + 1e5 < 1.82e6: flat
    assert d.estimate(A, 17.0, 100.0) == 1_900_000
    assert d.hardware(A, 5_000, 18.0, 100.0) == 5_000    # driver reload: the reset shows


def test_nothing_to_integrate_from_asks_for_a_read():
    d = DeferredEnergy(4)
    assert d.estimate(A, 1.0, 300.0) is None             # no hardware read yet
    d.hardware(A, 0, 1.0, None)
    assert d.estimate(A, 2.0, 300.0) is None             # no power at the last read
    d.hardware(A, 0, 2.0, 300.0)
    assert d.estimate(A, 3.0, None) is None              # no power now
    with pytest.raises(ValueError):
        DeferredEnergy(0)


@pytest.fixture
def daemon_with(tmp_path, in_process_daemon):
    def _make(scenario, *args):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(scenario))
        return in_process_daemon("--simulate", str(path),
                                 "--cgroup-root", str(tmp_path / "nocg"), *args), path

    return _make


def _hardware_mj() -> int:
    return pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0))


def test_counters_agree_with_the_hardware_within_one_percent(daemon_with):
    powers = [300, 650, 120, 480, 90]
    scenario = {"devices": [{"uuid": A, "power_watts": powers[0], "utilization_percent": 50}]}
    daemon, path = daemon_with(scenario, "--energy-every", "4", "--idle-power-watts", "60")
    sim = daemon.simulator
    daemon.housekeeper.tick()
    # The hardware counter at a tick's read lies between the reads just before and after it.
    start_before = _hardware_mj()
    start = summary_dict(daemon.housekeeper.tick())["node"]["accelerators"][0]["energyJoules"]
    start_after = _hardware_mj()
    reads = sim.calls_by_function["nvmlDeviceGetFieldValues"]
    singles = sim.calls_by_function["nvmlDeviceGetTotalEnergyConsumption"]
    for watts in powers[1:] + powers[:2]:
        scenario["devices"][0]["power_watts"] = watts
        path.write_text(yaml.safe_dump(scenario))
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:            # each power level for a few ticks
            time.sleep(0.05)               # measures: real time between hand-driven ticks
            daemon.housekeeper.tick()
    end_before = _hardware_mj()
    snapshot = daemon.housekeeper.tick()
    end_after = _hardware_mj()
    # Fields only: the two single calls are this test's own reads just above.
    assert sim.calls_by_function["nvmlDeviceGetTotalEnergyConsumption"] == singles + 2
    acc = summary_dict(snapshot)["node"]["accelerators"][0]
    counted = acc["energyJoules"] - start
    # What the hardware counted between the two ticks' reads, however long the ticks took.
    least, most = (end_before - start_after) / 1000.0, (end_after - start_before) / 1000.0
    assert least * 0.99 <= counted <= most * 1.01, (counted, least, most)
    assert sim.calls_by_function["nvmlDeviceGetFieldValues"] > reads


def test_energy_field_asked_every_nth_tick(daemon_with):
    daemon, _ = daemon_with({"devices": [{"uuid": A, "power_watts": 300,
                                           "unsupported": ["fields.energy"]}]},
                            "--energy-every", "5")
    sim = daemon.simulator
    for _ in range(20):
        time.sleep(0.002)                  # measures: real time between hand-driven ticks
        snapshot = daemon.housekeeper.tick()
    assert sim.calls_by_function["nvmlDeviceGetTotalEnergyConsumption"] == 4   # ticks 0,5,10,15
    assert summary_dict(snapshot)["node"]["accelerators"][0]["energyJoules"] > 0


def test_hardware_reads_stop_the_integration_error_from_accumulating(tmp_path):
    """The power reading rises in steps just as the hardware counter still integrated the old
    power (the worst case for the trapezoid): the estimate alone would drift by ~1.2%; the
    counter reported with reads every 3 ticks stays within one interval's error."""
    from gpustats.simulator import SimulatedNvml
    from gpustats.sources.errors import CollectionErrors
    from gpustats.sources.nvml.session import NvmlSession
    from gpustats.sources.nvml.sweep import DeviceSweeper

    class Clock:
        now = 1000.0

        def __call__(self):
            return self.now

    clock = Clock()
    path = tmp_path / "ramp.yaml"
    scenario = {"devices": [{"uuid": A, "power_watts": 100}]}
    path.write_text(yaml.safe_dump(scenario))
    sim = SimulatedNvml(str(path), monotonic=clock)
    sim.install()
    session = NvmlSession.open(CollectionErrors())
    sweeper = DeviceSweeper(session, monotonic=clock, energy_every=3)
    try:
        (first,) = sweeper.sweep()
        for tick in range(1, 61):
            if tick % 5 == 0:
                scenario["devices"][0]["power_watts"] += 50
                path.write_text(yaml.safe_dump(scenario))    # seen once the clock moves
            clock.now += 10.0
            (reading,) = sweeper.sweep()
        hardware = _hardware_mj()
    finally:
        sweeper.close()
        session.close()
        sim.uninstall()
    reported = reading.energy_counter_millijoules - first.energy_counter_millijoules
    actual = hardware - first.energy_counter_millijoules
    assert reported == pytest.approx(actual, rel=0.002)
    assert reported >= actual - 1
