"""Processes that ended unlisted, read from NVML's accounting records: one list read per GPU
and tick, the records read only where something may be new, each run billed once, for its
part of the tick."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pynvml
import pytest

from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml import process_reads
from gpustats.sources.nvml.process_reads import EndedProcesses
from gpustats.sources.nvml.query import Querier
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A
from tests.support.sweepers import SimulatedSweepers

PIDS = "nvmlDeviceGetAccountingPids"
STATS = "nvmlDeviceGetAccountingStats"
MODE = "nvmlDeviceGetAccountingMode"
NO_SAMPLES = ["process_utilization"]


@pytest.fixture
def swept(tmp_path):
    sweepers = SimulatedSweepers(tmp_path)
    yield lambda scenario, **kw: sweepers.start(scenario, wall_epoch=1.7e9, **kw)
    sweepers.close()


def gpu(**fields) -> dict:
    return {"uuid": A, "power_watts": 300, "accounting": True, "unsupported": NO_SAMPLES,
            **fields}


def between_ticks(pid: int = 101, sm: int = 60) -> dict:
    return {"pid": pid, "device": A, "sm_util_percent": sm, "between_ticks": True}


def tick(s):
    """One sweep a second after the last: its reading and the driver calls it made."""
    before = dict(s.sim.calls_by_function)
    s.clock.now += 1.0
    (reading,) = s.sweeper.sweep()
    return reading, {k: v - before.get(k, 0) for k, v in s.sim.calls_by_function.items()}


def accounted(reading) -> dict[int, tuple[float, float | None]]:
    return {p.pid: (p.accounted.seconds, p.accounted.gpu_utilization_percent)
            for p in reading.processes if p.accounted is not None}


def test_a_run_between_ticks_is_read_once_for_its_part_of_the_tick(swept):
    s = swept({"devices": [gpu()], "processes": [
        between_ticks(), {"pid": 102, "device": A, "sm_util_percent": 10}]})
    first, calls = tick(s)
    # The records already there when the daemon first looks ended before it looked.
    assert accounted(first) == {} and calls[PIDS] == 1 and calls.get(STATS, 0) == 0
    for _ in range(4):
        reading, calls = tick(s)
        assert accounted(reading) == {101: (1.0, 60.0)}
        assert calls[PIDS] == 1 and calls[STATS] == 1      # the new record; 102 is listed
        ended = [p for p in reading.processes if p.pid == 101]
        assert len(ended) == 1 and not ended[0].listed
        assert [p.pid for p in reading.processes if p.listed] == [102]


def test_a_listed_process_that_ends_is_billed_for_the_rest_of_its_tick_once(swept):
    s = swept({"devices": [gpu()], "processes": [{"pid": 102, "device": A}]})
    for _ in range(3):
        reading, calls = tick(s)
        assert accounted(reading) == {} and calls.get(STATS, 0) == 0
    s.clock.now += 0.5                         # it ends half a second into the next tick
    write_scenario(s.path, {"devices": [gpu()], "processes": []})
    assert s.sim.reload()
    reading, calls = tick(s)
    assert accounted(reading) == {102: (0.5, 0.0)} and calls[STATS] == 1
    reading, calls = tick(s)
    assert accounted(reading) == {} and calls[STATS] == 1    # read again: the same record
    reading, calls = tick(s)
    assert accounted(reading) == {} and calls.get(STATS, 0) == 0


def test_a_full_buffer_still_shows_each_new_run(swept):
    """Each new run of the PID takes the place of its own oldest: the list stays the same."""
    s = swept({"devices": [gpu(accounting_buffer_size=2)], "processes": [between_ticks()]})
    tick(s)
    for _ in range(6):
        reading, _ = tick(s)
        assert accounted(reading) == {101: (1.0, 60.0)}


def test_work_the_samples_show_is_not_read_from_the_records(swept):
    s = swept({"devices": [gpu(unsupported=[])], "processes": [between_ticks()]})
    for _ in range(3):
        reading, calls = tick(s)
        assert calls[PIDS] == 1 and calls.get(STATS, 0) == 0
    assert accounted(reading) == {}
    assert [(p.pid, p.listed) for p in reading.processes] == [(101, False)]   # from samples


def test_accounting_off_reads_no_records_and_says_so_once(swept, caplog):
    s = swept({"devices": [gpu(accounting=False)], "processes": [between_ticks()]},
              slow_every=2)
    with caplog.at_level(logging.INFO):
        for _ in range(6):
            reading, calls = tick(s)
            assert calls.get(PIDS, 0) == 0 and calls.get(STATS, 0) == 0
    assert reading.processes == ()
    assert s.sim.calls_by_function[MODE] == 3
    assert sum("accounting mode is off" in r.getMessage() for r in caplog.records) == 1


def test_accounting_not_supported_is_one_line_and_one_call(swept, caplog):
    s = swept({"devices": [gpu(unsupported=[*NO_SAMPLES, "accounting"])],
               "processes": [between_ticks()]}, slow_every=1)
    with caplog.at_level(logging.INFO):
        for _ in range(4):
            reading, _ = tick(s)
    assert reading.processes == ()
    assert s.sim.calls_by_function[MODE] == 1
    assert s.sim.calls_by_function.get(PIDS, 0) == 0
    lines = [r.getMessage() for r in caplog.records if "accounting" in r.getMessage()]
    assert len(lines) == 1 and "not asking again" in lines[0]


def test_accounting_turned_on_later_starts_from_the_records_then(swept):
    s = swept({"devices": [gpu(accounting=False)], "processes": [between_ticks()]},
              slow_every=1)
    tick(s)
    write_scenario(s.path, {"devices": [gpu()], "processes": [between_ticks()]})
    assert s.sim.reload()
    reading, calls = tick(s)
    assert accounted(reading) == {} and calls[PIDS] == 1     # where the daemon starts
    reading, _ = tick(s)
    assert accounted(reading) == {101: (1.0, 60.0)}


def test_no_more_reads_per_tick_than_the_cap(swept, monkeypatch, caplog):
    monkeypatch.setattr(process_reads, "ACCOUNTING_READS_PER_TICK", 2)
    s = swept({"devices": [gpu()], "processes": [between_ticks(pid) for pid in (101, 102, 103)]})
    tick(s)
    with caplog.at_level(logging.WARNING):
        reading, calls = tick(s)
        tick(s)
    assert calls[STATS] == 2 and set(accounted(reading)) == {101, 102}
    assert sum("accounting records to read" in r.getMessage() for r in caplog.records) == 1


# ------------------------------------------------------------ the records, by hand


class Records:
    """A driver's accounting buffer: ``pids`` as listed, ``stats`` per PID (the latest)."""

    def __init__(self):
        self.pids: tuple[int, ...] = ()
        self.stats: dict[int, SimpleNamespace] = {}
        self.reads: list[int] = []

    def end(self, pid: int, start_s: float, end_s: float, util: int = 50,
            memory: int | None = None) -> None:
        self.pids = (*self.pids, pid)
        self.stats[pid] = SimpleNamespace(
            isRunning=0, startTime=int(start_s * 1e6), time=round((end_s - start_s) * 1000),
            gpuUtilization=util, maxMemoryUsage=0xFFFFFFFFFFFFFFFF if memory is None else memory)

    def accounting_pids(self, handle):
        return self.pids

    def accounting_stats(self, handle, pid):
        self.reads.append(pid)
        return self.stats[pid]


