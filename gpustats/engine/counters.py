"""Cumulative energy counters that only grow, persisted atomically in the state dir.

Keys are tuples such as ``("device", uuid)``, ``("device_active", uuid)``,
``("process", uuid, pid, container_id)``, ``("container", container_id, uuid)``,
``("pod", pod_uid, uuid)``, ``("mig", uuid, gpu_instance_id)``. Every level advances on its own
each tick, so a finished process's energy is already in its container's and pod's counters.
A counter not advanced for ``retention_seconds`` is dropped from memory (and so from the
output); the pod's total is its own key and is unaffected.

The state file is JSON with a schema version; a file that cannot be read or parsed is logged,
kept aside as ``counters.json.corrupt`` and replaced at the next persist. Methods are safe to
call from the housekeeping thread and a shutdown path at once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
import time
from typing import Callable, Hashable, Iterable

from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
STATE_FILE = "counters.json"
CORRUPT_SUFFIX = ".corrupt"

Key = tuple[Hashable, ...]


class EnergyCounters:
    def __init__(self, *, retention_seconds: float = 3600.0,
                 wall: Callable[[], float] = time.time):
        self._values: dict[Key, float] = {}
        self._updated: dict[Key, float] = {}
        self._retention = retention_seconds
        self._wall = wall
        self._log_once = LogOnce(log, every_seconds=300.0)
        self._lock = threading.Lock()

    def advance(self, key: Key, joules: float | None) -> float:
        """Add a non-negative finite amount; anything else leaves the counter as it is."""
        with self._lock:
            current = self._values.get(key, 0.0)
            if joules is not None and math.isfinite(joules) and joules > 0:
                current += joules
            self._values[key] = current
            self._updated[key] = self._wall()
            return current

    def touch(self, key: Key) -> float:
        """Keep a counter alive (and create it at 0) without adding energy."""
        return self.advance(key, None)

    def value(self, key: Key) -> float | None:
        return self._values.get(key)

    def items(self, kind: str | None = None) -> Iterable[tuple[Key, float]]:
        with self._lock:
            return [(k, v) for k, v in self._values.items() if kind is None or k[0] == kind]

    def expire(self) -> int:
        """Drop counters not advanced within the retention window; returns how many."""
        with self._lock:
            horizon = self._wall() - self._retention
            stale = [k for k, t in self._updated.items() if t < horizon]
            for key in stale:
                self._values.pop(key, None)
                self._updated.pop(key, None)
            return len(stale)

    # ------------------------------------------------------------ persistence

    def to_document(self) -> dict:
        with self._lock:
            return {
                "version": SCHEMA_VERSION,
                "saved_at": self._wall(),
                "counters": [{"key": list(k), "joules": v, "updated": self._updated.get(k)}
                             for k, v in self._values.items()],
            }

    def persist(self, directory: str) -> bool:
        """Write temp file, fsync, rename, fsync the directory. False (logged) on failure."""
        path = os.path.join(directory, STATE_FILE)
        tmp_path = None
        try:
            body = json.dumps(self.to_document(), separators=(",", ":"))
        except (TypeError, ValueError) as exc:      # a key that JSON cannot hold: a bug
            self._log_once("encode", logging.ERROR, "cannot encode energy counters: %s", exc)
            return False
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp_path = tempfile.mkstemp(prefix=".counters-", suffix=".tmp", dir=directory)
            with os.fdopen(fd, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_path, path)
            tmp_path = None
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return True
        except OSError as exc:
            self._log_once("persist", logging.ERROR,
                           "cannot persist energy counters to %s: %s (counters in memory are "
                           "intact; retrying)", path, exc)
            return False
        finally:
            if tmp_path is not None:
                try:
                    os.unlink(tmp_path)
                except OSError:
                    pass

    def load(self, directory: str) -> bool:
        """Load persisted counters; a missing or corrupt file is logged and replaced, not fatal."""
        path = os.path.join(directory, STATE_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                document = json.load(f)
        except FileNotFoundError:
            log.info("no persisted energy counters at %s; starting from zero", path)
            return False
        except IsADirectoryError as exc:
            log.error("energy counter state %s is unreadable (%s); starting from zero", path, exc)
            return False
        except (OSError, ValueError, RecursionError) as exc:
            # ValueError covers bad JSON and bad UTF-8; RecursionError absurdly deep nesting.
            log.error("energy counter state %s is unreadable (%s); starting from zero and "
                      "replacing it", path, exc)
            _keep_aside(path)
            return False
        try:
            loaded = parse_counters_document(document)
        except ValueError as exc:
            log.error("energy counter state %s is corrupt (%s); starting from zero and "
                      "replacing it", path, exc)
            _keep_aside(path)
            return False
        with self._lock:
            now = self._wall()
            for key, joules in loaded.items():
                # Never go below a value this process already counted.
                self._values[key] = max(joules, self._values.get(key, 0.0))
                self._updated[key] = now
        log.info("loaded %d energy counters from %s", len(loaded), path)
        return True


def parse_counters_document(document: object) -> dict[Key, float]:
    """Counters from a decoded state file. ``ValueError`` on anything but the current schema."""
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    if document.get("version") != SCHEMA_VERSION:
        raise ValueError(f"schema version {document.get('version')!r}")
    entries = document.get("counters")
    if not isinstance(entries, list):
        raise ValueError("no counters list")
    loaded: dict[Key, float] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"bad entry {entry!r:.80}")
        key, joules = entry.get("key"), entry.get("joules")
        if not isinstance(key, list) or not key or not isinstance(key[0], str) \
                or not all(part is None or isinstance(part, (str, int)) for part in key):
            raise ValueError(f"bad key {key!r:.80}")
        if isinstance(joules, bool) or not isinstance(joules, (int, float)):
            raise ValueError(f"bad value {joules!r:.80}")
        try:
            value = float(joules)
        except OverflowError:
            raise ValueError(f"bad value {joules!r:.80}") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"bad value {value!r}")
        loaded[tuple(key)] = value
    return loaded


def _keep_aside(path: str) -> None:
    """Move a bad state file out of the way (best effort) so it can be looked at later."""
    try:
        os.replace(path, path + CORRUPT_SUFFIX)
    except OSError:
        pass
