"""Containers and pods of one tick: map them to GPUs, read their usage when due, build them.

``ContainerTracker`` runs the three rooms in order: ``gpu_mapping`` (who holds which GPU, and
names), ``usage_schedule`` (CPU and memory, each cgroup on its phase) and ``rollup`` (the
snapshot's containers and pods with the energy the ledger settled).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from gpustats.engine.counters import EnergyCounters
from gpustats.engine.gpu_mapping import CgroupSource, GpuMapper, MappedTick, NamesSource
from gpustats.engine.mapping_devices import DevicesListMapping
from gpustats.engine.mapping_pod_resources import (
    AllocationSource, ClaimSource, PodResourcesMapping,
)
from gpustats.engine.mapping_processes import ProcessMapping, ProcSource, UserSource
from gpustats.engine.ledger import EnergyLedger, Settled
from gpustats.engine.rollup import ContainerView, Rollup
from gpustats.engine.usage_schedule import UsageSchedule
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.device import DeviceReading
from gpustats.model.snapshot import ProcessStats

__all__ = ["ContainerTracker", "ContainerView"]


class ContainerTracker:
    """Each tick's containers and pods: mapped to GPUs, their usage read, rolled up."""

    def __init__(self, cgroups: CgroupSource, procs: ProcSource, counters: EnergyCounters, *,
                 pod_resources: AllocationSource | None = None,
                 runtime: NamesSource | None = None, claims: ClaimSource | None = None,
                 names: Sequence[NamesSource] = (), users: UserSource | None = None,
                 usage_every_ticks: int = 1):
        self._cgroups = cgroups
        self._counters = counters
        # The mapping sources, in order: one line each.
        self._mapper = GpuMapper(cgroups, (
            ProcessMapping(procs, users),
            DevicesListMapping(cgroups),
            *((PodResourcesMapping(pod_resources, claims),) if pod_resources is not None else ()),
        ), names=(*names, *((runtime,) if runtime is not None else ())))
        self._usage = UsageSchedule(cgroups, usage_every_ticks)
        self._rollup = Rollup(counters)
        self._ticks = 0

    def tick(self, readings: tuple[DeviceReading, ...],
             attributions: Mapping[str, DeviceAttribution],
             processes: tuple[ProcessStats, ...]) -> ContainerView:
        """Map, settle the tick's energy in a ledger of this tracker's counters, build: for
        callers without a collector (the collector runs the ledger itself, between the two)."""
        starts = {(p.device_uuid, p.pid): p.start_time_ticks for p in processes}
        mapped = self.map(readings, starts)
        try:
            settled = EnergyLedger(self._counters).settle(readings, attributions, starts,
                                                          mapped.holdings)
        except BaseException:
            self._cgroups.end_tick()
            raise
        return self.build(mapped, processes, settled)

    def map(self, readings: tuple[DeviceReading, ...],
            starts: Mapping[tuple[str, int], int | None]) -> MappedTick:
        """Who holds which GPU this tick (what the energy ledger bills by). ``build`` must
        follow (it ends the cgroup source's tick)."""
        self._ticks += 1
        try:
            return self._mapper.map(readings, starts)
        except BaseException:
            self._cgroups.end_tick()
            raise

    def build(self, mapped: MappedTick, processes: tuple[ProcessStats, ...],
              settled: Settled) -> ContainerView:
        """Containers and pods with their usage (read when due) and the figures the ledger
        settled."""
        try:
            usage = self._usage.read(mapped.shown, mapped.pods, self._ticks)
            return self._rollup.build(mapped, processes, settled, usage)
        finally:
            self._cgroups.end_tick()
