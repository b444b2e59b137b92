"""Names of containers outside Kubernetes, from the runtimes' own metadata on the host's disk.

No socket is asked; under ``--host-root``:

- Docker: ``var/lib/docker/containers/<id>/config.v2.json``, its top-level ``"Name"`` less
  the leading ``/`` (moby ``daemon/container``; the default data root only).
- Podman (root): the SQLite state ``var/lib/containers/storage/db.sql``, table
  ``ContainerConfig(ID, Name, PodID, JSON)`` (libpod ``sqlite_state_internal.go``). It is opened
  read-only and ``immutable`` (no lock taken, no journal or WAL opened: podman is never held up
  or written to), with a deadline on each query. Rows still only in podman's WAL are missed
  until it checkpoints; a miss is asked again after ``retry_seconds``. The legacy BoltDB state
  (``libpod/bolt_state.db``) is not read: its containers stay unnamed (logged once).

A container's name never changes, so a name found is kept while its ID is asked for. A missing,
unreadable or malformed file names nothing and raises nothing; each kind of failure is logged
once an hour.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
import urllib.parse
from typing import Any, Callable, Iterable

from gpustats.documents import DocumentError, load_json, read_document
from gpustats.hostfs import HostRoots, UnsafeFile, require_regular
from gpustats.model.containers import ContainerNames
from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

DOCKER_CONTAINERS = ("var", "lib", "docker", "containers")
PODMAN_DB = ("var", "lib", "containers", "storage", "db.sql")
PODMAN_BOLT = ("var", "lib", "containers", "storage", "libpod", "bolt_state.db")
MAX_CONFIG_BYTES = 1 << 20       # config.v2.json: a few KB, more with many labels and env
MAX_DB_BYTES = 1 << 30
MAX_NAME_CHARS = 255
_ID = re.compile(r"[0-9a-f]{64}")


def parse_docker_config(text: str, container_id: str) -> str:
    """A ``config.v2.json``'s container name (``"/web"`` → ``web``); ``ValueError`` when it is
    not JSON, names another container, or has no usable name."""
    document: Any = load_json(text)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    if document.get("ID") != container_id:
        raise ValueError("its ID is not the container's")
    return valid_name(document.get("Name"))


def valid_name(value: Any) -> str:
    """A runtime's container name, its one leading ``/`` dropped; ``ValueError`` when it is not
    a string, empty, or longer than ``MAX_NAME_CHARS``."""
    if not isinstance(value, str):
        raise ValueError("the name is not a string")
    name = value.removeprefix("/")
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValueError("the name is empty or too long")
    return name


class RuntimeStoreNames:
    """A names source (``names(container_ids)``): Docker's and Podman's container names."""

    def __init__(self, roots: HostRoots, *, retry_seconds: float = 60.0,
                 deadline_seconds: float = 0.5,
                 monotonic: Callable[[], float] = time.monotonic):
        self._docker_dir = roots.host_path(*DOCKER_CONTAINERS)
        self._podman_db = roots.host_path(*PODMAN_DB)
        self._podman_bolt = roots.host_path(*PODMAN_BOLT)
        self._retry = retry_seconds
        self._deadline = deadline_seconds
        self._monotonic = monotonic
        self._named: dict[str, str] = {}
        self._missed: dict[str, float] = {}      # ID -> when last looked for in vain
        self._log = LogOnce(log, every_seconds=3600.0)
        self.lookups = 0                         # IDs looked up on disk (tests read this)

    def names(self, container_ids: Iterable[str]) -> dict[str, ContainerNames]:
        wanted = {c for c in container_ids if isinstance(c, str) and _ID.fullmatch(c)}
        self._named = {c: n for c, n in self._named.items() if c in wanted}
        self._missed = {c: t for c, t in self._missed.items() if c in wanted}
        now = self._monotonic()
        due = sorted(c for c in wanted if c not in self._named
                     and (c not in self._missed or now - self._missed[c] >= self._retry))
        if due:
            self._look_up(due, now)
        return {c: ContainerNames(pod_name=None, pod_namespace=None, pod_uid=None,
                                  container_name=n) for c, n in self._named.items()}

    def _look_up(self, due: list[str], now: float) -> None:
        """Name the ``due`` IDs from Docker's store, then Podman's; remember those missed."""
        self.lookups += len(due)
        found = {c: n for c in due if (n := self._docker_name(c)) is not None}
        rest = [c for c in due if c not in found]
        if rest:
            found.update(self._podman_names(rest))
        for container_id in due:
            if container_id in found:
                self._named[container_id] = found[container_id]
                self._missed.pop(container_id, None)
            else:
                self._missed[container_id] = now

    def _failed(self, kind: str, path: str, why: object) -> None:
        self._log(kind, logging.WARNING, "container names not read from %s: %s", path, why)

    # ------------------------------------------------------------------ Docker

    def _docker_name(self, container_id: str) -> str | None:
        path = os.path.join(self._docker_dir, container_id, "config.v2.json")
        try:
            text = read_document(path, MAX_CONFIG_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None                          # not a Docker container (or no Docker)
        except OSError as exc:
            self._failed("docker_unreadable", path, exc.strerror or exc)
            return None
        except DocumentError as exc:
            self._failed("docker_unsafe", path, exc)
            return None
        try:
            return parse_docker_config(text, container_id)
        except ValueError as exc:
            self._failed("docker_malformed", path, exc)
            return None

    # ------------------------------------------------------------------ Podman

    def _podman_names(self, container_ids: list[str]) -> dict[str, str]:
        path = self._podman_db
        try:
            # sqlite opens the file itself (blocking): refuse a FIFO or device first.
            require_regular(path, max_bytes=MAX_DB_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(self._podman_bolt):
                self._log("podman_bolt", logging.INFO, "Podman's BoltDB state %s is not read: "
                          "its containers are not named", self._podman_bolt)
            return {}
        except UnsafeFile as exc:
            self._failed("podman_unsafe", path, exc)
            return {}
        except OSError as exc:
            self._failed("podman_unreadable", path, exc.strerror or exc)
            return {}
        try:
            return self._query(path, container_ids)
        except sqlite3.Error as exc:
            # Not a database, no such table, interrupted at the deadline, a torn read.
            self._failed("podman_db", path, exc)
            return {}

    def _query(self, path: str, container_ids: list[str]) -> dict[str, str]:
        uri = f"file:{urllib.parse.quote(path)}?mode=ro&immutable=1"
        deadline = self._monotonic() + self._deadline
        connection = sqlite3.connect(uri, uri=True, timeout=0.0, isolation_level=None,
                                     check_same_thread=False)
        try:
            connection.text_factory = lambda data: data.decode("utf-8", "replace")
            connection.set_progress_handler(lambda: self._monotonic() > deadline, 1000)
            found: dict[str, str] = {}
            for wanted in container_ids:
                cursor = connection.execute(
                    "SELECT ID, Name FROM ContainerConfig WHERE ID = ?", (wanted,))
                for container_id, name in cursor.fetchmany(1):
                    try:
                        found.setdefault(container_id, valid_name(name))
                    except ValueError:
                        self._failed("podman_malformed", path, f"a bad name for {container_id}")
            return found
        finally:
            connection.close()
