"""A GPU's running processes and process utilization samples, each in one NVML call per tick;
with NVML's accounting mode on, the processes that ended unlisted, from its records.

pynvml's wrappers ask twice every time (a NULL buffer for the count, then the call that fills
a new array) and turn every entry into a Python object through per-attribute hooks. NVML's
contract lets the caller pass its own array with its capacity (``infoCount`` /
``processSamplesCount`` in, the number written out), answering INSUFFICIENT_SIZE with the
count needed when it is too small (nvml.h). So each device keeps one array per call, grown
when NVML asks for more (then asked again at once), and entries are read from plain ctypes
structures of pynvml's layouts into the sweep's ``ProcessReading``s. Errors are pynvml's
``NVMLError`` subclasses, as its wrappers raise them, for ``Querier.read`` to classify.

``EndedProcesses`` reads the accounting records (``nvmlDeviceGetAccountingPids``, then
``nvmlDeviceGetAccountingStats`` for the few PIDs that need it) to learn what ran during a
tick and ended unlisted where no utilization sample shows it.
"""

from __future__ import annotations

import ctypes
import logging
import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, NamedTuple

import pynvml

from gpustats.model.device import AccountedRun, ProcessReading
from gpustats.sources.errors import LogOnce
from gpustats.sources.nvml.query import NOT_FOUND, Querier, handle_address
from gpustats.sources.wall_clock import rebased_stamp_us

log = logging.getLogger(__name__)

_INITIAL_CAPACITY = 16
_GROWTH_TRIES = 3          # a list that keeps outgrowing the array is an error this tick
# The driver keeps 4000 accounting records per GPU (nvmlDeviceGetAccountingBufferSize); a
# list longer than this is refused rather than read into an ever larger array.
ACCOUNTING_MAX_PIDS = 4096
ACCOUNTING_READS_PER_TICK = 256    # nvmlDeviceGetAccountingStats calls per GPU and tick
_ENDED_MEMORY = 2 * ACCOUNTING_MAX_PIDS   # (PID, start) of the ended records read, newest kept
_NOT_AVAILABLE_UINT = 0xFFFFFFFF


class _ProcessInfo(ctypes.Structure):
    _fields_ = pynvml.c_nvmlProcessInfo_v3_t._fields_


class _UtilizationSample(ctypes.Structure):
    _fields_ = pynvml.c_nvmlProcessUtilizationSample_t._fields_


class _AccountingStats(ctypes.Structure):
    _fields_ = pynvml.c_nvmlAccountingStats_t._fields_


class UtilizationSample(NamedTuple):
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int


_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
_NO_INSTANCE = 0xFFFFFFFF
_PROCESS_INFO_BYTES = ctypes.sizeof(_ProcessInfo)
# nvmlProcessUtilizationSample_t's members (pid, timeStamp, sm, mem, enc, dec) in the C
# layout, unpacked all at once from the array's bytes rather than a structure per entry.
_SAMPLE = struct.Struct("@IQIIII")
if _SAMPLE.size != ctypes.sizeof(_UtilizationSample):
    raise ImportError("nvmlProcessUtilizationSample_t is not the layout this module unpacks")


def unique_processes(processes: Iterable[ProcessReading]) -> tuple[ProcessReading, ...]:
    """One entry per (PID, GPU instance): NVML lists a process once per context, so a PID can
    appear twice; counting it twice would bill it twice. The larger memory figure is kept."""
    merged: dict[tuple[int, int | None], ProcessReading] = {}
    for p in processes:
        key = (p.pid, p.gpu_instance_id)
        seen = merged.get(key)
        if seen is None:
            merged[key] = p
        elif p.memory_used_bytes is not None and (seen.memory_used_bytes is None
                                                   or p.memory_used_bytes > seen.memory_used_bytes):
            merged[key] = replace(seen, memory_used_bytes=p.memory_used_bytes)
    return tuple(merged.values())


def process_readings(listed: Iterable[Any]) -> tuple[ProcessReading, ...]:
    """NVML's process entries (this module's, or pynvml's ``_v2`` ones) as readings, one per
    (PID, GPU instance). Memory NVML cannot give (NVML_VALUE_NOT_AVAILABLE, which pynvml's
    wrapper turns into ``None``) is absent; so is the GPU instance of a process outside MIG."""
    return unique_processes(
        ProcessReading(
            pid=int(p.pid),
            memory_used_bytes=_memory(p.usedGpuMemory),
            gpu_instance_id=_instance_id(getattr(p, "gpuInstanceId", None)),
            compute_instance_id=_instance_id(getattr(p, "computeInstanceId", None)),
        )
        for p in listed
    )


