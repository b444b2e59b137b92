"""The Kubernetes demo node's GPUs, pods and their load over time (pure: a scenario for a
moment).

Three simulated H100s: GPU 0 time-sliced between a training job and a notebook, GPU 1 serving
one model, GPU 2 in MIG mode with two busy instances and an idle one. Every tenant's load
swings on its own period, and the notebook stops and starts, so the split of each GPU's active
power between its pods moves while the demo runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

H100 = "NVIDIA H100 80GB HBM3"
GIB = 1024 ** 3
IDLE_WATTS = 70.0            # what each GPU draws with nothing running (the demo's idle)
POWER_LIMIT_WATTS = 700.0
MIG_GPU = 2


def gpu_uuid(index: int) -> str:
    return f"GPU-de300000-0000-4000-8000-{index:012x}"


@dataclass(frozen=True)
class Tenant:
    """One pod with one container and one GPU process."""
    number: int                  # pod and container number (UID and ID are made from it)
    namespace: str
    pod: str
    container: str
    pid: int
    gpu: int
    gpu_instance_id: int | None  # MIG instance, on the MIG GPU
    busy_percent: float          # mean SM utilization (or instance activity)
    period_seconds: float        # of its swing
    memory_bytes: int


TENANTS = (
    Tenant(1, "ml", "llm-train-0", "trainer", 4101, 0, None, 60, 47, 24 * GIB),
    Tenant(2, "research", "notebook-ada", "jupyter", 4102, 0, None, 25, 31, 6 * GIB),
    Tenant(3, "serve", "embed-serve-7f9c", "server", 4103, 1, None, 55, 23, 12 * GIB),
    Tenant(4, "serve", "chat-inference-2", "triton", 4104, MIG_GPU, 1, 65, 37, 30 * GIB),
    Tenant(5, "batch", "etl-nightly-5", "worker", 4105, MIG_GPU, 5, 40, 53, 8 * GIB),
)
MIG_INSTANCES = ((1, "3g.40gb", 40 * GIB), (5, "2g.20gb", 20 * GIB), (13, "1g.10gb", 10 * GIB))


def busy_at(tenant: Tenant, t: float) -> float:
    """The tenant's SM utilization (percent) ``t`` seconds into the demo. The notebook is
    stopped for a third of its period, as a person at a notebook is."""
    wave = math.sin(2 * math.pi * t / tenant.period_seconds + tenant.number)
    if tenant.container == "jupyter" and wave < -0.5:
        return 0.0
    return round(max(1.0, min(100.0, tenant.busy_percent * (1 + 0.5 * wave))), 1)


def gpu_power(busy_percent: float) -> float:
    """A GPU's power at a total SM utilization: idle plus a share of the headroom."""
    share = min(100.0, busy_percent) / 100.0
    return round(IDLE_WATTS + 0.85 * (POWER_LIMIT_WATTS - IDLE_WATTS) * share, 1)


def scenario_at(t: float) -> dict[str, Any]:
    """The simulator scenario (see ``gpustats.simulator.scenario``) ``t`` seconds in."""
    busy = {tenant.number: busy_at(tenant, t) for tenant in TENANTS}
    devices = []
    for index in range(3):
        on_gpu = [tenant for tenant in TENANTS if tenant.gpu == index]
        total = sum(busy[tenant.number] for tenant in on_gpu)
        device = {
            "uuid": gpu_uuid(index), "name": H100, "architecture": "hopper", "minor": index,
            "pci_bus_id": f"00000000:{0x1b + 0x20 * index:02X}:00.0",
            "memory_total_bytes": 80 * GIB, "power_watts": gpu_power(total),
            "power_limit_watts": POWER_LIMIT_WATTS,
            "temperature_celsius": int(35 + total / 4),
        }
        if index == MIG_GPU:
            by_instance = {tenant.gpu_instance_id: busy[tenant.number] for tenant in on_gpu}
            device["gpm"] = {"sm_active_percent": round(min(100.0, total / 2), 1)}
            device["mig_instances"] = [
                {"gpu_instance_id": gi, "profile": profile, "memory_total_bytes": memory,
                 **({"gpm": {"sm_active_percent": by_instance[gi],
                             "graphics_active_percent": by_instance[gi]}}
                    if gi in by_instance else {})}
                for gi, profile, memory in MIG_INSTANCES]
        else:
            device["utilization_percent"] = int(min(100.0, total))
            device["gpm"] = {"sm_active_percent": round(min(100.0, total), 1),
                             "graphics_active_percent": round(min(100.0, total), 1)}
        devices.append(device)
    processes = []
    for tenant in TENANTS:
        process = {"pid": tenant.pid, "device": gpu_uuid(tenant.gpu),
                   "memory_used_bytes": tenant.memory_bytes}
        if tenant.gpu_instance_id is None:
            process["sm_util_percent"] = int(busy[tenant.number])
        else:
            process["gpu_instance_id"] = tenant.gpu_instance_id
        processes.append(process)
    return {"devices": devices, "processes": processes}
