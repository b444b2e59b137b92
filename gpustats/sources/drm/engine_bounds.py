"""One device's engine time over a tick, bounded by what the tick held, and the work its clients
seen do not account for.

- Per device and engine class: the clients' engine seconds together are at most the tick ×
  the class's engines; beyond it, each is scaled down alike (``clamp_device``).
- Seen utilization: the busiest class's engine seconds / (tick × its engines).
- Unseen work: the device's own busy measure (amdgpu ``gpu_busy_percent``; Intel's GT idle
  residency, ``gt_idle.py``) above the seen utilization by more than ``UNSEEN_MARGIN`` is work
  no client seen accounts for (one opened since the process was last read, one held by a
  process that could not be read). It is expressed in the clients' engine seconds, so that
  what the seen clients did keeps its share and the rest stays unattributed
  (``unseen_seconds``). The margin absorbs the two measures' differences (a GT awake between
  jobs, the SMU's sampling).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from gpustats.sources.drm.clients import ClientTick

UNSEEN_MARGIN = 0.25


def _capacities(clients: Iterable[ClientTick]) -> tuple[dict[str, float], dict[str, int]]:
    busy: dict[str, float] = {}
    capacity: dict[str, int] = {}
    for client in clients:
        for engine, seconds in client.engine_seconds.items():
            busy[engine] = busy.get(engine, 0.0) + seconds
            capacity[engine] = max(capacity.get(engine, 1), client.capacity.get(engine, 1))
    return busy, capacity


def clamp_device(clients: list[ClientTick], seconds: float | None) -> list[ClientTick]:
    """The clients with each class's engine seconds scaled so that together they fit in
    ``seconds`` × the class's engines."""
    if seconds is None or not seconds > 0:
        return clients
    busy, capacity = _capacities(clients)
    scale = {e: seconds * capacity[e] / b for e, b in busy.items() if b > seconds * capacity[e]}
    if not scale:
        return clients
    return [replace(c, engine_seconds={e: s * scale.get(e, 1.0)
                                       for e, s in c.engine_seconds.items()})
            for c in clients]


def seen_utilization(clients: Iterable[ClientTick], seconds: float | None) -> float | None:
    """The busiest class's utilization by the clients, 0..1; ``None`` without an interval."""
    if seconds is None or not seconds > 0:
        return None
    busy, capacity = _capacities(clients)
    if not busy:
        return 0.0
    return min(1.0, max(b / (seconds * capacity[e]) for e, b in busy.items()))


def unseen_seconds(clients: list[ClientTick], seconds: float | None,
                   device_percent: int | None) -> float:
    """Engine seconds of work the device did that its clients seen do not account for (0
    when the device's measure is absent, or within the margin of theirs)."""
    seen = seen_utilization(clients, seconds)
    if seen is None or device_percent is None or seconds is None:
        return 0.0
    device = min(1.0, max(0.0, device_percent / 100.0))
    if device - seen <= UNSEEN_MARGIN:
        return 0.0
    total = sum(c.busy_seconds for c in clients)
    if seen <= 0 or total <= 0:
        return device * seconds
    unseen_part = (device - seen) / device
    return total * unseen_part / (1.0 - unseen_part)
