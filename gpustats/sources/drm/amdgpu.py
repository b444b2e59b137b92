"""An amdgpu device's sysfs values (drivers/gpu/drm/amd/pm/amdgpu_pm.c, amdgpu_vram_mgr.c).

In the PCI device directory: ``gpu_busy_percent`` (%), ``mem_info_vram_{total,used}``
(bytes), ``unique_id`` (16 hex digits, GFX9 and later) and ``product_name`` (FRU EEPROM,
some server cards). In its hwmon directory: ``power1_average`` or ``power1_input`` (µW; each
is hidden where the SMU does not support it, so both are probed), ``power1_cap`` (µW) and
``temp1_input``, else ``temp2_input`` (m°C; MI300 hides temp1).

amdgpu has no energy counter: power is integrated (trapezoid over the monotonic time of each
read) into a counter that starts at 0 when this sweeper first reads the device.
"""

from __future__ import annotations

import os
import string
from typing import Callable

from gpustats.sources.drm.devices import DeviceValues, DrmDevice
from gpustats.sources.drm.hwmon import HwmonDirs, celsius, first_of, watts
from gpustats.sources.drm.reads import FsReads

UUID_PREFIX = "amd-"
_POWER_FILES = ("power1_average", "power1_input")
_TEMPERATURE_FILES = ("temp1_input", "temp2_input")
_NAME_BYTES = 256


class PowerIntegral:
    """Energy in mJ as the trapezoid of power samples over their times."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None      # (watts, monotonic seconds)
        self._millijoules = 0.0

    def add(self, power_watts: float, at: float) -> int:
        """Take a sample; the counter after it. A gap between samples (failed reads) is
        bridged by the trapezoid of its two ends."""
        if self._last is not None:
            last_watts, last_at = self._last
            if at > last_at:
                self._millijoules += (last_watts + power_watts) / 2 * (at - last_at) * 1000
        self._last = (power_watts, at)
        return int(self._millijoules)


def parse_unique_id(text: str | None) -> str | None:
    """``unique_id``'s hex digits, lowercased; ``None`` when absent or not hex."""
    value = (text or "").strip().lower()
    return value if value and all(c in string.hexdigits for c in value) else None


class AmdgpuValues:
    """Reads each amdgpu device; keeps its identity, hwmon directory and energy integral."""

    def __init__(self, fs: FsReads, monotonic: Callable[[], float]):
        self._fs = fs
        self._monotonic = monotonic
        self._hwmon = HwmonDirs(fs)
        self._identity: dict[str, tuple[str, str | None]] = {}
        self._vram_total: dict[str, int] = {}
        self._energy: dict[str, PowerIntegral] = {}
        self._power_files: dict[str, tuple[str, ...]] = {}

    def read(self, device: DrmDevice) -> DeviceValues:
        fs, path = self._fs, device.path
        uuid, name = self._identity_of(device)
        hwmon = self._hwmon.of(path, device.driver)
        power_uw, power_at = self._power(device.address, hwmon)
        power_w = watts(power_uw)
        energy = None
        if power_w is not None:
            integral = self._energy.setdefault(device.address, PowerIntegral())
            energy = integral.add(power_w, power_at)
        cap = fs.integer(os.path.join(hwmon, "power1_cap")) if hwmon else None
        temperature, _ = first_of(fs, hwmon, _TEMPERATURE_FILES)
        return DeviceValues(
            monotonic_seconds=power_at, uuid=uuid, name=name,
            memory_total_bytes=self._total(device),
            memory_used_bytes=fs.integer(os.path.join(path, "mem_info_vram_used")),
            utilization_percent=fs.integer(os.path.join(path, "gpu_busy_percent")),
            power_watts=power_w, energy_counter_millijoules=energy,
            power_limit_watts=watts(cap) if cap else None,
            temperature_celsius=celsius(temperature))

    def forget(self, addresses: set[str]) -> None:
        """Drop what is kept of devices no longer on the bus."""
        for kept in (self._identity, self._vram_total, self._energy, self._power_files):
            for address in addresses & set(kept):
                del kept[address]

    def _identity_of(self, device: DrmDevice) -> tuple[str, str | None]:
        """``amd-<unique_id>`` (stable across machines), else ``amd-<BDF>``; the product name
        where the FRU gives one. Read once per device."""
        kept = self._identity.get(device.address)
        if kept is None:
            unique = parse_unique_id(self._fs.text(os.path.join(device.path, "unique_id")))
            name = (self._fs.text(os.path.join(device.path, "product_name"), _NAME_BYTES)
                    or "").strip() or None
            kept = self._identity[device.address] = (UUID_PREFIX + (unique or device.address),
                                                     name)
        return kept

    def _total(self, device: DrmDevice) -> int | None:
        total = self._vram_total.get(device.address)
        if total is None:
            total = self._fs.integer(os.path.join(device.path, "mem_info_vram_total"))
            if total is not None:
                self._vram_total[device.address] = total
        return total

    def _power(self, address: str, hwmon: str | None) -> tuple[int | None, float]:
        """Power in µW and when it was read; the file that answered last is tried first."""
        names = self._power_files.get(address, _POWER_FILES)
        value, used = first_of(self._fs, hwmon, names)
        if used:
            self._power_files[address] = (used, *(n for n in _POWER_FILES if n != used))
        return value, self._monotonic()
