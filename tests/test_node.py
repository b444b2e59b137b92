"""Node CPU and memory from a fake /proc: the kubelet's arithmetic, rates between readings."""

import math
import os
import tempfile

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustats.hostfs import HostRoots
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.node import CLOCK_TICKS_PER_SECOND as HZ
from gpustats.sources.node import NodeReader
from tests.support.clock import Clock


@pytest.fixture(autouse=True)
def psutil_reads_tmp_path(tmp_path, monkeypatch):
    """psutil reads the fake tree, as the daemon points it at --proc-root at start-up."""
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))


def _stat(proc, busy_jiffies):
    (proc / "stat").write_text(f"cpu  {busy_jiffies} 0 0 1000 0 0 0 0 0 0\nbtime 1700000000\n")


def test_cpu_rate_between_readings_and_working_set(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\nInactive(file): 10 kB\n"
                                      "AnonPages: 20 kB\n")
    clock = Clock(10.0)
    reader = NodeReader(HostRoots(proc=str(tmp_path)), monotonic=clock, wall=lambda: 5.0)
    _stat(tmp_path, 100)
    first, memory = reader.read()
    assert first.usage_nano_cores is None                # one reading: no rate yet
    assert memory.working_set_bytes == 40 * 1024 and memory.rss_bytes == 20 * 1024
    assert reader.boot_time == 1700000000.0
    clock.now = 12.0
    _stat(tmp_path, 100 + 2 * HZ)                        # two CPU seconds in 2 s: one core
    second, _ = reader.read()
    assert second.usage_nano_cores == 1_000_000_000
    assert second.usage_core_nano_seconds - first.usage_core_nano_seconds == 2_000_000_000
    clock.now = 14.0
    _stat(tmp_path, 50)                                  # went backwards: no rate, not negative
    assert reader.read()[0].usage_nano_cores is None


def test_cpu_ticks_come_exactly_from_the_fake_tree(tmp_path):
    # Numbers no real host has this instant: psutil read them from the fake tree.
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\n")
    (tmp_path / "stat").write_text("cpu  7 11 13 1000 500 17 19 23 0 0\n"
                                   "cpu0 7 11 13 1000 500 17 19 23 0 0\nbtime 1234567890\n")
    reader = NodeReader(HostRoots(proc=str(tmp_path)), monotonic=Clock(1.0), wall=lambda: 5.0)
    cpu, _ = reader.read()
    busy = 7 + 11 + 13 + 17 + 19 + 23                    # idle and iowait are not busy
    assert cpu.usage_core_nano_seconds == busy * 1_000_000_000 // HZ
    assert reader.boot_time == 1234567890.0


def test_a_root_psutil_does_not_read_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(psutil, "PROCFS_PATH", "/proc")
    with pytest.raises(ValueError, match="psutil reads procfs at /proc"):
        NodeReader(HostRoots(proc=str(tmp_path)))


def test_a_fifo_stat_is_reported_not_opened(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\n")
    os.mkfifo(tmp_path / "stat")                          # nobody ever writes to it
    errors = CollectionErrors()
    reader = NodeReader(HostRoots(proc=str(tmp_path)), errors=errors)
    cpu, memory = reader.read()                           # returns: the FIFO is not opened
    assert cpu is None and reader.boot_time is None
    assert memory.usage_bytes == 50 * 1024                # the rest of the node still reads
    (state,) = errors.states()
    assert state.source == "node" and state.last_error_reason == "not_regular_file"


def test_missing_btime_or_cpu_line_is_absent_not_zero(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\n")
    (tmp_path / "stat").write_text("intr 0\n")
    reader = NodeReader(HostRoots(proc=str(tmp_path)))
    cpu, memory = reader.read()
    assert cpu is None and reader.boot_time is None and memory is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.sampled_from(["cpu ", "cpu  ", "btime ", "cpu0 ", "intr "]).flatmap(
        lambda head: st.lists(st.one_of(st.integers(-10, 10**15).map(str),
                                        st.sampled_from(["nan", "inf", "-inf", "1e308", "x",
                                                         "1.5", ""])),
                              max_size=12).map(lambda v: head + " ".join(v))),
    st.text(max_size=30)), max_size=6))
def test_any_stat_file_gives_numbers_or_absence(lines):
    """Whatever <proc>/stat holds, busy ticks are an integer and the boot time finite, or
    absent; the reader never raises."""
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "stat"), "w", encoding="utf-8", errors="replace") as f:
            f.write("\n".join(lines) + "\n")
        previous = psutil.PROCFS_PATH
        psutil.PROCFS_PATH = root
        try:
            reader = NodeReader(HostRoots(proc=root))
            cpu, _ = reader.read()
        finally:
            psutil.PROCFS_PATH = previous
    assert cpu is None or isinstance(cpu.usage_core_nano_seconds, int)
    assert reader.boot_time is None or math.isfinite(reader.boot_time)


def test_boot_time_is_read_once_a_recheck_interval_and_a_new_one_then_taken(tmp_path,
                                                                            monkeypatch):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\n")
    _stat(tmp_path, 100)
    reads = []
    real_boot_time = psutil.boot_time
    monkeypatch.setattr(psutil, "boot_time", lambda: reads.append(1) or real_boot_time())
    clock = Clock(10.0)
    reader = NodeReader(HostRoots(proc=str(tmp_path)), monotonic=clock, wall=lambda: 5.0,
                        boot_recheck_seconds=60.0)
    reader.read()
    assert reader.boot_time == 1700000000.0 and len(reads) == 1
    (tmp_path / "stat").write_text("cpu  200 0 0 1000 0 0 0 0 0 0\nbtime 1700000500\n")
    for now in (11.0, 40.0, 69.9):                       # within the interval: not read again
        clock.now = now
        cpu, _ = reader.read()
        assert reader.boot_time == 1700000000.0 and cpu is not None
    assert len(reads) == 1
    clock.now = 70.0                                     # due: the new btime is taken
    reader.read()
    assert reader.boot_time == 1700000500.0 and len(reads) == 2


def test_boot_time_is_tried_every_tick_until_it_is_read(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\n")
    (tmp_path / "stat").write_text("cpu  100 0 0 1000 0 0 0 0 0 0\n")    # no btime line yet
    clock = Clock(10.0)
    reader = NodeReader(HostRoots(proc=str(tmp_path)), monotonic=clock, wall=lambda: 5.0)
    reader.read()
    assert reader.boot_time is None
    _stat(tmp_path, 200)
    clock.now = 11.0
    reader.read()
    assert reader.boot_time == 1700000000.0
