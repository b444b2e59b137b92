"""NVSentinel's GpuService over gRPC, served from the device API's snapshots and events.

Consumers (device plugins, DRA drivers): ``ListGpus``, ``GetGpu`` and ``WatchGpus`` read the
same GPU objects as ``/api/v1/gpus`` (``export.gpus``) and the same numbered events
(``export.gpu_events``): a watch begins with an ADDED for every GPU, or resumes after a
``resource_version`` the service gave, then gets MODIFIED and DELETED as they come; an ERROR
ends it when what comes next is no longer kept (list again). Providers (health monitors):
``UpdateGpuStatus`` (and ``UpdateGpu``, for the status it carries) merges a provider's
conditions by type into the GPU's (``engine.provider_health``), ``ABORTED`` when the
``resource_version`` it names is not the GPU's; the daemon's own condition types are its own
(``INVALID_ARGUMENT``). GPUs are the ones the daemon discovers: ``CreateGpu`` and
``DeleteGpu`` answer ``FAILED_PRECONDITION`` for those and ``PERMISSION_DENIED`` (create) or
``NOT_FOUND`` (delete) for any other.

No request does device I/O: each reads the latest snapshot. Bounded: request sizes (the
server's options), condition counts and text lengths, watches (``MAX_WATCHES`` at once, each
ended after 5 to 10 minutes; the server closes connections older than that, so a watcher
that stops reading frees its slot too).
"""

from __future__ import annotations

import calendar
import json
import logging
import random
import re
import threading
import time
from typing import Any, Iterator

import grpc
from google.protobuf import empty_pb2

from gpustats.deviceapi import nvsentinel_gpu_pb2 as pb
from gpustats.deviceapi import nvsentinel_gpu_pb2_grpc as pb_grpc
from gpustats.engine.provider_health import MAX_PROVIDED_TYPES, PROVIDER_SOURCE, \
    ProvidedHealthStore
from gpustats.export.gpu_events import Expired, GpuEventLog, added_lines
from gpustats.export.gpus import gpu_name, gpu_object
from gpustats.model.health import (
    CONDITION_TYPES, STATUS_FALSE, STATUS_TRUE, STATUS_UNKNOWN, Condition,
)
from gpustats.model.snapshot import DeviceStats, Snapshot

log = logging.getLogger(__name__)

MAX_WATCHES = 32
WATCH_SECONDS_MIN, WATCH_SECONDS_MAX = 300, 600
MAX_TEXT = {"type": 316, "reason": 1024, "message": 4096, "recommended_action": 1024}
_TYPE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?\Z")
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z")
_STATUSES = (STATUS_TRUE, STATUS_FALSE, STATUS_UNKNOWN)
ERROR = "ERROR"


class _Refused(Exception):
    """A request answered with a status code and a message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _seconds(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def gpu_message(obj: dict[str, Any]) -> pb.Gpu:
    """A GPU object of the device API (``export.gpus.gpu_object``) as NVSentinel's ``Gpu``."""
    meta = obj["metadata"]
    health = obj.get("health") or {}
    conditions = [pb.Condition(type=c["type"], status=c["status"], reason=c.get("reason") or "",
                               message=c.get("message") or "")
                  for c in health.get("conditions", ())]
    for message, c in zip(conditions, health.get("conditions", ())):
        message.last_transition_time.seconds = _seconds(c["lastTransitionTime"])
    return pb.Gpu(metadata=pb.ObjectMeta(name=meta["name"],
                                         resource_version=meta["resourceVersion"]),
                  spec=pb.GpuSpec(uuid=obj["uuid"]),
                  status=pb.GpuStatus(conditions=conditions,
                                      recommended_action=health.get("recommendedAction", "")),
                  resource_version=int(meta["resourceVersion"]))


def event_message(line: bytes) -> pb.WatchGpusResponse:
    """One event line of the log as a ``WatchGpusResponse``."""
    event = json.loads(line)
    if event["type"] == ERROR:
        return pb.WatchGpusResponse(type=ERROR)
    return pb.WatchGpusResponse(type=event["type"], object=gpu_message(event["object"]))


