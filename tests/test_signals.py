"""Signals reach the daemon whichever of its threads the kernel hands them to.

A signal sent to a process goes to any thread that does not block it; Python runs the handler
in the main thread, which may be asleep in the serving loop's ``poll`` for half a minute when
no client is connected. ``kill(2)`` with a thread's ID delivers to that thread first, so these
tests choose the thread instead of hoping the kernel does."""

import os
import signal
import time

import pytest

from gpustats.serving import CLEANUP_SECONDS
from tests.support.fakehost import build
from tests.support.gpus import device
from tests.support.simulated import start_simulated


def other_threads(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_taken_by_another_thread_stops_the_idle_daemon_at_once(
        start_daemon, tmp_path, sig):
    host = build(tmp_path / "host", {})
    daemon, _ = start_simulated(start_daemon, tmp_path, {"devices": [device()]}, host)
    # The readiness probe's connection expired: the loop sleeps its long idle wait (no
    # outside sign of that but time).
    time.sleep(CLEANUP_SECONDS + 1.0)    # measures: past the cleanup, into the idle wait
    threads = other_threads(daemon.proc.pid)
    assert threads
    began = time.monotonic()
    os.kill(threads[-1], sig)
    code = daemon.proc.wait(20)
    took = time.monotonic() - began
    assert code == 0, daemon.log()
    assert took < 5.0, f"stopped {took:.1f} s after the signal"
    assert "shutting down" in daemon.log()
