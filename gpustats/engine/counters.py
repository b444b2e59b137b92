"""Cumulative energy counters that only grow, persisted atomically in the state dir.

Keys are tuples such as ``("device", uuid)``, ``("device_active", uuid)``,
``("process", uuid, pid, container_id)``, ``("container", container_id, uuid)``,
``("pod", pod_uid, uuid)``, ``("mig", uuid, gpu_instance_id)``. Every level advances on its own
each tick, so a finished process's energy is already in its container's and pod's counters.
A counter not advanced for ``retention_seconds`` is dropped from memory (and so from the
output); the pod's total is its own key and is unaffected.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from typing import Callable, Hashable, Iterable

from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
STATE_FILE = "counters.json"

Key = tuple[Hashable, ...]


class EnergyCounters:
    def __init__(self, *, retention_seconds: float = 3600.0,
                 wall: Callable[[], float] = time.time):
        self._values: dict[Key, float] = {}
        self._updated: dict[Key, float] = {}
        self._retention = retention_seconds
        self._wall = wall
        self._log_once = LogOnce(log, every_seconds=300.0)

    def advance(self, key: Key, joules: float | None) -> float:
        """Add a non-negative finite amount; anything else leaves the counter as it is."""
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
        return [(k, v) for k, v in self._values.items() if kind is None or k[0] == kind]

    def expire(self) -> int:
        """Drop counters not advanced within the retention window; returns how many."""
        horizon = self._wall() - self._retention
        stale = [k for k, t in self._updated.items() if t < horizon]
        for key in stale:
            self._values.pop(key, None)
            self._updated.pop(key, None)
        return len(stale)

    # ------------------------------------------------------------ persistence

    def to_document(self) -> dict:
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
            os.makedirs(directory, exist_ok=True)
            fd, tmp_path = tempfile.mkstemp(prefix=".counters-", suffix=".tmp", dir=directory)
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_document(), f, separators=(",", ":"))
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
        except (OSError, ValueError) as exc:
            log.error("energy counter state %s is unreadable (%s); starting from zero and "
                      "replacing it", path, exc)
            return False
        try:
            if document.get("version") != SCHEMA_VERSION:
                raise ValueError(f"schema version {document.get('version')!r}")
            loaded = {}
            for entry in document["counters"]:
                joules = float(entry["joules"])
                if not math.isfinite(joules) or joules < 0:
                    raise ValueError(f"bad value {joules!r}")
                loaded[tuple(entry["key"])] = joules
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.error("energy counter state %s is corrupt (%s); starting from zero and "
                      "replacing it", path, exc)
            return False
        now = self._wall()
        for key, joules in loaded.items():
            # Never go below a value this process already counted.
            self._values[key] = max(joules, self._values.get(key, 0.0))
            self._updated[key] = now
        log.info("loaded %d energy counters from %s", len(loaded), path)
        return True
