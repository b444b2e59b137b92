"""The health thread: waits on NVML events and keeps each GPU's conditions.

It waits in slices of ``wait_ms`` so ``stop`` returns within the shutdown budget, or, where
the wait can be woken (``interrupt``: the simulator), in long slices that ``stop`` and a change
of the GPUs watched cut short. An event source that fails is closed, logged (rate-limited)
and reopened after a backoff: the thread never dies of an NVML error. The sweep reports
GPU_IS_LOST too, so health reflects a lost GPU even where the driver delivers no events, and
each GPU's remapped rows (``RowRemapHealth``). ``EccHealth`` is reported for the GPUs whose
events the source registered. A new NVML session starts from healthy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Mapping, Protocol

from gpustats.health import (
    DEFAULT_IGNORED_XIDS, apply_event, apply_remapped_rows, initial_health, watch_ecc,
)
from gpustats.model.device import RemappedRowsReading
from gpustats.model.health import CONDITION_ROW_REMAP, STATUS_TRUE, DeviceHealth, HealthEvent
from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)


class EventSource(Protocol):
    def open(self, uuids: tuple[str, ...]) -> dict[str, bool]: ...

    def wait(self, timeout_ms: int) -> list[HealthEvent]: ...

    def close(self) -> None: ...


class HealthMonitor:
    def __init__(self, make_source: Callable[[], EventSource], *,
                 ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS, wait_ms: int = 500,
                 max_backoff_seconds: float = 30.0, wall: Callable[[], float] = time.time,
                 interrupt: Callable[[], None] | None = None):
        self._make_source = make_source
        self._ignored = ignored_xids
        self._wait_ms = wait_ms
        self._interrupt = interrupt or (lambda: None)
        self._max_backoff = max_backoff_seconds
        self._wall = wall
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._changed = threading.Event()
        # Set once the thread has opened its event source for the current target (or failed
        # to): the conditions that depend on it (EccHealth) are known from then on.
        self._opened = threading.Event()
        self._target: tuple[int, tuple[str, ...]] = (0, ())
        self._health: dict[str, DeviceHealth] = {}
        self._xid_times: dict[str, deque[float]] = {}
        self._thread: threading.Thread | None = None
        self._log_once = LogOnce(log, every_seconds=300.0)
        self.errors = 0

    # ------------------------------------------------------------ called by the housekeeper

    def track(self, session: int, uuids: tuple[str, ...]) -> None:
        """The GPUs of NVML session number ``session`` (0: NVML not loaded)."""
        with self._lock:
            if (session, uuids) == self._target:
                return
            now = self._wall()
            if session != self._target[0]:
                health: dict[str, DeviceHealth] = {}
                self._xid_times = {}
            else:
                health = dict(self._health)
            for uuid in uuids:
                health.setdefault(uuid, initial_health(now))
            self._health = health
            self._target = (session, uuids)
            self._opened.clear()
        self._changed.set()
        self._interrupt()

    def note_gpu_lost(self, uuid: str, when: float) -> None:
        self._apply(HealthEvent(uuid, "gpu_lost", when, source="nvml-sweep"))

    def note_gpu_answers(self, uuid: str, when: float) -> None:
        """The sweep read the GPU: a GPU that was lost is ready again (logged once)."""
        current = self._health.get(uuid)
        if current is not None and current.lost:
            self._apply(HealthEvent(uuid, "gpu_answers", when, source="nvml-sweep"))

    def note_remapped_rows(self, uuid: str, rows: RemappedRowsReading | None,
                           when: float) -> None:
        """The sweep's remapped rows of the GPU (None: it gave none); a change of the
        condition's status or reason is logged once."""
        before, after = self._update(uuid, lambda h: apply_remapped_rows(h, rows, when))
        old, new = (h.condition(CONDITION_ROW_REMAP) if h is not None else None
                    for h in (before, after))
        if new is not None and new.status != STATUS_TRUE and (
                old is None or (old.status, old.reason) != (new.status, new.reason)):
            log.warning("GPU %s: %s: %s", uuid, new.reason, new.message)

    def _note_events(self, registered: Mapping[str, bool]) -> None:
        """The source registered these GPUs' events: their ECC health is known from now."""
        now = self._wall()
        for uuid, has_events in registered.items():
            if has_events:
                self._update(uuid, lambda h: watch_ecc(h, now))

    def _update(self, uuid: str, change: Callable[[DeviceHealth], DeviceHealth]
                ) -> tuple[DeviceHealth | None, DeviceHealth | None]:
        """The GPU's health before and after ``change`` (None, None: not tracked)."""
        with self._lock:
            current = self._health.get(uuid)
            if current is None:
                return None, None
            updated = change(current)
            if updated is not current and updated != current:
                health = dict(self._health)
                health[uuid] = updated
                self._health = health
            return current, updated

    def wait_opened(self, timeout: float) -> bool:
        """Waits (at most ``timeout`` seconds) until the thread has registered the tracked
        GPUs' events, so that the first snapshot of a session already has the conditions that
        come with them: a GPU's object then does not change (a spurious watch MODIFIED) one
        tick later. At once when the thread is not running."""
        if self._thread is None or not self._thread.is_alive():
            return True
        return self._opened.wait(timeout)

    def _opened_for(self, target: tuple[int, tuple[str, ...]]) -> None:
        with self._lock:
            if target == self._target:
                self._opened.set()

    def health_by_uuid(self) -> Mapping[str, DeviceHealth]:
        return self._health          # replaced, never mutated: safe to read without the lock

    def xid_count_since(self, uuid: str, since: float) -> int:
        times = self._xid_times.get(uuid)
        return sum(1 for t in times if t >= since) if times else 0

    # ------------------------------------------------------------ the thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._changed.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(timeout)

    def _apply(self, event: HealthEvent) -> None:
        with self._lock:
            current = self._health.get(event.device_uuid)
            if current is None:
                return
            updated = apply_event(current, event, self._ignored)
            if event.kind == "xid":
                self._xid_times.setdefault(event.device_uuid, deque(maxlen=10000)).append(
                    event.time)
            changed = updated != current
            if changed:
                health = dict(self._health)
                health[event.device_uuid] = updated
                self._health = health
        if event.kind in ("gpu_lost", "gpu_answers"):
            # States seen by every sweep: logged once per transition, not once per tick.
            if changed:
                log.log(logging.WARNING if event.kind == "gpu_lost" else logging.INFO,
                        "GPU %s: %s", event.device_uuid,
                        "lost (GPU_IS_LOST)" if event.kind == "gpu_lost"
                        else "answers again")
        elif event.kind != "single_bit_ecc":
            log.warning("GPU %s: %s%s", event.device_uuid, event.kind,
                        f" {event.code}" if event.code is not None else "")

    def _run(self) -> None:
        source: EventSource | None = None
        opened_for = None
        backoff = 1.0
        while not self._stop.is_set():
            target = self._target
            if not target[1]:
                if source is not None:
                    source.close()
                    source, opened_for = None, None
                self._opened_for(target)
                self._changed.wait()           # nothing to watch: sleep until track() or stop()
                self._changed.clear()
                continue
            try:
                if source is None or opened_for != target:
                    if source is not None:
                        source.close()
                    source = self._make_source()
                    opened_for = target
                    self._note_events(source.open(target[1]) or {})
                    self._opened_for(target)
                for event in source.wait(self._wait_ms):
                    self._apply(event)
                backoff = 1.0
            except Exception as exc:  # noqa: BLE001 - the thread must outlive any NVML error
                self.errors += 1
                self._opened_for(target)           # what depends on the source stays absent
                self._log_once("wait", logging.WARNING,
                               "NVML event wait failed (%s); retrying in up to %.0f s", exc,
                               self._max_backoff)
                if source is not None:
                    try:
                        source.close()
                    except Exception:  # noqa: BLE001
                        pass
                source, opened_for = None, None
                self._stop.wait(backoff)
                backoff = min(self._max_backoff, backoff * 2)
        if source is not None:
            source.close()
