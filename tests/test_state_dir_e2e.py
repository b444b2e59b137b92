"""The state dir under strain, through the real daemon: a disk that fills up, a SIGHUP
compaction on a slow disk with ticks going on, a journal hard-linked to another file, a
rollback over a newer gpustats' state, a reboot. After a SIGKILL and a restart no served
counter is ever lower (but a process's, after a reboot: another process then)."""

from __future__ import annotations

import base64
import os
import signal
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.engine.state_files import (
    FORMAT_FILE, JOURNAL_FILE, STATE_FILE, decode_journal_line,
)
from gpustats.engine.state_schema import SCHEMA_VERSION
from tests.support.fakehost import build, write_scenario
from tests.support.gpus import GPU_A as GPU, device
from tests.support.invariants import assert_never_decreased, counters
from tests.support.paths import REPO_ROOT
from tests.support.simulated import start_simulated
from tests.support.small_disk import fill, small_disk
from tests.support.waiting import poll

BASE = ("--pod-resources-socket", "", "--runtime-socket", "", "--idle-power-watts", "100")
SLOW_FSYNC = Path(__file__).resolve().parent / "slow_fsync"


def busy() -> dict:
    return {"devices": [device()], "processes": [{"pid": 101, "device": GPU}]}


def start(start_daemon, tmp_path, *extra, env=None):
    written = (tmp_path / "s.yaml").exists()
    return start_simulated(start_daemon, tmp_path, None if written else busy(),
                           build(tmp_path / "host", {101: (1, 1)}), *BASE, *extra, env=env)[0]


def scrape(daemon) -> dict:
    status, body = daemon.get("/metrics")
    assert status == 200, body
    return counters(body)


def persistence(daemon) -> dict | None:
    status, body = daemon.get("/api/v1/status")
    assert status == 200, body
    return {s["name"]: s for s in body["sources"]}.get("persistence")


def wait_persistence(daemon, state: str, timeout: float = 15.0) -> dict:
    last: list[dict | None] = [None]

    def reached() -> dict | None:
        last[0] = persistence(daemon)
        return last[0] if last[0] is not None and last[0]["state"] == state else None

    found = poll(reached, timeout=timeout, interval=0.1)
    if found is None:
        raise AssertionError(f"persistence not {state} in {timeout}s: {last[0]}\n{daemon.log()}")
    return found


def sample(daemon, name: str, **labels: str) -> float | None:
    """The value of the one ``name`` sample with these labels, ``None`` when absent."""
    for family in text_string_to_metric_families(daemon.get("/metrics")[1]):
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                return s.value
    return None


def failing_gauge(daemon) -> float | None:
    return sample(daemon, "gpustats_source_failing", source="persistence")


@pytest.fixture
def small_state_dir(tmp_path):
    """``tmp_path/state`` on a 2 MiB tmpfs (root with mount rights only): room for the
    counters and the usage database, until the test fills it."""
    with small_disk(tmp_path / "state", "2m") as state:
        yield state


def test_a_state_dir_that_fills_up_loses_nothing(start_daemon, tmp_path, small_state_dir):
    """The journal's disk fills mid-line, then has room again. No torn line is left for later
    lines to follow (replay used to stop there: after SIGKILL counters came back lower), the
    failing journal shows in /api/v1/status and /metrics, and after a SIGKILL and a restart
    every counter is at least what was served."""
    args = ("--housekeeping-interval", "0.1", "--persist-interval", "3600")
    daemon = start(start_daemon, tmp_path, *args)
    daemon.wait_ticks(10)
    wait_persistence(daemon, "ok")
    filler = fill(small_state_dir)
    failing = wait_persistence(daemon, "failing")
    assert failing["lastErrorReason"] == "journal_failed", failing
    assert failing_gauge(daemon) == 1
    daemon.wait_ticks(10)                             # ticks go on failing to append
    journal = (small_state_dir / JOURNAL_FILE).read_bytes()
    assert journal.endswith(b"\n")                    # no half line left
    for line in journal.splitlines():
        decode_journal_line(line)
    served_while_full = scrape(daemon)
    filler.unlink()
    wait_persistence(daemon, "ok")
    assert failing_gauge(daemon) == 0
    daemon.wait_ticks(3)
    last = scrape(daemon)
    assert_never_decreased(served_while_full, last)
    daemon.stop(signal.SIGKILL)
    restarted = start(start_daemon, tmp_path, *args)
    first = scrape(restarted)
    assert_never_decreased(last, first)
    assert "torn or corrupt" not in restarted.log()


