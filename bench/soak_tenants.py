"""The soak's tenants on a fake host: bystanders of every kind holding its GPU processes, and
(with attackers) a user who names cgroups in its own delegated subtree after a bystander's
Docker container and a pod's container, floods that subtree with container-named cgroups, and
runs a process whose name holds terminal control bytes.

Without attackers the same processes run, the user's two in its session: the GPUs' work and its
split are the same, so each bystander's share of its GPU's active energy is the same too; the
soak compares them (``bystander_shares``, ``compare_shares``).
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from gpustats import fakehost

ATTACKER_UID = 1002
USER_TREE = f"user.slice/user-{ATTACKER_UID}.slice/user@{ATTACKER_UID}.service"
ATTACKER_PIDS = (200000, 200001)
HOSTILE_COMM = "tty\x1b[2J\x07\r"
HOSTILE_PID = 200002


def _pod_uid(p: int) -> str:
    return fakehost.pod_uid(0x500 + p)


def _bystander(p: int) -> tuple[str, int]:
    """The cgroup and UID of the scenario's ``p``-th process: a Docker container, a pod's
    container, a service or a session, in turn."""
    cid = fakehost.container_id(0x5000 + p)
    kind = p % 4
    if kind == 0:
        return fakehost.docker_cgroup(cid), 0
    if kind == 1:
        uid_ = _pod_uid(p).replace("-", "_")
        return (f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/"
                f"cri-containerd-{cid}.scope"), 0
    if kind == 2:
        return fakehost.service_cgroup(f"svc{p}.service"), 0
    return fakehost.session_cgroup(1000 + p, str(p)), 1000 + p


def _attacker_cgroup(n: int, attack: bool) -> str:
    """The user's two processes: named after bystander 0's container and bystander 1's pod
    container under attack, in the user's session otherwise."""
    if not attack:
        return fakehost.session_cgroup(ATTACKER_UID, "9")
    if n == 0:
        return f"{USER_TREE}/app.slice/docker-{fakehost.container_id(0x5000)}.scope"
    uid_ = _pod_uid(1).replace("-", "_")
    return (f"{USER_TREE}/app.slice/kubepods-pod{uid_}.slice/"
            f"cri-containerd-{fakehost.container_id(0x5001)}.scope")


def add_processes(scenario: dict) -> None:
    """The user's two GPU processes (on the first two GPUs) and the oddly named one (on the
    third), beside the scenario's own."""
    devices = scenario["devices"]
    for n, pid in enumerate((*ATTACKER_PIDS, HOSTILE_PID)):
        entry = {"pid": pid, "device": devices[n]["uuid"], "memory_used_bytes": 1 << 30}
        if "mig_instances" not in devices[n]:
            entry["sm_util_percent"] = 40
        scenario["processes"].append(entry)


def build_proc(proc: Path, scenario: dict, attack: bool) -> None:
    """A /proc with every scenario process in its tenant's cgroup (cgroup v2 lines)."""
    fakehost.copy_node_files(proc)
    first = min(p["pid"] for p in scenario["processes"])
    for process in scenario["processes"]:
        pid = process["pid"]
        if pid in ATTACKER_PIDS:
            rel, uid, comm = _attacker_cgroup(ATTACKER_PIDS.index(pid), attack), \
                ATTACKER_UID, "miner"
        elif pid == HOSTILE_PID:
            rel, uid, comm = "", 1001, HOSTILE_COMM
        else:
            (rel, uid), comm = _bystander(pid - first), "python3"
        fakehost.add_process_files(proc, pid, fakehost.v2_cgroup_lines(rel), comm, uid)


def flood(base: Path, count: int) -> int:
    """``count`` Docker-named cgroups made in the user's delegated subtree, none holding a
    GPU; how many were made."""
    apps = base / USER_TREE / "app.slice"
    made = 0
    for n in range(count):
        try:
            (apps / f"docker-{0xF100D000 + n:064x}.scope").mkdir(parents=True, exist_ok=True)
        except OSError:
            break
        made += 1
    return made


def unflood(base: Path, made: int) -> None:
    apps = base / USER_TREE / "app.slice"
    for n in range(made):
        try:
            (apps / f"docker-{0xF100D000 + n:064x}.scope").rmdir()
        except OSError:
            pass
    for d in (apps, apps.parent, apps.parent.parent, apps.parent.parent.parent):
        try:
            d.rmdir()
        except OSError:
            pass


_SERIES = re.compile(r'^gpustats_tenant_gpu_joules_total\{([^}]*)\} (\S+)$', re.M)
_ACTIVE = re.compile(r'^gpustats_node_gpu_active_joules_total\{([^}]*)\} (\S+)$', re.M)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def bystander_shares(metrics: str) -> dict[str, float]:
    """Each bystander tenant's share of its GPU's active energy, by ``gpu kind tenant``: the
    user's own tenants (its UID) and the oddly named process left out."""
    active = {}
    for labels, value in _ACTIVE.findall(metrics):
        active[dict(_LABEL.findall(labels))["gpu_uuid"]] = float(value)
    shares = {}
    for labels, value in _SERIES.findall(metrics):
        found = dict(_LABEL.findall(labels))
        if found.get("uid") in (str(ATTACKER_UID), "1001"):
            continue
        gpu = found["gpu_uuid"]
        if active.get(gpu):
            key = f"{gpu} {found['kind']} {found['tenant']}"
            shares[key] = shares.get(key, 0.0) + float(value) / active[gpu]
    return shares


def compare_shares(base: dict[str, float], attacked: dict[str, float]) -> dict:
    """How far each bystander's share moved under attack (relative), the worst, and the
    bystanders missing from either run."""
    common = sorted(set(base) & set(attacked))
    moved = {k: abs(attacked[k] / base[k] - 1) for k in common if base[k] > 0}
    return {"bystanders": len(common),
            "missing_under_attack": sorted(set(base) - set(attacked))[:10],
            "new_under_attack": sorted(set(attacked) - set(base))[:10],
            "max_relative_change": round(max(moved.values()), 5) if moved else None,
            "worst": max(moved, key=moved.__getitem__) if moved else None}


def fetch(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        return reply.read().decode("utf-8", "replace")


def page_is_clean(port: int) -> bool:
    """Whether the page carries no raw terminal control byte of the oddly named process."""
    page = fetch(port, "/")
    return not {"\x1b", "\x07", "\r"} & set(page)
