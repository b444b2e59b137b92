"""Start times of GPU processes read tick after tick through kept ``/proc/<pid>/stat`` files,
against the machine's own procfs (a kept file names one process, whatever its PID becomes)."""

import os
import subprocess
import sys

import pytest

from gpustats.hostfs import HostRoots
from gpustats.sources.procs import ProcReader, parse_start_time


@pytest.fixture
def children():
    procs = []

    def spawn():
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def opens(monkeypatch):
    seen = []
    real = os.open

    def recording(path, *args, **kwargs):
        seen.append(os.fsdecode(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording)
    return seen


def test_a_listed_process_is_read_without_opening_its_file_again(children, opens):
    child = children()
    reader = ProcReader(HostRoots(proc="/proc"), kept_files=8)
    try:
        first = reader.start_times([child.pid, child.pid])
        with open(f"/proc/{child.pid}/stat") as stat:
            assert first == {child.pid: parse_start_time(stat.read())}
        assert first[child.pid] is not None
        opens.clear()
        assert reader.start_times([child.pid]) == first
        assert opens == []
    finally:
        reader.close()


def test_an_ended_process_reads_as_gone_and_its_file_is_closed(children):
    child = children()
    reader = ProcReader(HostRoots(proc="/proc"), kept_files=8)
    try:
        assert reader.start_times([child.pid])[child.pid] is not None
        child.kill()
        child.wait()                       # reaped: the kept file answers ESRCH
        assert reader.start_times([child.pid]) == {child.pid: None}
        assert len(reader._stats) == 0
    finally:
        reader.close()


def test_files_of_pids_no_longer_listed_are_closed_and_the_limit_holds(children, opens):
    a, b, c = children(), children(), children()
    reader = ProcReader(HostRoots(proc="/proc"), kept_files=2)
    try:
        everything = reader.start_times([a.pid, b.pid, c.pid])
        assert all(everything.values()) and len(reader._stats) == 2    # the third: by path
        assert reader.start_times([c.pid]) == {c.pid: everything[c.pid]}
        assert len(reader._stats) == 0     # a and b closed; c was read by path that tick
        reader.start_times([c.pid])
        assert len(reader._stats) == 1
        opens.clear()
        assert reader.start_times([c.pid]) == {c.pid: everything[c.pid]}
        assert opens == []
    finally:
        reader.close()
    assert len(reader._stats) == 0


@pytest.mark.parametrize("tail_fields", [30, 0])
def test_the_start_time_is_field_22_counted_after_the_command_name(tail_fields):
    # Fields 3-21, the start time (22), then the rest of a real line (or none of it).
    fields = ["S"] + [str(n) for n in range(4, 22)] + ["987654"] + ["7"] * tail_fields
    line = f"4242 (a (b) c) {' '.join(fields)}\n"
    assert parse_start_time(line) == 987654


@pytest.mark.parametrize("line", [
    "4242 no command name 0 0\n",
    "4242 (worker) S " + " ".join(["0"] * 17) + "\n",          # field 21 is the last
    "4242 (worker) S " + " ".join(["0"] * 18) + " -5 0 0\n",   # negative
    "4242 (worker) S " + " ".join(["0"] * 18) + " soon 0 0\n",
])
def test_a_stat_line_without_a_start_time_is_refused(line):
    with pytest.raises(ValueError):
        parse_start_time(line)
