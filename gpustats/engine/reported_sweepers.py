"""Sweepers that mark their source working or failing in ``CollectionErrors`` at every sweep,
and the simulated PCI bus that stands in for the scan under ``--simulate``."""

from __future__ import annotations

from gpustats.sources.driver_procfs import normalize_bus_id
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.query import DriverGone
from gpustats.sources.nvml.sweep import DeviceSweeper
from gpustats.sources.pci import PciGpu


class SimulatedBus:
    """With ``--simulate`` the simulated GPUs stand in for what the PCI scan would find."""

    def __init__(self, simulator):
        self._simulator = simulator

    def scan(self) -> tuple[PciGpu, ...]:
        return tuple(PciGpu(address=normalize_bus_id(d.pci_bus_id))
                     for d in self._simulator.scenario.devices)


class ReportedSweeper:
    """A device sweeper whose every sweep marks the ``nvml`` source working or failing; the
    rest of the sweeper is passed through as it is."""

    def __init__(self, sweeper: DeviceSweeper, errors: CollectionErrors):
        self._sweeper = sweeper
        self._errors = errors

    def __getattr__(self, name: str):
        return getattr(self._sweeper, name)

    def sweep(self):
        try:
            readings = self._sweeper.sweep()
        except DriverGone as exc:
            self._errors.failed("nvml", "driver_gone", f"NVML session lost: {exc}")
            raise
        self._errors.succeeded("nvml")
        return readings


class ReportedDrmSweeper:
    """An AMD or Intel sweeper whose every sweep marks its source (``amd``, ``intel``) working,
    or failing while other processes' DRM fdinfo is refused (their GPUs' processes unknown)."""

    def __init__(self, sweeper, vendor: str, errors: CollectionErrors):
        self._sweeper = sweeper
        self._vendor = vendor
        self._errors = errors

    def __getattr__(self, name: str):
        return getattr(self._sweeper, name)

    def sweep(self):
        readings = self._sweeper.sweep()
        if any("processes" in r.unsupported_fields for r in readings):
            self._errors.failed(self._vendor, "fdinfo_refused",
                                "other processes' DRM fdinfo is refused (CAP_SYS_PTRACE "
                                "missing?): their GPU processes are unknown")
        elif readings:
            self._errors.succeeded(self._vendor)
        return readings
