"""A GPU's hwmon directory (``<device>/hwmon/hwmon<M>/``) and its scaled values.

hwmon units (Documentation/hwmon/sysfs-interface.rst): power in µW, energy in µJ,
temperature in m°C. i915 registers one device-level instance named ``i915`` and one per GT
(``i915_gt<N>``): the device's is the one named like the driver.
"""

from __future__ import annotations

import os

from gpustats.sources.drm.reads import FsReads


class HwmonDirs:
    """Each device's hwmon directory, found once and again when it disappears (a driver
    reload renumbers hwmon instances)."""

    def __init__(self, fs: FsReads):
        self._fs = fs
        self._found: dict[str, str] = {}

    def of(self, device_dir: str, driver: str) -> str | None:
        cached = self._found.get(device_dir)
        if cached is not None and self._fs.is_dir(cached):
            return cached
        found = self._find(device_dir, driver)
        if found is None:
            self._found.pop(device_dir, None)
        else:
            self._found[device_dir] = found
        return found

    def _find(self, device_dir: str, driver: str) -> str | None:
        base = os.path.join(device_dir, "hwmon")
        dirs = [os.path.join(base, n) for n in sorted(self._fs.names(base))
                if n.startswith("hwmon")]
        for path in dirs:
            name = self._fs.text(os.path.join(path, "name"))
            if name is not None and name.strip() == driver:
                return path
        return dirs[0] if dirs else None


def watts(micro: int | None) -> float | None:
    return micro / 1e6 if micro is not None and micro >= 0 else None


def celsius(milli: int | None) -> int | None:
    return round(milli / 1000) if milli is not None else None


def first_of(fs: FsReads, hwmon: str | None, names: tuple[str, ...]) -> tuple[int | None, str]:
    """The first of ``names`` that reads as an integer, and its name; ``(None, "")`` when
    none does."""
    if hwmon is None:
        return None, ""
    for name in names:
        value = fs.integer(os.path.join(hwmon, name))
        if value is not None:
            return value, name
    return None, ""