def test_a_sighup_compaction_on_a_slow_disk_never_erases_a_tick(start_daemon, tmp_path):
    """SIGHUP compacts while ticks run and fsync takes a second. The pod's process ends
    during the compaction, so its counters change no more: lines the ticks journaled during
    the compaction used to be erased by its truncation, and after a SIGKILL the pod's
    counters came back lower than served."""
    args = ("--housekeeping-interval", "0.1", "--persist-interval", "3600")
    env = {"PYTHONPATH": f"{SLOW_FSYNC}{os.pathsep}{REPO_ROOT}",
           "GPUSTATS_TEST_FSYNC_SECONDS": "1.0"}
    daemon = start(start_daemon, tmp_path, *args, env=env)
    daemon.wait_ticks(10)
    daemon.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)              # measures: half the compaction's 1 s fsync, then a change
    write_scenario(tmp_path / "s.yaml", {**busy(), "processes": []})
    poll(lambda: "SIGHUP: counters" in daemon.log(), timeout=20, interval=0.1)
    assert "SIGHUP: counters persisted" in daemon.log()
    daemon.wait_ticks(10)
    last = scrape(daemon)
    assert any(name == "gpustats_pod_gpu_joules" for name, _ in last)
    daemon.stop(signal.SIGKILL)
    restarted = start(start_daemon, tmp_path, *args)
    assert_never_decreased(last, scrape(restarted))


def test_a_hard_linked_journal_leaves_the_other_file_alone(start_daemon, tmp_path):
    """counters.journal hard-linked to another file: the daemon used to append to that file
    and empty it at the next compaction. It is refused (moved aside, logged, counted) and a
    journal of the daemon's own is written instead."""
    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    body = b"another program's data\n" * 10
    victim.write_bytes(body)
    os.link(victim, state / JOURNAL_FILE)
    daemon = start(start_daemon, tmp_path, "--housekeeping-interval", "0.1",
                   "--persist-interval", "0.5")
    first = (state / STATE_FILE).stat().st_mtime_ns if (state / STATE_FILE).exists() else None
    seen = {"first": first, "compactions": 0}

    def compacted_twice() -> bool:
        if (state / STATE_FILE).exists() \
                and (state / STATE_FILE).stat().st_mtime_ns != seen["first"]:
            seen["first"] = (state / STATE_FILE).stat().st_mtime_ns
            seen["compactions"] += 1
        return seen["compactions"] >= 2

    poll(compacted_twice, timeout=15, interval=0.2)
    assert seen["compactions"] == 2
    assert victim.read_bytes() == body
    assert os.stat(state / JOURNAL_FILE).st_nlink == 1
    assert len(list(state.glob(JOURNAL_FILE + ".refused-*"))) == 1
    assert "has 2 hard links" in daemon.log()
    assert sample(daemon, "gpustats_collection_errors_total", source="persistence",
                  reason="hard_linked") == 1
    last = scrape(daemon)
    daemon.stop(signal.SIGKILL)
    assert_never_decreased(last, scrape(start(start_daemon, tmp_path)))


# ------------------------------------------------------------ a rollback

def as_a_newer_release_left_it(state: Path) -> None:
    """What a newer gpustats that changed the journal line leaves at a SIGKILL: its FORMAT (a
    version above this one's) and journal lines this release cannot decode."""
    (state / FORMAT_FILE).write_bytes(b"%d\n" % (SCHEMA_VERSION + 1))
    journal = state / JOURNAL_FILE
    journal.write_bytes(b"".join(base64.b64encode(line) + b"\n"
                                 for line in journal.read_bytes().splitlines()))


def state_contents(state: Path) -> dict[str, bytes]:
    """Every file of the counters' state: not the simulator's (its fake hardware's counters)
    nor the usage database's (history that --state-reset leaves where it is)."""
    return {p.name: p.read_bytes() for p in sorted(state.iterdir())
            if p.is_file() and p.name != "simulated-driver.json"
            and not p.name.startswith("usage.sqlite")}


def exit_status_or_serving(daemon, timeout: float = 20.0) -> int | None:
    """The daemon's exit status when it exits at start, ``None`` once it is ready."""
    def exited_or_ready() -> tuple[int | None] | None:
        code = daemon.proc.poll()
        if code is not None:
            return (code,)
        try:
            if daemon.get("/readyz")[0] == 200:
                return (None,)
        except OSError:
            pass                                   # not listening yet
        return None

    found = poll(exited_or_ready, timeout=timeout, interval=0.1)
    if found is None:
        raise AssertionError(f"neither ready nor exited in {timeout}s:\n{daemon.log()}")
    return found[0]


