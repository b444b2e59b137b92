"""Conditions that health providers set over the device API, merged into every snapshot.

NVSentinel's model: a GPU's status is a list of conditions by type. The daemon sets its own
(``NVMLReady``, ``EccHealth``, ``RowRemapHealth``, ``Ready``); a provider (a DCGM health
watcher, NVSentinel's monitors) sets others through ``UpdateGpuStatus``. Their conditions are
kept here, per GPU, merged by type with what each provider set before, and merged into the
daemon's own on every snapshot published, ``Ready`` worked out over all of them; so
``/api/v1/gpus``, the page, ``/metrics`` and the gRPC service show them alike.

``ProvidedHealthStore`` is the snapshot store that does it: the collector publishes its
snapshot, and a provider's change republishes the last one at once with a new sequence, so
watchers hear of it within the request, not at the next tick. Nothing here does I/O. Bounded:
at most ``MAX_PROVIDED_TYPES`` provider condition types per GPU, ``MAX_GPUS`` GPUs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable

from gpustats.engine.store import SnapshotStore
from gpustats.health import aggregate
from gpustats.model.health import CONDITION_READY, Condition, DeviceHealth
from gpustats.model.record import record
from gpustats.model.snapshot import DeviceStats, Snapshot

MAX_PROVIDED_TYPES = 16
MAX_GPUS = 256
PROVIDER_SOURCE = "device-api"


@record
class Provided:
    """What providers set on one GPU: their conditions (one per type) and the recommended
    action of the last update (None: none)."""

    conditions: tuple[Condition, ...] = ()
    recommended_action: str | None = None


def merge_conditions(old: tuple[Condition, ...], new: tuple[Condition, ...], now: float
                     ) -> tuple[Condition, ...]:
    """``old`` with each condition of ``new`` put in by type; a condition whose status did
    not change keeps its transition time unless the provider gave one."""
    by_type = {c.type: c for c in old}
    for c in new:
        before = by_type.get(c.type)
        when = c.last_transition_time
        if when <= 0:
            when = before.last_transition_time if before is not None and \
                before.status == c.status else now
        by_type[c.type] = replace(c, last_transition_time=when)
    return tuple(by_type.values())


class ProvidedHealthStore(SnapshotStore):
    """A snapshot store whose snapshots carry the providers' conditions beside the daemon's."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._wall = wall
        self._lock = threading.Lock()
        self._provided: dict[str, Provided] = {}
        self._ready: dict[str, Condition] = {}          # the merged Ready, per GPU
        self._base: Snapshot | None = None
        self._sequence = 0
        self._republished: list[Callable[[Snapshot], object]] = []

    def on_republish(self, callback: Callable[[Snapshot], object]) -> None:
        """``callback(snapshot)`` after a provider's change republished the snapshot."""
        self._republished.append(callback)

    def publish(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._base = snapshot
            self._publish_locked()

    def provide(self, uuid: str, conditions: tuple[Condition, ...],
                recommended_action: str | None) -> Snapshot | None:
        """A provider's conditions on GPU ``uuid`` merged by type into those set before, its
        recommended action kept; the snapshot republished with them. ValueError past the
        bounds."""
        with self._lock:
            old = self._provided.get(uuid, Provided())
            merged = merge_conditions(old.conditions, conditions, self._wall())
            if len(merged) > MAX_PROVIDED_TYPES:
                raise ValueError(f"at most {MAX_PROVIDED_TYPES} provider condition types "
                                 "per GPU")
            if uuid not in self._provided and len(self._provided) >= MAX_GPUS:
                raise ValueError(f"conditions are kept for at most {MAX_GPUS} GPUs")
            self._provided[uuid] = Provided(merged, recommended_action or None)
            snapshot = self._publish_locked()
        if snapshot is not None:
            for callback in self._republished:
                callback(snapshot)
        return snapshot

    def _publish_locked(self) -> Snapshot | None:
        base = self._base
        if base is None:
            return None
        self._sequence = max(base.sequence, self._sequence + 1)
        if self._provided:
            snapshot = replace(base, sequence=self._sequence,
                               devices=tuple(self._merged(d) for d in base.devices))
        elif base.sequence != self._sequence:
            snapshot = replace(base, sequence=self._sequence)
        else:
            snapshot = base
        super().publish(snapshot)
        return snapshot

    def _merged(self, device: DeviceStats) -> DeviceStats:
        uuid = device.identity.uuid
        provided = self._provided.get(uuid)
        if provided is None:
            return device
        health = device.health or DeviceHealth(())
        own = tuple(c for c in health.conditions if c.type != CONDITION_READY)
        names = {c.type for c in own}
        conditions = own + tuple(c for c in provided.conditions if c.type not in names)
        ready = aggregate(conditions, self._ready.get(uuid) or health.condition(CONDITION_READY),
                          self._wall())
        self._ready[uuid] = ready
        return replace(device, health=replace(
            health, conditions=(*conditions, ready),
            recommended_action=provided.recommended_action))
