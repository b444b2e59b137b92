"""The energy state's on-disk documents: a snapshot of the whole state and a journal line of
what changed, built from and parsed back into plain values.

A snapshot is ``{"version", "saved_at", "journal_sequence", "counters": [{"key", "joules",
"updated"}], "devices": {uuid: record}}``; a journal line is ``{"sequence", "at",
"counters": [[key, joules]], "devices": {uuid: record}}``. Keys are stored as lists (the
counter's tuple), GPU records as objects of their set fields. The documents' version is the
state dir's format version (``state_files.FORMAT_VERSION``): any change here bumps it.

Since version 3 a process key carries the boot it ran in (``["process", uuid, pid, start,
boot_id]``) where the boot is known. A process key without one (every process key of versions
1 and 2) is of an unknown boot: it is read as it is, and never equals the key of a live
process whose boot is known, so it is kept until its retention ends and never continued.

Parsing trusts nothing: anything but a well-formed document of a readable version is a
``ValueError``, and one from a newer gpustats a ``NewerStateVersion``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Hashable, Iterable, Mapping

from gpustats.engine.state_files import FORMAT_VERSION, READABLE_VERSIONS, NewerStateVersion
from gpustats.model.record import record

SCHEMA_VERSION = FORMAT_VERSION

Key = tuple[Hashable, ...]


@record
class DeviceRecord:
    """What the daemon remembers of one GPU between runs (every field optional)."""

    idle_watts: float | None = None            # learned idle (only ever decreases)
    energy_counter_mj: int | None = None       # last raw hardware counter reading
    boot_id: str | None = None                 # the boot that reading was taken in
    read_at: float | None = None               # wall time of that reading
    index: int | None = None
    pci_bus_id: str | None = None
    name: str | None = None
    minor_number: int | None = None
    # The boot clock (CLOCK_BOOTTIME) at that reading: within its boot, the time since is
    # told from it, whatever the wall clock did meanwhile.
    read_at_boot_seconds: float | None = None


_RECORD_FIELDS = tuple(f.name for f in fields(DeviceRecord))
_RECORD_TYPES = {"idle_watts": (int, float), "energy_counter_mj": (int,), "boot_id": (str,),
                 "read_at": (int, float), "index": (int,), "pci_bus_id": (str,),
                 "name": (str,), "minor_number": (int,), "read_at_boot_seconds": (int, float)}


@dataclass(frozen=True)
class StateDocument:
    """A parsed snapshot: counters, when each was last updated (where the file says), GPU
    records, the sequence of the last journal line it holds, and the version it was written
    in."""

    counters: dict[Key, float]
    updated: dict[Key, float]
    devices: dict[str, DeviceRecord]
    journal_sequence: int
    version: int


# ------------------------------------------------------------ building

def state_document(saved_at: float, journal_sequence: int,
                   counters: Iterable[tuple[Key, float, float | None]],
                   devices: Mapping[str, DeviceRecord]) -> dict:
    """The snapshot of the whole state, from (key, joules, last updated) and GPU records."""
    return {
        "version": SCHEMA_VERSION,
        "saved_at": saved_at,
        "journal_sequence": journal_sequence,
        "counters": [{"key": list(k), "joules": v, "updated": updated}
                     for k, v, updated in counters],
        "devices": {u: record_dict(r) for u, r in devices.items()},
    }


def journal_entry(sequence: int, at: float, counters: Iterable[tuple[Key, float]],
                  devices: Mapping[str, DeviceRecord]) -> dict:
    """One journal line: the counters and GPU records that changed."""
    return {
        "sequence": sequence,
        "at": at,
        "counters": [[list(k), v] for k, v in counters],
        "devices": {u: record_dict(r) for u, r in devices.items()},
    }


def record_dict(record: DeviceRecord) -> dict:
    """A GPU record's set fields."""
    # Scalar fields only: read them directly (``asdict`` deep-copies, on every tick's journal).
    return {name: value for name in _RECORD_FIELDS
            if (value := getattr(record, name)) is not None}


