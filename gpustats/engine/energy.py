"""Per-device energy bookkeeping between ticks: idle tracking, tick energy, attribution, counters.

``energyJoules`` of a device is the daemon's monotonic total of its hardware energy counter
(absent on GPUs without one); attribution uses the counter delta when there is one and the
trapezoid of power samples otherwise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Mapping

from gpustats.attribution import (
    DeviceTickInput, active_energy_joules, active_power, attribute_device, next_idle_power,
    tick_energy_joules,
)
from gpustats.engine.counters import EnergyCounters
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.device import DeviceReading

log = logging.getLogger(__name__)


@dataclass
class _DeviceState:
    counter_mj: int | None = None
    power_watts: float | None = None
    monotonic: float | None = None
    idle_min_watts: float | None = None


class EnergyAccountant:
    def __init__(self, configured_idle: Callable[[str], float | None], counters: EnergyCounters):
        self._configured_idle = configured_idle
        self._counters = counters
        self._state: dict[str, _DeviceState] = {}

    def account(self, reading: DeviceReading,
                mig_activity: Mapping[int, float] | None = None) -> DeviceAttribution | None:
        """One tick of one device; ``None`` for a lost device (its counters are kept)."""
        if reading.lost:
            return None
        uuid = reading.identity.uuid
        state = self._state.setdefault(uuid, _DeviceState())
        dt = reading.monotonic_seconds - state.monotonic if state.monotonic is not None else 0.0
        delta = tick_energy_joules(state.counter_mj, reading.energy_counter_millijoules,
                                   state.power_watts, reading.power_watts, dt,
                                   reading.power_limit_watts)
        if delta.counter_reset:
            log.info("GPU %s: energy counter went from %s to %s mJ (driver reload?); using "
                     "integrated power for this tick", uuid, state.counter_mj,
                     reading.energy_counter_millijoules)
        state.idle_min_watts = next_idle_power(state.idle_min_watts, reading.power_watts,
                                               self._configured_idle(uuid))
        idle = state.idle_min_watts
        active_energy = active_energy_joules(delta.joules, idle, dt)
        if reading.energy_counter_millijoules is not None:
            self._counters.advance(("device", uuid), delta.joules)
        if active_energy is not None or reading.energy_counter_millijoules is not None:
            self._counters.advance(("device_active", uuid), active_energy)
        state.counter_mj = reading.energy_counter_millijoules
        state.power_watts = reading.power_watts
        state.monotonic = reading.monotonic_seconds
        return attribute_device(DeviceTickInput(
            device_uuid=uuid,
            dt_seconds=dt,
            tick_energy_joules=delta.joules,
            active_energy_joules=active_energy,
            idle_power_watts=idle,
            active_power_watts=active_power(reading.power_watts, idle),
            processes=reading.processes,
            samples=reading.process_samples,
            mps=reading.mps,
            mig_enabled=bool(reading.mig_enabled),
            mig_instances=reading.mig_instances,
            mig_activity=mig_activity or {},
        ))

    def forget_missing(self, present_uuids: set[str]) -> None:
        for uuid in set(self._state) - present_uuids:
            del self._state[uuid]
