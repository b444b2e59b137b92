"""Each sweep's read of the kernel's clients lists (``debugfs.py``), one small file per GPU:
``<sysfs>/kernel/debug/dri/<card minor>/clients``.

The lists are used only when every device's reads: a device without one would have its
clients unseen, so then the bounded scan of every process stands in for all (``clients.py``).
"""

from __future__ import annotations

import logging
import os
from typing import Iterable

from gpustats.hostfs import HostRoots, UnsafeFile
from gpustats.sources.drm.debugfs import CLIENTS_BYTES, parse_clients
from gpustats.sources.drm.devices import DrmDevice
from gpustats.sources.drm.fd_walk import Listed
from gpustats.sources.drm.reads import FsReads

log = logging.getLogger(__name__)


class ClientLists:
    def __init__(self, roots: HostRoots, fs: FsReads):
        self._base = roots.sys_path("kernel", "debug", "dri")
        self._fs = fs
        self._using: bool | None = None

    def read(self, devices: Iterable[DrmDevice]) -> dict[int, Listed] | None:
        """What the kernel lists per tgid: its (minor, client ID) pairs, sorted; ``None``
        where some device's list cannot be read."""
        by_tgid: dict[int, list[tuple[int, int | None]]] = {}
        for device in devices:
            text = self._text(device)
            try:
                clients = parse_clients(text) if text is not None else None
            except ValueError:
                clients = None
            if clients is None:
                self._report(False, device.address)
                return None
            for c in clients:
                by_tgid.setdefault(c.tgid, []).append((c.minor, c.client_id))
        self._report(True, "")
        return {tgid: tuple(sorted(entries, key=lambda e: (e[0], e[1] or 0)))
                for tgid, entries in by_tgid.items()}

    def _text(self, device: DrmDevice) -> str | None:
        if device.card is None or not device.minors:
            return None
        path = os.path.join(self._base, str(device.minors[0]), "clients")
        try:
            return self._fs.data_or_raise(path, CLIENTS_BYTES).decode("utf-8", "replace")
        except (OSError, UnsafeFile):
            return None

    def _report(self, using: bool, address: str) -> None:
        if using == self._using:
            return
        self._using = using
        if using:
            log.info("DRM clients read from the kernel's clients lists (debugfs): a client is "
                     "seen at the first tick after it opens")
        else:
            log.info("no readable DRM clients list for %s (debugfs not mounted, or not root): "
                     "processes are scanned for DRM clients within a budget per tick", address)
