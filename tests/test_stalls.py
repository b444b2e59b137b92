"""A stalled daemon bills each process for the part of the stall it lived, not all of it.

SIGSTOP for several intervals while pod A's process runs and ends and pod B's starts: the
first tick after the stall covers all of it. It went to the processes listed at that tick, so
B was billed for time before it existed. Now B is billed at most for the time since its start
(from ``/proc/<pid>/stat``), and the rest of the stall stays unattributed: never dropped, never
given to a bystander.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from gpustats.fakehost import add_container, add_process
from tests.support.fakehost import (
    build, container_cgroup, container_id, containers_by_id, pod_uid, write_scenario,
)
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

ACTIVE_WATTS = 400.0        # 500 W drawn, 100 W idle
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def energy(summary: dict, n: int) -> float:
    found = containers_by_id(summary).get(container_id(n))
    return found["accelerators"][0].get("attributedEnergyJoules", 0.0) if found else 0.0


def start_process_now(proc, pid: int) -> float:
    """``/proc/<pid>/stat`` of a process started now (on the boot clock); returns when."""
    started = time.clock_gettime(time.CLOCK_BOOTTIME)
    (proc / str(pid) / "stat").write_text(
        f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 " + "0 " * 12
        + f"{int(started * CLOCK_TICKS)} " + "0 " * 30 + "\n")
    return time.monotonic()


def test_a_process_started_during_a_stall_is_billed_only_for_its_life(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    daemon, path = start_simulated(
        start_daemon, tmp_path,
        {"devices": [device(power_watts=500)], "processes": [{"pid": 101, "device": GPU}]},
        (cgroup, proc), "--housekeeping-interval", "0.5", "--pod-resources-socket", "",
        "--runtime-socket", "", "--idle-power-watts", "100")
    daemon.wait_for(lambda s: energy(s, 1) > 100)
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(4.0)                        # measures: stopped while A runs, then ends
        rel = container_cgroup(pod_uid(2), container_id(2))
        add_container(cgroup, rel)
        add_process(proc, 102, rel)
        b_started = start_process_now(proc, 102)
        write_scenario(path, {"devices": [device(power_watts=500)],
                              "processes": [{"pid": 102, "device": GPU}]})
        time.sleep(4.0)                        # measures: stopped while B runs
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    summary = daemon.wait_for(lambda s: energy(s, 2) > 0, timeout=10)
    lived = time.monotonic() - b_started
    # Without the bound B got the whole 8 s stall: ~3,200 J for ~4 s of life.
    assert energy(summary, 2) <= ACTIVE_WATTS * lived * 1.05 + 50, (energy(summary, 2), lived)
    # The stall's first part is not B's, and not dropped: it stays unattributed.
    assert summary["node"]["accelerators"][0]["unattributedEnergyJoules"] \
        >= ACTIVE_WATTS * 3.0, summary["node"]["accelerators"][0]


def test_with_accounting_on_a_stall_bills_each_process_its_own_part(start_daemon, tmp_path):
    """Accounting mode on, 260 W above idle: pod A's process runs the first part of a stall
    and exits, pod B's starts then and runs the rest. Each is billed its own part from the
    records (A's run within the stall, though A is gone when the daemon reads it), not A the
    whole stall (it was billed 135 % of its part, B 72 %)."""
    gpu = device(power_watts=360, accounting=True)
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    daemon, path = start_simulated(
        start_daemon, tmp_path,
        {"devices": [gpu], "processes": [{"pid": 101, "device": GPU, "sm_util_percent": 80}]},
        (cgroup, proc), "--housekeeping-interval", "0.25", "--pod-resources-socket", "",
        "--runtime-socket", "", "--idle-power-watts", "100")
    before = daemon.wait_for(lambda s: energy(s, 1) > 100)
    daemon.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        time.sleep(3.0)                        # measures: stopped while A runs, then ends
        rel = container_cgroup(pod_uid(2), container_id(2))
        add_container(cgroup, rel)
        add_process(proc, 102, rel)
        changed = start_process_now(proc, 102)
        write_scenario(path, {"devices": [gpu], "processes": [
            {"pid": 102, "device": GPU, "sm_util_percent": 80}]})
        time.sleep(3.0)                        # measures: stopped while B runs
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
    after = daemon.wait_for(lambda s: energy(s, 2) > 0, timeout=10)
    active = 260.0
    a, b = energy(after, 1) - energy(before, 1), energy(after, 2)
    # A: its run in the stall, and the part of a tick before it (at most one interval).
    assert active * (changed - stopped) * 0.93 <= a <= active * (changed - stopped + 0.4), a
    assert b == pytest.approx(active * (resumed - changed), rel=0.07), b
