"""The simulator's accounting and performance-state calls.

Accounting records live on the simulator (``_accounting_records``: per GPU, a buffer of at most
the device's ``accounting_buffer_size``, oldest first) and are brought up to date at each read
of the PIDs (``nvmlDeviceGetAccountingPids``), as ``scenario.py`` describes: a listed process
has one running record, ended when it leaves the scenario; a ``between_ticks`` process ends a
run at every read and starts the next under the same PID. A listed process that leaves or
joins the scenario after the records were first read ends or starts its record when the
scenario file was written (no earlier than the last read), as the driver dates an exit. With
the mode off the driver answers NOT_SUPPORTED (nvml.h: "accounting mode is disabled").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

    from gpustats.simulator.scenario import SimDevice, SimMigInstance, SimProcess


from collections import deque
from ctypes import c_uint
from dataclasses import dataclass

import pynvml

from gpustats.simulator.abi import (
    INSUFFICIENT_SIZE, NOT_FOUND, NOT_SUPPORTED, SUCCESS, plain, set_out, struct_at,
)

_Stats = plain(pynvml.c_nvmlAccountingStats_t)
_PSTATE_UNKNOWN = pynvml.NVML_PSTATE_UNKNOWN
_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value


@dataclass
class _Record:
    pid: int
    start_us: int
    time_ms: int                 # 0 while running, as the driver reports it
    running: bool
    utilization_percent: int
    max_memory_bytes: int | None


class AccountingCalls:
    """Mixin of ``SimulatedNvml``: records in ``_accounting_records``, the time of the last
    read of each GPU's PIDs in ``_accounting_cut`` (wall clock µs)."""

    if TYPE_CHECKING:   # the simulator's state and helpers this mixin uses (library.py)
        _wall: Callable[[], float]
        _accounting_records: dict[str, deque]
        _accounting_cut: dict[str, int]
        _accounting_since_us: int

        _scenario: Any

        def _note_mig_changes(self, old: Any, new: Any) -> None: ...
        def _idling(self, device: SimDevice) -> bool: ...
        def _process_list(self, device: Any, instance: Any, *, mps_only: bool = False,
                          between_ticks: bool = False) -> Any: ...


    def _scenario_changed(self, new, written_at: float) -> None:
        """The scenario is about to become ``new`` (its file written at ``written_at``, wall
        seconds): its MIG changes queued, and the records of the processes it ends or
        starts dated then, as the driver dates a process's exit and start, rather than at
        the next read of the records (a daemon stopped meanwhile reads them only later)."""
        self._note_mig_changes(self._scenario, new)
        written = min(int(written_at * 1e6), int(self._wall() * 1e6))
        for device in new.devices:
            records = self._accounting_records.get(device.uuid)
            if records is None or not device.accounting or device.mig_instances:
                continue                       # never read: the first read starts them
            # No earlier than the last read, which did not see the change.
            at = max(written, self._accounting_cut.get(device.uuid, self._accounting_since_us))
            listed = {p.pid: p for p in new.processes_by_device.get(device.uuid, ())
                      if not p.between_ticks}
            running = set()
            for record in records:
                if record.running and record.pid not in listed:
                    record.running = False
                    record.time_ms = max(0, round((at - record.start_us) / 1000))
                elif record.running:
                    running.add(record.pid)
            records.extend(_Record(p.pid, at, 0, True, p.sm_util_percent or 0,
                                   p.memory_used_bytes)
                           for pid, p in listed.items() if pid not in running)

    def _pstate(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        idle = self._idling(device)
        set_out(out, c_uint, max(device.supported_pstates) if idle else device.pstate)
        return SUCCESS

    def _supported_pstates(self, device: SimDevice, instance: SimMigInstance | None, buf: int,
                           size: int) -> int:
        states = device.supported_pstates             # ascending: the most performance first
        room = size // 4
        if room < len(states):
            return INSUFFICIENT_SIZE
        array = struct_at(buf, c_uint * room)
        for i in range(room):
            array[i] = states[i] if i < len(states) else _PSTATE_UNKNOWN
        return SUCCESS

    def _accounting_mode(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        set_out(out, c_uint, pynvml.NVML_FEATURE_ENABLED if device.accounting
                else pynvml.NVML_FEATURE_DISABLED)
        return SUCCESS

    def _accounting_buffer_size(self, device: SimDevice, instance: SimMigInstance | None,
                                out: int) -> int:
        if not device.accounting or device.mig_instances:
            return NOT_SUPPORTED
        set_out(out, c_uint, device.accounting_buffer_size)
        return SUCCESS

    def _accounting_pids(self, device: SimDevice, instance: SimMigInstance | None, count_ptr: int,
                         pids: int) -> int:
        if not device.accounting or device.mig_instances:
            return NOT_SUPPORTED
        count = struct_at(count_ptr, c_uint)
        capacity, count.value = count.value, self._sync_accounting(device, apply=False)
        if count.value and (pids is None or capacity < count.value):
            return INSUFFICIENT_SIZE          # asked again at once: nothing ends in between
        records = self._accounting_records.get(device.uuid, ())
        if count.value:
            records = self._sync_accounting(device)
        count.value = len(records)
        if not records:
            return SUCCESS
        array = struct_at(pids, c_uint * len(records))
        for i, record in enumerate(records):
            array[i] = record.pid
        return SUCCESS

    def _accounting_stats(self, device: SimDevice, instance: SimMigInstance | None, pid: int,
                          out: int) -> int:
        if not device.accounting or device.mig_instances:
            return NOT_SUPPORTED
        found = None
        for record in reversed(self._accounting_records.get(device.uuid, ())):
            if record.pid == pid and (found is None or record.running):
                found = record          # the running one, else the latest that ended
                if record.running:
                    break
        if found is None:
            return NOT_FOUND
        stats = struct_at(out, _Stats)
        stats.gpuUtilization = found.utilization_percent
        stats.memoryUtilization = 0
        stats.maxMemoryUsage = (found.max_memory_bytes if found.max_memory_bytes is not None
                                else _NOT_AVAILABLE)
        stats.time = found.time_ms
        stats.startTime = found.start_us
        stats.isRunning = 1 if found.running else 0
        return SUCCESS

    def _sync_accounting(self, device: SimDevice, apply: bool = True):
        """The GPU's records as of now (see the module's docstring); with ``apply`` False
        only how many there would be."""
        now = int(self._wall() * 1e6)
        records = self._accounting_records.get(device.uuid)
        size = device.accounting_buffer_size
        if apply and (records is None or records.maxlen != size):
            records = self._accounting_records[device.uuid] = deque(records or (), maxlen=size)
        cut = self._accounting_cut.get(device.uuid, self._accounting_since_us)
        processes = self._process_list(device, None, between_ticks=True)
        running = {r.pid for r in records or () if r.running}
        added = _new_records(processes, running, cut, now)
        if not apply:
            return min(size, len(records or ()) + len(added))
        assert records is not None            # made above, as apply is true
        _end_stopped(records, {p.pid for p in processes if not p.between_ticks}, now)
        records.extend(added)
        self._accounting_cut[device.uuid] = now
        return records


def _new_records(processes: Sequence[SimProcess], running: set[int], cut: int,
                 now: int) -> list[_Record]:
    """The records the processes add at ``now``: each process seen only between ticks since
    ``cut``, ended; each one running that has no running record yet, started."""
    return [_Record(p.pid, cut, round((now - cut) / 1000), False, p.sm_util_percent or 0,
                    p.memory_used_bytes) if p.between_ticks
            else _Record(p.pid, now, 0, True, p.sm_util_percent or 0, p.memory_used_bytes)
            for p in processes if (p.between_ticks and now > cut)
            or (not p.between_ticks and p.pid not in running)]


def _end_stopped(records: Iterable[_Record], live: set[int], now: int) -> None:
    """End each running record whose process is no longer ``live``."""
    for record in records:
        if record.running and record.pid not in live:
            record.running = False
            record.time_ms = round((now - record.start_us) / 1000)
