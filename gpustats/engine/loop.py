"""The housekeeping thread: one tick every interval (with jitter), never dies of a source."""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)


class Housekeeping:
    """Calls ``tick`` every ``interval`` seconds (±``jitter`` fraction) until stopped.

    A tick that raises is logged with its traceback and the loop goes on; the next tick runs at
    its normal time. ``on_tick_done`` runs after every tick (readiness, watchdog pings).
    """

    def __init__(self, tick: Callable[[], None], interval: float, *, jitter: float = 0.05,
                 on_tick_done: Callable[[], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self._tick = tick
        self._interval = interval
        self._jitter = jitter
        self._on_tick_done = on_tick_done
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._random = random.Random()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="housekeeping", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        """No tick is running or will run (never started, or its thread has ended)."""
        return self._thread is None or not self._thread.is_alive()

    def run_once(self) -> None:
        try:
            self._tick()
        except Exception:  # the loop must survive any source failure
            log.exception("housekeeping tick failed; continuing with the next tick")
        if self._on_tick_done is not None:
            try:
                self._on_tick_done()
            except Exception:
                log.exception("post-tick hook failed")

    def _run(self) -> None:
        next_due = self._monotonic()
        while not self._stop.is_set():
            self.run_once()
            spread = self._interval * self._jitter
            next_due += self._interval + self._random.uniform(-spread, spread)
            now = self._monotonic()
            if next_due < now:  # a slow tick: do not try to catch up with a burst
                next_due = now
            self._stop.wait(max(0.0, next_due - now))
