"""Steps of the wall clock, told from the monotonic clock.

NVML stamps its samples with the wall clock (microseconds since the epoch), and the sweep asks
for samples newer than the newest it has seen. When the wall clock steps (an NTP step, an
operator's ``date -s``), those stamps jump with it; everything the daemon times itself runs on
the monotonic clock. Between two looks, the wall clock should move as far as the monotonic
one; what it moved beyond that, past ``STEP_SECONDS``, is a step (slewing moves it by
microseconds a second).
"""

from __future__ import annotations

import time
from typing import Callable

STEP_SECONDS = 1.0


class WallClockSteps:
    """``step_us()``: how far the wall clock stepped since the last call (0: it did not)."""

    def __init__(self, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic):
        self._wall = wall
        self._monotonic = monotonic
        self._last: tuple[float, float] | None = None

    def step_us(self) -> int:
        wall, mono = self._wall(), self._monotonic()
        last, self._last = self._last, (wall, mono)
        if last is None:
            return 0
        step = (wall - last[0]) - (mono - last[1])
        return int(step * 1e6) if abs(step) > STEP_SECONDS else 0