def _memory(value: int | None) -> int | None:
    return None if value is None or value == _NOT_AVAILABLE else int(value)


def _instance_id(value: int | None) -> int | None:
    return None if value is None or value == _NO_INSTANCE else int(value)


def _function(name: str) -> Any:
    # pynvml's symbol lookup: cached, and NVMLError_Uninitialized / _FunctionNotFound as its
    # own wrappers raise them.
    return pynvml._nvmlGetFunctionPointer(name)


class ProcessReads:
    """Per device handle: the arrays the two calls fill, kept between ticks, and the last
    process list read (the same readings are handed out again while the driver's bytes are
    the same, rather than built anew every tick)."""

    def __init__(self) -> None:
        self._arrays: dict[tuple[str, int], ctypes.Array[Any]] = {}
        self._processes: dict[int, tuple[bytes, tuple[ProcessReading, ...]]] = {}
        self._accounting: dict[int, tuple[bytes, tuple[int, ...]]] = {}

    def running_processes(self, handle: Any) -> tuple[ProcessReading, ...]:
        """``nvmlDeviceGetComputeRunningProcesses_v3``, as ``process_readings``."""
        fn = _function("nvmlDeviceGetComputeRunningProcesses_v3")
        address = handle_address(handle)
        count, array = self._call(
            "processes", address, _ProcessInfo,
            lambda array, c_count: fn(handle, ctypes.byref(c_count), array))
        raw = ctypes.string_at(array, count * _PROCESS_INFO_BYTES)
        kept = self._processes.get(address)
        if kept is not None and kept[0] == raw:
            return kept[1]
        readings = process_readings(array[i] for i in range(count))
        self._processes[address] = (raw, readings)
        return readings

    def utilization_samples(self, handle: Any, since_us: int) -> list[UtilizationSample]:
        """``nvmlDeviceGetProcessUtilization``: samples newer than ``since_us``
        (NVMLError_NotFound when there are none)."""
        fn = _function("nvmlDeviceGetProcessUtilization")
        stamp = ctypes.c_ulonglong(since_us)
        count, array = self._call(
            "samples", handle_address(handle), _UtilizationSample,
            lambda array, c_count: fn(handle, array, ctypes.byref(c_count), stamp))
        return [UtilizationSample(pid, taken, sm, memory) for pid, taken, sm, memory, _, _
                in _SAMPLE.iter_unpack(ctypes.string_at(array, count * _SAMPLE.size))]

    def accounting_pids(self, handle: Any) -> tuple[int, ...]:
        """``nvmlDeviceGetAccountingPids``: the PIDs of the driver's accounting records,
        running and ended, at most ``ACCOUNTING_MAX_PIDS`` (the same tuple again while the
        driver's bytes are the same)."""
        fn = _function("nvmlDeviceGetAccountingPids")
        address = handle_address(handle)
        count, array = self._call(
            "accounting", address, ctypes.c_uint,
            lambda array, c_count: fn(handle, ctypes.byref(c_count), array),
            limit=ACCOUNTING_MAX_PIDS)
        raw = ctypes.string_at(array, count * ctypes.sizeof(ctypes.c_uint))
        kept = self._accounting.get(address)
        if kept is not None and kept[0] == raw:
            return kept[1]
        pids = struct.unpack(f"@{count}I", raw)
        self._accounting[address] = (raw, pids)
        return pids

    def accounting_stats(self, handle: Any, pid: int) -> _AccountingStats:
        """``nvmlDeviceGetAccountingStats`` into a plain structure. pynvml's wrapper sets
        ``maxMemoryUsage`` to ``None`` on its ctypes structure where the driver gives
        NVML_VALUE_NOT_AVAILABLE, which raises TypeError (nvidia-ml-py 13.615.71: the
        assignment to a c_ulonglong field), so the driver's value is kept and read by
        ``_memory``."""
        fn = _function("nvmlDeviceGetAccountingStats")
        stats = _AccountingStats()
        ret = fn(handle, ctypes.c_uint(pid), ctypes.byref(stats))
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return stats

    def _call(self, what: str, address: int, entry: type[ctypes.Structure] | type[ctypes.c_uint],
              call: Any, limit: int | None = None) -> tuple[int, ctypes.Array[Any]]:
        key = (what, address)
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = (entry * _INITIAL_CAPACITY)()
        for _ in range(_GROWTH_TRIES):
            c_count = ctypes.c_uint(len(array))
            ret = call(array, c_count)
            if ret == pynvml.NVML_SUCCESS:
                return min(c_count.value, len(array)), array
            if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
                raise pynvml.NVMLError(ret)
            if limit is not None and c_count.value > limit:
                break                       # more than the driver keeps: not believed
            # Room for the count asked and some more, as pynvml's wrapper leaves.
            size = c_count.value * 2 + 5
            array = self._arrays[key] = (entry * (min(size, limit) if limit else size))()
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)


