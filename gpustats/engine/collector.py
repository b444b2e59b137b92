"""One housekeeping tick: read every source, compute, publish one frozen Snapshot."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Callable, Iterable, Mapping, Protocol

from gpustats.attribution import mig_activity
from gpustats.engine.containers import ContainerTracker
from gpustats.engine.rollup import ContainerView
from gpustats.engine.counters import EnergyCounters
from gpustats.engine.energy import EnergyAccountant
from gpustats.engine.gpus import GpuStatus
from gpustats.engine.health_monitor import HealthMonitor
from gpustats.engine.ledger import EnergyLedger, Holdings, Settled
from gpustats.engine.persister import Persister
from gpustats.engine.store import SnapshotStore
from gpustats.health import kernel_health, unknown_health
from gpustats.saturation import SaturationSample, SaturationWindow
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.device import VENDOR_NVIDIA, DeviceIdentity, DeviceReading
from gpustats.model.energy_keys import (
    ActiveKey, DeviceKey, MigKey, UnallocatedIdleKey, UnattributedKey, UnobservedKey,
)
from gpustats.model.health import DeviceHealth, Saturation
from gpustats.model.host import CpuStats, MemoryStats, NodeStats
from gpustats.model.snapshot import (
    DaemonStatus, DeviceStats, MigInstanceStats, ProcessStats, Snapshot, VendorStatus,
)

log = logging.getLogger(__name__)

# How long a tick waits for the health thread to register a newly tracked session's GPU events
# (nvmlDeviceRegisterEvents: milliseconds), so the snapshot has their conditions at once.
HEALTH_OPEN_WAIT_SECONDS = 2.0


class NodeSource(Protocol):
    boot_time: float | None

    def read(self) -> tuple[CpuStats | None, MemoryStats | None]: ...


class DeviceSource(Protocol):
    def readings(self) -> tuple[DeviceReading, ...]: ...

    def status(self) -> GpuStatus: ...


class ErrorTotals(Protocol):
    def totals(self) -> tuple[tuple[str, str, int], ...]: ...

    def states(self) -> tuple: ...


class ActivitySource(Protocol):
    def activity(self) -> dict[tuple[str, int], float] | None: ...


class Housekeeper:
    """The housekeeping tick: turns each round of readings into one published Snapshot.
    A failing source leaves its part empty."""

    def __init__(self, *, node_name: str, node: NodeSource, gpus: DeviceSource,
                 errors: ErrorTotals, store: SnapshotStore, energy: EnergyAccountant,
                 counters: EnergyCounters, persister: Persister | None = None,
                 containers: ContainerTracker | None = None,
                 mig_activity_source: ActivitySource | None = None,
                 health: HealthMonitor | None = None, saturation_window: float = 60.0,
                 memory_pressure_threshold: float = 0.9,
                 process_starts: Callable[[Iterable[int]], Mapping[int, int | None]] =
                 dict.fromkeys,
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic):
        self._node_name = node_name
        self._node = node
        self._gpus = gpus
        self._errors = errors
        self._store = store
        self._energy = energy
        self._counters = counters
        # Process counters are keyed by the boot too: after a reboot, a PID with the same
        # start time is another process.
        self._ledger = EnergyLedger(counters, boot_id=energy.boot_id)
        self._persister = persister
        self._containers = containers
        self._mig_activity_source = mig_activity_source
        self._health = health
        self._process_starts = process_starts
        self._saturation_window = saturation_window
        self._pressure_threshold = memory_pressure_threshold
        self._windows: dict[str, SaturationWindow] = {}
        self._known: dict[str, DeviceIdentity] = {}   # uuid -> last identity, for NVML outages
        self._drm_health: dict[str, DeviceHealth] = {}   # AMD and Intel GPUs, by UUID
        self._idle_served: dict[str, float] = {}     # uuid -> the idle energy served last
        # Processes by (counter key, GPU instance): this tick's, and those ended while their
        # counters are retained.
        self._last_live: dict[tuple, ProcessStats] = {}
        self._ended: dict[tuple, ProcessStats] = {}
        self._wall = wall
        self._monotonic = monotonic
        self._started_at = wall()
        self._sequence = 0
        self.ticks_completed = 0

    def tick(self) -> Snapshot:
        started = time.perf_counter()
        cpu, memory = self._guard("node CPU/memory", self._node.read, (None, None))
        readings = self._guard("GPU sweep", self._gpus.readings, ())
        gpu_status = self._gpus.status()
        activity = self._mig_activities(readings)
        starts = self._starts(readings)
        attributions = {}
        for reading in readings:
            uuid = reading.identity.uuid
            attribution = self._guard(
                f"energy accounting of {uuid}",
                lambda r=reading: self._energy.account(r, activity.get(r.identity.uuid),
                                                       starts), None)
            if attribution is not None:
                attributions[uuid] = attribution
        # A GPU gone from the sweep starts afresh when it is back, as a lost one does.
        self._energy.forget_missing({r.identity.uuid for r in readings})
        mapped = None
        if self._containers is not None and (readings or gpu_status.gpus_on_pci_bus):
            mapped = self._guard("container discovery",
                                 lambda: self._containers.map(readings, starts), None)
        holdings = mapped.holdings if mapped is not None else Holdings()
        if gpu_status.away:
            # An interface away (NVML): the GPUs known before stay served, and so do their
            # counters.
            read = {r.identity.uuid for r in readings}
            holdings = replace(holdings, alive=(*holdings.alive, *(
                ("gpu", uuid) for uuid in self._known if uuid not in read)))
        # The one step that advances every energy counter of the tick.
        settled = self._guard("energy ledger",
                              lambda: self._ledger.settle(readings, attributions, starts,
                                                          holdings), None) \
            or Settled(self._counters)
        processes = self._process_stats(readings, attributions, starts, settled)
        view = ContainerView()
        if mapped is not None and self._containers is not None:
            view = self._guard("container discovery",
                               lambda: self._containers.build(mapped, processes, settled), view)
            if view.pid_to_container or view.process_users:
                processes = tuple(_with_owner(p, view) for p in processes)
        processes = self._with_ended(processes, settled)
        health, saturation, unknown = self._guard(
            "health and saturation", lambda: self._health_and_saturation(readings, gpu_status),
            ({}, {}, ()))
        devices = (*(self._device_stats(r, attributions.get(r.identity.uuid),
                                        activity.get(r.identity.uuid, {}), settled,
                                        health.get(r.identity.uuid),
                                        saturation.get(r.identity.uuid))
                     for r in readings), *unknown)
        self._sequence += 1
        snapshot = Snapshot(
            sequence=self._sequence,
            taken_at=self._wall(),
            monotonic=self._monotonic(),
            node=NodeStats(node_name=self._node_name,
                           start_time=self._node.boot_time or self._started_at,
                           cpu=cpu, memory=memory),
            devices=devices,
            processes=processes,
            pods=view.pods,
            containers=view.containers,
            status=DaemonStatus(
                gpus_on_pci_bus=sum(v.gpus_on_pci_bus for v in gpu_status.vendors
                                    if v.vendor == VENDOR_NVIDIA)
                if gpu_status.vendors else gpu_status.gpus_on_pci_bus,
                nvml_loaded=gpu_status.loaded,
                nvml_error=gpu_status.error,
                driver_version=gpu_status.driver_version,
                nvml_calls_last_tick=gpu_status.calls_last_tick,
                tick_duration_seconds=time.perf_counter() - started,
                collection_errors=self._errors.totals(),
                sources=self._errors.states(),
                vendors=tuple(VendorStatus(v.vendor, v.gpus_on_pci_bus, v.loaded)
                              for v in gpu_status.vendors or (gpu_status,)),
                dcgm_exporter_url=getattr(self._mig_activity_source, "url", None),
            ),
        )
        if self._persister is not None:
            # Before publishing: no counter is ever served above what survives a crash.
            self._guard("journaling counters", self._persister.journal, None)
        self._store.publish(snapshot)
        self.ticks_completed += 1
        if self._persister is not None:
            self._guard("persisting counters", self._persister.maybe_persist, None)
        return snapshot

    def _health_and_saturation(self, readings: tuple[DeviceReading, ...], status: GpuStatus
                               ) -> tuple[Mapping[str, DeviceHealth], dict[str, Saturation],
                                          tuple[DeviceStats, ...]]:
        """Health and saturation per GPU UUID, and the GPUs known before NVML went away (health
        Unknown). Worked out before the devices' stats, which are built with them."""
        now = self._wall()
        uuids = tuple(r.identity.uuid for r in readings)
        health: Mapping[str, DeviceHealth] = {}
        if self._health is not None:
            # The health thread waits on NVML's events: NVIDIA GPUs only.
            self._health.track(status.session if status.loaded else 0, tuple(
                r.identity.uuid for r in readings if _nvml_gpu(r)))
            self._health.wait_opened(HEALTH_OPEN_WAIT_SECONDS)
            for r in readings:
                if r.lost:
                    self._health.note_gpu_lost(r.identity.uuid, now)
                else:
                    self._health.note_gpu_answers(r.identity.uuid, now)
                    self._health.note_remapped_rows(r.identity.uuid, r.remapped_rows, now)
            health = self._health.health_by_uuid()
        health = {**health, **self._kernel_health(readings, now)}
        saturations = {}
        for reading in readings:
            uuid = reading.identity.uuid
            self._known[uuid] = reading.identity
            window = self._windows.get(uuid)
            if window is None:
                window = self._windows[uuid] = SaturationWindow(self._saturation_window,
                                                                self._pressure_threshold)
            if not reading.lost:
                window.add(SaturationSample.of(reading))
                xids = self._health.xid_count_since(uuid, now - self._saturation_window) \
                    if self._health is not None and _nvml_gpu(reading) else None   # XIDs: NVML's
                saturations[uuid] = window.saturation(xids)
            else:
                window.gap()       # the time it was lost is counted in no counter
        for gone in set(self._windows) - set(uuids):
            del self._windows[gone]
        unknown: tuple[DeviceStats, ...] = ()
        if status.away and self._known:
            # An interface went away (NVML): keep reporting the GPUs we knew and did not read,
            # with health Unknown.
            reason = status.error or "NVML is not loaded"
            unknown = tuple(DeviceStats(identity=ident,
                                        health=unknown_health(now, "NVMLNotLoaded", reason))
                            for uuid, ident in self._known.items() if uuid not in uuids)
        return health, saturations, unknown

    def _kernel_health(self, readings: tuple[DeviceReading, ...], now: float
                       ) -> dict[str, DeviceHealth]:
        """AMD and Intel GPUs' health from their drivers' files, kept tick to tick for the
        conditions' transition times."""
        kept = {}
        for r in readings:
            if r.kernel_health is not None and not r.lost:
                found = kernel_health(self._drm_health.get(r.identity.uuid), r.kernel_health,
                                      now)
                if found is not None:
                    kept[r.identity.uuid] = found
        self._drm_health = kept
        return kept

    def _mig_activities(self, readings: tuple[DeviceReading, ...]) -> dict[str, dict[int, float]]:
        """Per MIG-enabled GPU: instance activity from dcgm-exporter, else GPM."""
        mig = [r for r in readings if r.mig_enabled and not r.lost]
        if not mig:
            return {}
        exporter = None
        if self._mig_activity_source is not None:
            exporter = self._guard("dcgm-exporter activity", self._mig_activity_source.activity,
                                   None)
        out = {}
        for r in mig:
            uuid = r.identity.uuid
            mine = None if exporter is None else \
                {gi: v for (u, gi), v in exporter.items() if u == uuid}
            out[uuid] = mig_activity(r.mig_instances, mine)
        return out

    def _guard(self, what: str, fn, default):
        try:
            return fn()
        except Exception:  # one source failing gives a partial snapshot
            log.exception("%s failed; this tick's snapshot leaves it out", what)
            return default

    def _starts(self, readings: tuple[DeviceReading, ...]) -> dict[tuple[str, int], int | None]:
        """Each listed process's start time: with its PID, what its counter is keyed by."""
        by_pid = self._process_starts([p.pid for r in readings for p in r.processes])
        return {(r.identity.uuid, p.pid): by_pid.get(p.pid) for r in readings
                for p in r.processes}

    def _process_stats(self, readings: tuple[DeviceReading, ...],
                       attributions: dict[str, DeviceAttribution],
                       starts: dict[tuple[str, int], int | None],
                       settled: Settled) -> tuple[ProcessStats, ...]:
        """One entry per (GPU, GPU instance, PID); counters keyed by the process's start time
        too, so a PID reused by a new process starts a new counter."""
        out = []
        for reading in readings:
            uuid = reading.identity.uuid
            attribution = attributions.get(uuid)
            by_pid = {(a.pid, a.gpu_instance_id): a
                      for a in (attribution.processes if attribution else ())}
            seen: set[tuple[int, int | None]] = set()
            for p in reading.processes:
                if (p.pid, p.gpu_instance_id) in seen:
                    continue
                seen.add((p.pid, p.gpu_instance_id))
                a = by_pid.get((p.pid, p.gpu_instance_id))
                start = starts.get((uuid, p.pid))
                out.append(ProcessStats(
                    pid=p.pid, device_uuid=uuid, gpu_instance_id=p.gpu_instance_id,
                    start_time_ticks=start,
                    memory_used_bytes=p.memory_used_bytes,
                    compute_utilization_percent=a.sm_util_percent if a else None,
                    share_method=a.share_method if a else None,
                    attributed_power_watts=a.power_watts if a else None,
                    attributed_energy_joules=settled.total(
                        self._ledger.process_key(uuid, p.pid, start)),
                ))
        return tuple(out)

    def _with_ended(self, processes: tuple[ProcessStats, ...],
                    settled: Settled) -> tuple[ProcessStats, ...]:
        """This tick's processes, then those that ended while their counters are retained
        (``ended``: their energy and owner kept, their figures of the moment absent)."""
        def key(p: ProcessStats):
            return self._ledger.process_key(p.device_uuid, p.pid, p.start_time_ticks), \
                p.gpu_instance_id
        live = {key(p): p for p in processes}
        for k, p in self._last_live.items():
            if k not in live and k not in self._ended:
                self._ended[k] = replace(
                    p, ended=True, memory_used_bytes=None, compute_utilization_percent=None,
                    share_method=None, attributed_power_watts=None)
        kept = {}
        for k, p in self._ended.items():
            total = settled.total(k[0])
            if k in live or total is None:
                continue                          # back, or its counter expired
            kept[k] = p if p.attributed_energy_joules == total else \
                replace(p, attributed_energy_joules=total)
        self._ended, self._last_live = kept, live
        return processes + tuple(kept.values()) if kept else processes

    def _mig_stats(self, reading: DeviceReading, activity: dict[int, float],
                   settled: Settled) -> tuple[MigInstanceStats, ...]:
        uuid = reading.identity.uuid
        out = []
        for inst in reading.mig_instances:
            watts, total = settled.figures(MigKey(uuid, inst.gpu_instance_id), uuid)
            out.append(MigInstanceStats(
                gpu_instance_id=inst.gpu_instance_id, uuid=inst.uuid, profile=inst.profile,
                memory_total_bytes=inst.memory_total_bytes,
                memory_used_bytes=inst.memory_used_bytes,
                activity_ratio=activity.get(inst.gpu_instance_id),
                attributed_power_watts=watts, attributed_energy_joules=total,
            ))
        return tuple(out)

    def _device_stats(self, reading: DeviceReading, attribution: DeviceAttribution | None,
                      activity: dict[int, float], settled: Settled, health: DeviceHealth | None,
                      saturation: Saturation | None) -> DeviceStats:
        uuid = reading.identity.uuid
        energy, active = settled.total(DeviceKey(uuid)), settled.total(ActiveKey(uuid))
        unobserved = settled.total(UnobservedKey(uuid))
        idle = None
        if energy is not None and active is not None:
            # To the millijoule (the driver counter's unit): two sums of the same ticks do not
            # jitter it below itself. The energy no one observed is no idle.
            idle = self._idle_served[uuid] = max(
                self._idle_served.get(uuid, 0.0),
                round(max(0.0, energy - active - (unobserved or 0.0)), 3))
        unattributed_watts, unattributed = settled.figures(UnattributedKey(uuid), uuid)
        unallocated_watts, unallocated = settled.figures(UnallocatedIdleKey(uuid), uuid)
        return DeviceStats(
            identity=reading.identity,
            lost=reading.lost,
            memory_used_bytes=reading.memory_used_bytes,
            duty_cycle_percent=reading.utilization_percent,
            power_watts=attribution.power_watts if attribution else reading.power_watts,
            energy_joules=energy,
            idle_power_watts=attribution.idle_power_watts if attribution else None,
            active_power_watts=attribution.active_power_watts if attribution else None,
            active_energy_joules=active,
            idle_energy_joules=idle,
            unattributed_power_watts=unattributed_watts,
            unattributed_energy_joules=unattributed,
            unallocated_idle_power_watts=unallocated_watts,
            unallocated_idle_energy_joules=unallocated,
            unobserved_energy_joules=unobserved,
            power_limit_watts=reading.power_limit_watts,
            temperature_celsius=reading.temperature_celsius,
            sharing_mode=attribution.sharing_mode if attribution else None,
            mig_instances=self._mig_stats(reading, activity, settled),
            reading=reading,
            health=health,
            saturation=saturation,
        )


def _nvml_gpu(reading: DeviceReading) -> bool:
    return reading.identity.vendor in (None, VENDOR_NVIDIA)


def _with_owner(process: ProcessStats, view: ContainerView) -> ProcessStats:
    """The process with its container (or tenant) and its command and user."""
    where = (process.device_uuid, process.pid)
    cid, user = view.pid_to_container.get(where), view.process_users.get(where)
    if cid is None and user is None:
        return process
    return replace(process, container_id=cid,
                   **({"comm": user.comm, "uid": user.uid, "user": user.user} if user else {}))
