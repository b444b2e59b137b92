"""The device API's watch: each GPU's object diffed snapshot to snapshot into versioned events.

NVSentinel's GpuService (``WatchGpus``) and Kubernetes watches: every change of a GPU's object
is an event, ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": <gpu>}``, numbered by a
resource version that only grows (an etcd-like revision: one counter for all GPUs). An
object's ``metadata.resourceVersion`` is the event that last changed it; a list's
``resourceVersion`` is the last event as of its snapshot. Only what ``gpus.versioned_part``
keeps is compared (everything but saturation), as JSON, so a key or condition type added to
the object later is watched without a change here.

Events are made once per snapshot (``observe``: on the tick, and idempotently by the first
request that sees a snapshot the tick has not observed yet), their lines rendered once and
shared by every watch. The log keeps the last ``EVENT_CAPACITY`` events and at most
``EVENT_BYTES`` of them; a watch from a version older than that is ``Expired`` (410: list
again). Versions start at the daemon's start time in microseconds, so a version from an
earlier run is older than every event of this one and is refused rather than misread.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from typing import Any, Callable

from gpustats.export.gpus import GpuVersions, gpu_dict, gpu_object, versioned_part, with_metadata
from gpustats.export.text import json_bytes
from gpustats.model.snapshot import Snapshot

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
EVENT_CAPACITY = 1000                 # events kept for watches that resume from a version
EVENT_BYTES = 2 * 1024 * 1024         # and at most this much of their lines
_RECORDED_SNAPSHOTS = 32              # versions kept per snapshot, for a late list render


class Expired(Exception):
    """A resource version whose later events are no longer kept (or that this run never
    made): the client lists again and watches from the list's version."""


def event_line(kind: str, obj: dict[str, Any]) -> bytes:
    """One watch event as a line of JSON."""
    return json_bytes({"type": kind, "object": obj}) + b"\n"


def bookmark_line(revision: int) -> bytes:
    """A BOOKMARK: nothing changed up to ``revision`` (Kubernetes' watch bookmark)."""
    return event_line("BOOKMARK", {"metadata": {"resourceVersion": str(revision)}})


def expired_line(revision: int) -> bytes:
    """The ERROR event that ends a watch whose next events are no longer kept."""
    return event_line("ERROR", {"code": 410, "error": "expired", "message":
                                f"events after resourceVersion {revision} are no longer "
                                "kept; list again and watch from the list's resourceVersion"})


def _key(item: dict[str, Any]) -> bytes:
    return json.dumps(versioned_part(item), sort_keys=True, separators=(",", ":")).encode()


