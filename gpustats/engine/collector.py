"""One housekeeping tick: read every source, compute, publish one frozen Snapshot."""

from __future__ import annotations

import logging
import time
from typing import Callable, Protocol

from gpustats.model.device import DeviceReading
from gpustats.model.host import CpuStats, MemoryStats, NodeStats
from gpustats.model.snapshot import DaemonStatus, DeviceStats, Snapshot
from gpustats.engine.gpus import GpuStatus
from gpustats.engine.store import SnapshotStore

log = logging.getLogger(__name__)


class NodeSource(Protocol):
    boot_time: float | None

    def read(self) -> tuple[CpuStats | None, MemoryStats | None]: ...


class DeviceSource(Protocol):
    def readings(self) -> tuple[DeviceReading, ...]: ...

    def status(self) -> GpuStatus: ...


class ErrorTotals(Protocol):
    def totals(self) -> tuple[tuple[str, str, int], ...]: ...


class Collector:
    """Builds and publishes a Snapshot per tick. A failing source leaves its part empty."""

    def __init__(self, *, node_name: str, node: NodeSource, gpus: DeviceSource,
                 errors: ErrorTotals, store: SnapshotStore,
                 wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic):
        self._node_name = node_name
        self._node = node
        self._gpus = gpus
        self._errors = errors
        self._store = store
        self._wall = wall
        self._monotonic = monotonic
        self._sequence = 0
        self.ticks_completed = 0

    def tick(self) -> Snapshot:
        started = time.perf_counter()
        cpu, memory = self._read_node()
        readings = self._read_gpus()
        devices = tuple(device_stats(r) for r in readings)
        gpu_status = self._gpus.status()
        self._sequence += 1
        snapshot = Snapshot(
            sequence=self._sequence,
            taken_at=self._wall(),
            monotonic=self._monotonic(),
            node=NodeStats(node_name=self._node_name,
                           start_time=self._node.boot_time or 0.0, cpu=cpu, memory=memory),
            devices=devices,
            status=DaemonStatus(
                gpus_on_pci_bus=gpu_status.gpus_on_pci_bus,
                nvml_loaded=gpu_status.nvml_loaded,
                nvml_error=gpu_status.nvml_error,
                driver_version=gpu_status.driver_version,
                nvml_calls_last_tick=gpu_status.calls_last_tick,
                tick_duration_seconds=time.perf_counter() - started,
                collection_errors=self._errors.totals(),
            ),
        )
        self._store.publish(snapshot)
        self.ticks_completed += 1
        return snapshot

    def _read_node(self) -> tuple[CpuStats | None, MemoryStats | None]:
        try:
            return self._node.read()
        except Exception:  # noqa: BLE001 - one source failing gives a partial snapshot
            log.exception("reading node CPU/memory failed")
            return None, None

    def _read_gpus(self) -> tuple[DeviceReading, ...]:
        try:
            return self._gpus.readings()
        except Exception:  # noqa: BLE001 - one source failing gives a partial snapshot
            log.exception("GPU sweep failed")
            return ()


def device_stats(reading: DeviceReading) -> DeviceStats:
    return DeviceStats(
        identity=reading.identity,
        lost=reading.lost,
        memory_used_bytes=reading.memory_used_bytes,
        duty_cycle_percent=reading.utilization_percent,
        power_watts=reading.power_watts,
        power_limit_watts=reading.power_limit_watts,
        temperature_celsius=reading.temperature_celsius,
    )
