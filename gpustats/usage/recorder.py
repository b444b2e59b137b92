"""The usage writer thread: the tick hands it each snapshot (a reference, no I/O); it writes
the snapshot's gains in one transaction, off the tick's path, and says whether that works."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from typing import Callable

from gpustats.model.snapshot import Snapshot
from gpustats.usage.database import FILE_NAME, UsageWriter, open_database
from gpustats.usage.tariff import CarbonIntensity, Price
from gpustats.usage.ticks import Deltas, TenantNames

log = logging.getLogger(__name__)

OPEN_FAILED = "open_failed"
WRITE_FAILED = "write_failed"
DISK_FULL = "disk_full"
Problem = tuple[str, str]
WRITER_NICE = 10


def _reason(exc: sqlite3.Error) -> str:
    text = str(exc).lower()
    return DISK_FULL if "full" in text or "no space" in text else WRITE_FAILED


class UsageRecorder:
    """Records every snapshot's usage into ``<state_dir>/usage.sqlite``.

    ``observe`` only swaps a reference: when the writer is still busy with an earlier tick,
    the newer snapshot replaces one not yet taken (its counters include the skipped tick's,
    so nothing is lost; the gain is dated at the later tick). A write that fails leaves the
    baseline where it was, so the next one that works carries the energy of both. ``report``
    hears ``None`` while writes work, or (reason, message).
    """

    def __init__(self, state_dir: str, *, price: Price | None = None,
                 carbon: CarbonIntensity | None = None, hourly_retention: float = 90 * 86400,
                 daily_retention: float = 730 * 86400, keep_seconds: float = 3600.0,
                 report: Callable[[Problem | None], None] | None = None):
        self.path = os.path.join(state_dir, FILE_NAME)
        self._price = price
        self._carbon = carbon
        self._hourly = hourly_retention
        self._daily = daily_retention
        self._keep = keep_seconds
        self._report = report or (lambda problem: None)
        self._condition = threading.Condition()
        self._pending: Snapshot | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._writer: UsageWriter | None = None
        self._deltas: Deltas | None = None
        self._names = TenantNames()
        self.recorded_sequence = 0            # the last snapshot written (or found failing)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="usage-writer", daemon=True)
        self._thread.start()

    def observe(self, snapshot: Snapshot) -> None:
        """The tick's hand-over: O(1), never blocks on the database."""
        with self._condition:
            self._pending = snapshot
            self._condition.notify_all()

    def wait_recorded(self, sequence: int, timeout: float) -> bool:
        """Whether the snapshot ``sequence`` (or a later one) was taken in within ``timeout``."""
        with self._condition:
            return self._condition.wait_for(lambda: self.recorded_sequence >= sequence,
                                            timeout)

    def stop(self, timeout: float = 1.0) -> None:
        """Write what is pending, then close the database (within ``timeout``)."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            # Below the tick when both want a CPU: usage can wait, the tick cannot (Linux
            # schedules threads by their own nice value).
            thread = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, thread,
                           min(19, os.getpriority(os.PRIO_PROCESS, thread) + WRITER_NICE))
        except (OSError, AttributeError):
            pass
        while True:
            with self._condition:
                self._condition.wait_for(lambda: self._pending is not None or self._stopping)
                snapshot, self._pending = self._pending, None
                stopping = self._stopping
            if snapshot is not None:
                try:
                    self.record(snapshot)
                except Exception:      # the thread must outlive any one tick's write
                    log.exception("usage: recording a snapshot failed")
                with self._condition:
                    self.recorded_sequence = max(self.recorded_sequence, snapshot.sequence)
                    self._condition.notify_all()
            if stopping and self._pending is None:
                break
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _open(self, now: float) -> UsageWriter | None:
        try:
            writer = UsageWriter(open_database(self.path), price=self._price,
                                 carbon=self._carbon, hourly_retention=self._hourly,
                                 daily_retention=self._daily)
            baseline = writer.baseline(now - self._keep - 86400)
        except (sqlite3.Error, OSError) as exc:
            self._report((OPEN_FAILED, f"the usage database {self.path} cannot be opened: "
                                       f"{exc}"))
            return None
        self._deltas = Deltas(baseline, self._keep)
        return writer

    def record(self, snapshot: Snapshot) -> None:
        """Write one snapshot's gains (the writer thread; tests call it directly)."""
        if self._writer is None:
            self._writer = self._open(snapshot.taken_at)
            if self._writer is None:
                return
        assert self._deltas is not None
        totals, tenants = self._names.totals(snapshot)
        gains, updated = self._deltas.gains(totals, snapshot.taken_at)
        try:
            self._writer.write(snapshot.taken_at, gains, tenants)
        except sqlite3.Error as exc:
            self._report((_reason(exc), f"usage rows cannot be written to {self.path}: {exc}; "
                                        "they are kept for the next tick"))
            return
        self._deltas.commit(updated, snapshot.taken_at)
        self._report(None)
