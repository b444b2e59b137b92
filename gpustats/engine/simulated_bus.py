"""With ``--simulate`` the simulated GPUs stand in for what the PCI scan would find."""

from __future__ import annotations

from typing import Any

from gpustats.sources.driver_procfs import normalize_bus_id
from gpustats.sources.pci import PciGpu


class SimulatedBus:
    """The scenario's GPUs as the PCI scan's answer (the simulator passed in, not imported)."""

    def __init__(self, simulator: Any) -> None:
        self._simulator = simulator

    def scan(self) -> tuple[PciGpu, ...]:
        return tuple(PciGpu(address=normalize_bus_id(d.pci_bus_id))
                     for d in self._simulator.scenario.devices)
