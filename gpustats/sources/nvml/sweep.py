"""One sweep per device per tick: dynamic readings into ``DeviceReading``.

Every per-tick scalar NVML offers as a field (power, energy, memory temperature, violation
counters, PCIe replays, remapped rows) comes from one ``nvmlDeviceGetFieldValues`` call; a field
the GPU does not support is remembered and read through its own call from then on (violations
every ``violation_every`` ticks, PCIe replays and remapped rows every ``slow_every``). Then, per
GPU and tick: memory, utilization, temperature, clocks-event reasons, processes, process
utilization (when there are processes), GPM sample + metrics. Read less often: clocks and
encoder/decoder utilization every ``detail_every`` ticks (dcgm-exporter samples them every
30 s by default); power limit, MIG mode and, while the process list stays the same, MPS clients
every ``slow_every`` ticks; PCIe throughput (each call blocks ~20 ms in the driver: it samples
over 20 ms, NVML API reference) only on GPUs without GPM and every ``pcie_every`` ticks. A value
read less often is
carried in the readings between its reads. With ``energy_every`` > 1 the energy counter is
read every that many ticks and estimated from power in between (``energy_reads.py``).

The performance state every tick, the states the GPU supports (every ``slow_every`` ticks)
until it names them. NVML's accounting mode every ``slow_every`` ticks; while it is on (and
MIG off), the accounting records every tick, for the processes that ended unlisted and that
no sample shows (``EndedProcesses``).

MIG: every instance's memory each tick; the layout (``mig.py``) re-read while MIG stays on when
NVML delivers a MIG configuration change event for the GPU (``mig_events.py``), when a process
names a GPU instance the layout lacks or an instance's memory could not be read, and every
``slow_every`` ticks on a GPU without those events (every ``slow_every`` × 10 ticks on one with
them, in case an event was missed).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import pynvml

from gpustats.model.device import (
    DeviceIdentity, DeviceReading, ProcessReading, ProcessSample, RemappedRowsReading,
    ViolationReading,
)
from gpustats.sources.nvml import fields
from gpustats.sources.nvml.energy_reads import DeferredEnergy
from gpustats.sources.nvml.gpm import GpmSampler
from gpustats.sources.nvml.mig import MigInstance, layout_change, mig_readings, read_layout
from gpustats.sources.nvml.mig_events import MigConfigEvents
from gpustats.sources.nvml.process_reads import EndedProcesses, ProcessReads, process_readings
from gpustats.sources.nvml.query import NOT_FOUND, DeviceLost, Querier
from gpustats.sources.nvml.session import DeviceHandle, NvmlSession
from gpustats.sources.wall_clock import WallClockSteps, rebased_stamp_us

log = logging.getLogger(__name__)

# How long a PID no longer listed keeps its newest sample's stamp (the driver's sample buffer
# covers seconds).
SAMPLE_MEMORY_US = 60_000_000
FUTURE_SAMPLE_SLACK_US = 1_000_000
_MIG_EVENT_BACKSTOP = 10          # with MIG events: layout also re-read every 10 slow ticks
_VIOLATION_POLICIES = (
    ("power_ns", pynvml.NVML_PERF_POLICY_POWER),
    ("thermal_ns", pynvml.NVML_PERF_POLICY_THERMAL),
    ("sync_boost_ns", pynvml.NVML_PERF_POLICY_SYNC_BOOST),
    ("board_limit_ns", pynvml.NVML_PERF_POLICY_BOARD_LIMIT),
)


@dataclass
class _SweepMemory:
    """What the sweep remembers about one device between ticks (slow reads, MIG layout, samples
    seen): the NVML side, apart from the energy accountant's per-device figures."""

    ticks: int = 0
    last_sample_timestamp_us: int = 0          # newest sample seen from any process
    sample_timestamp_by_pid: dict[int, int] = field(default_factory=dict)
    power_limit_watts: float | None = None
    violations: ViolationReading | None = None
    pcie: tuple[float | None, float | None] = (None, None)
    pcie_replay_count: int | None = None
    remapped_rows: RemappedRowsReading | None = None
    clocks: tuple[int | None, int | None] = (None, None)          # SM, memory MHz
    codec: tuple[int | None, int | None] = (None, None)           # encoder, decoder %
    mps_pids: frozenset[int] | None = None                        # process list MPS was read for
    mps: bool | None = None
    mig_enabled: bool | None = None
    accounting: bool | None = None                 # NVML's accounting mode (None: not known)
    lowest_pstate: int | None = None               # of the supported performance states
    mig_instances: list[MigInstance] = field(default_factory=list)
    mig_unreadable: frozenset[int] = frozenset()        # GPU instances whose memory read failed
    mig_hints_checked: tuple = ((), ())                  # (unknown, unreadable) a re-read followed
    lost: bool = False
    # (identity read at session open, memory total, that identity with the total): the same
    # object tick after tick while neither changes, not a copy each tick.
    identity_with_total: tuple[DeviceIdentity, int, DeviceIdentity] | None = None

    def rebase_samples(self, step_us: int, now_us: int) -> None:
        """The wall clock stepped by ``step_us`` (``now_us``: its reading since): the sample
        times seen move with it, so the next read asks from the same instant on the new clock
        (after a step back, samples newer than a stamp on the old clock would not come for as
        long as the step); those taken on the new clock already stay (``rebased_stamp_us``)."""
        if self.last_sample_timestamp_us:
            self.last_sample_timestamp_us = max(0, rebased_stamp_us(
                self.last_sample_timestamp_us, step_us, now_us))
        seen = self.sample_timestamp_by_pid
        for pid, stamp in seen.items():
            seen[pid] = max(0, rebased_stamp_us(stamp, step_us, now_us))