def _text(field: str, value: str, pattern: re.Pattern[str] | None = None) -> str:
    if len(value) > MAX_TEXT[field]:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                       f"{field} is longer than {MAX_TEXT[field]} characters")
    if pattern is not None and value and not pattern.match(value):
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"{field} {value[:64]!r} is malformed")
    return value


def provided_conditions(status: pb.GpuStatus) -> tuple[tuple[Condition, ...], str]:
    """A provider's conditions and recommended action, checked (``_Refused`` says why not)."""
    if len(status.conditions) > MAX_PROVIDED_TYPES:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                       f"at most {MAX_PROVIDED_TYPES} conditions per GPU")
    out = []
    for c in status.conditions:
        kind = _text("type", c.type, _TYPE)
        if not kind:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "a condition needs a type")
        if kind in CONDITION_TYPES:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                           f"{kind} is the daemon's own condition; a provider sets others")
        if c.status not in _STATUSES:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                           "a condition's status is True, False or Unknown")
        when = c.last_transition_time.seconds + c.last_transition_time.nanos / 1e9 \
            if c.HasField("last_transition_time") else 0.0
        out.append(Condition(kind, c.status, _text("reason", c.reason, _REASON),
                             _text("message", c.message), when, PROVIDER_SOURCE))
    if len({c.type for c in out}) != len(out):
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "a condition type is given twice")
    return tuple(out), _text("recommended_action", status.recommended_action)


