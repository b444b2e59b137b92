"""The simulator's NVML event calls: event sets, XID/ECC delivery on schedule, GPU lost, and
MIG configuration changes (a reloaded scenario whose ``mig_instances`` differ)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading
    from typing import Any
    from collections.abc import Callable

    from gpustats.simulator.scenario import Scenario, SimDevice, SimMigInstance


import ctypes
import time
from ctypes import c_ulonglong, c_void_p

import pynvml

from gpustats.simulator.abi import (
    EVENT_DOUBLE_BIT_ECC, EVENT_MIG_CONFIG_CHANGE, EVENT_SINGLE_BIT_ECC, EVENT_XID_CRITICAL,
    GPU_IS_LOST, INVALID_ARGUMENT, NO_INSTANCE, NOT_SUPPORTED, SUCCESS, TIMEOUT, UNINITIALIZED,
    set_out, struct_at,
)

_KIND_BITS = {"xid": EVENT_XID_CRITICAL, "single_bit_ecc": EVENT_SINGLE_BIT_ECC,
              "double_bit_ecc": EVENT_DOUBLE_BIT_ECC}


def mig_layout(device: SimDevice) -> tuple[object, ...]:
    """What a MIG configuration change event is about: the instances and their identities."""
    return tuple((m.gpu_instance_id, m.compute_instance_id, m.profile, m.uuid)
                 for m in device.mig_instances)


class EventCalls:
    """Mixin of ``SimulatedNvml``: state lives on the simulator (``_event_sets``, ``_delivered``,
    ``_mig_changes``, ``_lost_reported``)."""

    if TYPE_CHECKING:   # the simulator's state and helpers this mixin uses (library.py)
        _next_id: int
        _refcount: int
        _event_sets: dict[int, dict[str, int]]
        _mig_changes: dict[int, list[str]]
        _monotonic: Callable[[], float]
        _installed_at: float
        _scenario: Scenario
        _delivered: set[int]
        _lost_reported: set[tuple[int, str]]
        _waits_interrupted: bool
        _wake: threading.Condition

        def _maybe_reload(self) -> None: ...
        def _handle_of(self, device: SimDevice, instance: SimMigInstance | None = None) -> int: ...


    def _new_id(self) -> int:
        self._next_id += 1
        return 0x7000_0000 + self._next_id

    def _event_set_create(self, out: int) -> int:
        if self._refcount <= 0:
            return UNINITIALIZED
        set_id = self._new_id()
        self._event_sets[set_id] = {}
        self._mig_changes[set_id] = []
        set_out(out, c_void_p, set_id)
        return SUCCESS

    def _event_mask(self, device: SimDevice) -> int:
        if not device.events_supported:
            return 0
        mask = EVENT_XID_CRITICAL
        if "ecc" not in device.unsupported:
            mask |= EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC
        if "mig_events" not in device.unsupported:
            mask |= EVENT_MIG_CONFIG_CHANGE
        return mask

    def _supported_events(self, device: SimDevice, instance: SimMigInstance | None,
                          out: int) -> int:
        mask = self._event_mask(device)
        if not mask:
            return NOT_SUPPORTED
        set_out(out, c_ulonglong, mask)
        return SUCCESS

    def _register_events(self, device: SimDevice, instance: SimMigInstance | None, mask: int,
                         event_set: int) -> int:
        registered = self._event_sets.get(event_set)
        if registered is None:
            return INVALID_ARGUMENT
        wanted = mask & self._event_mask(device)
        if not wanted:
            return NOT_SUPPORTED
        registered[device.uuid] = registered.get(device.uuid, 0) | wanted
        return SUCCESS

    def _note_mig_changes(self, old: Scenario, new: Scenario) -> None:
        """Called on a scenario reload: queue a MIG configuration change event, in every set
        registered for it, for each GPU whose MIG layout differs."""
        for device in new.devices:
            before = old.device(device.uuid)
            if before is None or mig_layout(before) == mig_layout(device):
                continue
            for set_id, registered in self._event_sets.items():
                if registered.get(device.uuid, 0) & EVENT_MIG_CONFIG_CHANGE:
                    self._mig_changes[set_id].append(device.uuid)

    def _due_event(self, registered: dict[str, int]):   # (key, event, None) or (None, None, wait)
        elapsed = self._monotonic() - self._installed_at
        next_due = None
        for position, event in enumerate(self._scenario.xid_events):
            key = hash((event.device, event.kind, event.xid, event.after_seconds, position))
            wanted = registered.get(event.device, 0) & _KIND_BITS[event.kind]
            if key in self._delivered or not wanted:
                continue
            if event.after_seconds <= elapsed:
                return key, event, None
            wait = event.after_seconds - elapsed
            next_due = wait if next_due is None else min(next_due, wait)
        return None, None, next_due

    def _event_wait(self, event_set: int, data_ptr: int, timeout_ms: int) -> int:
        """Blocks, as the driver does, until an event is there or the timeout passes: woken by a
        scenario reload (a lost GPU, a queued MIG change) or when the next XID falls due."""
        # Called with the lock held by _wrap; waiting on _wake releases it.
        registered = self._event_sets.get(event_set)
        if registered is None:
            return INVALID_ARGUMENT
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            for uuid in registered:
                device = self._scenario.device(uuid)
                if device is not None and device.lost \
                        and (event_set, uuid) not in self._lost_reported:
                    self._lost_reported.add((event_set, uuid))
                    return GPU_IS_LOST
            changes = self._mig_changes.get(event_set)
            if changes:
                device = self._scenario.device(changes.pop(0))
                if device is not None:
                    self._fill_event(data_ptr, device, EVENT_MIG_CONFIG_CHANGE, 0)
                    return SUCCESS
                continue
            key, event, next_due = self._due_event(registered)
            if event is not None:
                self._delivered.add(key)
                self._fill_event(data_ptr, self._scenario.device(event.device),
                                 _KIND_BITS[event.kind], event.xid if event.kind == "xid" else 0)
                return SUCCESS
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return TIMEOUT
            if self._waits_interrupted:
                self._waits_interrupted = False
                return TIMEOUT
            # The due time is on the simulator's clock; an injected clock that does not move
            # with real time only makes this wake, look again and wait out the deadline.
            self._wake.wait(remaining if next_due is None else min(remaining, next_due))
            self._maybe_reload()

    def interrupt_event_waits(self) -> None:
        """Makes the blocking event wait in progress, or the next one to block, return TIMEOUT
        now: the daemon's stop and a change of the GPUs watched need not wait out a slice.
        A real driver offers no such call, so there the daemon keeps its slices short."""
        with self._wake:
            self._waits_interrupted = True
            self._wake.notify_all()

    def _fill_event(self, data_ptr: int, device: SimDevice | Any, event_type: int,
                    event_data: int) -> None:
        # Any: an XID event's device is looked up by the UUID the scenario gave it.
        data = struct_at(data_ptr, pynvml.c_nvmlEventData_t)
        set_out(ctypes.addressof(data), c_void_p, self._handle_of(device))   # .device, first
        data.eventType = event_type
        data.eventData = event_data
        data.gpuInstanceId = NO_INSTANCE
        data.computeInstanceId = NO_INSTANCE

    def _event_set_free(self, event_set: int) -> int:
        self._mig_changes.pop(event_set, None)
        return SUCCESS if self._event_sets.pop(event_set, None) is not None else INVALID_ARGUMENT
