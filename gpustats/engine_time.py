"""Shares of a GPU's active energy by the engine time each process used in the tick, as the
driver measured it (DRM fdinfo: AMD, Intel), and what no process seen accounts for.

The work of clients the daemon did not see (the device's own busy measure above its clients'),
and of clients no owner could be decided for, is ``unattributed`` engine seconds: it takes its
part of the split like a process would, and that part is billed to no one.
"""

from __future__ import annotations

import math
from typing import Mapping

from gpustats.model.attribution import SHARE_ENGINE_TIME, SHARE_EQUAL, SHARE_EXCLUSIVE
from gpustats.model.device import ProcessReading


def engine_seconds(processes: tuple[ProcessReading, ...]) -> dict[int, float] | None:
    """Each process's engine busy seconds over the tick, where the driver measured them for
    every process (DRM fdinfo); ``None`` otherwise."""
    if not processes:
        return None
    busy: dict[int, float] = {}
    for p in processes:
        seconds = p.engine_busy_seconds
        if seconds is None or not math.isfinite(seconds):
            return None
        busy[p.pid] = max(0.0, seconds)
    return busy


def weights_by_engine_time(busy: Mapping[int, float], unattributed: float = 0.0,
                           unseen_seconds: float | None = None
                           ) -> tuple[dict[int, float], str]:
    """Shares by the engine time each process used in the tick: not sampled, so a time-sliced
    GPU splits as its clients used it; ``unattributed`` engine seconds keep their part, so the
    shares then add up to less than 1. No engine time at all while the GPU drew power above
    idle, and none unaccounted for: equal, as without samples.

    ``unseen_seconds`` (the tick's length) where some process could not be read at all (a
    security module refused it): it may have used the GPU too, so a process's share is its
    engine time over the tick's, no more (``busy / max(Σ busy + unattributed, tick)``), and
    what the known ones leave stays unattributed; with no engine time seen, none is
    attributed."""
    rest = unattributed if math.isfinite(unattributed) and unattributed > 0 else 0.0
    total = sum(busy.values()) + rest
    if unseen_seconds is not None:
        whole = max(total, unseen_seconds)
        if not whole > 0:
            return {pid: 0.0 for pid in busy}, SHARE_ENGINE_TIME
        return {pid: seconds / whole for pid, seconds in busy.items()}, SHARE_ENGINE_TIME
    if len(busy) == 1 and not rest:
        return {pid: 1.0 for pid in busy}, SHARE_EXCLUSIVE
    if total > 0:
        return {pid: seconds / total for pid, seconds in busy.items()}, SHARE_ENGINE_TIME
    return {pid: 1.0 / len(busy) for pid in busy}, SHARE_EQUAL
