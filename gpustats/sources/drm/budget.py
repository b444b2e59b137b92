"""What one tick may spend on reading processes' files: a number of reads and a time.

A tick reads processes in turn while both last; the ones it did not reach go first at the next
tick (``RoundRobin``), so a crowd of processes with costly files delays the others by a few
ticks and never starves the same ones. One process's walk is bounded on its own
(``fd_walk.MAX_FDS_PER_PID``), so a tick overruns its budget by one walk at most.
"""

from __future__ import annotations

from typing import Callable, Container, Iterable

READS_PER_TICK = 65536
SECONDS_PER_TICK = 0.1


class ReadBudget:
    def __init__(self, calls: Callable[[], int], clock: Callable[[], float], *,
                 reads: int = READS_PER_TICK, seconds: float = SECONDS_PER_TICK):
        self._calls = calls
        self._clock = clock
        self._reads = reads
        self._seconds = seconds
        self._start_calls = 0
        self._start_at = 0.0

    def start(self) -> None:
        self._start_calls = self._calls()
        self._start_at = self._clock()

    def left(self) -> bool:
        return (self._calls() - self._start_calls < self._reads
                and self._clock() - self._start_at < self._seconds)


class RoundRobin:
    """The order processes are read in: the ones ``cheap`` to read (their DRM files known,
    one fdinfo read a client) first, in PID order; then those left over from the last tick
    (in the order they were due); then the rest in PID order."""

    def __init__(self) -> None:
        self._carried: list[int] = []

    def order(self, pids: Iterable[int], cheap: Container[int] = ()) -> list[int]:
        wanted = set(pids)
        first = sorted(p for p in wanted if p in cheap)
        taken = set(first)
        first += [p for p in self._carried if p in wanted and p not in taken]
        taken.update(first)
        return first + sorted(p for p in wanted if p not in taken)

    def carry(self, pids: list[int]) -> None:
        self._carried = list(pids)
