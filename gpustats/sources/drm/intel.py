"""An i915 or xe device's hwmon values, and its duty cycle from its GTs' idle residency.

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
from gpustats.sources.drm.reads import FsReads

UUID_PREFIX = "intel-"


class IntelValues:
    """Reads each i915/xe device's hwmon directory."""

    def __init__(self, fs: FsReads, monotonic: Callable[[], float]):
        self._fs = fs
        self._monotonic = monotonic
        self._hwmon = HwmonDirs(fs)
        self._gt_idle = GtIdle(fs, monotonic)

    def read(self, device: DrmDevice) -> DeviceValues:
        fs = self._fs
        hwmon = self._hwmon.of(device.path, device.driver)

        def value(name: str) -> int | None:
            return fs.integer(os.path.join(hwmon, name)) if hwmon is not None else None

        energy_uj = value("energy1_input")
        read_at = self._monotonic()
        limit = value("power1_max")
        return DeviceValues(
            monotonic_seconds=read_at, uuid=UUID_PREFIX + device.address,
            energy_counter_millijoules=energy_uj // 1000 if energy_uj is not None
            and energy_uj >= 0 else None,
            power_limit_watts=watts(limit) if limit else None,
            temperature_celsius=celsius(value("temp2_input")),
            utilization_percent=self._gt_idle.duty_percent(device))

    def forget(self, addresses: set[str]) -> None:
        """Drop the GTs' last idle residency read (the hwmon directory is found again when
        needed)."""
        self._gt_idle.forget(addresses)
