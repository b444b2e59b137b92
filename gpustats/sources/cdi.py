"""CDI spec files: the device nodes and environment a fully qualified CDI device name gives.

A DRA driver prepares a claim by writing a CDI spec (NVIDIA's writes one transient file per
claim into ``/var/run/cdi``; ``/etc/cdi`` holds static ones). ``parse_spec`` is pure;
``CdiSpecs`` lists the spec dirs, keeps each parsed file keyed by its (mtime, size, inode) and
re-reads only files that changed: a directory whose mtime moved is rescanned at once, and every
file is re-checked every ``recheck_seconds`` (in-place rewrites leave the directory alone).
A file refused (not a regular file, over ``MAX_SPEC_BYTES``, not valid, aliases or nesting past
the bounds of ``gpustats.documents``) is recorded as malformed under its key, logged once and
not read again until it changes.

Names follow the CDI specification: a spec's ``kind`` is ``vendor/class`` and its devices are
``vendor/class=name``. Where two files define one name, the later directory wins (``/var/run/cdi``
over ``/etc/cdi`` in the default order), and within a directory the later file name.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gpustats.documents import brief, load_json, load_yaml, read_document
from gpustats.model.dra import CdiDeviceNodes
from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
NVIDIA_MAJOR = 195                       # /dev/nvidia<N> (N < 128), nvidiactl 255, modeset 254
MAX_SPEC_BYTES = 1 << 20
# Bounds on work per file: YAML aliases let a small file name one device many times.
MAX_DEVICES = 1024                       # per spec file
MAX_EDITS = 256                          # device nodes or env entries per edit set
_SUFFIXES = {".json": "json", ".yaml": "yaml"}
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d{1,3})$")
_CAP_NODE = re.compile(r"^/dev/nvidia-caps/nvidia-cap(\d{1,7})$")
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*$")


# ------------------------------------------------------------------ parse (pure)

def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _node(entry: Any) -> tuple[str, int] | None:
    """A ``deviceNodes`` entry → ("gpu" | "cap", minor), or None for any other node."""
    if not isinstance(entry, dict):
        raise ValueError("a deviceNodes entry is not a mapping")
    path = entry.get("hostPath") or entry.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError("a deviceNodes entry has no path")
    major, minor = _int(entry.get("major")), _int(entry.get("minor"))
    gpu = _GPU_NODE.match(path)
    if gpu:
        explicit = minor if major in (None, NVIDIA_MAJOR) else None
        return "gpu", explicit if explicit is not None else int(gpu.group(1))
    cap = _CAP_NODE.match(path)
    if cap:
        return "cap", minor if minor is not None else int(cap.group(1))
    if major == NVIDIA_MAJOR and minor is not None and 0 <= minor < 128:
        return "gpu", minor        # a renamed GPU node: the number is what counts
    return None


def _visible_uuids(value: str) -> tuple[str, ...]:
    """``NVIDIA_VISIBLE_DEVICES``: the UUIDs it names (indices, all, none and void name none)."""
    items = [item.strip() for item in value.split(",")]
    return tuple(item for item in items if _UUID.match(item))


@dataclass
class _Edits:
    gpus: list[int]
    caps: list[int]
    visible: tuple[str, ...] | None

    @classmethod
    def of(cls, edits: Any) -> _Edits:
        out = cls([], [], None)
        if edits is None:
            return out
        if not isinstance(edits, dict):
            raise ValueError("containerEdits is not a mapping")
        nodes, env = edits.get("deviceNodes") or [], edits.get("env") or []
        if not isinstance(nodes, list) or not isinstance(env, list):
            raise ValueError("deviceNodes and env must be lists")
        if len(nodes) > MAX_EDITS or len(env) > MAX_EDITS:
            raise ValueError(f"more than {MAX_EDITS} device nodes or env entries")
        for entry in nodes:
            found = _node(entry)
            if found is not None:
                (out.gpus if found[0] == "gpu" else out.caps).append(found[1])
        for item in env:
            if not isinstance(item, str):
                raise ValueError("an env entry is not a string")
            key, sep, value = item.partition("=")
            if sep and key == "NVIDIA_VISIBLE_DEVICES":
                out.visible = _visible_uuids(value)      # the last assignment wins
        return out

    def then(self, later: _Edits) -> CdiDeviceNodes:
        """Spec-level edits followed by device-level ones, as a runtime applies them."""
        visible = later.visible if later.visible is not None else self.visible
        return CdiDeviceNodes(gpu_minors=tuple(dict.fromkeys(self.gpus + later.gpus)),
                              capability_minors=tuple(dict.fromkeys(self.caps + later.caps)),
                              visible_device_uuids=visible or ())


def load_document(text: str, fmt: str) -> Any:
    """JSON or YAML text → Python data; ValueError when it is neither, or when its aliases
    or nesting go past the bounds of ``gpustats.documents``."""
    return load_json(text) if fmt == "json" else load_yaml(text)


def parse_spec(data: Any) -> dict[str, CdiDeviceNodes]:
    """A loaded CDI spec → {fully qualified device name: its nodes}; ValueError if malformed."""
    if not isinstance(data, dict):
        raise ValueError("a CDI spec is a mapping")
    kind, devices = data.get("kind"), data.get("devices")
    if not isinstance(kind, str) or not _KIND.match(kind):
        raise ValueError(f"kind must be vendor/class, got {brief(kind)}")
    if not isinstance(devices, list):
        raise ValueError("devices must be a list")
    if len(devices) > MAX_DEVICES:
        raise ValueError(f"more than {MAX_DEVICES} devices")
    common = _Edits.of(data.get("containerEdits"))
    out: dict[str, CdiDeviceNodes] = {}
    for device in devices:
        if not isinstance(device, dict):
            raise ValueError("a device is not a mapping")
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_NAME.match(name):
            raise ValueError(f"bad device name {brief(name)}")
        out[f"{kind}={name}"] = common.then(_Edits.of(device.get("containerEdits")))
    return out


# ------------------------------------------------------------------ read (cached by mtime)

FileKey = tuple[int, int, int]            # (mtime_ns, size, inode)


@dataclass
class _File:
    key: FileKey
    devices: dict[str, CdiDeviceNodes]
    error: str | None = None


def read_spec_file(path: str) -> str | None:
    """The file's text, or None when it vanished (a claim unprepared meanwhile) or cannot be
    read; ``DocumentError`` when it is not a regular file, too large or not UTF-8."""
    try:
        return read_document(path, MAX_SPEC_BYTES)
    except OSError:
        return None


class CdiSpecs:
    """The CDI devices defined under ``dirs``; ``refresh()`` once per tick, then ``lookup``."""

    def __init__(self, dirs: Iterable[str] = DEFAULT_SPEC_DIRS, *,
                 recheck_seconds: float = 10.0,
                 read: Callable[[str], str | None] = read_spec_file,
                 monotonic: Callable[[], float] = time.monotonic):
        self.dirs = tuple(dirs)
        self._recheck = recheck_seconds
        self._read = read
        self._monotonic = monotonic
        self._dir_keys: dict[str, tuple[int, int] | None] = {}
        self._files: dict[str, _File] = {}
        self._index: dict[str, CdiDeviceNodes] = {}
        self._checked_at: float | None = None
        self._log = LogOnce(log)
        self.parses = 0                   # files parsed since start (benchmarks read this)
        self.generation = 0               # bumped whenever the device index changes

    def lookup(self, name: str) -> CdiDeviceNodes | None:
        return self._index.get(name)

    def malformed(self) -> tuple[str, ...]:
        return tuple(sorted(p for p, f in self._files.items() if f.error is not None))

    def refresh(self) -> None:
        """Two ``stat`` calls when nothing changed; a rescan when a directory did, or is due."""
        now = self._monotonic()
        keys = {d: _dir_key(d) for d in self.dirs}
        if keys == self._dir_keys and self._checked_at is not None \
                and now - self._checked_at < self._recheck:
            return
        self._dir_keys = keys
        self._checked_at = now
        self._rescan(d for d in self.dirs if keys[d] is not None)

    def _rescan(self, dirs: Iterable[str]) -> None:
        seen: list[str] = []
        changed = False
        for directory in dirs:
            for path, key in _spec_files(directory):
                seen.append(path)
                old = self._files.get(path)
                if old is not None and old.key == key:
                    continue
                entry = self._load(path, key)
                if entry is None:
                    self._files.pop(path, None)     # vanished between listing and reading
                else:
                    self._files[path] = entry
                changed = True
        for gone in set(self._files) - set(seen):
            del self._files[gone]
            self._log.forget(gone)
            changed = True
        if changed:
            index: dict[str, CdiDeviceNodes] = {}
            for path in seen:                        # directory order, then file name order
                entry = self._files.get(path)
                if entry is not None:
                    index.update(entry.devices)
            self._index = index
            self.generation += 1

    def _load(self, path: str, key: FileKey) -> _File | None:
        if key[1] > MAX_SPEC_BYTES:
            return self._bad(path, key, f"larger than {MAX_SPEC_BYTES} bytes")
        try:
            text = self._read(path)
        except ValueError as exc:              # a FIFO or device put in its place, say
            return self._bad(path, key, str(exc))
        if text is None:
            log.debug("CDI spec %s vanished before it could be read", path)
            return None
        self.parses += 1
        log.debug("CDI spec %s: parsing %d characters", path, len(text))
        try:
            devices = parse_spec(load_document(text, _SUFFIXES[os.path.splitext(path)[1]]))
        except (ValueError, MemoryError) as exc:
            # Recorded under the file's key either way, so a file that fails is parsed again
            # only once it changes, never once a tick.
            return self._bad(path, key, str(exc) or type(exc).__name__)
        self._log.forget(path)
        return _File(key, devices)

    def _bad(self, path: str, key: FileKey, why: str) -> _File:
        self._log(path, logging.WARNING, "CDI spec %s is malformed (%s); its devices stay "
                  "unresolved until it is rewritten", path, why)
        return _File(key, {}, why)


def _dir_key(directory: str) -> tuple[int, int] | None:
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ino


def _spec_files(directory: str) -> list[tuple[str, FileKey]]:
    """(path, key) of each ``*.json`` / ``*.yaml`` file, sorted by name."""
    out = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.startswith(".") or os.path.splitext(entry.name)[1] not in _SUFFIXES:
            continue
        try:
            st = entry.stat()
        except OSError:
            continue                                  # vanished after the listing
        if not entry.is_file():
            continue
        out.append((entry.path, (st.st_mtime_ns, st.st_size, st.st_ino)))
    return out
