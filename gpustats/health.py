"""GPU health conditions (pure): NVML events in, DeviceHealth out.

One condition, ``NVMLReady``, in the NVSentinel model {type, status, reason, message,
lastTransitionTime, source}. It turns False on a critical XID (any XID not on the ignore list,
999 "unknown" included), a double-bit ECC error, or GPU_IS_LOST, and stays False until the
NVML session is re-initialised (the driver does not heal these without a reset). Application
XIDs on the ignore list and single-bit ECC errors are counted and leave health unchanged.
A GPU is healthy when every condition is True.
"""

from __future__ import annotations

from dataclasses import replace

from gpustats.model.health import (
    CONDITION_NVML_READY, STATUS_FALSE, STATUS_TRUE, STATUS_UNKNOWN, XID_DESCRIPTIONS, Condition,
    DeviceHealth, HealthEvent,
)

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def xid_message(code: int | None) -> str:
    description = XID_DESCRIPTIONS.get(code) if code is not None else None
    return f"XID {code} ({description})" if description else f"XID {code}"


def initial_health(now: float, source: str = "nvml") -> DeviceHealth:
    return DeviceHealth(conditions=(Condition(CONDITION_NVML_READY, STATUS_TRUE, "NVMLReady",
                                              "NVML answers for this GPU", now, source),))


def unknown_health(now: float, reason: str, message: str) -> DeviceHealth:
    return DeviceHealth(conditions=(Condition(CONDITION_NVML_READY, STATUS_UNKNOWN, reason,
                                              message, now, "nvml"),))


def _set(health: DeviceHealth, status: str, reason: str, message: str, now: float,
         source: str) -> DeviceHealth:
    conditions = []
    for c in health.conditions:
        if c.type == CONDITION_NVML_READY:
            if c.status == STATUS_FALSE and status == STATUS_FALSE:
                conditions.append(c)         # sticky: keep the first cause and its time
                continue
            when = c.last_transition_time if c.status == status else now
            c = Condition(c.type, status, reason, message, when, source)
        conditions.append(c)
    return replace(health, conditions=tuple(conditions))


def apply_event(health: DeviceHealth, event: HealthEvent,
                ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS) -> DeviceHealth:
    """The health after one event. Every XID is counted, ignored ones included."""
    if event.kind == "xid":
        health = replace(health, xid_error_count=health.xid_error_count + 1,
                         last_xid=event.code)
        if event.code in ignored_xids:
            return health
        return _set(health, STATUS_FALSE, "XidError", xid_message(event.code), event.time,
                    event.source)
    if event.kind == "double_bit_ecc":
        health = replace(health, double_bit_ecc_count=health.double_bit_ecc_count + 1)
        return _set(health, STATUS_FALSE, "DoubleBitEcc", "double-bit ECC error", event.time,
                    event.source)
    if event.kind == "single_bit_ecc":
        return replace(health, single_bit_ecc_count=health.single_bit_ecc_count + 1)
    if event.kind == "gpu_lost":
        return _set(health, STATUS_FALSE, "GpuLost",
                    "GPU_IS_LOST: the GPU has fallen off the bus or is inaccessible",
                    event.time, event.source)
    return health
