"""The health thread with fake event sources: transitions, failures, shutdown budget."""

import logging
import time

from gpustats.engine.health_monitor import HealthMonitor
from gpustats.model.health import HealthEvent
from tests.support.waiting import wait_until


class Source:
    def __init__(self, events=(), fail=False, block=0.0):
        self.events = list(events)
        self.fail = fail
        self.block = block
        self.opened = []
        self.closed = 0
        self.waits = 0

    def open(self, uuids):
        self.opened.append(uuids)
        return {u: True for u in uuids}

    def wait(self, timeout_ms):
        self.waits += 1
        if self.fail:
            raise RuntimeError("NVML Error: Unknown")
        if self.events:
            return [self.events.pop(0)]
        time.sleep(self.block or timeout_ms / 1000)      # measures: a wait that blocks, as NVML's
        return []

    def close(self):
        self.closed += 1


def test_events_change_health():
    now = time.time()
    source = Source([HealthEvent("GPU-a", "xid", now, 13), HealthEvent("GPU-a", "xid", now, 79)])
    monitor = HealthMonitor(lambda: source, wait_ms=50)
    monitor.track(1, ("GPU-a", "GPU-b"))
    monitor.start()
    try:
        assert wait_until(lambda: monitor.health_by_uuid()["GPU-a"].xid_error_count == 2)
        a = monitor.health_by_uuid()["GPU-a"]
        assert not a.healthy and a.conditions[0].reason == "XidError"
        assert monitor.health_by_uuid()["GPU-b"].healthy
        assert monitor.xid_count_since("GPU-a", now - 1) == 2
    finally:
        monitor.stop()


def test_sweep_lost_without_events_and_new_session_resets():
    monitor = HealthMonitor(lambda: Source(), wait_ms=50)
    monitor.track(1, ("GPU-a",))
    monitor.note_gpu_lost("GPU-a", time.time())
    assert monitor.health_by_uuid()["GPU-a"].conditions[0].reason == "GpuLost"
    monitor.track(2, ("GPU-a",))               # NVML re-initialised
    assert monitor.health_by_uuid()["GPU-a"].healthy


def test_failing_source_never_kills_the_thread(caplog):
    source = Source(fail=True)
    monitor = HealthMonitor(lambda: source, wait_ms=50, max_backoff_seconds=0.05)
    monitor.track(1, ("GPU-a",))
    with caplog.at_level(logging.WARNING):
        monitor.start()
        try:
            assert wait_until(lambda: monitor.errors >= 5)
            assert monitor._thread.is_alive()
        finally:
            monitor.stop()
    assert len([r for r in caplog.records if "event wait failed" in r.getMessage()]) == 1
    assert source.closed >= 5


def test_stop_within_budget_while_waiting():
    made: list[Source] = []
    monitor = HealthMonitor(lambda: made.append(Source(block=0.5)) or made[-1], wait_ms=500)
    monitor.track(1, ("GPU-a",))
    monitor.start()
    assert wait_until(lambda: made and made[-1].waits > 0)       # inside its wait
    started = time.monotonic()
    monitor.stop(timeout=2.0)
    assert time.monotonic() - started < 2.0
    assert not monitor._thread.is_alive()


def test_idle_without_gpus():
    made = []
    monitor = HealthMonitor(lambda: made.append(1) or Source(), wait_ms=50)
    monitor.start()
    time.sleep(0.3)                            # measures: a while without GPUs
    monitor.stop()
    assert made == []                          # no GPUs: no event set opened


def test_a_simulating_daemon_health_thread_wakes_for_events_and_stops_at_once(
        in_process_daemon, tmp_path):
    """A simulated event wait can be woken, so the daemon waits in long slices there (the
    thread's wakes were a share of the idle CPU) and its stop cuts the slice short."""
    from tests.support.fakehost import write_scenario
    from tests.support.gpus import GPU_A

    write_scenario(tmp_path / "s.yaml", {"devices": [{"uuid": GPU_A}]})
    daemon = in_process_daemon("--simulate", str(tmp_path / "s.yaml"))
    daemon._tick()                                   # the health thread is told the GPUs
    waits = daemon.simulator.calls_by_function["nvmlEventSetWait_v2"]
    daemon.health.start()
    assert wait_until(lambda: daemon.simulator.calls_by_function["nvmlEventSetWait_v2"] > waits)
    time.sleep(0.2)    # measures: the first may end at once (track() interrupted it early)
    waits = daemon.simulator.calls_by_function["nvmlEventSetWait_v2"]
    time.sleep(1.2)    # measures: a span with no new wait (each waits 10 s)
    assert daemon.simulator.calls_by_function["nvmlEventSetWait_v2"] == waits
    started = time.monotonic()
    daemon.health.stop(5.0)
    assert time.monotonic() - started < 1.0          # not the 10 s slice
    assert not daemon.health._thread.is_alive()


class SlowOpen(Source):
    """Registers the GPUs' events only after a while (a busy driver)."""

    def open(self, uuids):
        time.sleep(0.3)                        # measures: a slow driver's registration
        return super().open(uuids)


def test_a_tick_can_wait_for_the_events_to_be_registered_so_nothing_changes_a_tick_later():
    """What the first snapshot of a session shows has EccHealth already: without the wait the
    condition came a tick later, and every GPU's watch got a MODIFIED with nothing changed."""
    monitor = HealthMonitor(lambda: SlowOpen(), wait_ms=50)
    monitor.start()
    try:
        monitor.track(1, ("GPU-a",))
        assert monitor.health_by_uuid()["GPU-a"].condition("EccHealth") is None
        assert monitor.wait_opened(5.0)
        assert monitor.health_by_uuid()["GPU-a"].condition("EccHealth") is not None
        monitor.track(1, ("GPU-a",))                 # the same GPUs: nothing to wait for
        assert monitor.wait_opened(0.0)
    finally:
        monitor.stop()


def test_the_wait_is_bounded_and_ends_when_opening_fails_or_no_thread_runs():
    assert HealthMonitor(lambda: SlowOpen(), wait_ms=50).wait_opened(5.0)     # no thread
    failing = HealthMonitor(lambda: Source(fail=True), wait_ms=50, max_backoff_seconds=0.1)
    failing.start()
    try:
        failing.track(1, ("GPU-a",))
        assert failing.wait_opened(5.0)          # opened, then its wait failed: settled
    finally:
        failing.stop()
    slow = HealthMonitor(lambda: SlowOpen(), wait_ms=50)
    slow.start()
    try:
        slow.track(1, ("GPU-a",))
        began = time.monotonic()
        assert not slow.wait_opened(0.05)
        assert time.monotonic() - began < 0.25
    finally:
        slow.stop()
