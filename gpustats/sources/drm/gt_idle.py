"""An Intel GPU's duty cycle from its GTs' idle residency: the device's own count of the time it
had nothing to do, whoever its clients are (seen or not).

- i915: ``<card>/gt/gt<N>/rc6_residency_ms`` (drivers/gpu/drm/i915/gt/intel_gt_sysfs_pm.c),
  the milliseconds the GT spent in RC6, its idle power state.
- xe: ``<device>/tile<T>/gt<N>/gtidle/idle_residency_ms`` (drivers/gpu/drm/xe/xe_gt_idle.c),
  the milliseconds the GT spent in C6.

Both only grow. A GT's busy part of an interval is 1 − its idle growth over the interval's
length; the device's duty cycle is its busiest GT's. A GT whose counter went back (a reset)
or did not answer gives no figure that interval; with none, the duty cycle is absent.
"""

from __future__ import annotations

import os
from typing import Callable

from gpustats.sources.drm.devices import DrmDevice
from gpustats.sources.drm.reads import FsReads

I915_FILE = "rc6_residency_ms"
XE_FILE = "idle_residency_ms"


def residency_files(fs: FsReads, device: DrmDevice) -> tuple[str, ...]:
    """The idle residency file of each of the device's GTs (none found: ``()``)."""
    if device.driver == "i915":
        if device.card is None:
            return ()
        base = os.path.join(device.path, "drm", device.card, "gt")
        return tuple(os.path.join(base, gt, I915_FILE) for gt in sorted(fs.names(base))
                     if gt.startswith("gt"))
    files = []
    for tile in sorted(fs.names(device.path)):
        if tile.startswith("tile") and tile[4:].isdigit():
            tile_dir = os.path.join(device.path, tile)
            files += [os.path.join(tile_dir, gt, "gtidle", XE_FILE)
                      for gt in sorted(fs.names(tile_dir)) if gt.startswith("gt")]
    return tuple(files)


def busy_fraction(before: tuple[float, dict[str, int]], after: tuple[float, dict[str, int]]
                  ) -> float | None:
    """The busiest GT's busy part (0..1) between two reads ``(monotonic s, {file: idle ms})``;
    ``None`` without an interval or a GT read at both ends with a counter that did not go
    back."""
    seconds = after[0] - before[0]
    if not seconds > 0:
        return None
    parts = [1.0 - (after[1][f] - idle) / (seconds * 1000.0)
             for f, idle in before[1].items() if f in after[1] and after[1][f] >= idle]
    return min(1.0, max(0.0, max(parts))) if parts else None


class GtIdle:
    """Each Intel device's duty cycle from one read of its GTs' idle residency per sweep."""

    def __init__(self, fs: FsReads, monotonic: Callable[[], float]):
        self._fs = fs
        self._monotonic = monotonic
        self._files: dict[str, tuple[str, ...]] = {}
        self._last: dict[str, tuple[float, dict[str, int]]] = {}

    def duty_percent(self, device: DrmDevice) -> int | None:
        files = self._files.get(device.address)
        if not files:
            files = self._files[device.address] = residency_files(self._fs, device)
        read = {f: v for f in files if (v := self._fs.integer(f)) is not None and v >= 0}
        if len(read) < len(files):
            self._files.pop(device.address, None)      # looked for again next sweep
        now = (self._monotonic(), read)
        before = self._last.get(device.address)
        self._last[device.address] = now
        busy = busy_fraction(before, now) if before is not None else None
        return int(round(busy * 100)) if busy is not None else None

    def forget(self, addresses: set[str]) -> None:
        for kept in (self._files, self._last):
            for address in addresses & set(kept):
                del kept[address]