def ended_processes(records: Records) -> EndedProcesses:
    return EndedProcesses(Querier(CollectionErrors()), records)


def runs(found) -> dict[int, tuple[float, float | None, int | None]]:
    return {p.pid: (round(p.accounted.seconds, 6), p.accounted.gpu_utilization_percent,
                    p.accounted.max_memory_used_bytes) for p in found}


def test_a_run_past_the_end_of_its_tick_is_billed_for_the_rest_at_the_next():
    records = Records()
    ended = ended_processes(records)
    assert ended.ended(A, None, 10_000_000, frozenset(), set()) == ()          # t = 10 s
    # Read at 11.002 s (after the tick's energy at 11 s): it ran 10.5 .. 11.002 s.
    records.end(7, 10.5, 11.002, util=80, memory=1 << 30)
    assert runs(ended.ended(A, None, 11_000_000, frozenset(), set())) == {7: (0.5, 80.0, 1 << 30)}
    assert runs(ended.ended(A, None, 12_000_000, frozenset(), set())) == {7: (0.002, 80.0, 1 << 30)}
    assert runs(ended.ended(A, None, 13_000_000, frozenset(), set())) == {}
    assert records.reads == [7, 7]        # read when new, and once more (the list did not grow)


def test_a_reused_pid_is_billed_for_each_run_and_each_run_once():
    records = Records()
    ended = ended_processes(records)
    ended.ended(A, None, 10_000_000, frozenset(), set())
    records.end(7, 10.2, 10.6, util=100)
    records.end(7, 10.7, 10.9, util=40)        # the PID again: the driver answers this one
    found = runs(ended.ended(A, None, 11_000_000, frozenset(), set()))
    assert found == {7: (0.2, 40.0, None)}     # NVML gives the latest record of a PID only
    assert runs(ended.ended(A, None, 12_000_000, frozenset(), set())) == {}


def test_what_nvml_cannot_give_is_absent():
    records = Records()
    ended = ended_processes(records)
    ended.ended(A, None, 10_000_000, frozenset(), set())
    records.end(7, 10.0, 10.5, util=0xFFFFFFFF)
    assert runs(ended.ended(A, None, 11_000_000, frozenset(), set())) == {7: (0.5, None, None)}


def test_a_pid_listed_or_sampled_now_is_not_read():
    records = Records()
    ended = ended_processes(records)
    ended.ended(A, None, 10_000_000, frozenset(), set())
    records.end(7, 10.0, 10.5)
    records.end(8, 10.0, 10.5)
    records.end(9, 10.0, 10.5)
    found = ended.ended(A, None, 11_000_000, frozenset({7}), {8})
    assert runs(found) == {9: (0.5, 50.0, None)} and records.reads == [9]


def test_the_pid_list_is_one_call_into_an_array_kept_and_bounded(swept, monkeypatch):
    s = swept({"devices": [gpu()], "processes": [between_ticks(1000 + n) for n in range(20)]})
    _, calls = tick(s)
    assert calls[PIDS] == 2                        # 20 records: too small once, then grown
    _, calls = tick(s)
    assert calls[PIDS] == 1                        # 40: room was left
    handle = s.sweeper._session.devices[0].handle
    reads = process_reads.ProcessReads()
    assert len(reads.accounting_pids(handle)) == 40
    assert reads.accounting_pids(handle) is reads.accounting_pids(handle)   # bytes unchanged
    monkeypatch.setattr(process_reads, "ACCOUNTING_MAX_PIDS", 30)
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        process_reads.ProcessReads().accounting_pids(handle)     # more than a driver keeps
