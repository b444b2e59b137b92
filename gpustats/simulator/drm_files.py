"""What each sysfs and DRM fdinfo file of a simulated AMD or Intel GPU says (pure: the values
come in, the kernel's text goes out).

Formats: amdgpu_pm.c (sysfs, hwmon), amdgpu_fdinfo.c, i915_drm_client.c, xe_drm_client.c and
drm_file.c (``drm_show_fdinfo``, ``drm_print_memory_stats``) of Linux 6.x.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass

from gpustats.simulator.drm_vendors import ENGINES, XE_TIMESTAMP_HZ
from gpustats.simulator.scenario import SimDevice

# devtmpfs's mount id and flags of an O_RDWR|O_CLOEXEC|O_LARGEFILE open, as /proc shows them.
FDINFO_HEADER = "pos:\t0\nflags:\t{flags}\nmnt_id:\t26\nino:\t{ino}\n"
DRM_FLAGS = "02100002"
# xe's GPU timestamp at the simulator's start: past 2**32, as on a host up for minutes.
XE_TIMESTAMP_BASE = 1 << 32
AMD_REGIONS = ("vram", "gtt", "cpu", "gds", "gws", "oa", "doorbell", "mmioremap")
AMD_TEMPERATURES = (("temp1", "edge"), ("temp2", "junction"))


@dataclass(frozen=True)
class Client:
    """One DRM client (a ``struct drm_file``) of a process, as of now."""
    client_id: int
    engine: str
    busy_seconds: float         # engine time, summed over the class's engines
    vram_bytes: int


def unique_id(uuid: str) -> str:
    """amdgpu's ``unique_id`` (``%016llx``): the first 16 hex digits of the scenario's UUID
    (after a ``GPU-`` prefix, without dashes), else 16 digits of its SHA-256."""
    digits = uuid.lower().removeprefix("gpu-").replace("-", "")
    if len(digits) >= 16 and all(c in string.hexdigits for c in digits):
        return digits[:16]
    return hashlib.sha256(uuid.encode()).hexdigest()[:16]


def render_minor(device: SimDevice) -> int:
    return 128 + device.minor


def amd_files(device: SimDevice, *, busy: bool, watts: float) -> dict[str, str]:
    """The amdgpu files of the device directory, and of its hwmon directory as
    ``hwmon/<name>``; ``busy``: not in an idle phase."""
    off = device.unsupported
    files = {}
    if "utilization" not in off:
        files["gpu_busy_percent"] = f"{device.utilization_percent if busy else 0}\n"
        files["mem_busy_percent"] = f"{device.memory_utilization_percent if busy else 0}\n"
    if "memory" not in off:
        files["mem_info_vram_total"] = f"{device.memory_total_bytes}\n"
        used = min(device.memory_used_bytes, device.memory_total_bytes)
        files["mem_info_vram_used"] = f"{used}\n"
    if "unique_id" not in off:
        files["unique_id"] = f"{unique_id(device.uuid)}\n"
    files["product_name"] = f"{device.name}\n"
    # RAS (amdgpu_ras.c): error counts per block, no bad VRAM page (a healthy Instinct card)
    for block in ("umc", "gfx", "sdma"):
        files[f"ras/{block}_err_count"] = "ue: 0\nce: 0\n"
    files["ras/gpu_vram_bad_pages"] = ""
    files["hwmon/name"] = "amdgpu\n"
    if "power" not in off:
        files["hwmon/power1_average"] = f"{_micro(watts)}\n"
    if "power_limit" not in off:
        files["hwmon/power1_cap"] = f"{_micro(device.power_limit_watts)}\n"
    if "temperature" not in off:
        for sensor, label in AMD_TEMPERATURES:
            files[f"hwmon/{sensor}_input"] = f"{device.temperature_celsius * 1000}\n"
            files[f"hwmon/{sensor}_label"] = f"{label}\n"
    if "memory_temperature" not in off:
        files["hwmon/temp3_input"] = f"{device.memory_temperature_celsius * 1000}\n"
        files["hwmon/temp3_label"] = "mem\n"
    return files


def intel_files(device: SimDevice, *, energy_microjoules: float,
                idle_ms: float = 0.0) -> dict[str, str]:
    """The i915 or xe hwmon files (``hwmon/<name>``), the GT's idle residency in ms
    (i915_gt_sysfs_pm.c, xe_gt_idle.c) and the card's local memory: xe's tile
    (xe_tile_sysfs.c), the out-of-tree i915's card attribute; no busy or memory-used file."""
    off = device.unsupported
    files = {"hwmon/name": f"{device.driver}\n"}
    if "utilization" not in off:
        residency = f"drm/card{device.minor}/gt/gt0/rc6_residency_ms" \
            if device.driver == "i915" else "tile0/gt0/gtidle/idle_residency_ms"
        files[residency] = f"{int(idle_ms)}\n"
    if "memory" not in off:
        memory = "tile0/physical_vram_size_bytes" if device.driver == "xe" \
            else f"drm/card{device.minor}/lmem_total_bytes"
        files[memory] = f"{device.memory_total_bytes}\n"
    if "power" not in off:
        files["hwmon/energy1_input"] = f"{int(energy_microjoules)}\n"
    if "power_limit" not in off:
        files["hwmon/power1_max"] = f"{_micro(device.power_limit_watts)}\n"
    if device.driver == "xe":          # package and VRAM temperatures (6.15)
        if "temperature" not in off:
            files["hwmon/temp2_input"] = f"{device.temperature_celsius * 1000}\n"
        if "memory_temperature" not in off:
            files["hwmon/temp3_input"] = f"{device.memory_temperature_celsius * 1000}\n"
    return files


