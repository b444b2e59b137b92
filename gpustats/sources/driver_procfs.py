"""The NVIDIA driver's procfs (``<proc>/driver/nvidia/gpus/<bus id>/information``).

The driver still tells a GPU's UUID, model and minor number there when NVML answers
GPU_IS_LOST for it, so a GPU lost before its identity was read can still be named.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustats.hostfs import HostRoots, read_text

_MAX_INFORMATION_BYTES = 64 * 1024


@dataclass(frozen=True)
class DriverGpuInfo:
    uuid: str | None = None
    model: str | None = None
    minor_number: int | None = None
    bus_location: str | None = None


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:3B:00.0`` and sysfs' ``0000:3b:00.0`` → ``0000:3b:00.0``."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{domain[-4:].rjust(4, '0')}:{rest}"


def parse_gpu_information(text: str) -> DriverGpuInfo:
    """``Key: value`` lines; unknown keys ignored, malformed values left out."""
    values: dict[str, str] = {}
    for line in text.splitlines()[:200]:
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip().lower()] = value.strip()
    uuid = values.get("gpu uuid") or None
    if uuid is not None and not uuid.startswith("GPU-"):
        uuid = None
    minor = values.get("device minor", "")
    return DriverGpuInfo(
        uuid=uuid,
        model=values.get("model") or None,
        minor_number=int(minor) if minor.isdigit() else None,
        bus_location=values.get("bus location") or None,
    )


class DriverProcfs:
    def __init__(self, roots: HostRoots):
        self._roots = roots

    def gpu_information(self, bus_id: str) -> DriverGpuInfo | None:
        """What the driver says of the GPU at ``bus_id``; ``None`` when it says nothing."""
        text = read_text(self._roots.proc_path("driver", "nvidia", "gpus",
                                               normalize_bus_id(bus_id), "information"))
        if text is None or len(text) > _MAX_INFORMATION_BYTES:
            return None
        info = parse_gpu_information(text)
        return info if info != DriverGpuInfo() else None
