"""The discovery gate: NVIDIA display/3D controllers on the PCI bus, from sysfs.

cAdvisor's design: only load NVML when ``<sysfs>/bus/pci/devices/*/vendor`` shows 0x10de with a
display-class (0x03xxxx) function. pyudev is used where udev's database is usable on the real
sysfs; any other root (tests, containers without udev) is read as plain files.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from gpustats.hostfs import HostRoots, list_dir, read_text

log = logging.getLogger(__name__)

NVIDIA_VENDOR_ID = 0x10DE
DISPLAY_CLASS = 0x03


@dataclass(frozen=True)
class PciGpu:
    address: str          # sysfs form, "0000:3b:00.0"
    device_id: int | None = None


def parse_hex(text: str | None) -> int | None:
    """``"0x10de\\n"`` → 0x10de; ``None`` for missing or malformed text."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def is_nvidia_gpu(vendor: int | None, pci_class: int | None) -> bool:
    return vendor == NVIDIA_VENDOR_ID and pci_class is not None and pci_class >> 16 == DISPLAY_CLASS


def scan_sysfs(roots: HostRoots) -> tuple[PciGpu, ...]:
    """NVIDIA GPUs under ``<sysfs>/bus/pci/devices`` read as plain files."""
    base = roots.sys_path("bus", "pci", "devices")
    found = []
    for address in sorted(list_dir(base)):
        device_dir = os.path.join(base, address)
        vendor = parse_hex(read_text(os.path.join(device_dir, "vendor")))
        if vendor != NVIDIA_VENDOR_ID:
            continue
        if is_nvidia_gpu(vendor, parse_hex(read_text(os.path.join(device_dir, "class")))):
            found.append(PciGpu(address, parse_hex(read_text(os.path.join(device_dir, "device")))))
    return tuple(found)


def scan_udev() -> tuple[PciGpu, ...] | None:
    """The same scan through udev; ``None`` when pyudev or udev is unusable here."""
    try:
        import pyudev
    except ImportError:
        return None
    try:
        context = pyudev.Context()
        found = []
        for device in context.list_devices(subsystem="pci"):
            vendor = parse_hex(device.attributes.get("vendor").decode()
                               if device.attributes.get("vendor") else None)
            raw_class = device.attributes.get("class")
            pci_class = parse_hex(raw_class.decode() if raw_class else None)
            if is_nvidia_gpu(vendor, pci_class):
                raw_id = device.attributes.get("device")
                found.append(PciGpu(device.sys_name, parse_hex(raw_id.decode() if raw_id else None)))
        return tuple(sorted(found, key=lambda g: g.address))
    except (OSError, pyudev.DeviceNotFoundError, ValueError, AttributeError) as exc:
        log.debug("udev PCI scan unusable (%s); reading sysfs directly", exc)
        return None


class PciScanner:
    """Scans for NVIDIA GPUs; udev on the real ``/sys``, plain sysfs on any other root."""

    def __init__(self, roots: HostRoots, *, use_udev: bool | None = None):
        self._roots = roots
        self._use_udev = (os.path.realpath(roots.sysfs) == "/sys") if use_udev is None else use_udev

    def scan(self) -> tuple[PciGpu, ...]:
        if self._use_udev:
            found = scan_udev()
            if found is not None:
                return found
        return scan_sysfs(self._roots)
