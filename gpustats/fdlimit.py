"""The open-file limit, shared out: client connections, kept-open cgroup files, the rest."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1024              # ~10 KB of memory each when all are held open
HEALTH_CONNECTIONS = 64
WATCH_CONNECTIONS = 256             # GPU watches, held by the watch thread (watch_streams)
RESERVED_FDS = 64                   # proc and state files, sockets to sources, NVML, logs
# Cgroup stat files kept open between reads (``kept_files.KeptFiles``): three per container or
# pod, so 12,288 cover 4,096 cgroups (3,000 containers and their pods). Each open kernel file
# holds about a page of kernel memory (its read buffer), charged to the daemon: at most about
# 50 MB, and only on nodes with that many cgroups. A file read the plain way costs an open, a
# fstat and a close besides its read: at 3,000 containers, 2,048 kept files left most of them
# to that and the tick took 1.6x the CPU.
KEPT_FILES_MAX = 12288
# ``/proc/<pid>/stat`` of GPU processes kept open between ticks (their start times).
KEPT_PROC_FILES_MAX = 128


def _raise_soft_limit(need: int) -> int | None:
    """Raises the soft RLIMIT_NOFILE to ``need`` within the hard limit; the soft limit after
    (``None``: unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_limit(wanted: int = MAX_CONNECTIONS) -> int:
    """How many client connections the descriptor limit allows (they come first)."""
    soft = _raise_soft_limit(wanted + HEALTH_CONNECTIONS + RESERVED_FDS)
    if soft is None:
        return wanted
    return max(8, min(wanted, soft - HEALTH_CONNECTIONS - RESERVED_FDS))


def kept_file_limit(wanted: int = KEPT_FILES_MAX) -> int:
    """How many cgroup files may stay open: what the limit leaves after the connections.

    Kept files only save time; with a tight limit they get fewer (or none) and files are
    read the plain way.
    """
    others = MAX_CONNECTIONS + HEALTH_CONNECTIONS + WATCH_CONNECTIONS + RESERVED_FDS
    soft = _raise_soft_limit(others + wanted)
    if soft is None:
        return wanted
    return max(0, min(wanted, soft - others))


def kept_file_shares() -> tuple[int, int]:
    """(cgroup files, process stat files) that may stay open: ``kept_file_limit`` for both,
    shared in proportion to what each wants."""
    wanted = KEPT_FILES_MAX + KEPT_PROC_FILES_MAX
    kept = kept_file_limit(wanted)
    procs = kept * KEPT_PROC_FILES_MAX // wanted
    return kept - procs, procs
