"""Fakes of the housekeeper's sources, for ticks driven by a test: scripted GPU readings, a
node with no figures and a source ledger with nothing to say."""

from __future__ import annotations

from gpustats.engine.gpus import GpuStatus
from gpustats.model.device import DeviceReading


class ScriptedGpus:
    """Hands out the readings it is given, one tuple per tick (``next``)."""

    def __init__(self):
        self.next: tuple[DeviceReading, ...] = ()

    def readings(self):
        return self.next

    def status(self):
        return GpuStatus(1, True, None, None, None)


class BrokenGpus(ScriptedGpus):
    """A GPU sweep that raises."""

    def readings(self):
        raise RuntimeError("sweep exploded")


class Node:
    boot_time = 1.0

    def read(self):
        return None, None


class NoErrors:
    def states(self):
        return ()

    def totals(self):
        return ()