@dataclass(frozen=True)
class _Run:
    """One ended process's accounting record: its run on the wall clock (µs)."""

    pid: int
    start_us: int
    end_us: int
    utilization_percent: int | None
    max_memory_bytes: int | None


@dataclass
class _AccountingMemory:
    """What ``EndedProcesses`` keeps of one GPU between ticks."""

    pids: tuple[int, ...] | None = None           # the last list read (None: none yet)
    counts: Counter[int] = field(default_factory=Counter)   # that list as a multiset
    end_us: int | None = None                     # the last tick's end, wall clock µs
    listed: frozenset[int] = frozenset()          # PIDs listed at the last tick
    running: set[int] = field(default_factory=set)     # read running, unlisted: read again
    recent: set[int] = field(default_factory=set)      # a new ended record read last tick
    # (PID, start µs) of the ended records read, oldest first.
    read: dict[tuple[int, int], None] = field(default_factory=dict)
    tails: list[_Run] = field(default_factory=list)    # runs that went on past their tick's end

    def rebase(self, step_us: int, now_us: int) -> None:
        """The wall clock stepped: the last tick's end and the runs carried move with it,
        unless they were stamped on the new clock already (``rebased_stamp_us``)."""
        if self.end_us is not None:
            self.end_us = rebased_stamp_us(self.end_us, step_us, now_us)
        tails = []
        for run in self.tails:
            shift = rebased_stamp_us(run.end_us, step_us, now_us) - run.end_us
            tails.append(replace(run, start_us=run.start_us + shift, end_us=run.end_us + shift))
        self.tails = tails


