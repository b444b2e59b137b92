"""GPU health conditions (pure): NVML events and the sweep in, DeviceHealth out.

Conditions in the NVSentinel model {type, status, reason, message, lastTransitionTime,
source}; each is True when healthy. ``lastTransitionTime`` changes only when a condition's
status does; ``source`` says who set it last (``nvml-events``, ``nvml-sweep``, ``gpustats``).

- ``NVMLReady``: False on a critical XID (any XID not on the ignore list, 999 "unknown"
  included; the message names the latest), a double-bit ECC error, or GPU_IS_LOST. XID and
  ECC causes stay False until the NVML session is re-initialised (the driver does not heal
  these without a reset); a lost GPU that answers again turns True, with a new transition
  time. Application XIDs on the ignore list and single-bit ECC errors are counted and leave
  health unchanged.
- ``EccHealth``: False (``VolatileDoubleBitEcc``) once a double-bit ECC event arrived since
  NVML was initialised, as the driver's volatile count; present for GPUs whose events are
  registered, or that reported one.
- ``RowRemapHealth``: from the sweep's remapped rows (Ampere+): False with ``RowRemapFailure``
  (no spare row left) or ``RowRemapPending`` (a remapping waits for the next GPU reset);
  absent where the GPU gives no remapped rows.
- AMD and Intel GPUs (no NVML): from the kernel's files (``kernel_health``), source
  ``kernel-sysfs``. ``RasHealth``: False (``UncorrectableRasErrors``) once amdgpu counts an
  uncorrectable RAS error; ``RetiredPagesHealth``: False while VRAM pages wait to be retired
  (``RetiredPagePending``) or could not be (``RetiredPageFailure``); ``ResetHealth``: False
  while the driver holds a captured hang (i915's error state, ``GpuHang``) or a device
  coredump waits to be read (``DeviceCoredump``: a hang or reset); ``PciBusHealth``: False
  (``GpuOffBus``) while the device's PCI config space reads all ones (fallen off the bus, or
  wedged). Each is absent where its file is not there (a card without RAS, an unreadable
  error state).
- ``Ready``: computed from all the others, True only when every other is True, False when
  any is False, else Unknown.

A GPU is healthy when every condition is True.
"""

from __future__ import annotations

from dataclasses import replace

from gpustats.model.device import RemappedRowsReading
from gpustats.model.health import (
    CONDITION_BUS, CONDITION_ECC, CONDITION_NVML_READY, CONDITION_RAS, CONDITION_READY,
    CONDITION_RESET, CONDITION_RETIRED_PAGES, CONDITION_ROW_REMAP, RECENT_XIDS_CAP,
    STATUS_FALSE, STATUS_TRUE, STATUS_UNKNOWN, XID_DESCRIPTIONS, XID_OTHER, XID_SERIES_CAP,
    XID_WINDOW_SECONDS, Condition, DeviceHealth, HealthEvent, KernelHealthReading,
)

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
AGGREGATE_SOURCE = "gpustats"
# The order conditions are listed in: NVMLReady first, as before the others existed.
_ORDER = {CONDITION_NVML_READY: 0, CONDITION_ECC: 1, CONDITION_ROW_REMAP: 2, CONDITION_RAS: 3,
          CONDITION_RETIRED_PAGES: 4, CONDITION_RESET: 5, CONDITION_BUS: 6}
KERNEL_SOURCE = "kernel-sysfs"


def xid_message(code: int | None) -> str:
    description = XID_DESCRIPTIONS.get(code) if code is not None else None
    return f"XID {code} ({description})" if description else f"XID {code}"


def initial_health(now: float, source: str = "nvml") -> DeviceHealth:
    return _with_ready(DeviceHealth(conditions=(Condition(
        CONDITION_NVML_READY, STATUS_TRUE, "NVMLReady", "NVML answers for this GPU", now,
        source),)), now)