def _pstate(value) -> int | None:
    """A performance state P0..P15; NVML_PSTATE_UNKNOWN (32), or anything else, is absent."""
    return int(value) if value is not None and 0 <= value <= 15 else None


def _sampled_only(processes: tuple[ProcessReading, ...],
                  samples: tuple[ProcessSample, ...] | None) -> tuple[ProcessReading, ...]:
    """Processes that did SM work since the last tick but are not in the list at this one
    (``listed`` False), in the order their samples came."""
    listed = {p.pid for p in processes}
    found: dict[int, ProcessReading] = {}
    for s in samples or ():
        if s.sm_util_percent > 0 and s.pid not in listed and s.pid not in found:
            found[s.pid] = ProcessReading(pid=s.pid, listed=False)
    return tuple(found.values())


class DeviceSweeper:
    """Reads every device of one NVML session; one instance per session."""

    def __init__(self, session: NvmlSession, *, monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 slow_every: int = 12, violation_every: int = 3, pcie_every: int = 6,
                 detail_every: int = 6, energy_every: int = 1):
        self._session = session
        self._q: Querier = session.querier
        self._monotonic = monotonic
        self._wall = wall
        self._slow_every = slow_every
        self._detail_every = detail_every
        self._violation_every = violation_every
        self._pcie_every = pcie_every
        self._state: dict[int, _SweepMemory] = {}
        self._gpm = GpmSampler(self._q, monotonic)
        self._energy = DeferredEnergy(energy_every)
        self._mig_events = MigConfigEvents(self._q)
        self._process_reads = ProcessReads()
        self._ended = EndedProcesses(self._q, self._process_reads)
        self._wall_steps = WallClockSteps(wall, monotonic)

    @property
    def calls(self) -> int:
        return self._q.calls

    def close(self) -> None:
        self._gpm.close()
        self._mig_events.close()

    def unidentified(self) -> tuple[int, ...]:
        """Indices of GPUs lost before their identity could be read (named by the engine)."""
        return tuple(d.index for d in self._session.devices if d.identity is None)

    def sweep(self) -> tuple[DeviceReading, ...]:
        """Read all devices; a lost device is reported as lost, the others as usual."""
        readings = []
        mig_changed = self._mig_events.changed()
        step_us = self._wall_steps.step_us()
        if step_us:
            log.warning("the wall clock stepped %+.1f s; NVML sample times re-based",
                        step_us / 1e6)
            now_us = int(self._wall() * 1e6)
            for memory in self._state.values():
                memory.rebase_samples(step_us, now_us)
            self._ended.rebase(step_us, now_us)
        for device in self._session.devices:
            if device.identity is None:
                continue  # lost before identification; logged at session open
            state = self._state.get(device.index)
            if state is None:
                state = self._state[device.index] = _SweepMemory()
            try:
                # Back from lost: its MIG layout may have changed meanwhile, and no event told.
                readings.append(self._read(device, device.identity, state,
                                           device.identity.uuid in mig_changed or state.lost))
                state.lost = False               # a later loss is logged again
            except DeviceLost as exc:
                if not state.lost:
                    log.error("GPU %s (index %d) is lost: %s", device.identity.uuid,
                              device.index, exc)
                state.lost = True
                self._ended.forget(device.identity.uuid)
                readings.append(DeviceReading(identity=device.identity,
                                              monotonic_seconds=self._monotonic(), lost=True))
            state.ticks += 1
        if not self._mig_events.opened and any(s.mig_enabled for s in self._state.values()):
            self._mig_events.open(self._session.devices)   # once MIG is seen on a GPU
        return tuple(readings)

    def _read(self, device: DeviceHandle, ident: DeviceIdentity, state: _SweepMemory,
              mig_changed: bool) -> DeviceReading:
        q, h, uuid = self._q, device.handle, ident.uuid
        tick = state.ticks
        slow = tick % self._slow_every == 0
        energy_due = self._energy.due(uuid, tick)
        called = (self._wall(), self._monotonic())
        values = q.field_values(uuid, h, (*fields.EVERY_TICK, fields.ENERGY) if energy_due
                                else fields.EVERY_TICK)
        power_w, energy_mj, read_at = self._power_and_energy(uuid, h, values, energy_due,
                                                             called)
        memory = self._memory(uuid, h)
        util = q.read(uuid, "utilization", pynvml.nvmlDeviceGetUtilizationRates, h)
        temperature = q.read(uuid, "temperature", pynvml.nvmlDeviceGetTemperature, h,
                             pynvml.NVML_TEMPERATURE_GPU)
        reasons = q.read(uuid, "clocks_event_reasons",
                         pynvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        pstate = _pstate(q.read(uuid, "performance_state",
                                pynvml.nvmlDeviceGetPerformanceState, h))
        self._every_few_ticks(device, ident, state, values, slow, mig_changed)
        processes = self._processes(uuid, h)
        mps = self._mps(uuid, h, state, processes, slow) if processes else None
        samples = None
        if not state.mig_enabled:
            samples = self._samples(uuid, h, state, processes)
            if "processes" not in q.unsupported_fields(uuid):
                ended = self._ended_unlisted(uuid, h, state, processes, samples, read_at)
                processes = processes + _sampled_only(processes, samples) + ended
        gpm = self._gpm.device(uuid, h)
        if not self._gpm.supported(uuid) and tick % self._pcie_every == 0:
            state.pcie = self._pcie(uuid, h)
        mig = self._mig_readings(ident, h, state, processes) if state.mig_enabled else ()
        return _device_reading(
            ident, state, values, memory=memory, util=util, read_at=read_at, power_w=power_w,
            energy_mj=energy_mj, temperature=temperature, reasons=reasons, mig=mig,
            processes=processes, mps=mps, samples=samples, gpm=gpm, pstate=pstate,
            unsupported=q.unsupported_fields(uuid))

    def _ended_unlisted(self, uuid: str, h: Any, state: _SweepMemory,
                        processes: tuple[ProcessReading, ...],
                        samples: tuple[ProcessSample, ...] | None,
                        read_at: float) -> tuple[ProcessReading, ...]:
        """With accounting on: processes that ended unlisted during the tick and that no
        sample shows. The tick ends when its energy was read (``read_at``), on the wall clock
        the records' times are on."""
        if not state.accounting:
            return ()
        end_us = int((self._wall() - (self._monotonic() - read_at)) * 1e6)
        return self._ended.ended(uuid, h, end_us, frozenset(p.pid for p in processes),
                                 {s.pid for s in samples or ()})

    def _power_and_energy(self, uuid: str, h: Any, values: fields.FieldValues,
                          energy_due: bool, called: tuple[float, float],
                          ) -> tuple[float | None, float | None, float]:
        """(power W, energy counter mJ, the counter's time): the counter read when due, else
        estimated from power (the energy reads' schedule). ``called``: (wall, monotonic) just
        before the field values were asked for."""
        q = self._q
        read_at = self._field_time(values, "energy", called)   # delta / dt exact
        power_mw = fields.value(values, "power")
        if power_mw is None:
            power_mw = q.read(uuid, "power", pynvml.nvmlDeviceGetPowerUsage, h)
        power_w = power_mw / 1000.0 if power_mw is not None else None
        energy_mj = None if energy_due else self._energy.estimate(uuid, read_at, power_w)
        if energy_mj is None:
            hardware = fields.value(values, "energy") if energy_due else None
            if hardware is None:
                hardware = q.read(uuid, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, h)
                read_at = self._monotonic()
            if hardware is not None:
                energy_mj = self._energy.hardware(uuid, int(hardware), read_at, power_w)
        return power_w, energy_mj, read_at

    def _every_few_ticks(self, device: DeviceHandle, ident: DeviceIdentity,
                         state: _SweepMemory, values: fields.FieldValues, slow: bool,
                         mig_changed: bool) -> None:
        """The reads kept in the device's memory between ticks: power limit and MIG layout
        (slow), field-backed figures, details."""
        q, h, uuid, tick = self._q, device.handle, ident.uuid, state.ticks
        if slow:
            limit_mw = q.read(uuid, "power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            state.power_limit_watts = limit_mw / 1000.0 if limit_mw is not None else None
            self._accounting_mode(uuid, h, state)
            if state.lowest_pstate is None:
                supported = q.read(uuid, "supported_performance_states",
                                   pynvml.nvmlDeviceGetSupportedPerformanceStates, h)
                states = [p for p in map(_pstate, supported or ()) if p is not None]
                state.lowest_pstate = max(states, default=None)
        if slow or mig_changed:
            every = self._slow_every * (_MIG_EVENT_BACKSTOP if self._mig_events.watches(uuid)
                                        else 1)
            self._refresh_mig(device, ident, state, mig_changed or tick % every == 0)
        self._field_backed(uuid, h, state, values, tick, slow)
        if tick % self._detail_every == 0:
            self._details(uuid, h, state)

    def _accounting_mode(self, uuid: str, h: Any, state: _SweepMemory) -> None:
        """NVML's accounting mode (``nvidia-smi -am``), logged when it is first read and when
        it changes; not supported: the querier's one line. An error keeps what was known."""
        q = self._q
        mode = q.read(uuid, "accounting_mode", pynvml.nvmlDeviceGetAccountingMode, h)
        if mode is None and not q.is_unsupported(uuid, "accounting_mode"):
            return
        enabled = mode == pynvml.NVML_FEATURE_ENABLED if mode is not None else None
        if enabled == state.accounting:
            return
        if enabled:
            log.info("GPU %s: NVML accounting mode is on: processes that end between ticks "
                     "are billed from its records", uuid)
            q.forget(uuid, ("accounting_pids", "accounting_stats"))
        elif enabled is not None:
            log.info("GPU %s: NVML accounting mode is off: a process that ends between ticks "
                     "is billed from its utilization samples only", uuid)
        self._ended.forget(uuid)
        state.accounting = enabled

    def _mig_readings(self, ident: DeviceIdentity, h: Any, state: _SweepMemory,
                      processes) -> tuple:
        q, uuid = self._q, ident.uuid
        self._follow_hints(ident, h, state, processes)
        mig = mig_readings(q, self._gpm, uuid, h, state.mig_instances, processes)
        state.mig_unreadable = frozenset() if q.is_unsupported(uuid, "mig_memory") else \
            frozenset(m.gpu_instance_id for m in mig if m.memory_used_bytes is None)
        return mig

    def _field_time(self, values: fields.FieldValues, name: str,
                    called: tuple[float, float]) -> float:
        """Monotonic time at which the driver took field ``name`` (its CPU timestamp), or now.

        A field may come from the driver's cache, and the call returns after the value was
        taken; the entry's own timestamp keeps counter deltas and their intervals together.
        It is placed on the monotonic clock from the clocks read just before the call
        (``called``), so a stall after the driver took the value (SIGSTOP, a descheduled
        thread) does not date it to when the daemon went on: the stall's energy would then fall
        into the next tick, too much for its length, and be taken for a counter reset. A
        timestamp from more than a second before the call, or after it returned (clock step,
        cache this old), is not trusted.
        """
        now = self._monotonic()
        found = values.get(name)
        if found is None or not found[1]:
            return now
        wall_before, mono_before = called
        taken = mono_before + (found[1] / 1e6 - wall_before)
        return taken if mono_before - 1.0 <= taken <= now else now

    def _field_backed(self, uuid: str, h: Any, state: _SweepMemory, values: fields.FieldValues,
                      tick: int, slow: bool) -> None:
        """Violations, PCIe replays and remapped rows: from this tick's fields, else (fields not
        supported) through their own calls at their slower cadence, carried in between."""
        violations = fields.violations_of(values)
        if violations is not None:
            state.violations = violations
        elif tick % self._violation_every == 0:
            state.violations = self._violations(uuid, h)
        replay = fields.value(values, "pcie_replay")
        if replay is not None:
            state.pcie_replay_count = replay
        elif slow:
            replay = self._q.read(uuid, "pcie_replay", pynvml.nvmlDeviceGetPcieReplayCounter, h)
            state.pcie_replay_count = int(replay) if replay is not None else None
        remapped = fields.remapped_rows_of(values)
        if remapped is not None:
            state.remapped_rows = remapped
        elif slow:
            raw = self._q.read(uuid, "remapped_rows", pynvml.nvmlDeviceGetRemappedRows, h)
            state.remapped_rows = RemappedRowsReading(
                correctable=int(raw[0]), uncorrectable=int(raw[1]),
                pending=bool(raw[2]), failure=bool(raw[3])) if raw is not None else None

    def _details(self, uuid: str, h: Any, state: _SweepMemory) -> None:
        """Clocks and encoder/decoder utilization (no field values exist for them)."""
        q = self._q
        sm = q.read(uuid, "sm_clock", pynvml.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM)
        mem = q.read(uuid, "memory_clock", pynvml.nvmlDeviceGetClockInfo, h,
                     pynvml.NVML_CLOCK_MEM)
        state.clocks = (int(sm) if sm is not None else None,
                        int(mem) if mem is not None else None)
        enc = q.read(uuid, "encoder_utilization", pynvml.nvmlDeviceGetEncoderUtilization, h)
        dec = q.read(uuid, "decoder_utilization", pynvml.nvmlDeviceGetDecoderUtilization, h)
        state.codec = (int(enc[0]) if enc is not None else None,
                       int(dec[0]) if dec is not None else None)

    def _mps(self, uuid: str, h: Any, state: _SweepMemory,
             processes: tuple[ProcessReading, ...], slow: bool) -> bool | None:
        """Whether MPS clients are present: asked again when the process list changes (a
        process does not become an MPS client during its life) and every slow tick."""
        pids = frozenset(p.pid for p in processes)
        if pids != state.mps_pids or slow:
            raw = self._q.read(uuid, "mps_processes",
                               pynvml.nvmlDeviceGetMPSComputeRunningProcesses, h)
            state.mps = bool(raw) if raw is not None else None
            state.mps_pids = pids
        return state.mps

    def _memory(self, uuid: str, h: Any) -> Any:
        """Memory info, v2 first: its ``used`` excludes driver-reserved memory, as nvidia-smi
        shows it (v1's ``used`` counts the reservation, ~0.5 GiB on an idle H100)."""
        if not self._q.is_unsupported(uuid, "memory_v2"):
            info = self._q.read(uuid, "memory_v2", pynvml.nvmlDeviceGetMemoryInfo, h,
                                pynvml.nvmlMemory_v2)
            if info is not None:
                return info
        return self._q.read(uuid, "memory", pynvml.nvmlDeviceGetMemoryInfo, h)

    def _processes(self, uuid: str, h: Any) -> tuple[ProcessReading, ...]:
        readings = self._q.read(uuid, "processes", self._process_reads.running_processes, h)
        if readings is None and self._q.is_unsupported(uuid, "processes"):
            # Drivers without the _v3 symbol (before R510): fall back to _v2.
            raw = self._q.read(uuid, "processes_v2",
                               pynvml.nvmlDeviceGetComputeRunningProcesses_v2, h)
            return process_readings(raw) if raw else ()
        return readings or ()

    def _samples(self, uuid: str, h: Any, state: _SweepMemory,
                 processes: tuple[ProcessReading, ...]) -> tuple[ProcessSample, ...] | None:
        """Each process's samples newer than the last one seen *for that process*.

        The driver keeps a sample per process with its own timestamp; asking only for samples
        newer than the newest one of any process would drop a less busy process's older-stamped
        sample every time (seen on an H100: an 80%/20% pair read as 100%/0%). So ask from the
        oldest per-process timestamp and drop, per process, what was already counted.
        Asked also when no process is listed: a process that ended, or dropped its context,
        between two ticks shows only here, and its work is not billed to a bystander.
        ``()`` when NVML has none (NOT_FOUND: idle).
        """
        seen = state.sample_timestamp_by_pid
        pids = {p.pid for p in processes}
        floor = state.last_sample_timestamp_us
        since = min((seen.get(pid, floor) for pid in pids), default=floor)
        raw = self._q.read(uuid, "process_utilization",
                           self._process_reads.utilization_samples, h, since, not_found=NOT_FOUND)
        if raw is None:
            return None
        if raw is NOT_FOUND:
            return ()
        samples = []
        # A sample stamped after now was taken before the wall clock stepped back: counted
        # already, or lost with the step.
        latest = int(self._wall() * 1e6) + FUTURE_SAMPLE_SLACK_US
        for s in raw:
            pid, stamp = int(s.pid), int(s.timeStamp)
            if stamp <= seen.get(pid, since) or stamp > latest:
                continue                     # counted last time
            samples.append(ProcessSample(pid=pid, timestamp_us=stamp,
                                         sm_util_percent=int(s.smUtil),
                                         mem_util_percent=int(s.memUtil)))
            seen[pid] = max(seen.get(pid, 0), stamp)
        if samples:
            state.last_sample_timestamp_us = max(state.last_sample_timestamp_us,
                                                 max(s.timestamp_us for s in samples))
        # A PID no longer listed keeps its stamp while the driver may still hand out its
        # older samples (they would be counted twice); its stamp goes once that long is past.
        forget_before = state.last_sample_timestamp_us - SAMPLE_MEMORY_US
        for gone in [pid for pid, stamp in seen.items()
                     if pid not in pids and stamp < forget_before]:
            del seen[gone]
        return tuple(samples)

    def _violations(self, uuid: str, h: Any) -> ViolationReading | None:
        values = {}
        reference = None
        for name, policy in _VIOLATION_POLICIES:
            raw = self._q.read(uuid, f"violation_{name[:-3]}", pynvml.nvmlDeviceGetViolationStatus,
                               h, policy)
            values[name] = int(raw.violationTime) if raw is not None else None
            if raw is not None and reference is None:
                reference = int(raw.referenceTime)
        if all(v is None for v in values.values()):
            return None
        return ViolationReading(**values, reference_time_us=reference or None)

    def _pcie(self, uuid: str, h: Any) -> tuple[float | None, float | None]:
        tx = self._q.read(uuid, "pcie", pynvml.nvmlDeviceGetPcieThroughput, h,
                          pynvml.NVML_PCIE_UTIL_TX_BYTES)
        rx = self._q.read(uuid, "pcie", pynvml.nvmlDeviceGetPcieThroughput, h,
                          pynvml.NVML_PCIE_UTIL_RX_BYTES) if tx is not None else None
        return (tx * 1024.0 if tx is not None else None, rx * 1024.0 if rx is not None else None)

    def _refresh_mig(self, device: DeviceHandle, ident: DeviceIdentity, state: _SweepMemory,
                     check_layout: bool) -> None:
        """Check MIG mode (one cheap call); read the layout when MIG turned on, and re-read it
        while MIG stays on when ``check_layout``."""
        mode = self._q.read(ident.uuid, "mig", pynvml.nvmlDeviceGetMigMode, device.handle)
        enabled = bool(mode[0]) if mode is not None else None
        if enabled == state.mig_enabled:
            if enabled and check_layout:
                self._set_layout(ident, device.handle, state)
            return
        if state.mig_enabled is not None or enabled:
            log.info("GPU %s: MIG mode is now %s", ident.uuid, "on" if enabled else "off")
        if state.mig_enabled is not None:
            # These answer NOT_SUPPORTED under MIG only: forget what the old mode taught.
            self._q.forget(ident.uuid, (
                "utilization", "process_utilization", "encoder_utilization",
                "decoder_utilization", "remapped_rows",
                *(f"field:{name}" for name, _ in fields.REMAPPED_ROWS)))
        state.mig_enabled = enabled
        self._ended.forget(ident.uuid)        # no accounting reads under MIG: start afresh
        if enabled:
            self._set_layout(ident, device.handle, state, first=True)
        else:
            self._forget_instances(ident.uuid, state.mig_instances)
            state.mig_instances = []

    def _follow_hints(self, ident: DeviceIdentity, h: Any, state: _SweepMemory,
                      processes: tuple[ProcessReading, ...]) -> None:
        """Re-read the layout when a process runs on a GPU instance it lacks, or an instance's
        memory could not be read last tick (its handle may name a destroyed instance). Once for
        the same hints, so a driver that lists an instance it has no device for, or an instance
        whose memory stays unreadable, costs one re-read, not one per tick."""
        known = {m.gpu_instance_id for m in state.mig_instances}
        unknown = tuple(sorted({p.gpu_instance_id for p in processes
                                if p.gpu_instance_id is not None
                                and p.gpu_instance_id not in known}))
        hints = (unknown, tuple(sorted(state.mig_unreadable & known)))
        if any(hints) and hints != state.mig_hints_checked:
            log.info("GPU %s: re-reading the MIG layout (processes on GPU instance(s) not in it:"
                     " %s; instance(s) whose memory could not be read: %s)", ident.uuid,
                     ", ".join(map(str, hints[0])) or "none", ", ".join(map(str, hints[1]))
                     or "none")
            self._set_layout(ident, h, state)
        state.mig_hints_checked = hints

    def _set_layout(self, ident: DeviceIdentity, h: Any, state: _SweepMemory,
                    first: bool = False) -> None:
        """Read the MIG layout; log what was destroyed and created since the last read."""
        before = state.mig_instances
        after = read_layout(self._q, ident.uuid, h, before)
        destroyed, created = layout_change(before, after)
        state.mig_instances = after
        self._forget_instances(ident.uuid, destroyed + created)
        if first:
            log.info("GPU %s: %d MIG instance(s): %s", ident.uuid, len(after),
                     ", ".join(m.label for m in after) or "none")
        elif destroyed or created:
            log.info("GPU %s: MIG layout changed: destroyed %s; created %s; now %s", ident.uuid,
                     ", ".join(m.label for m in destroyed) or "none",
                     ", ".join(m.label for m in created) or "none",
                     ", ".join(m.label for m in after) or "none")

    def _forget_instances(self, uuid: str, instances: list[MigInstance]) -> None:
        """GPM state kept per GPU instance id belongs to the instance that had the id."""
        for m in instances:
            self._gpm.forget_instance(uuid, m.gpu_instance_id)


def _with_total(ident: DeviceIdentity, state: _SweepMemory, total: int) -> DeviceIdentity:
    kept = state.identity_with_total
    if kept is not None and kept[0] is ident and kept[1] == total:
        return kept[2]
    with_total = replace(ident, memory_total_bytes=total)
    state.identity_with_total = (ident, total, with_total)
    return with_total


def _int_or_none(value) -> int | None:
    return int(value) if value is not None else None


def _device_reading(ident: DeviceIdentity, state: _SweepMemory, values: fields.FieldValues, *,
                    memory, util, read_at: float, power_w: float | None,
                    energy_mj: float | None, temperature, reasons, mig, processes, mps,
                    samples, gpm, pstate, unsupported) -> DeviceReading:
    """One tick's reading of a device from this tick's reads and the sweep's memory of it."""
    has_memory = memory is not None
    reserved = getattr(memory, "reserved", None) if has_memory else None
    return DeviceReading(
        identity=_with_total(ident, state, int(memory.total)) if has_memory else ident,
        monotonic_seconds=read_at,
        memory_used_bytes=int(memory.used) if has_memory else None,
        utilization_percent=int(util.gpu) if util is not None else None,
        memory_utilization_percent=int(util.memory) if util is not None else None,
        power_watts=power_w,
        energy_counter_millijoules=_int_or_none(energy_mj),
        power_limit_watts=state.power_limit_watts,
        temperature_celsius=_int_or_none(temperature),
        mig_enabled=state.mig_enabled,
        mig_instances=mig,
        processes=processes,
        mps=mps,
        process_samples=samples,
        clocks_event_reasons=_int_or_none(reasons),
        violations=state.violations,
        gpm=gpm,
        pcie_tx_bytes_per_second=state.pcie[0],
        pcie_rx_bytes_per_second=state.pcie[1],
        sm_clock_mhz=state.clocks[0],
        memory_clock_mhz=state.clocks[1],
        memory_temperature_celsius=fields.value(values, "memory_temperature"),
        pcie_replay_count=state.pcie_replay_count,
        encoder_utilization_percent=state.codec[0],
        decoder_utilization_percent=state.codec[1],
        memory_free_bytes=int(memory.free) if has_memory else None,
        memory_reserved_bytes=_int_or_none(reserved),
        remapped_rows=state.remapped_rows,
        performance_state=pstate,
        lowest_performance_state=state.lowest_pstate,
        unsupported_fields=unsupported,
    )
