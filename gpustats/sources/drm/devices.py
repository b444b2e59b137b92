"""One vendor's DRM GPUs on the PCI bus, and their DRM nodes.

``<sysfs>/bus/pci/devices/<BDF>/``: ``vendor``, ``class`` (display 0x03xxxx, or a processing
accelerator, 0x12xxxx, where the vendor has those: ``Vendor.serves``) and ``driver`` (a link
whose last component is the bound driver) pick the GPUs; ``drm/card<N>/dev`` and
``drm/renderD<N>/dev`` ("226:<minor>") name their nodes. A function's vendor and class never
change, so they are read once per address; the bound driver is read every sweep (it may be
unbound, or rebound to vfio-pci for a virtual machine), the nodes again when it changed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from gpustats.hostfs import HostRoots
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.pci import may_be_gpu, parse_hex
from gpustats.sources.vendors import Vendor

DRM_MAJOR = 226
_NODE = re.compile(r"(card|renderD)(\d+)")


@dataclass(frozen=True)
class DrmDevice:
    address: str                    # "0000:19:00.0"
    path: str                       # its sysfs directory
    driver: str                     # amdgpu, i915, xe
    card: str | None = None         # "card1"
    minors: tuple[int, ...] = ()    # card's, then render node's


@dataclass(frozen=True)
class DeviceValues:
    """One sweep's sysfs and hwmon values of a device (``None``: absent), with the
    identity parts only the vendor's files give."""

    monotonic_seconds: float
    uuid: str
    name: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    utilization_percent: int | None = None
    power_watts: float | None = None
    energy_counter_millijoules: int | None = None
    power_limit_watts: float | None = None
    temperature_celsius: int | None = None


def parse_dev(text: str | None) -> int | None:
    """A DRM node's ``dev`` file, ``"226:128\\n"`` → 128; ``None`` if not a DRM node's."""
    if text is None:
        return None
    major, sep, minor = text.strip().partition(":")
    if not sep or not (major.isascii() and major.isdigit()) or int(major) != DRM_MAJOR:
        return None
    return int(minor) if minor.isascii() and minor.isdigit() else None


def read_nodes(fs: FsReads, device_dir: str) -> tuple[str | None, tuple[int, ...]]:
    """The card node's name and the card's and render node's minors."""
    card, card_minors, render_minors = None, [], []
    for name in sorted(fs.names(os.path.join(device_dir, "drm"))):
        match = _NODE.fullmatch(name)
        if match is None:
            continue
        minor = parse_dev(fs.text(os.path.join(device_dir, "drm", name, "dev")))
        if minor is None:
            continue
        if match.group(1) == "card":
            card = card or name
            card_minors.append(minor)
        else:
            render_minors.append(minor)
    return card, tuple(card_minors + render_minors)


class DeviceDiscovery:
    """This vendor's GPUs bound to one of its drivers, by PCI address."""

    def __init__(self, roots: HostRoots, vendor: Vendor, fs: FsReads):
        self._base = roots.sys_path("bus", "pci", "devices")
        self._vendor = vendor
        self._fs = fs
        self._candidate: dict[str, int | None] = {}  # address -> its class, if this vendor's
        self._known: dict[str, DrmDevice] = {}

    def devices(self) -> tuple[DrmDevice, ...]:
        found = []
        addresses = sorted(self._fs.names(self._base))
        for gone in set(self._candidate) - set(addresses):
            del self._candidate[gone]
            self._known.pop(gone, None)
        for address in addresses:
            path = os.path.join(self._base, address)
            pci_class = self._candidate_class(address, path)
            if pci_class is None:
                continue
            driver = self._fs.link_name(os.path.join(path, "driver"))
            if driver is None or not self._vendor.serves(self._vendor.pci_vendor_id, pci_class,
                                                          driver):
                self._known.pop(address, None)
                continue
            device = self._known.get(address)
            if device is None or device.driver != driver or not device.minors:
                card, minors = read_nodes(self._fs, path)
                device = self._known[address] = DrmDevice(address, path, driver, card, minors)
            found.append(device)
        return tuple(found)

    def _candidate_class(self, address: str, path: str) -> int | None:
        """The function's PCI class where it is this vendor's and may be a GPU, else None."""
        if address not in self._candidate:
            vendor = parse_hex(self._fs.text(os.path.join(path, "vendor")))
            pci_class = parse_hex(self._fs.text(os.path.join(path, "class")))
            if vendor is None or pci_class is None:
                return None                  # unreadable now: asked again next sweep
            self._candidate[address] = pci_class if (
                vendor == self._vendor.pci_vendor_id and may_be_gpu(pci_class)) else None
        return self._candidate[address]