class GpuService(pb_grpc.GpuServiceServicer):
    """The servicer: every answer from ``store``'s latest snapshot and ``events``."""

    def __init__(self, store: ProvidedHealthStore, events: GpuEventLog,
                 max_watches: int = MAX_WATCHES) -> None:
        self._store = store
        self._events = events
        self._slots = threading.BoundedSemaphore(max_watches)
        self._changed = threading.Condition()
        self._generation = 0
        self._provide_lock = threading.Lock()
        events.listen(self._notify)

    def _notify(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    # ------------------------------------------------------------------ reads

    def _snapshot(self) -> Snapshot:
        snapshot = self._store.latest()
        if snapshot is None:
            raise _Refused(grpc.StatusCode.UNAVAILABLE, "no collection tick has completed yet")
        return snapshot

    @staticmethod
    def _device(snapshot: Snapshot, name: str) -> DeviceStats | None:
        for device in snapshot.devices:
            if name in (device.identity.uuid, gpu_name(device.identity.uuid)):
                return device
        return None

    def _gpu(self, snapshot: Snapshot, device: DeviceStats) -> pb.Gpu:
        return gpu_message(gpu_object(device, self._events.observe(snapshot)))

    def ListGpus(self, request, context):
        return _answer(context, lambda: self._list())

    def _list(self) -> pb.ListGpusResponse:
        snapshot = self._snapshot()
        versions = self._events.observe(snapshot)
        seen: set[str] = set()
        items = []
        for device in snapshot.devices:
            if device.identity.uuid not in seen:
                seen.add(device.identity.uuid)
                items.append(gpu_message(gpu_object(device, versions)))
        return pb.ListGpusResponse(gpu_list=pb.GpuList(
            metadata=pb.ListMeta(resource_version=str(versions.revision)), items=items))

    def GetGpu(self, request, context):
        return _answer(context, lambda: self._get(request.name))

    def _get(self, name: str) -> pb.GetGpuResponse:
        snapshot = self._snapshot()
        device = self._device(snapshot, name)
        if device is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, "no GPU has this name or UUID")
        return pb.GetGpuResponse(gpu=self._gpu(snapshot, device))

    def WatchGpus(self, request, context) -> Iterator[pb.WatchGpusResponse]:
        if not self._slots.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          "every watch slot is taken; try again later")
        try:
            try:
                first, cursor = self._watch_start(request.opts.resource_version)
            except _Refused as refused:
                context.abort(refused.code, str(refused))
            ends_at = time.monotonic() + random.uniform(  # nosec B311: jitter
                WATCH_SECONDS_MIN, WATCH_SECONDS_MAX)
            yield from (event_message(line) for line in first)
            while context.is_active() and time.monotonic() < ends_at:
                with self._changed:
                    generation = self._generation
                try:
                    lines, cursor = self._events.replay(cursor)
                except Expired:
                    yield pb.WatchGpusResponse(type=ERROR)
                    return
                yield from (event_message(line) for line in lines)
                self._wait_past(generation, 1.0)
        finally:
            self._slots.release()

    def _wait_past(self, generation: int, timeout: float) -> None:
        """Until the log made events after ``generation`` (or ``timeout`` seconds)."""
        with self._changed:
            self._changed.wait_for(lambda: self._generation != generation, timeout)

    def _watch_start(self, version: str) -> tuple[list[bytes], int]:
        """The first event lines of a watch and the version they reach."""
        snapshot = self._snapshot()
        if version in ("", "0"):
            versions = self._events.observe(snapshot)
            return list(added_lines(snapshot, versions)), versions.revision
        if not (version.isascii() and version.isdigit() and len(version) <= 20):
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT,
                           "resource_version is a version this service gave")
        try:
            return self._events.replay(int(version))
        except Expired:
            raise _Refused(grpc.StatusCode.OUT_OF_RANGE,
                           f"the events after {version} are no longer kept (or it is not a "
                           "version of this run); list again and watch from the list's "
                           "version") from None

    # ------------------------------------------------------------------ providers

    def UpdateGpuStatus(self, request, context):
        return _answer(context, lambda: pb.UpdateGpuStatusResponse(gpu=self._update(
            request.name, request.status, request.resource_version)))

    def UpdateGpu(self, request, context):
        gpu = request.gpu
        return _answer(context, lambda: pb.UpdateGpuResponse(gpu=self._update(
            gpu.metadata.name, gpu.status, gpu.resource_version, gpu.spec.uuid)))

    def _update(self, name: str, status: pb.GpuStatus, version: int, uuid: str = "") -> pb.Gpu:
        conditions, action = provided_conditions(status)
        with self._provide_lock:
            snapshot = self._snapshot()
            device = self._device(snapshot, name)
            if device is None:
                raise _Refused(grpc.StatusCode.NOT_FOUND, "no GPU has this name or UUID")
            if uuid and uuid != device.identity.uuid:
                raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                               "a GPU's spec is what the daemon discovers")
            current = self._events.observe(snapshot).objects.get(device.identity.uuid)
            if version and version != current:
                raise _Refused(grpc.StatusCode.ABORTED,
                               f"resource_version {version} is not the GPU's ({current})")
            try:
                updated = self._store.provide(device.identity.uuid, conditions, action)
            except ValueError as exc:
                raise _Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        log.debug("device API: a provider set %s on %s",
                 ", ".join(f"{c.type}={c.status}" for c in conditions) or "no condition",
                 device.identity.uuid)
        snapshot = updated or snapshot
        found = self._device(snapshot, device.identity.uuid)
        return self._gpu(snapshot, found or device)

    def CreateGpu(self, request, context):
        return _answer(context, lambda: self._refuse_lifecycle(
            request.gpu.metadata.name or request.gpu.spec.uuid, grpc.StatusCode.PERMISSION_DENIED))

    def DeleteGpu(self, request, context):
        return _answer(context, lambda: self._refuse_lifecycle(
            request.name, grpc.StatusCode.NOT_FOUND))

    def _refuse_lifecycle(self, name: str, otherwise: grpc.StatusCode) -> empty_pb2.Empty:
        """GPUs come and go as the daemon discovers them, never by a provider's word."""
        if self._device(self._snapshot(), name) is not None:
            raise _Refused(grpc.StatusCode.FAILED_PRECONDITION,
                           "this GPU is discovered by the daemon; providers set its status")
        raise _Refused(otherwise, "GPUs are discovered by the daemon, not registered")


def _answer(context, build):
    """``build()``, or the status it was refused with."""
    try:
        return build()
    except _Refused as refused:
        context.abort(refused.code, str(refused))

