"""The idle the daemon has for a GPU with none configured, as the chaos oracle expects it.

The daemon learns it from idle ticks only (its process list read and empty, and the duty
cycle read as 0 %, or not reported on a MIG GPU): the lowest power that held for
``HOLD_TICKS`` consecutive idle ticks, kept across restarts. A tick's power is the power
reading, or the energy counter's rate over the tick where power is not supported (the daemon
remembers that until it restarts). Until it has learnt one, the GPU has no idle and each
tick's whole energy is active, billed to its holders.

Where the oracle cannot tell what a tick saw (a reload next to the read), every possibility is
kept: the model is a set of states, each with the idle learnt one read before, for a daemon
killed before it journaled its last tick.
"""

from __future__ import annotations

from dataclasses import dataclass

from oracles.world import GpuState

HOLD_TICKS = 3            # gpustats.engine.energy.IDLE_HOLD_TICKS


@dataclass(frozen=True)
class _Learning:
    learned: float | None
    recent: tuple[float, ...]          # powers of the consecutive idle ticks up to now
    before: float | None               # what was learnt before the last read


def idle_tick_power(gpu: GpuState, processes_unknown: bool,
                    power: float | None) -> float | None:
    """The power an idle tick teaches, None for a tick that is not idle (or has no power)."""
    if gpu.lost or processes_unknown or power is None:
        return None
    listed = [h for h in gpu.holders if not h.between_ticks]
    if listed:
        return None
    return power if gpu.mig is not None or gpu.duty_percent == 0 else None


class LearnedIdle:
    """What one GPU's learnt idle may be, read by read."""

    def __init__(self) -> None:
        self.states = {_Learning(None, (), None)}

    def restart(self) -> None:
        """A new daemon run: idle ticks count afresh; its last tick's learning may be lost."""
        self.states = {_Learning(idle, (), idle)
                       for s in self.states for idle in (s.learned, s.before)}

    def lost(self) -> None:
        """The GPU was lost: idle ticks count afresh."""
        self.states = {_Learning(s.learned, (), s.before) for s in self.states}

    def read(self, outcomes: set[float | None]) -> None:
        """One tick, each outcome the power of an idle tick or None (not an idle tick)."""
        states = set()
        for s in self.states:
            for power in outcomes:
                recent = () if power is None else (s.recent + (power,))[-HOLD_TICKS:]
                learned = s.learned
                if len(recent) == HOLD_TICKS:
                    held = max(recent)
                    learned = held if learned is None else min(learned, held)
                states.add(_Learning(learned, recent, s.learned))
        self.states = states

    def values(self) -> set[float | None]:
        """The idles the daemon may be using at the last read (None: none learnt)."""
        return {s.learned for s in self.states}
