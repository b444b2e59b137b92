"""The soak's AMD GPU and its file-descriptor attackers.

One AMD GPU beside the soak's NVIDIA ones, rendered by the simulator as the kernel's sysfs
and DRM fdinfo files under the daemon's state directory, with four bystander processes on it
(one of each tenant kind: ``soak_tenants`` gives their cgroups). Under attack the user of
``soak_tenants`` runs processes there that each hold one DRM client of the GPU (engine time
still) and flood their fd table the two ways ``bench/attackers.py`` knows: half dup the
client's fd ``fds`` times (``drm_fd_dups``: every copy's fdinfo to read), half open
``fds`` − 1 ``/dev/null`` fds before it (``drm_fd_crowd``: every link to read). The
daemon's read budget keeps its tick bounded; what it leaves unread waits for the next tick.

Without attackers the same processes hold the same client with one fd each, in the same
session: the GPU's holders, and so each bystander's share of it, are the same in both runs.
"""

from __future__ import annotations

from pathlib import Path

from bench import soak_tenants as tenants
from bench.attackers import drm_fd_crowd, drm_fd_dups
from bench.drm import amdgpu_fdinfo
from gpustats import fakehost

AMD_UUID = "amd-soak-0"
AMD_BDF = "0000:c1:00.0"
AMD_MINOR = 0                          # card0, renderD128
BYSTANDERS = 4
FIRST_ATTACKER_PID = 300000


def add_amd_gpu(scenario: dict) -> None:
    """An MI300X and ``BYSTANDERS`` processes busy on it, after the scenario's processes (so
    ``soak_tenants.build_proc`` gives them a tenant of each kind in turn)."""
    scenario["devices"].append({
        "uuid": AMD_UUID, "vendor": "amd", "minor": AMD_MINOR, "pci_bus_id": AMD_BDF,
        "power_watts": 400, "utilization_percent": 60, "memory_total_bytes": 192 << 30})
    after = max(p["pid"] for p in scenario["processes"] if p["pid"] < tenants.ATTACKER_PIDS[0])
    for k in range(BYSTANDERS):
        scenario["processes"].append({"pid": after + 1 + k, "device": AMD_UUID,
                                      "sm_util_percent": 10 + 10 * k,
                                      "memory_used_bytes": 1 << 30})


def drm_proc_root(state_dir: Path) -> Path:
    """Where the simulator renders its DRM processes (``SimulatedDrm``'s root's ``proc``)."""
    return state_dir / "simulated-drm" / "proc"


def plant_fd_attackers(drm_proc: Path, proc: Path, processes: int, fds: int,
                       attack: bool) -> list[int]:
    """``processes`` processes of the attacking user holding a client of the AMD GPU, in its
    session: under attack half with ``fds`` dups of it, half with ``fds`` − 1 ``/dev/null``
    fds and it last; otherwise one fd each. Their files in the simulator's ``drm_proc``,
    their cgroup and owner in the node's ``proc``. Returns the PIDs."""
    text = amdgpu_fdinfo(0, 0, AMD_BDF).replace("drm-client-id:\t0", "drm-client-id:\t{pid}")
    node = f"renderD{128 + AMD_MINOR}"
    dups = processes // 2
    count = fds if attack else 1
    pids = drm_fd_dups(drm_proc, FIRST_ATTACKER_PID, text, processes=dups, fds=count,
                       node=node)
    if attack:
        pids += drm_fd_crowd(drm_proc, FIRST_ATTACKER_PID + dups, text,
                             processes=processes - dups, fds=fds, node=node)
    else:
        pids += drm_fd_dups(drm_proc, FIRST_ATTACKER_PID + dups, text,
                            processes=processes - dups, fds=1, node=node)
    lines = fakehost.v2_cgroup_lines(fakehost.session_cgroup(tenants.ATTACKER_UID, "9"))
    for pid in pids:
        fakehost.add_process_files(proc, pid, lines, "fdflood", tenants.ATTACKER_UID)
    return pids