class EndedProcesses:
    """Per GPU whose accounting mode is on: the processes that ran during a tick and ended
    without being listed at it, and that no utilization sample shows, from the driver's
    accounting records (``ProcessReading.accounted``: the seconds of the tick each ran, its
    lifetime GPU utilization).

    One ``nvmlDeviceGetAccountingPids`` per GPU and tick; ``nvmlDeviceGetAccountingStats``
    only for the PIDs that may have a record not yet read: new in the list (counted as a
    multiset: a reused PID's new record is one more entry), listed at the last tick and not
    now, read running last time, or with a new record read last tick while the list did not
    grow (in a full buffer a PID's new record can take the place of its own oldest); at most
    ``ACCOUNTING_READS_PER_TICK``. The first list read is where this daemon starts: records
    already there ended before it looked. An ended record is read once: its (PID, start) is
    remembered, so a PID whose latest record was billed is not billed again. A run is billed
    for its overlap with the tick (wall clock, from its ``startTime`` and ``time``); the part
    of a run read at one tick that ran on past that tick's end is billed at the next. What a
    record cannot bill: a process's life before the tick its record was read ended at (it
    was never listed, and a running record gives no times), and records past the cap.
    """

    def __init__(self, querier: Querier, reads: ProcessReads):
        self._q = querier
        self._reads = reads
        self._memory: dict[str, _AccountingMemory] = {}
        self._log_once = LogOnce(log, every_seconds=3600.0)

    def forget(self, uuid: str) -> None:
        """Start the GPU afresh (accounting turned off or on, MIG mode changed, GPU lost)."""
        self._memory.pop(uuid, None)

    def rebase(self, step_us: int, now_us: int) -> None:
        for memory in self._memory.values():
            memory.rebase(step_us, now_us)

    def ended(self, uuid: str, handle: Any, end_us: int, listed: frozenset[int],
              covered: set[int]) -> tuple[ProcessReading, ...]:
        """The processes that ran in the tick ending at ``end_us`` (wall clock µs) and ended
        unlisted; ``listed``: this tick's process list, ``covered``: PIDs with samples."""
        memory = self._memory.get(uuid)
        if memory is None:
            memory = self._memory[uuid] = _AccountingMemory()
        start_us, memory.end_us = memory.end_us, end_us
        was_listed, memory.listed = memory.listed, listed
        pids = self._q.read(uuid, "accounting_pids", self._reads.accounting_pids, handle)
        if pids is None:
            return ()
        if memory.pids is None or start_us is None:
            memory.pids, memory.counts = pids, Counter(pids)
            return ()
        new: set[int] = set()
        grew = False
        if pids is not memory.pids:
            counts = Counter(pids)
            new = set(counts - memory.counts)
            grew = len(pids) > len(memory.pids)
            memory.pids, memory.counts = pids, counts
        candidates = new | memory.running | (was_listed - listed)
        if not grew:
            candidates |= memory.recent
        present = memory.counts
        wanted = sorted(pid for pid in candidates
                        if pid in present and pid not in listed and pid not in covered)
        if len(wanted) > ACCOUNTING_READS_PER_TICK:
            self._log_once(("cap", uuid), logging.WARNING,
                           "GPU %s: %d accounting records to read in one tick; the first %d "
                           "are read, the rest left unbilled", uuid, len(wanted),
                           ACCOUNTING_READS_PER_TICK)
            wanted = wanted[:ACCOUNTING_READS_PER_TICK]
        runs = [r for r in memory.tails if r.pid not in listed and r.pid not in covered]
        memory.tails = []
        running, recent = self._read_records(uuid, handle, memory, wanted, runs, end_us)
        read = set(wanted)
        memory.running = running | {pid for pid in memory.running
                                    if pid not in read and pid in present and pid not in listed}
        memory.recent = recent
        return _ended_readings(runs, start_us, end_us)

    def _read_records(self, uuid: str, handle: Any, memory: _AccountingMemory, pids: list[int],
                      runs: list[_Run], end_us: int) -> tuple[set[int], set[int]]:
        """Each PID's record: the ended ones not read before go to ``runs`` (and to the
        tails when they ran past the tick's end); returns (PIDs running, PIDs with a new
        ended record)."""
        running: set[int] = set()
        recent: set[int] = set()
        for pid in pids:
            stats = self._q.read(uuid, "accounting_stats", self._reads.accounting_stats,
                                 handle, pid, not_found=NOT_FOUND)
            if stats is None or stats is NOT_FOUND:
                continue                     # gone from the buffer, or unreadable this tick
            if stats.isRunning:
                running.add(pid)
                continue
            run = _run(pid, stats)
            key = (pid, run.start_us)
            if key in memory.read:
                continue                     # NVML answers a PID's latest record: billed
            memory.read[key] = None
            recent.add(pid)
            runs.append(run)
            if run.end_us > end_us:
                memory.tails.append(run)
        while len(memory.read) > _ENDED_MEMORY:
            del memory.read[next(iter(memory.read))]
        return running, recent


def _run(pid: int, stats: Any) -> _Run:
    """An ended record (nvmlAccountingStats_t): ``startTime`` µs, ``time`` ms it ran."""
    start = int(stats.startTime)
    utilization = int(stats.gpuUtilization)
    memory = stats.maxMemoryUsage
    return _Run(pid=pid, start_us=start, end_us=start + int(stats.time) * 1000,
                utilization_percent=utilization if utilization != _NOT_AVAILABLE_UINT else None,
                max_memory_bytes=_memory(memory))


def _ended_readings(runs: Iterable[_Run], start_us: int, end_us: int
                    ) -> tuple[ProcessReading, ...]:
    """One unlisted reading per PID whose runs overlap the tick ``[start_us, end_us]``: the
    seconds they ran in it, their utilization weighted by those seconds."""
    by_pid: dict[int, list[tuple[float, _Run]]] = {}
    for run in runs:
        seconds = (min(run.end_us, end_us) - max(run.start_us, start_us)) / 1e6
        if seconds > 0:
            by_pid.setdefault(run.pid, []).append((seconds, run))
    out = []
    for pid, parts in by_pid.items():
        known = [(s, r.utilization_percent) for s, r in parts if r.utilization_percent is not None]
        weight = sum(s for s, _ in known)
        out.append(ProcessReading(pid=pid, listed=False, accounted=AccountedRun(
            seconds=sum(s for s, _ in parts),
            gpu_utilization_percent=sum(s * u for s, u in known) / weight if known else None,
            max_memory_used_bytes=max((r.max_memory_bytes for _, r in parts
                                       if r.max_memory_bytes is not None), default=None))))
    return tuple(out)