def null_fdinfo(ino: int = 5) -> str:
    """The fdinfo of a file that is not a DRM device (``/dev/null`` on fds 0..2)."""
    return FDINFO_HEADER.format(flags="0100002", ino=ino)


def drm_fdinfo(device: SimDevice, client: Client, seconds: float) -> str:
    """``/proc/<pid>/fdinfo/<fd>`` of a DRM client ``seconds`` after the simulator's start."""
    header = FDINFO_HEADER.format(flags=DRM_FLAGS, ino=1000 + render_minor(device))
    if "processes" in device.unsupported:        # a kernel before the drm- keys
        return header
    lines = [f"drm-driver:\t{device.driver}", f"drm-client-id:\t{client.client_id}",
             f"drm-pdev:\t{device.pci_bus_id}"]
    if device.driver == "amdgpu":
        lines += _amdgpu(client)
    elif device.driver == "i915":
        lines += _i915(client)
    else:
        lines += _xe(client, seconds)
    return header + "".join(line + "\n" for line in lines)


def _amdgpu(client: Client) -> list[str]:
    vram = client.vram_bytes
    lines = [f"pasid:\t{32768 + client.client_id}"]
    for region in AMD_REGIONS:
        lines += _memory(region, vram if region == "vram" else 0, ("resident", "purgeable"))
    lines += [f"drm-memory-vram:\t{vram // 1024} KiB", "drm-memory-gtt: \t0 KiB",
              "drm-memory-cpu: \t0 KiB", "amd-evicted-vram:\t0 KiB",
              f"amd-requested-vram:\t{vram // 1024} KiB", "amd-requested-gtt:\t0 KiB"]
    busy_ns = int(client.busy_seconds * 1e9)
    if busy_ns:                        # amdgpu leaves out engines the client never used
        lines.append(f"drm-engine-{client.engine}:\t{busy_ns} ns")
    return lines


def _i915(client: Client) -> list[str]:
    lines = (_memory("system0", 0, ("active", "resident", "purgeable"))
             + _memory("local0", client.vram_bytes, ("active", "resident", "purgeable")))
    for engine, capacity in ENGINES["i915"].items():
        busy = client.busy_seconds if engine == client.engine else 0.0
        lines.append(f"drm-engine-{engine}:\t{int(busy * 1e9)} ns")
        if capacity > 1:
            lines.append(f"drm-engine-capacity-{engine}:\t{capacity}")
    return lines


def _xe(client: Client, seconds: float) -> list[str]:
    lines = []
    for region, stats in (("system", ("active", "resident", "purgeable")),
                          ("gtt", ("active", "resident")), ("vram0", ("active", "resident")),
                          ("stolen", ("active", "resident"))):
        lines += _memory(region, client.vram_bytes if region == "vram0" else 0, stats)
    timestamp = XE_TIMESTAMP_BASE + int(seconds * XE_TIMESTAMP_HZ)
    for engine, capacity in ENGINES["xe"].items():
        busy = client.busy_seconds if engine == client.engine else 0.0
        lines += [f"drm-cycles-{engine}:\t{int(busy * XE_TIMESTAMP_HZ)}",
                  f"drm-total-cycles-{engine}:\t{timestamp}"]
        if capacity > 1:
            lines.append(f"drm-engine-capacity-{engine}:\t{capacity}")
    return lines


def _memory(region: str, resident: int, stats: tuple[str, ...]) -> list[str]:
    """``drm_print_memory_stats``: total and shared, then the optional stats the driver keeps
    (the simulated client's buffers are all private, resident and idle)."""
    values = {"active": 0, "resident": resident, "purgeable": 0}
    return ([f"drm-total-{region}:\t{size_text(resident)}", f"drm-shared-{region}:\t0"]
            + [f"drm-{stat}-{region}:\t{size_text(values[stat])}" for stat in stats])


def size_text(size: int) -> str:
    """``drm_fdinfo_print_size``: the largest of B, KiB, MiB that divides the size exactly."""
    units = ("", " KiB", " MiB")
    unit = 0
    while unit < len(units) - 1 and size and size % 1024 == 0:
        size //= 1024
        unit += 1
    return f"{size}{units[unit]}"


def _micro(watts: float) -> int:
    return int(round(watts * 1_000_000))
