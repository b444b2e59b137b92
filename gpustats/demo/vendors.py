"""The demo hosts of every vendor (``gpustats --demo mixed``, ``amd``, ``intel``): bare metal as
in ``bare_metal``, a Slurm job, a user's notebook, a systemd service and a Docker container,
on GPUs that are not all NVIDIA's.

``mixed``: an H100 (the simulated NVML) running the Slurm job, an MI300X (amdgpu) time-sliced
between the service and the notebook, and a Flex 170 (xe) running the container. ``amd``: two
MI300X; ``intel``: two Flex 170; on each, the job and the notebook share GPU 0, the service and
the container GPU 1. The AMD and Intel GPUs are the kernel's files the simulator writes: sysfs,
and each process's DRM fd and fdinfo in this host's ``/proc``, beside the files that place it
in its cgroup, so each tenant is billed its engine time's share.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any
from dataclasses import dataclass

from gpustats.demo import bare_metal
from gpustats.demo.load import GIB, H100

PCI_VENDORS = {"nvidia": "10de", "amd": "1002", "intel": "8086"}
MI300X = "AMD Instinct MI300X"
FLEX_170 = "Intel(R) Data Center GPU Flex 170"


@dataclass(frozen=True)
class Gpu:
    """One demo GPU: what the scenario says of it, and the idle it draws."""

    vendor: str                   # nvidia, amd, intel
    name: str
    pci_bus_id: str
    memory_bytes: int
    power_limit_watts: float
    idle_watts: float
    number: int                   # makes its UUID

    @property
    def uuid(self) -> str:
        """The scenario's UUID (an AMD GPU's ``unique_id`` is its first 16 hex digits: the
        number is among them)."""
        return f"GPU-{PCI_VENDORS[self.vendor]}{self.number:04x}-0000-4000-8000-{self.number:012x}"

    @property
    def daemon_id(self) -> str:
        """How the daemon names an Intel GPU (by its PCI address): its idle power's key."""
        return f"intel-{self.pci_bus_id}"


def _h100(n: int) -> Gpu:
    return Gpu("nvidia", H100, f"00000000:{0x19 + 0x20 * n:02X}:00.0", 80 * GIB, 700.0, 70.0, n)


def _mi300x(n: int) -> Gpu:
    return Gpu("amd", MI300X, f"0000:{0x19 + 0x20 * n:02x}:00.0", 192 * GIB, 750.0, 70.0, n)


def _flex(n: int) -> Gpu:
    return Gpu("intel", FLEX_170, f"0000:{0x19 + 0x20 * n:02x}:00.0", 16 * GIB, 150.0, 30.0, n)


JOB, NOTEBOOK, SERVICE, CONTAINER = bare_metal.TENANTS


def _on(tenant: bare_metal.Tenant, gpu: int, memory: int) -> bare_metal.Tenant:
    return dataclasses.replace(tenant, gpu=gpu, memory_bytes=memory)


@dataclass(frozen=True)
class Host:
    gpus: tuple[Gpu, ...]
    tenants: tuple[bare_metal.Tenant, ...]

    def idle_watts(self) -> tuple[tuple[str, float], ...]:
        """Per GPU the daemon names, where its idle is not the demo's default."""
        return tuple((g.daemon_id, g.idle_watts) for g in self.gpus if g.vendor == "intel")

    def describe(self) -> str:
        names = ", ".join(f"GPU {i} {g.name}" for i, g in enumerate(self.gpus))
        return (f"{len(self.gpus)} simulated GPUs ({names}), no Kubernetes, "
                f"{len(self.tenants)} tenants: "
                + ", ".join(f"{t.label} on GPU {t.gpu}" for t in self.tenants))


HOSTS = {
    "mixed": Host((_h100(0), _mi300x(1), _flex(2)),
                  (_on(JOB, 0, 40 * GIB), _on(SERVICE, 1, 60 * GIB), _on(NOTEBOOK, 1, 8 * GIB),
                   _on(CONTAINER, 2, 4 * GIB))),
    "amd": Host((_mi300x(0), _mi300x(1)),
                (_on(JOB, 0, 40 * GIB), _on(NOTEBOOK, 0, 8 * GIB), _on(SERVICE, 1, 60 * GIB),
                 _on(CONTAINER, 1, 12 * GIB))),
    "intel": Host((_flex(0), _flex(1)),
                  (_on(JOB, 0, 6 * GIB), _on(NOTEBOOK, 0, 2 * GIB), _on(SERVICE, 1, 8 * GIB),
                   _on(CONTAINER, 1, 2 * GIB))),
}


def _device(gpu: Gpu, busy: float) -> dict[str, Any]:
    """The scenario's entry of one GPU at a total busy percent (``gpustats.simulator``)."""
    share = min(100.0, busy) / 100.0
    power = round(gpu.idle_watts + 0.85 * (gpu.power_limit_watts - gpu.idle_watts) * share, 1)
    device = {"uuid": gpu.uuid, "name": gpu.name, "pci_bus_id": gpu.pci_bus_id,
              "memory_total_bytes": gpu.memory_bytes, "power_watts": power,
              "power_limit_watts": gpu.power_limit_watts,
              "temperature_celsius": int(35 + min(100.0, busy) / 4)}
    if gpu.vendor == "nvidia":
        device.update(architecture="hopper", utilization_percent=int(min(100.0, busy)),
                      gpm={"sm_active_percent": round(min(100.0, busy), 1)})
    elif gpu.vendor == "amd":
        device.update(vendor="amd", pci_class=0x120000, utilization_percent=int(min(100.0, busy)),
                      memory_utilization_percent=int(min(100.0, busy) / 3))
    else:
        device.update(vendor="intel", driver="xe")
    return device


def scenario_at(host: Host, t: float) -> dict[str, Any]:
    """The simulator scenario ``t`` seconds in: each tenant's load swings as on the bare-metal
    demo; a GPU's power follows its tenants' summed load."""
    busy = {x.number: bare_metal.busy_at(x, t) for x in host.tenants}
    devices = [_device(gpu, sum(busy[x.number] for x in host.tenants if x.gpu == i))
               for i, gpu in enumerate(host.gpus)]
    processes = [{"pid": x.pid, "device": host.gpus[x.gpu].uuid,
                  "memory_used_bytes": x.memory_bytes,
                  "sm_util_percent": int(math.floor(busy[x.number]))} for x in host.tenants]
    return {"devices": devices, "processes": processes}
