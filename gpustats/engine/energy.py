"""Per-device energy bookkeeping between ticks: idle learning, tick energy, attribution, counters.

``energyJoules`` of a device is the daemon's monotonic total of its hardware energy counter
(absent on GPUs without one); attribution uses the counter delta when there is one and the
trapezoid of power samples otherwise. Where the power call is not supported, power is the
counter's rate over the tick.

Idle without ``--idle-power-watts`` is learned from idle ticks only (no process listed and
0 % duty or the GPU in its idle performance state, or 0 % duty and none of its processes
computing: ``attribution.idle_tick``): the lowest power that held for ``IDLE_HOLD_TICKS``
consecutive idle ticks (so one 0 W glitch never becomes the idle), kept per GPU UUID across
restarts. A GPU never seen idle has no idle: its whole energy is active, billed to its
processes from the first tick, and its idle stays absent rather than a busy reading.

After a restart, or when a lost GPU (or one gone from the sweep) is back, when the hardware
counter is continuous with the last reading (same boot, not below it, and no more than the
board could have drawn in between), the energy of the gap is added to the device counter;
attributed counters never invent it.
Counters are advanced by the energy ledger (``gpustats.engine.ledger``), from what
``account`` returns.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping

from gpustats.attribution import (
    GLITCH_FACTOR, DeviceTickInput, active_energy_joules, attribute_device, idle_performance_state,
    idle_tick, learned_idle_power, plausible_max_watts, tick_energy_joules,
)
from gpustats.engine.counters import DeviceRecord, EnergyCounters
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.device import DeviceReading
from gpustats.sources.node import CLOCK_TICKS_PER_SECOND

log = logging.getLogger(__name__)

IDLE_HOLD_TICKS = 3


@dataclass
class _EnergyBaseline:
    """What one GPU's accounting carries to its next tick: the last counter, power and time
    (the start of the next tick's energy) and the idle being learned."""

    counter_mj: int | None = None
    power_watts: float | None = None
    monotonic: float | None = None
    learned_idle_watts: float | None = None
    recent_watts: deque = field(default_factory=lambda: deque(maxlen=IDLE_HOLD_TICKS))


def boot_clock_offset() -> float:
    """Seconds from the monotonic clock to the boot clock (the time a process's start in
    ``/proc/<pid>/stat`` counts from, which also runs while the host is suspended)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()


class EnergyAccountant:
    def __init__(self, configured_idle: Callable[[str], float | None], counters: EnergyCounters,
                 *, boot_id: str | None = None, wall: Callable[[], float] = time.time,
                 boot_offset: Callable[[], float] = boot_clock_offset):
        self._configured_idle = configured_idle
        self._counters = counters
        self._boot_id = boot_id
        self._wall = wall
        self._boot_offset = boot_offset
        self._state: dict[str, _EnergyBaseline] = {}

    @property
    def boot_id(self) -> str | None:
        """The boot this daemon runs in (``None``: not known)."""
        return self._boot_id

    def account(self, reading: DeviceReading,
                mig_activity: Mapping[int, float] | None = None,
                starts: Mapping[tuple[str, int], int | None] | None = None,
                ) -> DeviceAttribution | None:
        """One tick of one device; ``None`` for a lost device. Counters are advanced by the
        energy ledger from what this returns. ``starts``: each process's start time (clock
        ticks since boot), to bill one that started during the tick for its part of it only.

        A lost GPU's baseline is dropped: the first tick back starts afresh (no energy of its
        own), and the energy used while it was lost goes to the device counter alone, by the
        same rule as a restart's gap, never to whoever runs when it is back.
        """
        uuid = reading.identity.uuid
        if reading.lost:
            self._state.pop(uuid, None)
            return None
        state = self._state.get(uuid)
        gap = None
        if state is None:
            state, gap = self._first_tick(reading)
            self._state[uuid] = state
        dt = reading.monotonic_seconds - state.monotonic if state.monotonic is not None else 0.0
        delta = tick_energy_joules(state.counter_mj, reading.energy_counter_millijoules,
                                   state.power_watts, reading.power_watts, dt,
                                   reading.power_limit_watts)
        if delta.counter_reset:
            log.info("GPU %s: energy counter went from %s to %s mJ (driver reload?); using "
                     "integrated power for this tick", uuid, state.counter_mj,
                     reading.energy_counter_millijoules)
        power = reading.power_watts
        if power is None and delta.source == "counter" and delta.joules is not None and dt > 0:
            power = delta.joules / dt           # no power call: the counter's rate
        idle = self._idle(uuid, state, power, reading, mig_activity or {})
        active_energy = active_energy_joules(delta.joules, idle, dt)
        device_energy = None
        if reading.energy_counter_millijoules is not None:
            device_energy = (delta.joules or 0.0) + (gap or 0.0)
        state.counter_mj = reading.energy_counter_millijoules
        state.power_watts = power
        state.monotonic = reading.monotonic_seconds
        self._remember(reading, state)
        return attribute_device(DeviceTickInput(
            device_uuid=uuid,
            dt_seconds=dt,
            tick_energy_joules=delta.joules,
            active_energy_joules=active_energy,
            idle_power_watts=idle,
            # The tick's active energy over its length, as every attributed watts figure is
            # (an instantaneous reading could be below what the tick attributes).
            active_power_watts=active_energy / dt if active_energy is not None else None,
            power_watts=power,
            device_energy_joules=device_energy,
            processes=reading.processes,
            processes_known="processes" not in reading.unsupported_fields,
            unseen_holders=bool(reading.unreadable_pids),
            samples=reading.process_samples,
            mps=reading.mps,
            mig_enabled=bool(reading.mig_enabled),
            mig_instances=reading.mig_instances,
            mig_activity=mig_activity or {},
            lived_seconds=self._lived(reading, dt, starts) if starts else {},
            unattributed_engine_seconds=reading.unattributed_engine_seconds or 0.0))

    def _lived(self, reading: DeviceReading, dt: float,
               starts: Mapping[tuple[str, int], int | None]) -> dict[int, float]:
        """The seconds of the tick each process that started during it lived."""
        if not dt > 0:
            return {}
        uuid = reading.identity.uuid
        ended_at = self._on_boot_clock(reading)
        lived = {}
        for p in reading.processes:
            start = starts.get((uuid, p.pid))
            if start is None:
                continue
            seconds = ended_at - start / CLOCK_TICKS_PER_SECOND
            if seconds < dt:
                lived[p.pid] = max(0.0, seconds)
        return lived

    def _first_tick(self, reading: DeviceReading) -> tuple[_EnergyBaseline, float | None]:
        """Start from what was learned before (an earlier run, or before the GPU was lost);
        the energy of the gap when the counter ran on plausibly (device counter only)."""
        uuid = reading.identity.uuid
        record = self._counters.device(uuid)
        state = _EnergyBaseline()
        if record is None:
            return state, None
        state.learned_idle_watts = record.idle_watts
        now_mj = reading.energy_counter_millijoules
        if now_mj is None or record.energy_counter_mj is None or record.read_at is None:
            return state, None
        if self._boot_id is None or record.boot_id != self._boot_id:
            return state, None
        elapsed = self._elapsed_since(record, reading)
        gap = (now_mj - record.energy_counter_mj) / 1000.0
        bound = GLITCH_FACTOR * plausible_max_watts(reading.power_limit_watts, None,
                                                    reading.power_watts) * elapsed
        if 0 <= gap <= bound:
            log.info("GPU %s: %.0f J used while gpustats was not running or the GPU was "
                     "lost (%.0f s) added to its energy counter", uuid, gap, elapsed)
            return state, gap
        log.info("GPU %s: energy counter not continuous with the last reading (%s → %s mJ "
                 "over %.0f s); the gap is not counted", uuid, record.energy_counter_mj,
                 now_mj, elapsed)
        return state, None

    def _on_boot_clock(self, reading: DeviceReading) -> float:
        """When ``reading`` was taken, on the boot clock (what process start times and the
        records of earlier runs in this boot count on)."""
        return reading.monotonic_seconds + self._boot_offset()

    def _elapsed_since(self, record: DeviceRecord, reading: DeviceReading) -> float:
        """Seconds from the record's reading to this one, in the same boot: on the boot
        clock where the record has it (a wall-clock step back while the daemon was down made
        the gap look negative, and its energy was dropped), else on the wall clock."""
        if record.read_at_boot_seconds is not None:
            return max(0.0, self._on_boot_clock(reading) - record.read_at_boot_seconds)
        assert record.read_at is not None            # the caller's check (_first_tick)
        return max(0.0, self._wall() - record.read_at)

    def _idle(self, uuid: str, state: _EnergyBaseline, power: float | None,
              reading: DeviceReading, mig_activity: Mapping[int, float]) -> float | None:
        """The configured idle, else the one learned from idle ticks (None: never seen)."""
        configured = self._configured_idle(uuid)
        if configured is not None:
            return configured
        if power is not None and (idle_tick("processes" not in reading.unsupported_fields,
                                            reading.processes, reading.process_samples,
                                            reading.utilization_percent,
                                            bool(reading.mig_enabled),
                                            reading.performance_state,
                                            reading.lowest_performance_state)
                                  or mig_idle_tick(reading, mig_activity)):
            state.recent_watts.append(power)
        else:
            state.recent_watts.clear()       # the hold counts consecutive idle ticks
        state.learned_idle_watts = learned_idle_power(
            state.learned_idle_watts, tuple(state.recent_watts), IDLE_HOLD_TICKS)
        return state.learned_idle_watts

    def _remember(self, reading: DeviceReading, state: _EnergyBaseline) -> None:
        ident = reading.identity
        counter = reading.energy_counter_millijoules
        self._counters.set_device(ident.uuid, DeviceRecord(
            idle_watts=state.learned_idle_watts, energy_counter_mj=counter,
            boot_id=self._boot_id if counter is not None else None,
            read_at=self._wall() if counter is not None else None,
            read_at_boot_seconds=self._on_boot_clock(reading) if counter is not None else None,
            index=ident.index, pci_bus_id=ident.pci_bus_id, name=ident.name,
            minor_number=ident.minor_number))

    def forget_missing(self, present_uuids: set[str]) -> None:
        """Drop the baselines of GPUs not in this tick's sweep (gone from the driver's list,
        or NVML away); each starts afresh when it is back, as a lost GPU does. What they
        learned stays in the counters' GPU records."""
        for uuid in set(self._state) - present_uuids:
            del self._state[uuid]


def mig_idle_tick(reading: DeviceReading, activity: Mapping[int, float]) -> bool:
    """Whether a MIG GPU whose instances hold processes is idle this tick (NVML gives no duty
    cycle under MIG, so a GPU always held would never learn its idle): every instance's
    activity (GPM, or dcgm-exporter's) reads 0, or the GPU sits in its idle performance
    state. Its process list must have been read; an instance of unknown activity is not
    idle."""
    if not reading.mig_enabled or not reading.processes \
            or "processes" in reading.unsupported_fields:
        return False
    if idle_performance_state(reading.performance_state, reading.lowest_performance_state):
        return True
    instances = reading.mig_instances
    return bool(instances) and all(activity.get(i.gpu_instance_id) == 0 for i in instances)

