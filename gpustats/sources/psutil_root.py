"""Where psutil reads procfs: ``psutil.PROCFS_PATH``, one setting for the whole process.

psutil takes no root per call, so the daemon points it at ``--proc-root`` once at start-up,
before any reader is built, and readers that use psutil refuse a root it does not read.
"""

from __future__ import annotations

import os

import psutil


def use_proc_root(path: str) -> str:
    """Point psutil at the host's procfs; returns the root it read before."""
    previous: str = psutil.PROCFS_PATH
    psutil.PROCFS_PATH = os.path.normpath(path)
    return previous


def require_proc_root(path: str) -> None:
    """``ValueError`` unless psutil reads ``path`` (``use_proc_root`` was not called for it)."""
    current = os.path.normpath(psutil.PROCFS_PATH)
    if current != os.path.normpath(path):
        raise ValueError(f"psutil reads procfs at {current}, not at {path}: "
                         f"use_proc_root({path!r}) must come first")
