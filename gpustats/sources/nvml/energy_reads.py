"""The energy counter read every N ticks, power integrated in between (``--energy-every``).

On some drivers one energy-counter read costs milliseconds of CPU, more than the rest of a
GPU's sweep. Between two reads the reported counter is the last hardware value plus the
trapezoid of the power samples since; at each read the hardware value takes over again, so the
error never exceeds one interval's integration error and does not accumulate. The reported
counter never goes backwards within one hardware count (an estimate that ran ahead holds flat
until the hardware passes it); a hardware counter that went backwards (driver reload) is passed
through, so the engine still sees the reset.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Counter:
    hardware_mj: int                 # last hardware read
    integrated_mj: float = 0.0       # power integrated since that read
    reported_mj: int = 0             # last value handed out
    power_watts: float | None = None
    at: float = 0.0                  # monotonic time of the last power sample


class DeferredEnergy:
    """Per device: whether this tick reads the hardware counter, and the counter to report."""

    def __init__(self, every: int = 1):
        if every < 1:
            raise ValueError("every must be >= 1")
        self.every = every
        self._counters: dict[str, _Counter] = {}

    def due(self, uuid: str, tick: int) -> bool:
        """Read the hardware counter this tick (always when ``every`` is 1 or none read yet)."""
        return self.every == 1 or uuid not in self._counters or tick % self.every == 0

    def hardware(self, uuid: str, counter_mj: int, at: float, power_watts: float | None) -> int:
        """A hardware read: the counter to report (the hardware value, or the estimate already
        handed out when that ran ahead of it)."""
        previous = self._counters.get(uuid)
        reported = counter_mj
        if previous is not None and counter_mj >= previous.hardware_mj:
            reported = max(counter_mj, previous.reported_mj)
        self._counters[uuid] = _Counter(hardware_mj=counter_mj, reported_mj=reported,
                                        power_watts=power_watts, at=at)
        return reported

    def estimate(self, uuid: str, at: float, power_watts: float | None) -> int | None:
        """The counter between hardware reads; ``None`` when there is nothing to integrate
        from (no read yet, or a power sample missing): the caller reads the hardware then."""
        counter = self._counters.get(uuid)
        if counter is None or power_watts is None or counter.power_watts is None \
                or at < counter.at:
            return None
        counter.integrated_mj += (counter.power_watts + power_watts) / 2.0 \
            * (at - counter.at) * 1000.0
        counter.power_watts, counter.at = power_watts, at
        counter.reported_mj = max(counter.reported_mj,
                                  int(counter.hardware_mj + counter.integrated_mj))
        return counter.reported_mj
