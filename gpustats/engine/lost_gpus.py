"""Naming a GPU that was lost before NVML could read its identity.

An operator most needs to see exactly this GPU, so it is reported, identified by the best the
host still tells: its UUID from the driver's procfs (found by its PCI bus id), or from what an
earlier run remembered of that bus id or index; else by its PCI bus id; else by its index.
NVML enumerates GPUs in PCI bus order, so the bus ids the PCI scan found that no identified
GPU holds belong, in order, to the unidentified ones.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from gpustats.model.device import VENDOR_NVIDIA, DeviceIdentity, DeviceReading


# Read-only members: frozen records (the driver's procfs entry, a DeviceRecord) fit.
class DriverInfo(Protocol):
    @property
    def uuid(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def minor_number(self) -> int | None: ...


class Remembered(Protocol):
    @property
    def index(self) -> int | None: ...
    @property
    def pci_bus_id(self) -> str | None: ...
    @property
    def name(self) -> str | None: ...
    @property
    def minor_number(self) -> int | None: ...


def unclaimed_bus_ids(bus_ids: tuple[str, ...], identified: tuple[DeviceReading, ...],
                      lost_indices: tuple[int, ...],
                      normalize: Callable[[str], str]) -> dict[int, str]:
    """Index → bus id for the unidentified GPUs, when the scan leaves exactly that many."""
    claimed = {normalize(r.identity.pci_bus_id) for r in identified if r.identity.pci_bus_id}
    free = sorted(b for b in {normalize(b) for b in bus_ids} if b not in claimed)
    if len(free) != len(lost_indices):
        return {}
    return dict(zip(sorted(lost_indices), free))


def identify_lost_gpu(index: int, bus_id: str | None, driver: DriverInfo | None,
                      remembered: Mapping[str, Remembered], taken: set[str],
                      normalize: Callable[[str], str]) -> DeviceIdentity:
    """The best identity the host still gives for the GPU at ``index`` (pure)."""
    if driver is not None and driver.uuid:
        return DeviceIdentity(index=index, uuid=driver.uuid, name=driver.model,
                              minor_number=driver.minor_number, pci_bus_id=bus_id,
                              vendor=VENDOR_NVIDIA)
    candidates = [(uuid, r) for uuid, r in remembered.items() if uuid not in taken]
    match = None
    if bus_id is not None:
        match = next(((u, r) for u, r in candidates
                      if r.pci_bus_id and normalize(r.pci_bus_id) == bus_id), None)
    elif candidates:
        by_index = [(u, r) for u, r in candidates if r.index == index]
        match = by_index[0] if len(by_index) == 1 else None
    if match is not None:
        uuid, r = match
        return DeviceIdentity(index=index, uuid=uuid, name=r.name, minor_number=r.minor_number,
                              pci_bus_id=r.pci_bus_id or bus_id, vendor=VENDOR_NVIDIA)
    # Nothing names it: its place on the bus (or in NVML's order) is its id.
    return DeviceIdentity(index=index, uuid=bus_id or f"nvml-index-{index}", pci_bus_id=bus_id,
                          vendor=VENDOR_NVIDIA)


class LostGpuNamer:
    """Turns the indices NVML could not identify into lost-GPU readings, each tick."""

    def __init__(self, driver_info: Callable[[str], DriverInfo | None],
                 remembered: Callable[[], Mapping[str, Remembered]],
                 normalize: Callable[[str], str], log: Callable[..., None]):
        self._driver_info = driver_info
        self._remembered = remembered
        self._normalize = normalize
        self._log = log
        self._reported: dict[int, str] = {}

    def readings(self, lost_indices: tuple[int, ...], identified: tuple[DeviceReading, ...],
                 bus_ids: tuple[str, ...], monotonic: float) -> tuple[DeviceReading, ...]:
        if not lost_indices:
            return ()
        buses = unclaimed_bus_ids(bus_ids, identified, lost_indices, self._normalize)
        taken = {r.identity.uuid for r in identified}
        remembered = self._remembered()
        out = []
        for index in lost_indices:
            bus_id = buses.get(index)
            driver = self._driver_info(bus_id) if bus_id is not None else None
            identity = identify_lost_gpu(index, bus_id, driver, remembered, taken,
                                         self._normalize)
            taken.add(identity.uuid)
            if self._reported.get(index) != identity.uuid:
                self._reported[index] = identity.uuid
                self._log("GPU index %d is lost (GPU_IS_LOST) before NVML could read its "
                          "identity; reported as %s%s", index, identity.uuid,
                          f" (bus {bus_id})" if bus_id and bus_id != identity.uuid else "")
            out.append(DeviceReading(identity=identity, monotonic_seconds=monotonic, lost=True))
        return tuple(out)