def test_a_rollback_over_a_newer_state_refuses_it_and_leaves_it_whole(start_daemon, tmp_path):
    """A newer gpustats changed the journal line, was SIGKILLed, and this release starts over
    its state (a rollback). The release before this one, over the state of the one after it
    (which had checksummed the lines without a version bump), read every line as torn and
    served a pod's counter 2,436 -> 294 J. Now the state's FORMAT is read first: the daemon
    exits 2 with one line naming the way out, and leaves every file of the newer state byte for
    byte; ``--state-reset`` then starts over from zero, keeping the newer files aside."""
    args = ("--housekeeping-interval", "0.1", "--persist-interval", "3600")
    daemon = start(start_daemon, tmp_path, *args)
    daemon.wait_ticks(10)
    served = scrape(daemon)
    assert any(name == "gpustats_pod_gpu_joules" and value > 0
               for (name, _), value in served.items()), served
    daemon.stop(signal.SIGKILL)
    state = tmp_path / "state"
    as_a_newer_release_left_it(state)
    newer = state_contents(state)
    rolled_back = start_simulated(start_daemon, tmp_path, None,
                                  build(tmp_path / "host", {101: (1, 1)}), *BASE, *args,
                                  ready=False)[0]
    code = exit_status_or_serving(rolled_back)
    if code is None:
        stepped_back = {series: (value, after) for series, after in scrape(rolled_back).items()
                        if (value := served.get(series)) is not None and after < value}
        raise AssertionError(f"the daemon serves over a newer state; stepped back: "
                             f"{stepped_back}")
    assert code == 2
    log = rolled_back.log()
    assert "written by a newer gpustats" in log and "--state-reset" in log, log
    assert f"format {SCHEMA_VERSION + 1}" in log, log
    assert state_contents(state) == newer               # nothing read aside, nothing written
    reset = start(start_daemon, tmp_path, *args, "--state-reset")
    assert scrape(reset)
    kept = {name.split(".reset-")[0]: data for name, data in state_contents(state).items()
            if ".reset-" in name}
    assert kept == newer


# ------------------------------------------------------------ a reboot

PID, START_TICKS = 101, 2500
PROCESS = "gpustats_process_gpu_joules"


def write_stat(proc: Path, pid: int, start_ticks: int) -> None:
    """``/proc/<pid>/stat`` with the process's start time (field 22) in clock ticks."""
    fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 30
    (proc / str(pid) / "stat").write_text(f"{pid} (worker) {' '.join(fields)}\n")


def start_in_boot(start_daemon, tmp_path, boot_id: str, *args):
    """The daemon over a host booted as ``boot_id`` whose PID 101 started at tick 2500."""
    cgroup, proc = build(tmp_path / "host", {PID: (1, 1)})
    write_stat(proc, PID, START_TICKS)
    (proc / "sys" / "kernel" / "random" / "boot_id").parent.mkdir(parents=True, exist_ok=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text(boot_id + "\n")
    written = (tmp_path / "s.yaml").exists()
    return start_simulated(start_daemon, tmp_path, None if written else busy(), (cgroup, proc),
                           *BASE, *args)[0]


def process_joules(daemon) -> float | None:
    return sample(daemon, PROCESS + "_total", pid=str(PID), pid_start_ticks=str(START_TICKS))


def first_process_joules(daemon, timeout: float = 15.0) -> float:
    """The process's counter as soon as it is served (its first tick with energy)."""
    found = poll(lambda: (joules,) if (joules := process_joules(daemon)) is not None else None,
                 timeout=timeout, interval=0.05)
    if found is not None:
        return found[0]
    raise AssertionError(f"no {PROCESS} for PID {PID} in {timeout}s:\n{daemon.log()}")


def test_after_a_reboot_the_same_pid_and_start_time_is_another_process(start_daemon, tmp_path):
    """PID 101, started at tick 2500, is billed; the node reboots (a new boot id) and a new
    process gets PID 101 and start tick 2500 again. Its counter used to go on from the old
    process's joules; it starts from zero now, while the pod's and the container's counters
    (not keyed by the process) go on growing from where they were."""
    args = ("--housekeeping-interval", "0.1", "--persist-interval", "3600")
    daemon = start_in_boot(start_daemon, tmp_path, "4b0e8a52-1f3c-4d6e-9a7b-0c1d2e3f4a5b", *args)
    daemon.wait_ticks(15)
    before = scrape(daemon)
    old_process = process_joules(daemon)
    assert old_process is not None and old_process > 50.0, before
    daemon.stop(signal.SIGKILL)
    rebooted = start_in_boot(start_daemon, tmp_path, "9e7d6c5b-4a39-4281-b7a6-958473625140",
                             *args)
    new_process = first_process_joules(rebooted)
    after = scrape(rebooted)
    assert new_process is not None and new_process < old_process, (old_process, new_process)
    billed = {series: value for series, value in before.items() if series[0] != PROCESS}
    assert_never_decreased(billed, after)
    rebooted.wait_ticks(5)
    later = scrape(rebooted)
    for level in ("gpustats_pod_gpu_joules", "gpustats_container_gpu_joules"):
        grew = [series for series in billed if series[0] == level
                and later.get(series, 0.0) > billed[series]]
        assert grew, (level, billed, later)
