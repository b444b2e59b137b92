"""A wall-clock step that lands in the middle of a sweep.

The sweep looks for a step once, before its reads, and re-bases the sample stamps it has seen
by the step found. A step that lands after that look and before the utilization samples are
read has them stamped on the new clock already; moved by the step again at the next look, they
would lie in the future after a step forward, and no sample would come for as long as the
step: a tenant seen only through its samples (its process listed at no tick) would go
unbilled meanwhile. A stamp moves with a step only where it was taken on the old clock.
"""

from __future__ import annotations

import pytest

from gpustats.sources.wall_clock import rebased_stamp_us
from tests.support.gpus import GPU_A as GPU
from tests.support.sweepers import SimulatedSweepers

EPOCH = 1.7e9


class SteppingWall:
    """The wall clock of a hand-moved monotonic one, which can take a step after its next
    ``reads`` reads."""

    def __init__(self):
        self.monotonic = lambda: 0.0
        self.offset = 0.0
        self._pending: tuple[int, float] | None = None

    def step_after(self, reads: int, seconds: float) -> None:
        self._pending = (reads, seconds)

    def __call__(self) -> float:
        if self._pending is not None:
            reads, seconds = self._pending
            if reads <= 0:
                self.offset += seconds
                self._pending = None
            else:
                self._pending = (reads - 1, seconds)
        return EPOCH + self.monotonic() + self.offset


@pytest.fixture
def sweepers(tmp_path):
    made = SimulatedSweepers(tmp_path)
    yield made
    made.close()


@pytest.mark.parametrize("seconds", [485.0, -73.0])
@pytest.mark.parametrize("reads", [0, 1])
def test_a_step_before_or_within_a_sweep_loses_no_sample(sweepers, seconds, reads):
    """``reads`` 0: the step lands before the sweep's look; 1: just after it."""
    scenario = {"devices": [{"uuid": GPU, "power_watts": 300}], "processes": [
        {"pid": 101, "device": GPU, "sm_util_percent": 60},
        {"pid": 102, "device": GPU, "sm_util_percent": 40, "between_ticks": True}]}
    wall = SteppingWall()
    swept = sweepers.start(scenario, wall=wall)
    wall.monotonic = swept.clock

    def tick() -> dict[int, int]:
        swept.clock.now += 1.0
        (reading,) = swept.sweeper.sweep()
        return {s.pid: s.sm_util_percent for s in reading.process_samples or ()}

    tick()
    assert tick() == {101: 60, 102: 40}
    wall.step_after(reads, seconds)
    seen = [tick() for _ in range(4)]
    # Within the sweep a step back may cost that one tick's samples (stamped before the last
    # seen); never more.
    assert all(s == {101: 60, 102: 40} for s in seen[1:]), seen


NOW = 1_700_000_000_000_000      # the old clock's reading at the step (µs)


@pytest.mark.parametrize("step", [30_000_000, -30_000_000, 2_000_000, -2_000_000])
def test_a_stamp_taken_on_the_old_clock_moves_with_the_step(step):
    taken_before = NOW - 1_000_000
    assert rebased_stamp_us(taken_before, step, NOW + step) == taken_before + step


@pytest.mark.parametrize("step", [30_000_000, -30_000_000, 2_000_000, -2_000_000])
def test_a_stamp_taken_on_the_new_clock_stays(step):
    """Taken after the step (the step fell between the look and the read): it is already
    where it belongs; moved, it would lie in the future (forward) or a step back in time."""
    now = NOW + step + 1_000_000
    taken_after = NOW + step + 500_000
    assert rebased_stamp_us(taken_after, step, now) == taken_after
