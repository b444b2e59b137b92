"""A simulated GPU that idles part of the time: its power as a function of time, and the energy
it draws between two times (pure; time in seconds since the simulator started).

A scenario device with ``idle_cycle: {watts, idle_seconds, busy_seconds, start}`` draws
``watts`` during each idle phase and its ``power_watts`` during each busy phase, the phases
alternating from the start (``start: idle``, the default, or ``busy``). The idle phase gives
the daemon a low power that holds, so it can learn the GPU's idle and split power into idle
and active, as on a node whose GPUs are not busy all the time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IdleCycle:
    watts: float
    idle_seconds: float
    busy_seconds: float
    idle_first: bool = True

    @property
    def period_seconds(self) -> float:
        return self.idle_seconds + self.busy_seconds


def is_idle(cycle: IdleCycle, t: float) -> bool:
    """Whether the GPU is in an idle phase ``t`` seconds after the start."""
    phase = t % cycle.period_seconds
    first = cycle.idle_seconds if cycle.idle_first else cycle.busy_seconds
    return (phase < first) == cycle.idle_first


def power_at(busy_watts: float, cycle: IdleCycle | None, t: float) -> float:
    """The power drawn ``t`` seconds after the start."""
    if cycle is None or not is_idle(cycle, t):
        return busy_watts
    return cycle.watts


def _energy_from_start(busy_watts: float, cycle: IdleCycle, t: float) -> float:
    """Joules drawn from the start to ``t`` (t >= 0)."""
    periods, phase = divmod(t, cycle.period_seconds)
    per_period = cycle.watts * cycle.idle_seconds + busy_watts * cycle.busy_seconds
    first_watts, first_len, second_watts = (
        (cycle.watts, cycle.idle_seconds, busy_watts) if cycle.idle_first
        else (busy_watts, cycle.busy_seconds, cycle.watts))
    within = first_watts * min(phase, first_len) + second_watts * max(0.0, phase - first_len)
    return periods * per_period + within


def energy_joules(busy_watts: float, cycle: IdleCycle | None, t0: float, t1: float) -> float:
    """Joules drawn between ``t0`` and ``t1`` seconds after the start (0 when t1 <= t0)."""
    if t1 <= t0:
        return 0.0
    if cycle is None:
        return busy_watts * (t1 - t0)
    t0 = max(0.0, t0)
    return _energy_from_start(busy_watts, cycle, t1) - _energy_from_start(busy_watts, cycle, t0)


def mean_watts(busy_watts: float, cycle: IdleCycle | None) -> float:
    """The power averaged over whole cycles (what a counter gains per second in the long run)."""
    if cycle is None:
        return busy_watts
    return (cycle.watts * cycle.idle_seconds + busy_watts * cycle.busy_seconds) \
        / cycle.period_seconds
