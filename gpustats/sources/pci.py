"""The discovery gate: GPUs (display and 3D controllers) on the PCI bus, from sysfs.

cAdvisor's design: only load a vendor's interface when ``<sysfs>/bus/pci/devices/*`` shows one
of its display-class (0x03xxxx) functions, bound to one of its drivers or to none yet, or one
of its accelerators (AMD Instinct: 0x12xxxx) bound to its driver (``vendors.Vendor.serves``).
pyudev is used where udev's database is usable on the real sysfs; any other root (tests,
containers without udev) is read as plain files.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from gpustats.hostfs import HostRoots, list_dir, read_text
from gpustats.sources.vendors import ACCELERATOR_CLASS, DISPLAY_CLASS, NVIDIA, Vendor

log = logging.getLogger(__name__)

NVIDIA_VENDOR_ID = NVIDIA.pci_vendor_id


@dataclass(frozen=True)
class PciGpu:
    address: str          # sysfs form, "0000:3b:00.0"
    device_id: int | None = None
    vendor_id: int | None = None
    driver: str | None = None         # the bound driver's name; None: none bound
    pci_class: int | None = None


def parse_hex(text: str | None) -> int | None:
    """``"0x10de\\n"`` → 0x10de; ``None`` for missing or malformed text."""
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def is_display_class(pci_class: int | None) -> bool:
    return pci_class is not None and pci_class >> 16 == DISPLAY_CLASS


def may_be_gpu(pci_class: int | None) -> bool:
    """A display controller, or a processing accelerator (some vendor's GPU may be one)."""
    return pci_class is not None and pci_class >> 16 in (DISPLAY_CLASS, ACCELERATOR_CLASS)


def is_nvidia_gpu(vendor: int | None, pci_class: int | None) -> bool:
    return vendor == NVIDIA_VENDOR_ID and is_display_class(pci_class)


def bound_driver(device_dir: str) -> str | None:
    """The name of the driver a PCI function is bound to (its ``driver`` link's target)."""
    try:
        return os.path.basename(os.readlink(os.path.join(device_dir, "driver"))) or None
    except OSError:
        return None


def scan_sysfs(roots: HostRoots) -> tuple[PciGpu, ...]:
    """Every function under ``<sysfs>/bus/pci/devices`` that may be a GPU (``may_be_gpu``),
    read as plain files."""
    base = roots.sys_path("bus", "pci", "devices")
    found = []
    for address in sorted(list_dir(base)):
        device_dir = os.path.join(base, address)
        pci_class = parse_hex(read_text(os.path.join(device_dir, "class")))
        if not may_be_gpu(pci_class):
            continue
        vendor = parse_hex(read_text(os.path.join(device_dir, "vendor")))
        if vendor is not None:
            found.append(PciGpu(address, parse_hex(read_text(os.path.join(device_dir, "device"))),
                                vendor, bound_driver(device_dir), pci_class))
    return tuple(found)


def scan_udev() -> tuple[PciGpu, ...] | None:
    """The same scan through udev; ``None`` when pyudev or udev is unusable here."""
    try:
        import pyudev
    except ImportError:
        return None

    def attribute(device: Any, name: str) -> int | None:      # a pyudev Device
        raw = device.attributes.get(name)
        return parse_hex(raw.decode() if raw else None)

    try:
        context = pyudev.Context()
        found = []
        for device in context.list_devices(subsystem="pci"):
            vendor, pci_class = attribute(device, "vendor"), attribute(device, "class")
            if vendor is not None and may_be_gpu(pci_class):
                found.append(PciGpu(device.sys_name, attribute(device, "device"), vendor,
                                    device.driver, pci_class))
        return tuple(sorted(found, key=lambda g: g.address))
    except (OSError, pyudev.DeviceNotFoundError, ValueError, AttributeError) as exc:
        log.debug("udev PCI scan unusable (%s); reading sysfs directly", exc)
        return None


class PciScanner:
    """Scans for one vendor's GPUs (NVIDIA unless told); udev on the real ``/sys``, plain
    sysfs on any other root."""

    def __init__(self, roots: HostRoots, vendor: Vendor = NVIDIA, *,
                 use_udev: bool | None = None):
        self._roots = roots
        self.vendor = vendor
        self._use_udev = (os.path.realpath(roots.sysfs) == "/sys") if use_udev is None else use_udev

    def scan(self) -> tuple[PciGpu, ...]:
        found = scan_udev() if self._use_udev else None
        if found is None:
            found = scan_sysfs(self._roots)
        return tuple(g for g in found if self.vendor.serves(g.vendor_id, g.pci_class, g.driver))
