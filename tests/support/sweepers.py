"""The device sweep over the simulated driver, on a hand-moved clock: a scenario written to a
file, the simulator installed below pynvml, an NVML session and a sweeper, all closed in the
reverse order they were made."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

from gpustats.simulator import SimulatedNvml
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.session import NvmlSession
from gpustats.sources.nvml.sweep import DeviceSweeper
from tests.support.clock import Clock
from tests.support.fakehost import write_scenario


class Swept(NamedTuple):
    path: Path
    sim: SimulatedNvml
    sweeper: DeviceSweeper
    clock: Clock


class SimulatedSweepers:
    def __init__(self, directory: Path):
        self._directory = directory
        self._made: list[tuple[SimulatedNvml, NvmlSession, DeviceSweeper]] = []

    def start(self, scenario: dict, *, wall_epoch: float | None = None,
              wall: Callable[[], float] | None = None, **sweeper_args) -> Swept:
        """``wall_epoch``: the wall clock follows the hand-moved one from that epoch (sample
        time stamps); ``wall``: this wall clock, for the simulator and the sweep alike; else
        the simulator reads the real wall clock."""
        path = self._directory / f"s{len(self._made)}.yaml"
        write_scenario(path, scenario)
        clock = Clock()
        walls = {} if wall_epoch is None else {"wall": lambda: wall_epoch + clock.now}
        if wall is not None:
            walls = {"wall": wall}
        sim = SimulatedNvml(str(path), monotonic=clock, **walls)
        sim.install()
        session = NvmlSession.open(CollectionErrors())
        sweeper = DeviceSweeper(session, monotonic=clock, **walls, **sweeper_args)
        self._made.append((sim, session, sweeper))
        return Swept(path, sim, sweeper, clock)

    def close(self) -> None:
        for sim, session, sweeper in reversed(self._made):
            sweeper.close()
            session.close()
            sim.uninstall()
        self._made.clear()
