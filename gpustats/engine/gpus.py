"""The GPU side of a tick: PCI gate, NVML load with retry, and the device sweep.

No NVIDIA GPU on the PCI bus: NVML is never loaded and a tick costs one timestamp comparison
(the bus is rescanned every ``rescan_interval`` for hot-plug). GPUs present: NVML is opened; a
failed load is logged once per attempt and retried every ``retry_interval``. Errors meaning the
driver went away close the session and re-enter the retry loop; the daemon serves throughout.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from gpustats.engine.lost_gpus import LostGpuNamer
from gpustats.model.device import DeviceReading

log = logging.getLogger(__name__)


class PciScan(Protocol):
    def scan(self) -> tuple: ...


class Sweeper(Protocol):
    calls: int

    def sweep(self) -> tuple[DeviceReading, ...]: ...

    def unidentified(self) -> tuple[int, ...]: ...

    def close(self) -> None: ...


class SessionUnavailable(Exception):
    """Raised by ``open_session`` when NVML cannot be loaded; the message is logged."""


@dataclass(frozen=True)
class GpuStatus:
    gpus_on_pci_bus: int
    nvml_loaded: bool
    nvml_error: str | None
    driver_version: str | None
    calls_last_tick: int | None
    session: int = 0           # number of the current NVML session; 0 while none is open


class GpuSource:
    """Owns the NVML session lifecycle; ``readings()`` is called once per tick."""

    def __init__(self, scanner: PciScan,
                 open_session: Callable[[], tuple[Sweeper, str | None]],
                 *, is_driver_gone: Callable[[BaseException], bool],
                 retry_interval: float, rescan_interval: float = 300.0,
                 lost_namer: LostGpuNamer | None = None,
                 monotonic: Callable[[], float] = time.monotonic):
        self._scanner = scanner
        self._open_session = open_session
        self._is_driver_gone = is_driver_gone
        self._retry_interval = retry_interval
        self._rescan_interval = rescan_interval
        self._monotonic = monotonic
        self._gpus_on_bus: int | None = None     # None: not scanned yet
        self._bus_ids: tuple[str, ...] = ()
        self._lost_namer = lost_namer
        self._next_scan = 0.0
        self._next_attempt = 0.0
        self._sweeper: Sweeper | None = None
        self._driver_version: str | None = None
        self._error: str | None = None
        self._calls_last_tick: int | None = None
        self.sessions_opened = 0

    def status(self) -> GpuStatus:
        return GpuStatus(self._gpus_on_bus or 0, self._sweeper is not None, self._error,
                         self._driver_version, self._calls_last_tick,
                         self.sessions_opened if self._sweeper is not None else 0)

    def readings(self) -> tuple[DeviceReading, ...]:
        now = self._monotonic()
        if self._sweeper is None:
            if now >= self._next_scan:
                self._rescan(now)
            if not self._gpus_on_bus:
                return ()
            if now < self._next_attempt:
                return ()
            self._try_open(now)
            if self._sweeper is None:
                return ()
        sweeper = self._sweeper
        before = sweeper.calls
        try:
            readings = sweeper.sweep()
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised if not ours
            if not self._is_driver_gone(exc):
                raise
            log.error("NVML session lost (%s); shutting NVML down and retrying every %.0f s",
                      exc, self._retry_interval)
            self.close()
            self._error = f"driver_gone: {exc}"
            self._next_attempt = now + self._retry_interval
            return ()
        self._calls_last_tick = sweeper.calls - before
        lost = sweeper.unidentified() if self._lost_namer is not None else ()
        if lost:
            readings += self._lost_namer.readings(lost, readings, self._bus_ids,
                                                  self._monotonic())
        return readings

    def close(self) -> None:
        if self._sweeper is not None:
            try:
                self._sweeper.close()
            finally:
                self._sweeper = None
                self._calls_last_tick = None

    def _rescan(self, now: float) -> None:
        gpus = self._scanner.scan()
        self._bus_ids = tuple(g.address for g in gpus if getattr(g, "address", None))
        found = len(gpus)
        if found != self._gpus_on_bus:
            if found:
                log.info("%d NVIDIA GPU(s) on the PCI bus", found)
            else:
                log.info("no NVIDIA GPU on the PCI bus; NVML stays unloaded "
                         "(rescanning every %.0f s)", self._rescan_interval)
        self._gpus_on_bus = found
        self._next_scan = now + self._rescan_interval

    def _try_open(self, now: float) -> None:
        try:
            self._sweeper, self._driver_version = self._open_session()
        except SessionUnavailable as exc:
            self._error = str(exc)
            self._next_attempt = now + self._retry_interval
            log.warning("NVML not available (%s); retrying in %.0f s", exc, self._retry_interval)
            return
        self._error = None
        self.sessions_opened += 1
        log.info("NVML loaded (driver %s)", self._driver_version or "unknown")
