"""The simulator's NVML event calls: event sets, XID/ECC delivery on schedule, GPU lost."""

from __future__ import annotations

import ctypes
import time
from ctypes import POINTER, c_ulonglong, c_void_p, cast

import pynvml

from gpustats.simulator.abi import (
    EVENT_DOUBLE_BIT_ECC, EVENT_SINGLE_BIT_ECC, EVENT_XID_CRITICAL, GPU_IS_LOST, INVALID_ARGUMENT,
    NO_INSTANCE, NOT_SUPPORTED, SUCCESS, TIMEOUT, UNINITIALIZED, set_out, struct_at,
)


class EventCalls:
    """Mixin of ``SimulatedNvml``: state lives on the simulator (``_event_sets``, ``_delivered``)."""

    def _new_id(self) -> int:
        self._next_id += 1
        return 0x7000_0000 + self._next_id

    def _event_set_create(self, out) -> int:
        if self._refcount <= 0:
            return UNINITIALIZED
        set_id = self._new_id()
        self._event_sets[set_id] = set()
        set_out(out, c_void_p, set_id)
        return SUCCESS

    def _event_mask(self, device) -> int:
        if not device.events_supported:
            return 0
        mask = EVENT_XID_CRITICAL
        if "ecc" not in device.unsupported:
            mask |= EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC
        return mask

    def _supported_events(self, device, instance, out) -> int:
        mask = self._event_mask(device)
        if not mask:
            return NOT_SUPPORTED
        set_out(out, c_ulonglong, mask)
        return SUCCESS

    def _register_events(self, device, instance, mask, event_set) -> int:
        registered = self._event_sets.get(event_set)
        if registered is None:
            return INVALID_ARGUMENT
        if not (mask & self._event_mask(device)):
            return NOT_SUPPORTED
        registered.add(device.uuid)
        return SUCCESS

    def _due_event(self, registered: set[str]):
        elapsed = self._monotonic() - self._installed_at
        next_due = None
        for position, event in enumerate(self._scenario.xid_events):
            key = hash((event.device, event.kind, event.xid, event.after_seconds, position))
            if key in self._delivered or event.device not in registered:
                continue
            if event.after_seconds <= elapsed:
                return key, event, None
            wait = event.after_seconds - elapsed
            next_due = wait if next_due is None else min(next_due, wait)
        return None, None, next_due

    def _event_wait(self, event_set, data_ptr, timeout_ms) -> int:
        # Called with the lock held by _wrap; it is released while sleeping.
        registered = self._event_sets.get(event_set)
        if registered is None:
            return INVALID_ARGUMENT
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            for uuid in registered:
                device = self._scenario.device(uuid)
                if device is not None and device.lost and uuid not in self._lost_reported:
                    self._lost_reported.add(uuid)
                    return GPU_IS_LOST
            key, event, _ = self._due_event(registered)
            if event is not None:
                self._delivered.add(key)
                device = self._scenario.device(event.device)
                data = struct_at(data_ptr, pynvml.c_nvmlEventData_t)
                cast(ctypes.addressof(data), POINTER(c_void_p))[0] = self._handle_of(device)
                data.eventType = {"xid": EVENT_XID_CRITICAL, "single_bit_ecc": EVENT_SINGLE_BIT_ECC,
                                  "double_bit_ecc": EVENT_DOUBLE_BIT_ECC}[event.kind]
                data.eventData = event.xid if event.kind == "xid" else 0
                data.gpuInstanceId = NO_INSTANCE
                data.computeInstanceId = NO_INSTANCE
                return SUCCESS
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return TIMEOUT
            self._lock.release()
            try:
                time.sleep(min(remaining, 0.05))
            finally:
                self._lock.acquire()
            self._maybe_reload()

    def _event_set_free(self, event_set) -> int:
        return SUCCESS if self._event_sets.pop(event_set, None) is not None else INVALID_ARGUMENT
