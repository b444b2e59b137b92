"""A wall-clock step leaves the time-sliced split as it was.

NVML stamps utilization samples with the wall clock and the sweep asks for those newer than
the newest seen. After the clock stepped back 600 s none were newer for 600 s, so the split
fell back to equal (a 75/25 pair billed 50/50). The step is told from the monotonic clock and
the stamps seen are re-based by it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpustats.sources.wall_clock import WallClockSteps
from tests.support.fakehost import build, container_id, containers_by_id
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

FAKETIME = [Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
            Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1")]


class Clocks:
    def __init__(self):
        self.wall, self.mono = 1000.0, 50.0

    def advance(self, seconds: float, step: float = 0.0) -> None:
        self.mono += seconds
        self.wall += seconds + step


def test_steps_are_told_from_drift():
    clocks = Clocks()
    steps = WallClockSteps(lambda: clocks.wall, lambda: clocks.mono)
    assert steps.step_us() == 0                       # the first look: nothing to compare
    clocks.advance(1.0)
    assert steps.step_us() == 0
    clocks.advance(1.0, step=-600.0)
    assert steps.step_us() == -600_000_000
    clocks.advance(1.0, step=0.0005)                  # slewing, not a step
    assert steps.step_us() == 0
    clocks.advance(1.0, step=30.0)
    assert steps.step_us() == 30_000_000


def energy(summary: dict, n: int) -> float:
    found = containers_by_id(summary).get(container_id(n))
    return found["accelerators"][0].get("attributedEnergyJoules", 0.0) if found else 0.0


@pytest.fixture
def faketime_library() -> Path:
    found = next((p for p in FAKETIME if p.exists()), None)
    if found is None:
        pytest.skip("libfaketime is not installed (Debian: libfaketime)")
    return found


def test_a_step_back_of_the_wall_clock_keeps_the_75_25_split(start_daemon, tmp_path,
                                                              faketime_library):
    """The daemon runs under libfaketime, its wall clock (and only it) stepped from a file."""
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {"LD_PRELOAD": str(faketime_library), "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    scenario = {"devices": [device(power_watts=400)], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 75},
        {"pid": 102, "device": GPU, "sm_util_percent": 25}]}
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario,
                                build(tmp_path / "host", {101: (1, 1), 102: (2, 2)}),
                                "--housekeeping-interval", "0.2", "--pod-resources-socket", "",
                                "--runtime-socket", "", "--idle-power-watts", "100", env=env)
    before = daemon.wait_for(lambda s: energy(s, 1) + energy(s, 2) > 300)
    offset.write_text("-600\n")                        # an NTP step back of ten minutes
    after = daemon.wait_for(lambda s: energy(s, 1) + energy(s, 2)
                            > energy(before, 1) + energy(before, 2) + 1200, timeout=30)
    a = energy(after, 1) - energy(before, 1)
    b = energy(after, 2) - energy(before, 2)
    assert a / (a + b) == pytest.approx(0.75, abs=0.03), (a, b)
    assert "wall clock stepped" in daemon.log()


def test_a_restart_across_a_step_back_counts_the_gap(start_daemon, tmp_path, faketime_library):
    """8 s down while the wall clock stepped back 600 s: the gap's energy is bounded on the
    boot clock, not the wall clock (there the gap looked negative, and 4,395 J drawn became
    794 J of counter growth)."""
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {"LD_PRELOAD": str(faketime_library), "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    host = build(tmp_path / "host", {101: (1, 1)})
    scenario = {"devices": [device(power_watts=500)],
                "processes": [{"pid": 101, "device": GPU}]}
    args = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "",
            "--runtime-socket", "", "--idle-power-watts", "100")
    first, _ = start_simulated(start_daemon, tmp_path, scenario, host, *args, env=env)
    before = first.wait_for(lambda s: s["node"]["accelerators"][0]["energyJoules"] > 500)
    first.stop()
    stopped = before["node"]["accelerators"][0]["energyJoules"]
    offset.write_text("-600\n")
    time.sleep(8.0)                       # measures: 8 s of downtime
    second, _ = start_simulated(start_daemon, tmp_path, None, host, *args, env=env)
    after = second.wait_for(lambda s: s["node"]["accelerators"][0]["energyJoules"]
                            > stopped + 1000, timeout=15)
    gained = after["node"]["accelerators"][0]["energyJoules"] - stopped
    assert gained >= 500 * 8.0 * 0.95, gained
    assert "added to its energy counter" in second.log()


def test_a_step_forward_leaves_a_live_keep_alive_connection_open(start_daemon, tmp_path,
                                                                 faketime_library):
    """The server's idle timers run on the monotonic clock: after a +300 s step a connection
    idle for 2 s (of its 5 s) is still served, where waitress's wall-clock stamps made it
    look idle for 302 s and closed it."""
    import http.client

    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    env = {"LD_PRELOAD": str(faketime_library), "FAKETIME_TIMESTAMP_FILE": str(offset),
           "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    host = build(tmp_path / "host", {101: (1, 1)})
    daemon, _ = start_simulated(start_daemon, tmp_path, {"devices": [device()]}, host,
                                "--housekeeping-interval", "0.2", "--pod-resources-socket", "",
                                "--runtime-socket", "", env=env)
    daemon.wait_for(lambda s: s["node"].get("accelerators"))
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=5)
    try:
        connection.request("GET", "/healthz")
        assert connection.getresponse().read()
        offset.write_text("+300\n")
        # The daemon's ticks are stamped 300 s ahead (its wall clock stepped), then the
        # server's cleanup (every 2 s) has run at least once.
        daemon.wait_for(lambda s: s["node"]["cpu"]["time"] > time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 250)), timeout=3)
        time.sleep(2.5)                   # measures: past the server's 2 s cleanup
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        assert response.status == 200
        response.read()
    finally:
        connection.close()