def unknown_health(now: float, reason: str, message: str) -> DeviceHealth:
    return _with_ready(DeviceHealth(conditions=(Condition(
        CONDITION_NVML_READY, STATUS_UNKNOWN, reason, message, now, "nvml"),)), now)


def _transition(old: Condition | None, type_: str, status: str, reason: str, message: str,
                now: float, source: str) -> Condition:
    """The condition now: ``old`` itself when nothing changed; its transition time kept
    unless the status changed."""
    if old is not None and (old.status, old.reason, old.message) == (status, reason, message):
        return old
    when = old.last_transition_time if old is not None and old.status == status else now
    return Condition(type_, status, reason, message, when, source)


def _put(health: DeviceHealth, condition: Condition | None, type_: str, now: float
         ) -> DeviceHealth:
    """``health`` with its condition of ``type_`` replaced by ``condition`` (None: removed),
    and ``Ready`` worked out again; the same object when nothing changed."""
    old = health.condition(type_)
    if condition is old:
        return health
    others = [c for c in health.conditions if c.type not in (type_, CONDITION_READY)]
    if condition is not None:
        others.append(condition)
    others.sort(key=lambda c: _ORDER.get(c.type, len(_ORDER)))
    ready = health.condition(CONDITION_READY)
    return _with_ready(replace(health, conditions=(*others, *(
        (ready,) if ready is not None else ()))), now)


def aggregate(conditions: tuple[Condition, ...], old: Condition | None, now: float
              ) -> Condition:
    """``Ready`` from the other conditions: True when every one is True, False when any is
    False (its reason the first False one's), else Unknown (NVSentinel's IsHealthy)."""
    others = [c for c in conditions if c.type != CONDITION_READY]
    false = [c for c in others if c.status == STATUS_FALSE]
    unknown = [c for c in others if c.status == STATUS_UNKNOWN]
    if false:
        status, reason = STATUS_FALSE, false[0].reason
        message = "; ".join(f"{c.type} is False ({c.reason})" for c in false)
    elif unknown:
        status, reason = STATUS_UNKNOWN, unknown[0].reason
        message = "; ".join(f"{c.type} is Unknown ({c.reason})" for c in unknown)
    else:
        status, reason, message = STATUS_TRUE, "Ready", "every condition is True"
    return _transition(old, CONDITION_READY, status, reason, message, now, AGGREGATE_SOURCE)


def _with_ready(health: DeviceHealth, now: float) -> DeviceHealth:
    old = health.condition(CONDITION_READY)
    ready = aggregate(health.conditions, old, now)
    if ready is old:
        return health
    return replace(health, conditions=(
        *(c for c in health.conditions if c.type != CONDITION_READY), ready))


def _nvml_ready(health: DeviceHealth, now: float, source: str) -> DeviceHealth:
    """NVMLReady from what the GPU reported: a critical XID first (the latest named), then
    double-bit ECC, then lost; True otherwise."""
    old = health.condition(CONDITION_NVML_READY)
    if health.last_critical_xid is not None:
        count = health.critical_xid_count
        message = xid_message(health.last_critical_xid) + (
            f"; {count} critical XIDs since NVML was initialised" if count > 1 else "")
        state = (STATUS_FALSE, "XidError", message)
    elif health.double_bit_ecc_count:
        count = health.double_bit_ecc_count
        state = (STATUS_FALSE, "DoubleBitEcc", "double-bit ECC error" if count == 1
                 else f"{count} double-bit ECC errors")
    elif health.lost:
        state = (STATUS_FALSE, "GpuLost",
                 "GPU_IS_LOST: the GPU has fallen off the bus or is inaccessible")
    elif old is not None and old.status == STATUS_TRUE:
        return health
    else:
        state = (STATUS_TRUE, "NVMLReady", "NVML answers for this GPU again")
    return _put(health, _transition(old, CONDITION_NVML_READY, *state, now, source),
                CONDITION_NVML_READY, now)


