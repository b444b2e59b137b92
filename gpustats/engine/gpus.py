"""The GPU side of a tick, one vendor's: PCI gate, its interface opened with retry, and the
device sweep; and every vendor's read as one (``GpuBackends``).

None of a vendor's GPUs on the PCI bus: its interface (NVML, or the kernel's sysfs and DRM
fdinfo) is never opened and a tick costs one timestamp comparison (the bus is rescanned every
``rescan_interval`` for hot-plug). GPUs present: the interface is opened; a failed open is
logged once per attempt and retried every ``retry_interval``. Errors meaning the driver went
away close the session and re-enter the retry loop; the daemon serves throughout.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from gpustats.engine.lost_gpus import LostGpuNamer
from gpustats.model.device import DeviceReading
from gpustats.sources.pci import PciGpu
from gpustats.sources.vendors import NVIDIA, Vendor

log = logging.getLogger(__name__)


class PciScan(Protocol):
    def scan(self) -> tuple[PciGpu, ...]: ...


class Sweeper(Protocol):
    @property
    def calls(self) -> int: ...

    def sweep(self) -> tuple[DeviceReading, ...]: ...

    def unidentified(self) -> tuple[int, ...]: ...

    def close(self) -> None: ...


class SessionUnavailable(Exception):
    """Raised by ``open_session`` when the interface cannot be opened; the message is logged."""


@dataclass(frozen=True)
class GpuStatus:
    """One vendor's GPUs and interface; for ``GpuBackends``, every vendor's together: its GPUs
    on the bus summed, the NVIDIA interface's figures, and each vendor's own in ``vendors``."""

    gpus_on_pci_bus: int
    loaded: bool               # the interface is open (NVML loaded)
    error: str | None
    driver_version: str | None
    calls_last_tick: int | None
    session: int = 0           # number of the current session; 0 while none is open
    vendor: str = NVIDIA.name
    vendors: tuple[GpuStatus, ...] = ()

    @property
    def away(self) -> tuple[str, ...]:
        """Vendors whose GPUs are on the bus while their interface is not open."""
        return tuple(v.vendor for v in self.vendors or (self,)
                     if v.gpus_on_pci_bus and not v.loaded)


class GpuSource:
    """Owns one vendor's interface session lifecycle; ``readings()`` is called once per tick."""

    def __init__(self, scanner: PciScan,
                 open_session: Callable[[], tuple[Sweeper, str | None]],
                 *, is_driver_gone: Callable[[BaseException], bool],
                 retry_interval: float, rescan_interval: float = 300.0,
                 lost_namer: LostGpuNamer | None = None, vendor: Vendor = NVIDIA,
                 monotonic: Callable[[], float] = time.monotonic):
        self.vendor = vendor
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
                         self.sessions_opened if self._sweeper is not None else 0,
                         self.vendor.name)

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
        except Exception as exc:  # classified below, re-raised if not ours
            if not self._is_driver_gone(exc):
                raise
            log.error("%s session lost (%s); shutting %s down and retrying every %.0f s",
                      self.vendor.interface, exc, self.vendor.interface, self._retry_interval)
            self.close()
            self._error = f"driver_gone: {exc}"
            self._next_attempt = now + self._retry_interval
            return ()
        self._calls_last_tick = sweeper.calls - before
        namer = self._lost_namer
        lost = sweeper.unidentified() if namer is not None else ()
        if namer is not None and lost:
            readings += namer.readings(lost, readings, self._bus_ids, self._monotonic())
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
                log.info("%d %s GPU(s) on the PCI bus", found, self.vendor.title)
            else:
                log.info("no %s GPU on the PCI bus; %s stays unloaded (rescanning every "
                         "%.0f s)", self.vendor.title, self.vendor.interface,
                         self._rescan_interval)
        self._gpus_on_bus = found
        self._next_scan = now + self._rescan_interval

    def _try_open(self, now: float) -> None:
        try:
            self._sweeper, self._driver_version = self._open_session()
        except SessionUnavailable as exc:
            self._error = str(exc)
            self._next_attempt = now + self._retry_interval
            log.warning("%s not available (%s); retrying in %.0f s", self.vendor.interface, exc,
                        self._retry_interval)
            return
        self._error = None
        self.sessions_opened += 1
        log.info("%s loaded (driver %s)", self.vendor.interface,
                 self._driver_version or "unknown")


class GpuBackends:
    """Every vendor's ``GpuSource`` on the node, read as one: readings in the sources' order,
    statuses merged. One vendor's failing sweep leaves its GPUs out of the tick, not the
    others'."""

    def __init__(self, sources: Sequence[GpuSource]):
        self.sources = tuple(sources)

    def readings(self) -> tuple[DeviceReading, ...]:
        out: list[DeviceReading] = []
        for source in self.sources:
            try:
                out.extend(source.readings())
            except Exception:  # one vendor failing leaves the others served
                log.exception("%s GPU sweep failed; this tick leaves its GPUs out",
                              source.vendor.title)
        return tuple(out)

    def status(self) -> GpuStatus:
        statuses = tuple(s.status() for s in self.sources)
        nvidia = next((s for s in statuses if s.vendor == NVIDIA.name), None)
        if nvidia is None:
            nvidia = GpuStatus(0, False, None, None, None)
        return GpuStatus(sum(s.gpus_on_pci_bus for s in statuses), nvidia.loaded,
                         nvidia.error, nvidia.driver_version, nvidia.calls_last_tick,
                         nvidia.session, NVIDIA.name, statuses)

    def close(self) -> None:
        for source in self.sources:
            source.close()
