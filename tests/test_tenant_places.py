"""Where a cgroup sits decides whose it is, through the real daemon on fake hosts written in the
real formats: every layout (systemd units and sessions, Docker, Podman, containerd, LXC,
machined, the kubelet's systemd and cgroupfs drivers, any other cgroup; cgroup v2 and v1) is a
tenant of its own, billed its own share; and a user who names cgroups in its delegated subtree
after another tenant's container or pod is billed itself, never the victim.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats import fakehost
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

POWER_WATTS, IDLE_WATTS = 600.0, 100.0
ACTIVE_WATTS = POWER_WATTS - IDLE_WATTS
ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--log-root", "", "--idle-power-watts", str(IDLE_WATTS))
USERS = {1000: "alice", 1002: "carol"}
VICTIM = fakehost.container_id(0xF1C7)           # a Docker container's ID
POD_CONTAINER = fakehost.container_id(0xB0D)     # a pod's container's ID
POD = fakehost.pod_uid(7)
USER_TREE = "user.slice/user-1002.slice/user@1002.service"


def _uid_(uid: str) -> str:
    return uid.replace("-", "_")


def _layouts() -> dict[int, tuple[str, str, int, str, tuple[str, str]]]:
    """pid → (cgroup v2 path, comm, uid, (kind, tenant label)), one process per layout."""
    c = fakehost.container_id
    return {
        401: ("system.slice/ollama.service", "ollama", 998, ("service", "ollama.service")),
        402: ("user.slice/user-1000.slice/session-3.scope", "python3", 1000,
              ("session", "alice")),
        403: (f"system.slice/docker-{c(0xA1)}.scope", "python3", 0, ("container", c(0xA1))),
        404: (f"docker/{c(0xA2)}", "python3", 0, ("container", c(0xA2))),
        405: (f"machine.slice/libpod-{c(0xA3)}.scope/container", "python3", 0,
              ("container", c(0xA3))),
        406: (f"libpod_parent/libpod-{c(0xA4)}", "python3", 0, ("container", c(0xA4))),
        407: (f"default/{c(0xA5)}", "python3", 0, ("container", c(0xA5))),
        408: (f"system.slice/nerdctl-{c(0xA6)}.scope", "python3", 0, ("container", c(0xA6))),
        # Two LXC containers, a root python3 in each: two tenants (never process:0:python3).
        409: ("lxc.payload.a/init.scope", "python3", 0, ("container", "a")),
        410: ("lxc.payload.b", "python3", 0, ("container", "b")),
        411: ("machine.slice/machine-vm1.scope/payload", "python3", 0, ("machine", "vm1")),
        412: (f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
              f"{_uid_(fakehost.pod_uid(1))}.slice/cri-containerd-{c(0xA7)}.scope", "python3",
              0, ("pod", fakehost.pod_uid(1))),
        413: (f"kubepods/besteffort/pod{fakehost.pod_uid(2)}/{c(0xA8)}", "python3", 0,
              ("pod", fakehost.pod_uid(2))),
        # Two cgroups of no known layout, a root python3 in each: two tenants.
        414: ("batch/worker1", "python3", 0, ("cgroup", "/batch/worker1")),
        415: ("batch/worker2", "python3", 0, ("cgroup", "/batch/worker2")),
        416: (f"{USER_TREE}/user.slice/libpod-{c(0xA9)}.scope", "python3", 1002,
              ("container", f"{c(0xA9)} (carol)")),
    }


def _host(root: Path, placement: dict[int, tuple[str, str, int]], v1: bool
          ) -> tuple[Path, Path, Path]:
    """(cgroup, proc, host root) with each pid's process in its cgroup: on v2 one hierarchy;
    on v1 the same path in ``cpuacct``, ``memory`` and systemd's named hierarchy."""
    cgroup, proc, host = root / "cgroup", root / "proc", root / "host"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    for pid, (rel, comm, uid) in placement.items():
        if v1:
            for hierarchy in ("cpuacct", "memory", "systemd"):
                (cgroup / hierarchy / rel).mkdir(parents=True, exist_ok=True)
            lines = fakehost.v1_cgroup_lines({"cpuacct": rel, "memory": rel,
                                              "name=systemd": rel})
        else:
            fakehost.add_container(cgroup, rel)
            lines = fakehost.v2_cgroup_lines(rel)
        fakehost.add_process_files(proc, pid, lines, comm, uid)
    fakehost.add_passwd(host, USERS)
    return cgroup, proc, host


def _scenario(sm_by_pid: dict[int, int]) -> dict:
    return {"devices": [device(power_watts=POWER_WATTS,
                               utilization_percent=min(100, sum(sm_by_pid.values())))],
            "processes": [{"pid": pid, "device": GPU, "sm_util_percent": sm,
                           "memory_used_bytes": 1 << 30} for pid, sm in sm_by_pid.items()]}


def _series(text: str) -> dict[tuple[str, str], dict]:
    """(kind, tenant) → the labels and watts of its tenant series on the GPU; two series of
    one (kind, tenant) fail the test (two tenants shown as one)."""
    out: dict[tuple[str, str], dict] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "gpustats_tenant_gpu_watts" and s.labels.get("gpu_uuid") == GPU:
                key = (s.labels["kind"], s.labels["tenant"])
                assert key not in out, (key, out[key], s.labels)
                out[key] = {"labels": s.labels, "watts": s.value}
    return out


def _billed(expected: dict[tuple[str, str], float]):
    """A wait predicate: every expected tenant has its watts (within 1 %)."""
    def predicate(text: str) -> bool:
        series = _series(text)
        return all(key in series and series[key]["watts"] == pytest.approx(watts, rel=0.01)
                   for key, watts in expected.items())
    return predicate