def _ecc(health: DeviceHealth, now: float, source: str) -> DeviceHealth:
    count = health.double_bit_ecc_count
    if count:
        plural = "s" if count > 1 else ""
        state = (STATUS_FALSE, "VolatileDoubleBitEcc",
                 f"{count} double-bit ECC error{plural} since NVML was initialised (volatile)")
    else:
        state = (STATUS_TRUE, "EccHealth", "no double-bit ECC error since NVML was initialised")
    return _put(health, _transition(health.condition(CONDITION_ECC), CONDITION_ECC, *state, now,
                                    source), CONDITION_ECC, now)


def watch_ecc(health: DeviceHealth, now: float, source: str = "nvml-events") -> DeviceHealth:
    """The GPU's ECC events are registered: ``EccHealth`` is reported from now on."""
    if health.condition(CONDITION_ECC) is not None:
        return health
    return _ecc(health, now, source)


def count_xid(health: DeviceHealth, code: int | None, time: float) -> DeviceHealth:
    """``health`` with one more XID ``code`` at ``time``: counted by code (the first
    ``XID_SERIES_CAP`` - 1 codes seen, the rest under ``XID_OTHER``) and kept among the
    window's events (those older than ``XID_WINDOW_SECONDS`` before it dropped)."""
    counts = dict(health.xid_counts)
    code_or_unknown = 999 if code is None else code      # the catalog's "unknown XID"
    key = str(code_or_unknown)
    if key not in counts and len(counts) >= XID_SERIES_CAP - 1:
        key = XID_OTHER
    counts[key] = counts.get(key, 0) + 1
    recent = tuple(e for e in health.recent_xids if e[1] >= time - XID_WINDOW_SECONDS)
    recent = (*recent, (code_or_unknown, time))[-RECENT_XIDS_CAP:]
    return replace(health, xid_error_count=health.xid_error_count + 1, last_xid=code,
                   xid_counts=tuple(counts.items()), recent_xids=recent)


def apply_event(health: DeviceHealth, event: HealthEvent,
                ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS) -> DeviceHealth:
    """The health after one event. Every XID is counted, ignored ones included."""
    if event.kind == "xid":
        health = count_xid(health, event.code, event.time)
        if event.code in ignored_xids:
            return health
        health = replace(health, critical_xid_count=health.critical_xid_count + 1,
                         last_critical_xid=event.code)
        return _nvml_ready(health, event.time, event.source)
    if event.kind == "double_bit_ecc":
        health = replace(health, double_bit_ecc_count=health.double_bit_ecc_count + 1)
        return _ecc(_nvml_ready(health, event.time, event.source), event.time, event.source)
    if event.kind == "single_bit_ecc":
        return replace(health, single_bit_ecc_count=health.single_bit_ecc_count + 1)
    if event.kind == "gpu_lost":
        if health.lost:
            return health
        return _nvml_ready(replace(health, lost=True), event.time, event.source)
    if event.kind == "gpu_answers":
        # Lost is the one False that heals: NVML answers for the GPU again. A False from an
        # XID or ECC error stays until the session is re-initialised.
        if not health.lost:
            return health
        return _nvml_ready(replace(health, lost=False), event.time, event.source)
    return health


