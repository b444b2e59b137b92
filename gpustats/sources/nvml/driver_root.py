"""NVML loaded from a driver tree mounted somewhere else (``--nvml-driver-root``): the GPU
Operator's driver container shares its root at ``/run/nvidia/driver``, where the library is
not on the daemon's own search path.

The library is looked for in that tree's library directories, as the NVIDIA Container
Toolkit looks for it; a link in the tree that names an absolute path is followed inside the
tree, not on the daemon's own filesystem. It is handed to pynvml before ``nvmlInit`` (which
loads its library only while it has none), so the rest of the session is unchanged.
"""

from __future__ import annotations

import ctypes
import os

import pynvml

LIBRARY = "libnvidia-ml.so.1"
LIBRARY_DIRS = ("usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
                "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib", "lib")
_MAX_LINKS = 8


def _inside(root: str, path: str) -> str | None:
    """``path`` (relative to ``root``) with its links resolved inside ``root``; None when it
    is not a file there or the links go round."""
    current = os.path.join(root, path)
    for _ in range(_MAX_LINKS):
        if not os.path.islink(current):
            return current if os.path.isfile(current) else None
        target = os.readlink(current)
        current = os.path.join(root, target.lstrip("/")) if os.path.isabs(target) \
            else os.path.join(os.path.dirname(current), target)
    return None


def find_library(driver_root: str) -> str | None:
    """The NVML library of the driver tree at ``driver_root``; None if it has none."""
    for directory in LIBRARY_DIRS:
        found = _inside(driver_root, os.path.join(directory, LIBRARY))
        if found is not None:
            return found
    return None


class LibraryNotLoaded(Exception):
    """The tree has no usable NVML library; ``reason`` is a short label."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def load_from(driver_root: str) -> str | None:
    """Give pynvml the driver tree's library, unless it holds one already (a session opened
    before, or the simulator's); returns the path loaded (None: one was there)."""
    with pynvml.libLoadLock:
        if pynvml.nvmlLib is not None:
            return None
        path = find_library(driver_root)
        if path is None:
            raise LibraryNotLoaded("library_not_found", f"no {LIBRARY} under {driver_root} "
                                   f"({', '.join(LIBRARY_DIRS)})")
        try:
            pynvml.nvmlLib = ctypes.CDLL(path)
        except OSError as exc:
            raise LibraryNotLoaded("library_unusable", f"{path}: {exc}") from exc
        return path
