"""Counting why values are missing, each source's state, and logging each kind of failure once."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from gpustats.model.sources import STATE_ABSENT, STATE_FAILING, STATE_OK, SourceState

log = logging.getLogger("gpustats.sources")


class CollectionErrors:
    """Cumulative counts of (source, reason) failures, and each source's state.

    Sources call ``record`` (a value could not be collected), ``failed`` (the source as a whole
    failed this time: counted, and the source is failing until it next succeeds), ``succeeded``
    and ``absent`` from the housekeeping thread (and the health thread); readers take immutable
    ``totals()`` and ``states()`` copies into each snapshot. A source's failure is logged once
    when it starts failing and once when it recovers: never silent, never a flood.
    """

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._wall = wall
        self._states: dict[str, SourceState] = {}

    def failed(self, source: str, reason: str, message: str) -> None:
        """``source`` failed for ``reason``; ``message`` says what happened, for people."""
        now = self._wall()
        with self._lock:
            key = (source, reason)
            self._counts[key] = self._counts.get(key, 0) + 1
            old = self._states.get(source)
            if old is None or old.state != STATE_FAILING:
                entering, since = True, now
            else:
                entering, since = False, old.since
            self._states[source] = SourceState(
                source, STATE_FAILING, since,
                old.last_success_time if old else None, reason, message, now)
        if entering:
            log.warning("%s failing (%s): %s", source, reason, message)

    def succeeded(self, source: str) -> None:
        now = self._wall()
        with self._lock:
            old = self._states.get(source)
            failing_since = old.since if old is not None and old.state == STATE_FAILING \
                else None
            self._states[source] = SourceState(
                source, STATE_OK, now if old is None or old.state != STATE_OK else old.since,
                now, old.last_error_reason if old else None, old.last_error if old else None,
                old.last_error_time if old else None)
        if failing_since is not None:
            log.info("%s recovered after %.1f s failing", source, now - failing_since)

    def noted(self, source: str, reason: str, message: str) -> None:
        """``source`` worked, but for something it names (``message``): it stays ``ok`` with
        this as its last error, counted under ``reason``."""
        now = self._wall()
        with self._lock:
            key = (source, reason)
            self._counts[key] = self._counts.get(key, 0) + 1
            old = self._states.get(source)
            since = old.since if old is not None and old.state == STATE_OK else now
            self._states[source] = SourceState(source, STATE_OK, since, now, reason, message,
                                               now)

    def absent(self, source: str) -> None:
        """Configured but not there (a socket not created yet): neither working nor failing."""
        now = self._wall()
        with self._lock:
            old = self._states.get(source)
            if old is not None and old.state == STATE_ABSENT:
                return
            self._states[source] = SourceState(
                source, STATE_ABSENT, now, old.last_success_time if old else None,
                old.last_error_reason if old else None, old.last_error if old else None,
                old.last_error_time if old else None)

    def states(self) -> tuple[SourceState, ...]:
        with self._lock:
            return tuple(self._states[k] for k in sorted(self._states))

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
                 clock: Callable[[], float] = time.monotonic):
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