def apply_remapped_rows(health: DeviceHealth, rows: RemappedRowsReading | None, now: float,
                        source: str = "nvml-sweep") -> DeviceHealth:
    """``RowRemapHealth`` from the sweep's remapped rows (nvmlDeviceGetRemappedRows): absent
    when the GPU gave neither the pending nor the failure flag."""
    old = health.condition(CONDITION_ROW_REMAP)
    if rows is None or (rows.pending is None and rows.failure is None):
        return _put(health, None, CONDITION_ROW_REMAP, now) if old is not None else health
    remapped = f"{rows.uncorrectable} rows remapped after uncorrectable errors, " \
               f"{rows.correctable} after correctable ones" \
        if rows.uncorrectable is not None and rows.correctable is not None else None
    if rows.failure:
        state = (STATUS_FALSE, "RowRemapFailure", "a row remapping failed: no spare row left")
    elif rows.pending:
        state = (STATUS_FALSE, "RowRemapPending",
                 "a row remapping waits for the next GPU reset")
    else:
        state = (STATUS_TRUE, "RowRemapHealth", "no row remapping pending or failed")
    if remapped is not None:
        state = (*state[:2], f"{state[2]} ({remapped})")
    return _put(health, _transition(old, CONDITION_ROW_REMAP, *state, now, source),
                CONDITION_ROW_REMAP, now)


def _ras_state(r: KernelHealthReading) -> tuple[str, str, str] | None:
    if r.ras_uncorrectable is None and r.ras_correctable is None:
        return None
    corrected = f"{r.ras_correctable} corrected" if r.ras_correctable is not None else None
    if r.ras_uncorrectable:
        return (STATUS_FALSE, "UncorrectableRasErrors",
                f"{r.ras_uncorrectable} uncorrectable RAS errors"
                + (f", {corrected}" if corrected else ""))
    return (STATUS_TRUE, "RasHealth", "no uncorrectable RAS error"
            + (f" ({corrected})" if corrected else ""))


def _retired_pages_state(r: KernelHealthReading) -> tuple[str, str, str] | None:
    if r.retired_pages is None and r.pending_pages is None and r.failed_pages is None:
        return None
    if r.failed_pages:
        return (STATUS_FALSE, "RetiredPageFailure",
                f"{r.failed_pages} bad VRAM pages could not be retired")
    if r.pending_pages:
        return (STATUS_FALSE, "RetiredPagePending",
                f"{r.pending_pages} bad VRAM pages wait to be retired")
    return (STATUS_TRUE, "RetiredPagesHealth",
            f"{r.retired_pages or 0} VRAM pages retired, none pending or failed")


def _reset_state(r: KernelHealthReading) -> tuple[str, str, str] | None:
    if r.hang_captured:
        return (STATUS_FALSE, "GpuHang", "the driver captured a GPU hang (its error state "
                "stays until cleared) and reset the engine or GPU")
    if r.coredump:
        return (STATUS_FALSE, "DeviceCoredump", "a device coredump waits to be read: the "
                "driver captured a hang or reset the GPU")
    if r.hang_captured is None and r.coredump is None:
        return None
    return (STATUS_TRUE, "ResetHealth", "no GPU hang or reset captured")


def _bus_state(r: KernelHealthReading) -> tuple[str, str, str] | None:
    if r.off_bus is None:
        return None
    if r.off_bus:
        return (STATUS_FALSE, "GpuOffBus", "the GPU's PCI config space reads all ones: it has "
                "fallen off the bus or is wedged")
    return (STATUS_TRUE, "PciBusHealth", "the GPU answers on the PCI bus")


_KERNEL_CONDITIONS = ((CONDITION_RAS, _ras_state), (CONDITION_RETIRED_PAGES, _retired_pages_state),
                      (CONDITION_RESET, _reset_state), (CONDITION_BUS, _bus_state))


def kernel_health(previous: DeviceHealth | None, reading: KernelHealthReading, now: float
                  ) -> DeviceHealth | None:
    """An AMD or Intel GPU's health from its driver's files, the conditions' transition times
    kept from ``previous``; ``None`` when no file told anything (health unknown)."""
    health = previous if previous is not None else DeviceHealth(conditions=())
    for type_, state_of in _KERNEL_CONDITIONS:
        state = state_of(reading)
        old = health.condition(type_)
        condition = None if state is None else _transition(old, type_, *state, now, KERNEL_SOURCE)
        health = _put(health, condition, type_, now)
    if not any(c.type != CONDITION_READY for c in health.conditions):
        return None
    return health
