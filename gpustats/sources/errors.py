"""Counting why values are missing, and logging each kind of failure once."""

from __future__ import annotations

import logging
import threading
import time


class CollectionErrors:
    """Cumulative counts of (source, reason) failures; exported as a counter family.

    Sources call ``record`` from the housekeeping thread (and the health thread); readers take
    an immutable ``totals()`` copy into each snapshot.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def record(self, source: str, reason: str, count: int = 1) -> None:
        with self._lock:
            key = (source, reason)
            self._counts[key] = self._counts.get(key, 0) + count

    def totals(self) -> tuple[tuple[str, str, int], ...]:
        with self._lock:
            return tuple(sorted((s, r, n) for (s, r), n in self._counts.items()))


class LogOnce:
    """Logs a message the first time a key is seen, then at most once per ``every`` seconds."""

    def __init__(self, logger: logging.Logger, every_seconds: float | None = None,
                 clock=time.monotonic):
        self._logger = logger
        self._every = every_seconds
        self._clock = clock
        self._last: dict[object, float] = {}

    def __call__(self, key: object, level: int, msg: str, *args: object) -> bool:
        now = self._clock()
        last = self._last.get(key)
        if last is not None and (self._every is None or now - last < self._every):
            return False
        self._last[key] = now
        self._logger.log(level, msg, *args)
        return True

    def forget(self, key: object) -> None:
        self._last.pop(key, None)
