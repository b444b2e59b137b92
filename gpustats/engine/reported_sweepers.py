"""The NVML sweeper that marks its source working or failing in ``CollectionErrors`` at every
sweep (the AMD and Intel sweepers' is ``drm_source``)."""

from __future__ import annotations

from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.query import DriverGone
from gpustats.sources.nvml.sweep import DeviceSweeper


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
