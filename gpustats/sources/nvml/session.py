"""An initialised NVML library: device handles and identities, read once per session."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pynvml

from gpustats.model.device import VENDOR_NVIDIA, DeviceIdentity
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.driver_root import LibraryNotLoaded, load_from
from gpustats.sources.nvml.query import DeviceLost, DriverGone, Querier, error_reason

log = logging.getLogger(__name__)

_ARCHITECTURES = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "kepler", pynvml.NVML_DEVICE_ARCH_MAXWELL: "maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "pascal", pynvml.NVML_DEVICE_ARCH_VOLTA: "volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "turing", pynvml.NVML_DEVICE_ARCH_AMPERE: "ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "ada", pynvml.NVML_DEVICE_ARCH_HOPPER: "hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "blackwell",
}


class NvmlUnavailable(Exception):
    """NVML could not be loaded or initialised; ``reason`` is a short label."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class DeviceHandle:
    """A physical GPU's handle and identity (``identity`` None: lost before it was read)."""

    index: int
    handle: Any
    identity: DeviceIdentity | None


def nvml_init(driver_root: str | None = None) -> None:
    """``nvmlInit`` with errors mapped to ``NvmlUnavailable`` (a failed load stays retryable);
    the library from the driver tree at ``driver_root`` where one is given."""
    if driver_root is not None:
        try:
            path = load_from(driver_root)
        except LibraryNotLoaded as exc:
            raise NvmlUnavailable(exc.reason, str(exc)) from exc
        if path is not None:
            log.info("NVML library from the driver tree: %s", path)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(error_reason(exc), str(exc)) from exc
    except OSError as exc:  # a library that exists but cannot be mapped
        raise NvmlUnavailable("library_unusable", str(exc)) from exc


class NvmlSession:
    """Holds NVML initialised; ``close`` shuts it down. One per successful load."""

    def __init__(self, errors: CollectionErrors):
        self.querier = Querier(errors)
        self.devices: list[DeviceHandle] = []
        self.driver_version: str | None = None

    @classmethod
    def open(cls, errors: CollectionErrors, driver_root: str | None = None) -> NvmlSession:
        nvml_init(driver_root)
        session = cls(errors)
        try:
            session._enumerate()
        except (DriverGone, pynvml.NVMLError) as exc:
            session.close()
            raise NvmlUnavailable("enumeration_failed", str(exc)) from exc
        return session

    def close(self) -> None:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def _enumerate(self) -> None:
        q = self.querier
        self.driver_version = q.read("system", "driver_version", pynvml.nvmlSystemGetDriverVersion)
        count = q.call(pynvml.nvmlDeviceGetCount)
        for index in range(count):
            try:
                handle = q.call(pynvml.nvmlDeviceGetHandleByIndex, index)
                self.devices.append(DeviceHandle(index, handle, self._identity(index, handle)))
            except DeviceLost:
                log.error("GPU index %d is lost (GPU_IS_LOST) before its identity could be read",
                          index)   # the engine names it from what the host still tells
                self.devices.append(DeviceHandle(index, None, None))
            except pynvml.NVMLError as exc:
                log.error("GPU index %d: cannot get a handle: %s", index, exc)

    def _identity(self, index: int, handle: Any) -> DeviceIdentity:
        q = self.querier
        uuid = q.call(pynvml.nvmlDeviceGetUUID, handle)
        pci = q.read(uuid, "pci_info", pynvml.nvmlDeviceGetPciInfo, handle)
        memory = q.read(uuid, "memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
        arch = q.read(uuid, "architecture", pynvml.nvmlDeviceGetArchitecture, handle)
        return DeviceIdentity(
            index=index,
            uuid=uuid,
            name=q.read(uuid, "name", pynvml.nvmlDeviceGetName, handle),
            minor_number=q.read(uuid, "minor_number", pynvml.nvmlDeviceGetMinorNumber, handle),
            pci_bus_id=pci.busId if pci is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            architecture=_ARCHITECTURES.get(arch) if arch is not None else None,
            vendor=VENDOR_NVIDIA,
        )