def _run(start_daemon, tmp_path, placement, sm, tenants) -> tuple[dict, object]:
    cgroup, proc, host = _host(tmp_path / "node", placement, tmp_path.name.endswith("v1_"))
    daemon, _ = start_simulated(start_daemon, tmp_path, _scenario(sm), (cgroup, proc),
                                "--host-root", str(host), *ARGS)
    total = sum(sm.values())
    expected: dict[tuple[str, str], float] = {}
    for pid, key in tenants.items():
        expected[key] = expected.get(key, 0.0) + sm[pid] / total * ACTIVE_WATTS
    text = daemon.wait_for(_billed(expected), path="/metrics", timeout=30)
    return _series(text), daemon


@pytest.mark.parametrize("v1", [False, True], ids=["cgroup-v2", "cgroup-v1"])
def test_every_layout_is_a_tenant_of_its_own(start_daemon, tmp_path, v1):
    layouts = _layouts()
    placement = {pid: (rel, comm, uid) for pid, (rel, comm, uid, _) in layouts.items()}
    sm = {pid: 2 + (pid % 7) for pid in layouts}
    tenants = {pid: key for pid, (*_, key) in layouts.items()}
    node = tmp_path / ("v1_" if v1 else "v2_")
    node.mkdir()
    series, _ = _run(start_daemon, node, placement, sm, tenants)
    assert set(series) == set(tenants.values())          # nothing billed to anyone else
    labels = {key: s["labels"] for key, s in series.items()}
    assert labels[("container", f"{fakehost.container_id(0xA9)} (carol)")]["uid"] == "1002"
    assert labels[("container", f"{fakehost.container_id(0xA9)} (carol)")]["container_id"] == ""


def test_a_user_naming_cgroups_after_a_container_or_a_pod_is_billed_itself(start_daemon,
                                                                            tmp_path):
    """Issue: ``…/user@1002.service/app.slice/docker-<victim>.scope`` billed the victim's
    Docker container, and a ``kubepods-pod<uid>.slice/cri-containerd-<id>.scope`` made in the
    same subtree billed the pod; the attacker vanished from the tenants. Both made from the
    victims' IDs (world-readable in their ``/proc/<pid>/cgroup``)."""
    pod_path = (f"kubepods.slice/kubepods-pod{_uid_(POD)}.slice/"
                f"cri-containerd-{POD_CONTAINER}.scope")
    placement = {
        501: (f"system.slice/docker-{VICTIM}.scope", "python3", 0),
        502: (pod_path, "python3", 0),
        503: (f"{USER_TREE}/app.slice/docker-{VICTIM}.scope", "miner", 1002),
        504: (f"{USER_TREE}/app.slice/kubepods-pod{_uid_(POD)}.slice/"
              f"cri-containerd-{POD_CONTAINER}.scope", "miner", 1002),
    }
    sm = {501: 10, 502: 10, 503: 40, 504: 40}
    tenants = {501: ("container", VICTIM), 502: ("pod", POD),
               503: ("container", f"{VICTIM} (carol)"),
               504: ("container", f"{POD_CONTAINER} (carol)")}
    node = tmp_path / "v2_"
    node.mkdir()
    series, daemon = _run(start_daemon, node, placement, sm, tenants)
    assert set(series) == set(tenants.values())
    for pid in (503, 504):
        assert series[tenants[pid]]["labels"]["uid"] == "1002"
    status, summary = daemon.get("/stats/summary")
    assert status == 200 and isinstance(summary, dict)
    # The victims are listed once each; the attacker's two cgroups are its tenants.
    ids = [c["id"] for c in summary.get("containers", ())]
    assert ids.count(VICTIM) == 1 and ids.count(POD_CONTAINER) == 1, ids
    keys = {t["id"] for t in summary["tenants"]}
    assert {f"container:1002:{VICTIM}", f"container:1002:{POD_CONTAINER}"} <= keys, keys


def test_cgroups_a_user_makes_are_not_the_nodes_containers(start_daemon, tmp_path):
    """Issue: 20,000 ``docker-<hex>.scope`` cgroups made in a user's ``user@.service``, none
    holding a GPU, became 20,000 of the node's containers (``containers[]`` 1 → 20,001, a
    9.4 MB summary, a slower tick). They are the user's, and only the user's containers that
    hold a GPU are tenants: the node's containers stay the one Docker container."""
    node = tmp_path / "v2_"
    node.mkdir()
    placement = {601: (f"system.slice/docker-{VICTIM}.scope", "python3", 0)}
    cgroup, proc, host = _host(node / "node", placement, v1=False)
    apps = cgroup / USER_TREE / "app.slice"
    for n in range(20_000):
        (apps / f"docker-{n:064x}.scope").mkdir(parents=True)
    daemon, _ = start_simulated(start_daemon, node, _scenario({601: 50}), (cgroup, proc),
                                "--host-root", str(host), *ARGS)

    def listed(body) -> bool:
        return isinstance(body, dict) and any(
            c.get("accelerators") for c in body.get("containers", ()))

    summary = daemon.wait_for(listed, timeout=60)
    assert [c["id"] for c in summary["containers"]] == [VICTIM]
    assert "tenants" not in summary
    status, raw = daemon.get("/stats/summary")
    assert status == 200 and len(str(raw)) < 10_000
    # More made while it runs (inotify's word): still not the node's.
    for n in range(20_000, 20_100):
        (apps / f"docker-{n:064x}.scope").mkdir()
    daemon.wait_ticks(3)
    status, summary = daemon.get("/stats/summary")
    assert [c["id"] for c in summary["containers"]] == [VICTIM]
