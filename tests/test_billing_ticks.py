"""Billing behaviour tick by tick, through the real daemon object (simulator, fake host trees):
learned idle across restarts and glitches, and PID reuse."""

from __future__ import annotations

import time

import pytest

from gpustats.export.prometheus import render
from gpustats.hostfs import read_boot_id
from gpustats.model.energy_keys import ProcessKey
from tests.support.descriptors import open_descriptors
from tests.support.fakehost import build, write_scenario
from tests.support.gpus import GPU_A as GPU



@pytest.fixture
def daemons(tmp_path, in_process_daemon):
    def _make(*args):
        cgroup, proc = build(tmp_path / "host", {4242: (1, 1)})
        return in_process_daemon("--simulate", str(tmp_path / "s.yaml"), "--cgroup-root",
                                 str(cgroup), "--proc-root", str(proc), *args), proc

    return _make


def scenario(tmp_path, watts, processes=(), daemon=None):
    """Writes the scenario; a running daemon's simulator reads it before the next tick."""
    write_scenario(tmp_path / "s.yaml", {
        "devices": [{"uuid": GPU, "minor": 0, "power_watts": watts}],
        "processes": [{"pid": pid, "device": GPU} for pid in processes]})
    if daemon is not None:
        assert daemon.simulator.reload()


def device(snapshot):
    return snapshot.devices[0]


def test_learned_idle_survives_a_restart_while_busy(daemons, tmp_path):
    scenario(tmp_path, 80)
    daemon, _ = daemons()
    for _ in range(4):
        snapshot = daemon.housekeeper.tick()
    assert device(snapshot).idle_power_watts == 80.0
    scenario(tmp_path, 300, [4242], daemon)
    daemon.housekeeper.tick()
    daemon.close()
    restarted, _ = daemons()                         # restart while the GPU is busy
    for _ in range(3):
        snapshot = restarted.housekeeper.tick()
        time.sleep(0.05)                     # measures: real time between hand-driven ticks
    assert device(snapshot).idle_power_watts == 80.0     # not today's 300 W
    # The tick's active energy over its length (the energy counter, read at its own time and
    # in millijoules, is not exact to the last digit).
    assert device(snapshot).active_power_watts == pytest.approx(220.0, rel=0.01)
    assert snapshot.processes[0].attributed_power_watts == pytest.approx(220.0, rel=0.05)


def test_one_zero_watt_reading_does_not_become_the_idle(daemons, tmp_path):
    scenario(tmp_path, 90)
    daemon, _ = daemons()
    for _ in range(4):
        daemon.housekeeper.tick()
    scenario(tmp_path, 0, daemon=daemon)              # a glitch, one tick long
    daemon.housekeeper.tick()
    scenario(tmp_path, 90, daemon=daemon)
    for _ in range(4):
        snapshot = daemon.housekeeper.tick()
    assert device(snapshot).idle_power_watts == 90.0
    scenario(tmp_path, 60, daemon=daemon)             # a real, sustained lower idle
    for _ in range(4):
        snapshot = daemon.housekeeper.tick()
    assert device(snapshot).idle_power_watts == 60.0


def write_stat(proc, pid, start_ticks):
    comm = "python3 (worker)"          # spaces and parentheses in the command name
    fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 30
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


def test_a_reused_pid_starts_a_new_process_counter(daemons, tmp_path):
    scenario(tmp_path, 300, [4242])
    daemon, proc = daemons("--idle-power-watts", "100")
    write_stat(proc, 4242, 1000)
    for _ in range(4):
        snapshot = daemon.housekeeper.tick()
        time.sleep(0.05)                     # measures: real time between hand-driven ticks
    first = snapshot.processes[0]
    assert first.start_time_ticks == 1000 and first.attributed_energy_joules > 0
    container_before = snapshot.pods[0].containers[0].accelerators[0].attributed_energy_joules
    write_stat(proc, 4242, 5000)                      # same PID, a new process
    snapshot = daemon.housekeeper.tick()
    second = snapshot.processes[0]
    assert second.start_time_ticks == 5000
    assert second.attributed_energy_joules < first.attributed_energy_joules
    boot = read_boot_id(daemon.roots)
    assert boot is not None                  # the fake /proc has the host's boot id
    assert daemon.counters.value(ProcessKey(GPU, 4242, 1000, boot)) == \
        pytest.approx(first.attributed_energy_joules)
    container_after = snapshot.pods[0].containers[0].accelerators[0].attributed_energy_joules
    assert container_after >= container_before       # container and pod are unaffected
    # On /metrics the new process is a new series, not the old one stepping down.
    text = render(snapshot, None)[0].decode()
    assert 'pid="4242",pid_start_ticks="5000"' in text


def test_cgroup_files_stay_open_between_ticks_and_close_with_the_daemon(tmp_path,
                                                                       in_process_daemon):
    scenario(tmp_path, 300, [4242])
    cgroup, proc = build(tmp_path / "host", {4242: (1, 1)})
    before = open_descriptors()
    daemon = in_process_daemon("--simulate", str(tmp_path / "s.yaml"), "--cgroup-root",
                               str(cgroup), "--proc-root", str(proc))
    for _ in range(3):
        snapshot = daemon.housekeeper.tick()
    (container,) = snapshot.containers or [c for p in snapshot.pods for c in p.containers]
    assert container.usage.memory.usage_bytes == 1048576
    during = open_descriptors() - before
    # The container's cpu.stat, memory.current and memory.stat (its pod's cgroup has none),
    # and the cgroup trees' inotify, beside the daemon's own (state journal, ...).
    assert len(during) >= 4
    memory = next(cgroup.rglob("cri-containerd-*.scope")) / "memory.current"
    memory.write_text("2097152\n")                     # the kernel rewrites it in place
    for _ in range(2):                                 # read every other tick by default
        snapshot = daemon.housekeeper.tick()
    (container,) = snapshot.containers or [c for p in snapshot.pods for c in p.containers]
    assert container.usage.memory.usage_bytes == 2097152
    daemon.close()
    assert open_descriptors() - before == set()
