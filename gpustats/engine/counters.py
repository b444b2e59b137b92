"""Cumulative energy counters that only grow, and what each GPU taught us, kept across restarts.

Keys are tuples: ``("device", uuid)``, ``("device_active", uuid)``, ``("mig", uuid, gi)``,
``("process", uuid, pid, start_ticks, boot_id)`` (without the boot where it is not known, as
in every state written before format 3), ``("container", container_id, uuid, gi)``,
``("pod", pod_uid, uuid)``. Every level advances on its own each tick, so a finished
process's energy is already in its container's and pod's counters.

A counter belongs to an owner (the GPU, the process, the container, the pod). Counters are
dropped only when their owner has not been seen for ``retention_seconds``: a live pod that left
its GPU idle for a day keeps its total. Per GPU the state also keeps a ``DeviceRecord``: the
learned idle power, the last raw hardware energy reading (with the boot it was read in, so a
restart can count the energy of the gap), and the identity (to name a GPU lost at start).

Every tick the changes go to the journal before the snapshot is published; every persist
interval the whole state is compacted (``state_files``; the documents' format is
``state_schema``). A state of an older format is migrated at load: written again at once in
this one, so no journal line of this format ever follows an older snapshot. Methods are safe
to call from the housekeeping thread, a SIGHUP and a shutdown path at once: journal lines and
compactions are written one at a time (a compaction empties the journal, so a line written
while it ran would be lost with its changes already marked as written).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable, Hashable, Iterable

from gpustats.engine.state_files import StateFiles
from gpustats.engine.state_schema import (
    SCHEMA_VERSION, DeviceRecord, Key, StateDocument, journal_entry, parse_journal_entry,
    parse_state_document, state_document,
)

log = logging.getLogger(__name__)

Owner = tuple[Hashable, ...]


def owner_of(key: Key) -> Owner:
    """Whose existence keeps a counter: the GPU, the process, the container or the pod."""
    kind = key[0]
    if kind in ("device", "device_active", "unattributed", "unallocated_idle", "unobserved",
                "mig"):
        return ("gpu", key[1])
    if kind == "process":
        return key
    return (_HOLDER_OF_IDLE.get(kind, kind), key[1])


# An idle share's counter lives as long as its holder's.
_HOLDER_OF_IDLE: dict[Hashable, str] = {"container_idle": "container", "pod_idle": "pod"}


def steady_wall() -> Callable[[], float]:
    """Wall time as it was at the start, advanced by the monotonic clock since: what the
    counters' retention and expiry count on, so a step of the wall clock while the daemon runs
    neither expires every owner at once (a step forward past the retention) nor keeps the
    gone ones for as long as the step (a step back)."""
    base_wall, base_monotonic = time.time(), time.monotonic()
    return lambda: base_wall + (time.monotonic() - base_monotonic)


class EnergyCounters:
    def __init__(self, *, retention_seconds: float = 3600.0,
                 wall: Callable[[], float] | None = None):
        self._values: dict[Key, float] = {}
        self._seen: dict[Owner, float] = {}           # owner -> last time it existed
        self._devices: dict[str, DeviceRecord] = {}
        self._dirty: set[Key] = set()
        self._dirty_devices: set[str] = set()
        self._sequence = 0                            # journal lines written (or replayed)
        self._retention = retention_seconds
        self._wall = wall if wall is not None else steady_wall()
        self._lock = threading.Lock()
        self._writing = threading.Lock()             # one writer of the state files at a time
        self._files: StateFiles | None = None

    # ------------------------------------------------------------ counters

    def advance(self, key: Key, joules: float | None) -> float:
        """Add a non-negative finite amount (anything else adds nothing); the owner is alive."""
        with self._lock:
            current = self._values.get(key)
            grown = current if current is not None else 0.0
            if joules is not None and math.isfinite(joules) and joules > 0:
                grown += joules
            if grown != current:
                self._values[key] = grown
                self._dirty.add(key)
            self._seen[owner_of(key)] = self._wall()
            return grown

    def advance_all(self, gains: Iterable[tuple[Key, float]]) -> None:
        """``advance`` of each (key, joules), under one lock and one clock reading; a counter
        that exists and gains nothing is left as it is (not marked changed). Only a new
        counter's owner is marked alive here: the caller marks the owners of the others
        (``mark_alive``), as the energy ledger does with every owner of its tick."""
        isfinite = math.isfinite
        with self._lock:
            values, dirty, seen = self._values, self._dirty, self._seen
            now = self._wall()
            for key, joules in gains:
                gain = joules if joules is not None and joules > 0 and isfinite(joules) else 0.0
                current = values.get(key)
                if current is None:
                    seen[owner_of(key)] = now
                    values[key] = gain
                elif gain:
                    values[key] = current + gain
                else:
                    continue
                dirty.add(key)

    def retained(self, owner: Owner) -> bool:
        """Some counter of this owner is kept (it existed within the retention)."""
        return owner in self._seen

    def value(self, key: Key) -> float | None:
        return self._values.get(key)

    def items(self, kind: str | None = None) -> Iterable[tuple[Key, float]]:
        with self._lock:
            return [(k, v) for k, v in self._values.items() if kind is None or k[0] == kind]

    def mark_alive(self, owners: Iterable[Owner]) -> None:
        """These owners exist this tick: their counters are kept, advanced or not.

        Only owners that hold counters are remembered (every counter's owner is, from its
        first advance or its load), so containers that never used a GPU cost nothing here.
        """
        now = self._wall()
        with self._lock:
            seen = self._seen
            for owner in owners:
                if owner in seen:
                    seen[owner] = now

    def expire(self) -> int:
        """Drop counters whose owner has not existed within the retention; returns how many."""
        with self._lock:
            horizon = self._wall() - self._retention
            gone = {o for o, t in self._seen.items() if t < horizon}
            stale = [k for k in self._values if owner_of(k) in gone]
            for key in stale:
                del self._values[key]
                self._dirty.discard(key)
            for owner in gone:
                del self._seen[owner]
            for uuid in [u for u in self._devices if ("gpu", u) in gone]:
                del self._devices[uuid]
            return len(stale)

    # ------------------------------------------------------------ per-GPU records

    def device(self, uuid: str) -> DeviceRecord | None:
        return self._devices.get(uuid)

    def devices(self) -> dict[str, DeviceRecord]:
        with self._lock:
            return dict(self._devices)

    def set_device(self, uuid: str, record: DeviceRecord) -> None:
        """The GPU's whole record, as a tick worked it out (journaled when it changed)."""
        with self._lock:
            if record != self._devices.get(uuid):
                self._devices[uuid] = record
                self._dirty_devices.add(uuid)
            self._seen[("gpu", uuid)] = self._wall()

    # ------------------------------------------------------------ persistence

    def _document(self) -> dict:
        seen = self._seen
        return state_document(self._wall(), self._sequence,
                              ((k, v, seen.get(owner_of(k))) for k, v in self._values.items()),
                              self._devices)

    def journal(self) -> bool:
        """Append what changed since the last call; call before publishing the tick.

        What could not be written stays marked as changed, for the next line or compaction.
        """
        with self._writing:
            return self._journal()

    def _journal(self) -> bool:
        if self._files is None:
            return False
        with self._lock:
            if not self._dirty and not self._dirty_devices:
                return True
            self._sequence += 1
            keys, uuids = self._dirty, self._dirty_devices
            values, records = self._values, self._devices
            entry = journal_entry(self._sequence, self._wall(),
                                  ((k, values[k]) for k in keys if k in values),
                                  {u: records[u] for u in uuids if u in records})
            self._dirty, self._dirty_devices = set(), set()
        if self._files.append(entry):
            return True
        with self._lock:
            self._dirty |= keys
            self._dirty_devices |= uuids
        return False

    def persist(self) -> bool:
        """Compact: the whole state to the snapshot file, fsynced; the journal emptied."""
        with self._writing:
            return self._persist()

    def _persist(self) -> bool:
        if self._files is None:
            return False
        with self._lock:
            self._sequence += 1
            document = self._document()
            keys, uuids = self._dirty, self._dirty_devices
            self._dirty, self._dirty_devices = set(), set()
        if self._files.write_snapshot(document):
            return True
        with self._lock:                 # not on disk: the next journal line carries them
            self._dirty |= keys
            self._dirty_devices |= uuids
        return False

    def close(self) -> None:
        """Close the journal once no line is being written (a later line reopens it)."""
        with self._writing:
            if self._files is not None:
                self._files.close()

    def load(self, files: StateFiles, *, write: bool = True) -> bool:
        """Read the snapshot and replay the journal; attach ``files`` for later writes (none
        with ``write`` False: ``--once``, which leaves the state dir as it found it).

        A missing, corrupt or foreign file is logged and the counters start from zero (the bad
        file is kept aside); a torn or corrupt journal line is skipped and the others replayed;
        a state from a newer gpustats raises ``NewerStateVersion`` (and is left untouched). A
        state not yet in this format (older, or none) is compacted at once (when writing), so
        the state dir says this format before the first journal line: a release that knows
        only an older one refuses it rather than misread its journal.
        """
        self._files = files
        parsed, journal = files.load(parse_state_document)
        loaded: dict[Key, float] = {}
        seen: dict[Owner, float] = {}
        devices: dict[str, DeviceRecord] = {}
        sequence = 0
        if parsed is not None:
            loaded, devices = dict(parsed.counters), dict(parsed.devices)
            sequence = parsed.journal_sequence
            for key, when in parsed.updated.items():
                owner = owner_of(key)
                seen[owner] = max(when, seen.get(owner, 0.0))
        replayed = 0
        for entry in journal:
            try:
                entry_sequence, counters, records = parse_journal_entry(entry)
            except ValueError as exc:
                log.warning("energy counter journal: an entry is corrupt (%s); skipped", exc)
                continue
            if entry_sequence <= sequence:
                continue              # already in the snapshot (written before the truncate)
            for key, joules in counters.items():
                loaded[key] = max(joules, loaded.get(key, 0.0))
            for uuid, record in records.items():
                devices[uuid] = record
            sequence = entry_sequence
            replayed += 1
        now = self._wall()
        with self._lock:
            for key, joules in loaded.items():
                # Never go below a value this process already counted.
                self._values[key] = max(joules, self._values.get(key, 0.0))
                owner = owner_of(key)
                self._seen[owner] = min(now, max(seen.get(owner, now), self._seen.get(owner, 0)))
            for uuid, record in devices.items():
                self._devices.setdefault(uuid, record)
            self._sequence = max(self._sequence, sequence)
        if loaded or devices:
            log.info("loaded %d energy counters and %d GPU records from %s (%d journal "
                     "entr%s replayed)", len(loaded), len(devices), files.directory, replayed,
                     "y" if replayed == 1 else "ies")
        if not write:
            self._files = None
        elif not _in_this_format(files, parsed):
            self.persist()
        return parsed is not None or replayed > 0


def _in_this_format(files: StateFiles, parsed: StateDocument | None) -> bool:
    """The state dir says this format and its snapshot was written in it."""
    return files.format_current and parsed is not None and parsed.version == SCHEMA_VERSION


__all__ = ["DeviceRecord", "EnergyCounters", "Key", "Owner", "owner_of"]