class GpuEventLog:
    """The events of every GPU's object, numbered, the latest kept in memory."""

    def __init__(self, capacity: int = EVENT_CAPACITY, max_bytes: int = EVENT_BYTES,
                 first_revision: int | None = None) -> None:
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._revision = time.time_ns() // 1000 if first_revision is None else first_revision
        self._compacted = self._revision          # events up to this one are gone
        self._events: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        self._keys: dict[str, bytes] = {}         # uuid -> its versioned part, as JSON
        self._items: dict[str, dict[str, Any]] = {}         # uuid -> its last object (for DELETED)
        self._versions = GpuVersions(self._revision, {})
        self._recorded: deque[tuple[int, GpuVersions]] = deque(maxlen=_RECORDED_SNAPSHOTS)
        self._listeners: list[Callable[[], None]] = []

    def listen(self, callback: Callable[[], None]) -> None:
        """``callback()`` after each snapshot that made events (in the observing thread)."""
        self._listeners.append(callback)

    @property
    def revision(self) -> int:
        return self._revision

    def observe(self, snapshot: Snapshot) -> GpuVersions:
        """The versions as of ``snapshot``, diffing it into events the first time it is seen."""
        with self._lock:
            if self._recorded and snapshot.sequence <= self._recorded[-1][0]:
                return self._versions_at(snapshot.sequence)
            before = self._revision
            objects = self._diff(snapshot)
            if self._revision != before:
                self._versions = GpuVersions(self._revision, objects)
            versions = self._versions
            self._recorded.append((snapshot.sequence, versions))
        if versions.revision != before:
            for callback in self._listeners:
                callback()
        return versions

    def _versions_at(self, sequence: int) -> GpuVersions:
        """The versions of an older snapshot (one rendered after a newer one was observed):
        those of the newest observed at or before it; a watch from them replays the rest."""
        found = None
        for seen, versions in self._recorded:
            if seen > sequence:
                break
            found = versions
        if found is None:                          # older than every snapshot kept
            return GpuVersions(self._compacted, {})
        return found

    def _diff(self, snapshot: Snapshot) -> dict[str, int]:
        """Emits the events from the last snapshot observed to ``snapshot``; each GPU's
        version after them."""
        seen: set[str] = set()
        objects = dict(self._versions.objects)
        for device in snapshot.devices:
            uuid = device.identity.uuid
            if uuid in seen:
                continue
            seen.add(uuid)
            item = gpu_dict(device)
            key = _key(item)
            before = self._keys.get(uuid)
            if before == key:
                continue
            self._emit(ADDED if before is None else MODIFIED, item)
            self._keys[uuid], self._items[uuid], objects[uuid] = key, item, self._revision
        for uuid in [u for u in self._keys if u not in seen]:
            self._emit(DELETED, self._items.pop(uuid))
            del self._keys[uuid], objects[uuid]
        return objects

    def _emit(self, kind: str, item: dict[str, Any]) -> None:
        self._revision += 1
        line = event_line(kind, with_metadata(item, self._revision))
        self._events.append((self._revision, line))
        self._bytes += len(line)
        while len(self._events) > self._capacity or self._bytes > self._max_bytes:
            revision, dropped = self._events.popleft()
            self._bytes -= len(dropped)
            self._compacted = revision

    def replay(self, after: int) -> tuple[list[bytes], int]:
        """The lines of every event after version ``after``, and the version they reach;
        ``Expired`` when some of them are no longer kept or ``after`` is not of this run."""
        with self._lock:
            if not self._compacted <= after <= self._revision:
                raise Expired(after)
            # Versions are consecutive: the first event kept is ``_compacted + 1``.
            lines = [line for _, line in itertools.islice(self._events,
                                                          after - self._compacted, None)]
            return lines, self._revision


def added_lines(snapshot: Snapshot, versions: GpuVersions) -> tuple[bytes, ...]:
    """An ADDED event for every GPU of ``snapshot``: how a watch without a version begins."""
    seen: set[str] = set()
    lines = []
    for device in snapshot.devices:
        if device.identity.uuid not in seen:
            seen.add(device.identity.uuid)
            lines.append(event_line(ADDED, gpu_object(device, versions)))
    return tuple(lines)


class GpuWatch:
    """One watch's place in the log: the lines it is sent next (``take``), as the serving
    loop's watch streams ask for them, until ``ends_at`` (monotonic seconds)."""

    __slots__ = ("_log", "_first", "_cursor", "ends_at")

    def __init__(self, log: GpuEventLog, first: list[bytes] | tuple[bytes, ...], cursor: int,
                 ends_at: float) -> None:
        self._log = log
        self._first: list[bytes] | None = list(first)
        self._cursor = cursor
        self.ends_at = ends_at

    def take(self) -> tuple[list[bytes], bool]:
        """The lines not sent yet (the first call: the initial ones too), and whether the
        stream is over: an ERROR when the log no longer holds what comes next."""
        lines, self._first = self._first or [], None
        try:
            later, self._cursor = self._log.replay(self._cursor)
        except Expired:
            return [*lines, expired_line(self._cursor)], True
        return lines + later if lines else later, False

    def bookmark(self) -> bytes:
        return bookmark_line(self._cursor)
