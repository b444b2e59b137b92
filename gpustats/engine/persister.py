"""When the energy counters are written: every tick's changes to the journal, the whole state
every persist interval (and at SIGHUP and shutdown), and whether that is working."""

from __future__ import annotations

import threading
import time
from typing import Callable

from gpustats.engine.counters import EnergyCounters

JOURNAL_FAILED = "journal_failed"
COMPACTION_FAILED = "compaction_failed"

Problem = tuple[str, str]          # (reason, message): why persistence is failing


class Persister:
    """Journals each tick's counter changes before it is published, and compacts the state
    every ``interval`` seconds (and on demand: SIGHUP, shutdown).

    ``report`` is told after every write whether persistence is working (``None``) or what
    is failing: a journal line not written fails until one is, a compaction until one works.
    The counters write one thing at a time, so a compaction asked for from another thread
    never races the tick's journal line.
    """

    def __init__(self, counters: EnergyCounters, interval: float,
                 monotonic: Callable[[], float] = time.monotonic,
                 report: Callable[[Problem | None], None] | None = None):
        self._counters = counters
        self._interval = interval
        self._monotonic = monotonic
        self._report = report
        self._next = monotonic() + interval
        self._lock = threading.Lock()          # outcomes and their report, in order
        self._journal_ok = True
        self._compaction_ok = True

    def journal(self) -> bool:
        with self._lock:
            ok = self._counters.journal()
            self._journal_ok = ok
            self._send()
            return ok

    def maybe_persist(self) -> None:
        now = self._monotonic()
        if now >= self._next:
            self._next = now + self._interval
            self._counters.expire()
            self.persist_now()

    def persist_now(self) -> bool:
        with self._lock:
            ok = self._counters.persist()
            self._compaction_ok = ok
            self._send()
            return ok

    def close(self) -> bool:
        """The final compaction; the journal closed after it (a later line reopens it)."""
        ok = self.persist_now()
        self._counters.close()
        return ok

    def _send(self) -> None:
        if self._report is None:
            return
        if not self._journal_ok:
            self._report((JOURNAL_FAILED, "energy counter changes cannot be appended to the "
                                          "journal; a crash now loses them"))
        elif not self._compaction_ok:
            self._report((COMPACTION_FAILED, "energy counters cannot be compacted into the "
                                             "state file; the journal keeps growing"))
        else:
            self._report(None)
