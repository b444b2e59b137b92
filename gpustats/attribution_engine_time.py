"""Shares of a GPU's active energy by the engine time each process used (DRM fdinfo: AMD,
Intel), as the driver measured it (pure)."""

from __future__ import annotations

from typing import Mapping

from gpustats.model.attribution import SHARE_ENGINE_TIME, SHARE_EQUAL, SHARE_EXCLUSIVE


def engine_time_weights(busy: Mapping[int, float], unseen_seconds: float | None = None
                        ) -> tuple[dict[int, float], str]:
    """Shares by the engine time each process used in the tick: not sampled, so a time-sliced
    GPU splits as its clients used it. No engine time at all while the GPU drew power above
    idle: equal, as the sampled split does without samples.

    ``unseen_seconds`` (the tick's length) where some process could not be read at all (a
    security module refused it): it may have used the GPU too, so a process's share is its
    engine time over the tick's, no more (``busy / max(Σ busy, tick)``), and what the known
    ones leave stays unattributed; with no engine time seen, none is attributed."""
    total = sum(busy.values())
    if unseen_seconds is not None:
        whole = max(total, unseen_seconds)
        if whole <= 0:
            return {pid: 0.0 for pid in busy}, SHARE_ENGINE_TIME
        return {pid: seconds / whole for pid, seconds in busy.items()}, SHARE_ENGINE_TIME
    if len(busy) == 1:
        return {pid: 1.0 for pid in busy}, SHARE_EXCLUSIVE
    if total > 0:
        return {pid: seconds / total for pid, seconds in busy.items()}, SHARE_ENGINE_TIME
    return {pid: 1.0 / len(busy) for pid in busy}, SHARE_EQUAL
