"""An i915 or xe device's hwmon values, and its duty cycle from its GTs' idle residency; its
name by PCI device ID and its local memory (``intel_models``).

hwmon (Documentation/ABI/testing/sysfs-driver-intel-{i915,xe}-hwmon): ``energy1_input`` (µJ,
a 64-bit accumulator the driver advances on each read), ``power1_max`` (PL1, µW; 0 means
disabled), xe's ``temp2_input`` (package, m°C, 6.15+). Neither driver has a power file: the
engine derives power from the energy counter's rate. Neither has a memory-used file. The duty
cycle is the device's own (``gt_idle.py``), never inferred from the clients the daemon sees: a
client it does not see would make a busy GPU read idle, and its power be learned as the idle.
"""

from __future__ import annotations

import os
from typing import Callable

from gpustats.sources.drm.devices import DeviceValues, DrmDevice
from gpustats.sources.drm.gt_idle import GtIdle
from gpustats.sources.drm.hwmon import HwmonDirs, celsius, watts
from gpustats.sources.drm.intel_models import local_memory_bytes, model_name
from gpustats.sources.drm.reads import FsReads
from gpustats.sources.pci import parse_hex

UUID_PREFIX = "intel-"


class IntelValues:
    """Reads each i915/xe device's hwmon directory; its name and memory once."""

    def __init__(self, fs: FsReads, monotonic: Callable[[], float]):
        self._fs = fs
        self._monotonic = monotonic
        self._hwmon = HwmonDirs(fs)
        self._identity: dict[str, tuple[str | None, int | None]] = {}
        self._gt_idle = GtIdle(fs, monotonic)

    def read(self, device: DrmDevice) -> DeviceValues:
        fs = self._fs
        hwmon = self._hwmon.of(device.path, device.driver)

        def value(name: str) -> int | None:
            return fs.integer(os.path.join(hwmon, name)) if hwmon is not None else None

        energy_uj = value("energy1_input")
        read_at = self._monotonic()
        limit = value("power1_max")
        name, memory = self._identity_of(device)
        return DeviceValues(
            monotonic_seconds=read_at, uuid=UUID_PREFIX + device.address, name=name,
            memory_total_bytes=memory,
            energy_counter_millijoules=energy_uj // 1000 if energy_uj is not None
            and energy_uj >= 0 else None,
            power_limit_watts=watts(limit) if limit else None,
            temperature_celsius=celsius(value("temp2_input")),
            utilization_percent=self._gt_idle.duty_percent(device))

    def forget(self, addresses: set[str]) -> None:
        """Drop the names and memory kept of devices no longer on the bus and the GTs' last
        idle residency read (the hwmon directory is found again when needed)."""
        for address in addresses & set(self._identity):
            del self._identity[address]
        self._gt_idle.forget(addresses)

    def _identity_of(self, device: DrmDevice) -> tuple[str | None, int | None]:
        """The card's name (by PCI device ID) and local memory, read once per device (the
        driver makes both files at probe)."""
        kept = self._identity.get(device.address)
        if kept is None:
            name = model_name(parse_hex(self._fs.text(os.path.join(device.path, "device"))))
            kept = self._identity[device.address] = (
                name, local_memory_bytes(self._fs, device.path, device.card))
        return kept
