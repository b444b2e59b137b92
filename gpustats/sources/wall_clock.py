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


# A stamp no later than this past the clock's reading counts as taken (sample stamps are
# taken before the sweep reads them; this is room for the two clocks' rounding).
STAMP_SLACK_US = 100_000


def rebased_stamp_us(stamp_us: int, step_us: int, now_us: int) -> int:
    """A wall-clock stamp kept from before a step of ``step_us``, on the new clock (read at
    ``now_us``, after the step).

    It moves with the step where it was taken on the old clock. One taken on the new clock
    already (the step landed after the look that found it and before the read that took the
    stamp) stays: moved, it would lie in the future after a step forward (no newer sample for
    as long as the step) or a step back in time. Of the stamp and the stamp moved, the later
    one not in the future is where it belongs: a stamp taken before a step back lies in the
    future unmoved, and one taken after a step forward lies in the future moved.
    """
    limit = now_us + STAMP_SLACK_US
    moved = stamp_us + step_us
    return max((s for s in (stamp_us, moved) if s <= limit), default=now_us)
