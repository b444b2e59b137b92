"""What an AMD or Intel GPU's driver says of its health in sysfs, read each sweep.

- amdgpu RAS (amdgpu_ras.c, DOC "AMDGPU RAS sysfs Error Count Interface" and "... gpu_vram_bad_pages
  Interface"): ``<device>/ras/<block>_err_count`` holds lines ``ue: N`` and ``ce: N``
  (uncorrected, corrected; newer kernels add ``de: N``, deferred); ``ras/gpu_vram_bad_pages``
  one line per bad VRAM page, ``<pfn> : <size> : <flag>`` with R (retired), P (pending: retired
  at the next reservation window) or F (could not be retired). Cards without RAS (most Radeon)
  have no ``ras`` directory: absent.
- i915 (i915_sysfs.c ``error_state_read``): ``card<N>/error`` reads "No error state collected"
  until the driver captures a GPU hang (and resets the engine or GT); the capture stays until
  someone writes to the file. Root only (0600): unreadable, absent.
- A device coredump (drivers/base/devcoredump.c): while one waits to be read (xe on a GT hang,
  amdgpu on a GPU reset; freed after 5 minutes or once read), the device has a ``devcoredump``
  link.
- The device's PCI config space (``<device>/config``, its first two bytes: the vendor ID, read
  from the hardware, not the cached ``vendor`` file): all ones (0xffff) when the GPU has fallen
  off the bus or its link is down; the classic "off the bus" check.
"""

from __future__ import annotations

import os
import stat

from gpustats.model.health import KernelHealthReading
from gpustats.sources.drm.devices import DrmDevice
from gpustats.sources.drm.reads import FsReads

RAS_FILE_BYTES = 256
BAD_PAGES_BYTES = 1 << 20          # 37,000 pages of 28 bytes: past that, absent
NO_ERROR_STATE = "No error state collected"
_HEAD_BYTES = 64


def parse_err_count(text: str | None) -> tuple[int | None, int | None]:
    """(ue, ce) of one ``*_err_count`` file; ``None`` for a count it does not give."""
    counts: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        value = value.strip()
        if sep and key.strip() in ("ue", "ce") and value.isdigit() and len(value) < 20:
            counts[key.strip()] = int(value)
    return counts.get("ue"), counts.get("ce")


def parse_bad_pages(text: str) -> tuple[int, int, int]:
    """(retired, pending, failed) pages of ``gpu_vram_bad_pages``; other lines are skipped."""
    flags = {"R": 0, "P": 0, "F": 0}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(":")]
        if len(parts) == 3 and parts[2] in flags:
            flags[parts[2]] += 1
    return flags["R"], flags["P"], flags["F"]


def _sum(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _head(fs: FsReads, path: str) -> str | None:
    """The first bytes of a file that may be large (an i915 error state is megabytes)."""
    data = _head_bytes(fs, path, _HEAD_BYTES)
    return None if data is None else data.decode("utf-8", "replace")


def _head_bytes(fs: FsReads, path: str, size: int) -> bytes | None:
    fs.calls += 1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _ras(fs: FsReads, device: DrmDevice) -> dict[str, int | None]:
    ras = os.path.join(device.path, "ras")
    names = fs.names(ras)
    if not names:
        return {}
    counts = [parse_err_count(fs.text(os.path.join(ras, n), RAS_FILE_BYTES))
              for n in sorted(names) if n.endswith("_err_count")]
    out: dict[str, int | None] = {"ras_uncorrectable": _sum([ue for ue, _ in counts]),
                                  "ras_correctable": _sum([ce for _, ce in counts])}
    if "gpu_vram_bad_pages" in names:
        text = fs.text(os.path.join(ras, "gpu_vram_bad_pages"), BAD_PAGES_BYTES)
        if text is not None:
            out["retired_pages"], out["pending_pages"], out["failed_pages"] = \
                parse_bad_pages(text)
    return out


def _off_bus(fs: FsReads, device: DrmDevice) -> bool | None:
    head = _head_bytes(fs, os.path.join(device.path, "config"), 2)
    return None if head is None or len(head) < 2 else head == b"\xff\xff"


def read_kernel_health(fs: FsReads, device: DrmDevice) -> KernelHealthReading:
    """The device's RAS counts and retired pages (amdgpu), its captured hang (i915) and a
    pending device coredump (any driver)."""
    hang = None
    if device.driver == "i915" and device.card is not None:
        head = _head(fs, os.path.join(device.path, "drm", device.card, "error"))
        hang = None if head is None else not head.startswith(NO_ERROR_STATE)
    coredump = fs.link_name(os.path.join(device.path, "devcoredump")) is not None
    return KernelHealthReading(**_ras(fs, device) if device.driver == "amdgpu" else {},
                               hang_captured=hang, coredump=coredump,
                               off_bus=_off_bus(fs, device))
