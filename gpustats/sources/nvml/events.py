"""NVML event sets: XID-critical and ECC events per GPU, as plain HealthEvents."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pynvml

from gpustats.model.health import HealthEvent
from gpustats.sources.nvml.query import error_code

log = logging.getLogger(__name__)

WANTED = (pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeSingleBitEccError
          | pynvml.nvmlEventTypeDoubleBitEccError)


class EventsUnavailable(Exception):
    """The event set cannot be used any more (NVML shut down, driver error)."""


class NvmlEventSource:
    """One event set over the GPUs given to ``open``; ``wait`` returns what arrived."""

    def __init__(self, wall: Callable[[], float] = time.time):
        self._wall = wall
        self._set: Any = None
        self._handles: dict[str, Any] = {}

    def open(self, uuids: tuple[str, ...]) -> dict[str, bool]:
        """Register each GPU for the events it supports; returns uuid → has events."""
        try:
            self._set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            raise EventsUnavailable(f"nvmlEventSetCreate: {exc}") from exc
        supported = {}
        for uuid in uuids:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                mask = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & WANTED
                if mask:
                    pynvml.nvmlDeviceRegisterEvents(handle, mask, self._set)
                    self._handles[uuid] = handle
                supported[uuid] = bool(mask)
            except pynvml.NVMLError as exc:
                supported[uuid] = False
                log.info("GPU %s: no NVML events (%s); health follows the sweep only", uuid, exc)
        return supported

    def wait(self, timeout_ms: int) -> list[HealthEvent]:
        if self._set is None:
            raise EventsUnavailable("event set not open")
        try:
            data = pynvml.nvmlEventSetWait_v2(self._set, timeout_ms)
        except pynvml.NVMLError as exc:
            code = error_code(exc)
            if code == pynvml.NVML_ERROR_TIMEOUT:
                return []
            if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                return self._lost_devices()
            raise EventsUnavailable(f"nvmlEventSetWait: {exc}") from exc
        uuid = self._uuid_of(data.device)
        if uuid is None:
            return []
        now = self._wall()
        if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return [HealthEvent(uuid, "xid", now, int(data.eventData))]
        if data.eventType & pynvml.nvmlEventTypeDoubleBitEccError:
            return [HealthEvent(uuid, "double_bit_ecc", now)]
        if data.eventType & pynvml.nvmlEventTypeSingleBitEccError:
            return [HealthEvent(uuid, "single_bit_ecc", now)]
        return []

    def _uuid_of(self, device: Any) -> str | None:
        try:
            uuid: str | None = pynvml.nvmlDeviceGetUUID(device)
            return uuid
        except pynvml.NVMLError:
            return None

    def _lost_devices(self) -> list[HealthEvent]:
        """The wait said a GPU is lost without saying which: ask each registered one."""
        now = self._wall()
        lost = []
        for uuid, handle in self._handles.items():
            try:
                pynvml.nvmlDeviceGetMinorNumber(handle)
            except pynvml.NVMLError as exc:
                if error_code(exc) == pynvml.NVML_ERROR_GPU_IS_LOST:
                    lost.append(HealthEvent(uuid, "gpu_lost", now))
        return lost

    def close(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError:
                pass
        self._set = None
        self._handles = {}
