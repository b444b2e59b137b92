"""The bare-metal demo host (``gpustats --demo bare-metal``): no Kubernetes anywhere, a tenant of
each kind users meet on a GPU server, and their load over time.

Three simulated H100s: GPU 0 time-sliced between a Slurm job's training step and a user's
notebook (``jupyter-lab`` in her login session), GPU 1 serving a model from a systemd service,
GPU 2 running a Docker container. The cgroups are cgroup v2's as systemd, Slurm's ``cgroup/v2``
plugin and Docker's systemd driver lay them out; the host root holds the ``etc/passwd`` that
names the users and Docker's ``config.v2.json`` that names the container. Each load swings on
its own period and the notebook stops and starts, as in the Kubernetes demo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpustats import fakehost
from gpustats.demo.load import GIB, H100, POWER_LIMIT_WATTS, gpu_power

GPUS = 3
DOCKER_ID = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
JOB_ID = 81427
USERS = {0: "root", 998: "vllm", 1001: "ada", 1002: "grace"}


def gpu_uuid(index: int) -> str:
    return f"GPU-ba4e0000-0000-4000-8000-{index:012x}"


@dataclass(frozen=True)
class Tenant:
    """One tenant with one GPU process."""

    number: int                  # the phase of its swing
    label: str                   # how ``describe`` names it
    cgroup: str                  # its process's cgroup (relative, cgroup v2)
    comm: str
    uid: int
    pid: int
    gpu: int
    busy_percent: float          # mean SM utilization
    period_seconds: float        # of its swing
    memory_bytes: int
    pauses: bool = False         # stopped for a third of its period (a person at a notebook)
    # The tenant's own cgroup, where it is above the process's (a Slurm step above its task):
    # its CPU and memory are read there.
    tenant_cgroup: str | None = None


TENANTS = (
    Tenant(1, f"Slurm job {JOB_ID} (ada)", fakehost.slurm_v2_cgroup(JOB_ID, "0"), "python3",
           1001, 5101, 0, 60, 41, 40 * GIB,
           tenant_cgroup=fakehost.slurm_v2_cgroup(JOB_ID, "0").rsplit("/user/", 1)[0]),
    Tenant(2, "grace's jupyter-lab", fakehost.session_cgroup(1002, "4"), "jupyter-lab",
           1002, 5102, 0, 25, 29, 8 * GIB, pauses=True),
    Tenant(3, "vllm.service", fakehost.service_cgroup("vllm.service"), "vllm", 998, 5103, 1,
           55, 23, 60 * GIB),
    Tenant(4, "Docker container embeddings", fakehost.docker_cgroup(DOCKER_ID), "python", 0,
           5104, 2, 45, 37, 12 * GIB),
)
DOCKER_NAME = "embeddings"


def busy_at(tenant: Tenant, t: float) -> float:
    """The tenant's SM utilization (percent) ``t`` seconds into the demo."""
    wave = math.sin(2 * math.pi * t / tenant.period_seconds + tenant.number)
    if tenant.pauses and wave < -0.5:
        return 0.0
    return round(max(1.0, min(100.0, tenant.busy_percent * (1 + 0.5 * wave))), 1)


def scenario_at(t: float) -> dict[str, Any]:
    """The simulator scenario (see ``gpustats.simulator.scenario``) ``t`` seconds in."""
    busy = {tenant.number: busy_at(tenant, t) for tenant in TENANTS}
    devices = []
    for index in range(GPUS):
        total = min(100.0, sum(busy[x.number] for x in TENANTS if x.gpu == index))
        devices.append({
            "uuid": gpu_uuid(index), "name": H100, "architecture": "hopper", "minor": index,
            "pci_bus_id": f"00000000:{0x19 + 0x20 * index:02X}:00.0",
            "memory_total_bytes": 80 * GIB, "power_watts": gpu_power(total),
            "power_limit_watts": POWER_LIMIT_WATTS, "temperature_celsius": int(35 + total / 4),
            "utilization_percent": int(total),
            "gpm": {"sm_active_percent": round(total, 1),
                    "graphics_active_percent": round(total, 1)}})
    processes = [{"pid": x.pid, "device": gpu_uuid(x.gpu), "memory_used_bytes": x.memory_bytes,
                  "sm_util_percent": int(busy[x.number])} for x in TENANTS]
    return {"devices": devices, "processes": processes}


def build_host(root: Path, tenants: tuple[Tenant, ...] = TENANTS) -> tuple[Path, Path, Path]:
    """The tenants' cgroups and processes, and the host root that names them, below ``root``:
    (cgroup, proc, host root)."""
    cgroup, proc, host = root / "cgroup", root / "proc", root / "host"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    for tenant in tenants:
        for rel in dict.fromkeys((tenant.cgroup, tenant.tenant_cgroup or tenant.cgroup)):
            fakehost.add_container(cgroup, rel, usage_usec=tenant.number * 10_000_000,
                                   memory_bytes=tenant.number * (512 << 20))
        fakehost.add_process_files(proc, tenant.pid, fakehost.v2_cgroup_lines(tenant.cgroup),
                                   tenant.comm, tenant.uid, start_ticks=1000 * tenant.number)
    fakehost.add_passwd(host, USERS)
    fakehost.add_docker_container(host, DOCKER_ID, DOCKER_NAME)
    return cgroup, proc, host


def describe() -> str:
    return (f"{GPUS} simulated H100s, no Kubernetes, {len(TENANTS)} tenants: "
            + ", ".join(t.label for t in TENANTS))