# ------------------------------------------------------------ parsing

def check_version(document: object) -> None:
    """``NewerStateVersion`` for a state written by a newer gpustats; ``ValueError`` if foreign."""
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    version = document.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"schema version {version!r:.40}")
    if version > SCHEMA_VERSION:
        raise NewerStateVersion(f"schema version {version}; this gpustats reads "
                                f"{', '.join(map(str, READABLE_VERSIONS))}")
    if version not in READABLE_VERSIONS:
        raise ValueError(f"schema version {version!r}")


def parse_state_document(document: object) -> StateDocument:
    """A snapshot's contents; ``ValueError`` on anything but a well-formed document of a
    readable version."""
    check_version(document)
    assert isinstance(document, dict)
    version = document["version"]
    entries = document.get("counters")
    if not isinstance(entries, list):
        raise ValueError("no counters list")
    loaded: dict[Key, float] = {}
    updated: dict[Key, float] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"bad entry {entry!r:.80}")
        key = _key(entry.get("key"))
        loaded[key] = _joules(entry.get("joules"))
        when = entry.get("updated")
        if isinstance(when, (int, float)) and not isinstance(when, bool) \
                and math.isfinite(when):
            updated[key] = float(when)
    raw_devices = document.get("devices", {})
    if not isinstance(raw_devices, dict):
        raise ValueError("bad devices section")
    devices = {str(uuid): _record(record) for uuid, record in raw_devices.items()}
    sequence = document.get("journal_sequence", 0)
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        raise ValueError(f"bad journal sequence {sequence!r:.80}")
    return StateDocument(loaded, updated, devices, sequence, version)


def parse_journal_entry(entry: object) -> tuple[int, dict[Key, float], dict[str, DeviceRecord]]:
    """A journal line's sequence, counters and GPU records; ``ValueError`` if malformed."""
    if not isinstance(entry, dict):
        raise ValueError("not a JSON object")
    sequence = entry.get("sequence")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        raise ValueError(f"bad sequence {sequence!r:.80}")
    raw = entry.get("counters", [])
    if not isinstance(raw, list):
        raise ValueError("bad counters")
    counters = {}
    for item in raw:
        if not isinstance(item, list) or len(item) != 2:
            raise ValueError(f"bad counter {item!r:.80}")
        counters[_key(item[0])] = _joules(item[1])
    raw_devices = entry.get("devices", {})
    if not isinstance(raw_devices, dict):
        raise ValueError("bad devices")
    return sequence, counters, {str(u): _record(r) for u, r in raw_devices.items()}


def _joules(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"bad value {value!r:.80}")
    try:
        joules = float(value)
    except OverflowError:
        raise ValueError(f"bad value {value!r:.80}") from None
    if not math.isfinite(joules) or joules < 0:
        raise ValueError(f"bad value {joules!r}")
    return joules


def _key(value: object) -> Key:
    if not isinstance(value, list) or not value or not isinstance(value[0], str) \
            or not all(part is None or (isinstance(part, (str, int))
                                        and not isinstance(part, bool)) for part in value):
        raise ValueError(f"bad key {value!r:.80}")
    return tuple(value)


def _record(value: object) -> DeviceRecord:
    if not isinstance(value, dict):
        raise ValueError(f"bad GPU record {value!r:.80}")
    values: dict[str, Any] = {}           # each checked against its field's types below
    for name, item in value.items():
        if name not in _RECORD_TYPES:
            continue                      # a field a newer minor version added
        if item is None:
            continue
        if isinstance(item, bool) or not isinstance(item, _RECORD_TYPES[name]):
            raise ValueError(f"bad GPU record field {name}={item!r:.80}")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"bad GPU record field {name}={item!r}")
        values[name] = item
    return DeviceRecord(**values)
