"""Every tenant, not only pods, end to end through the real daemon: on a fake host written in
the real formats (``/proc/<pid>/cgroup``, ``comm``, ``status``, ``stat``; a cgroup v2 tree, or
v1 hierarchies; a host root with ``etc/passwd`` and Docker's ``config.v2.json``), a systemd
service, a user's session, a Slurm job step, a Docker container and a loose process share one
time-sliced GPU, and each is billed its true share of the active power: the scenario gives each
process's SM utilization, so the truth is known.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustats import fakehost
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated
from tests.support.tenant_series import (
    ACTIVE_WATTS, IDLE_WATTS, POWER_WATTS, assert_billed_by_truth, billed, samples,
    tenant_series,
)

ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "",
        "--log-root", "", "--idle-power-watts", str(IDLE_WATTS))
WEB = fakehost.container_id(0xD0C)
USERS = {998: "ollama", 1000: "alice", 1001: "bob", 1002: "carol"}
JOB = 4242

# pid: (kind, tenant name, comm, uid, SM utilization %): the SM shares add up to 100 %.
TENANTS = {
    201: ("service", "ollama.service", "ollama", 998, 30),
    202: ("session", "alice", "python3", 1000, 25),
    203: ("job", f"job {JOB}", "python3", 1001, 20),
    204: ("container", "web", "gunicorn", 1500, 15),     # a UID passwd does not name
    205: ("process", "stress-gpu", "stress-gpu", 1002, 10),
}


def v2_host(root: Path) -> tuple[Path, Path, Path]:
    """(cgroup, proc, host root) of a cgroup v2 host with the five tenants."""
    cgroup, proc, host = root / "cgroup", root / "proc", root / "host"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    rels = {201: fakehost.service_cgroup("ollama.service"),
            202: fakehost.session_cgroup(1000, "3"),
            203: fakehost.slurm_v2_cgroup(JOB, "0"),
            204: fakehost.docker_cgroup(WEB),
            205: ""}                                   # the root cgroup
    for pid, rel in rels.items():
        if rel:
            fakehost.add_container(cgroup, rel)
        _, _, comm, uid, _ = TENANTS[pid]
        fakehost.add_process_files(proc, pid, fakehost.v2_cgroup_lines(rel), comm, uid)
    fakehost.add_passwd(host, USERS)
    fakehost.add_docker_container(host, WEB, "web")
    return cgroup, proc, host


def add_v1_cgroup(cgroup: Path, hierarchy: str, rel: str) -> None:
    d = cgroup / hierarchy / rel
    d.mkdir(parents=True, exist_ok=True)
    if hierarchy == "cpuacct":
        (d / "cpuacct.usage").write_text("5000000\n")
    elif hierarchy == "memory":
        (d / "memory.usage_in_bytes").write_text(f"{1 << 20}\n")
        (d / "memory.stat").write_text(f"total_rss {1 << 20}\ntotal_inactive_file 0\n")


def v1_host(root: Path) -> tuple[Path, Path, Path]:
    """The same tenants on a cgroup v1 host: hierarchies ``cpuacct``, ``memory`` and systemd's
    named one (``name=systemd``, mounted at ``systemd``); the Slurm step is v1's layout, in the
    controllers' hierarchies, while slurmstepd's tasks stay in ``slurmd.service`` in systemd's."""
    cgroup, proc, host = root / "cgroup", root / "proc", root / "host"
    for hierarchy in ("cpuacct", "memory", "systemd"):
        (cgroup / hierarchy).mkdir(parents=True)
    fakehost.copy_node_files(proc)
    step = fakehost.slurm_v1_cgroup(1001, JOB, "0")
    docker = fakehost.docker_cgroup(WEB, v1=True)
    placement = {
        201: {"cpuacct": "", "memory": "", "name=systemd": "system.slice/ollama.service"},
        202: {"cpuacct": "", "memory": "",
              "name=systemd": fakehost.session_cgroup(1000, "3")},
        203: {"cpuacct": step, "memory": step, "name=systemd": "system.slice/slurmd.service"},
        204: {"cpuacct": docker, "memory": docker, "name=systemd": docker},
        205: {"cpuacct": "", "memory": "", "name=systemd": ""},
    }
    for pid, paths in placement.items():
        for hierarchy, rel in paths.items():
            if rel:
                add_v1_cgroup(cgroup, hierarchy.removeprefix("name="), rel)
        _, _, comm, uid, _ = TENANTS[pid]
        fakehost.add_process_files(proc, pid, fakehost.v1_cgroup_lines(paths), comm, uid)
    fakehost.add_passwd(host, USERS)
    fakehost.add_docker_container(host, WEB, "web")
    return cgroup, proc, host


def scenario(sm_by_pid: dict[int, int]) -> dict:
    """One time-sliced GPU at ``POWER_WATTS``, each process with its SM utilization."""
    total = sum(sm_by_pid.values())
    return {"devices": [device(power_watts=POWER_WATTS, utilization_percent=min(100, total))],
            "processes": [{"pid": pid, "device": GPU, "sm_util_percent": sm,
                           "memory_used_bytes": 1 << 30} for pid, sm in sm_by_pid.items()]}


def check_identities(text: str) -> None:
    """Each tenant's identity labels, and each process series' command and user."""
    series = tenant_series(text, GPU)
    labels = {key: s["labels"] for key, s in series.items()}
    service = labels[("service", "ollama.service")]
    # A service and a container are their processes' user's: a per-user bill keeps them.
    assert (service["unit"], service["uid"], service["user"]) == ("ollama.service", "998",
                                                                  "ollama")
    assert (labels[("container", "web")]["uid"], labels[("container", "web")]["user"]) == \
        ("1500", "")                                   # a UID passwd does not name
    session = labels[("session", "alice")]           # named by passwd, not the UID
    assert (session["uid"], session["user"]) == ("1000", "alice")
    job = labels[("job", f"job {JOB}")]
    assert (job["job_id"], job["step"], job["uid"], job["user"]) == (str(JOB), "0", "1001", "bob")
    assert labels[("container", "web")]["container_id"] == WEB   # config.v2.json's Name
    loose = labels[("process", "stress-gpu")]
    assert (loose["uid"], loose["user"]) == ("1002", "carol")
    for label in ("namespace", "pod", "pod_uid"):              # no pod anywhere
        assert all(not s[label] for s in labels.values()), label
    for pid, (_, _, comm, uid, _) in TENANTS.items():
        found = samples(text, "gpustats_process_gpu_joules_total", pid=str(pid))
        assert len(found) == 1, (pid, found)
        process = found[0].labels
        assert (process["comm"], process["uid"]) == (comm, str(uid)), process
        assert process["user"] == USERS.get(uid, ""), process       # empty: not named


@pytest.mark.parametrize("layout", [v2_host, v1_host], ids=["cgroup-v2", "cgroup-v1"])
def test_every_kind_of_tenant_is_billed_its_share(start_daemon, tmp_path, layout):
    cgroup, proc, host = layout(tmp_path / "node")
    daemon, _ = start_simulated(start_daemon, tmp_path,
                                scenario({pid: t[-1] for pid, t in TENANTS.items()}),
                                (cgroup, proc), "--host-root", str(host), *ARGS)
    text = daemon.wait_for(billed(TENANTS, 1500.0), path="/metrics", timeout=40)
    assert_billed_by_truth(text, TENANTS, GPU, ACTIVE_WATTS)
    check_identities(text)


def test_the_shares_follow_the_load_and_counters_keep_their_series(start_daemon, tmp_path):
    """The load moves: the session stops, the job takes its share; each tenant's watts follow
    the new truth, and its energy counter continues on the same series."""
    cgroup, proc, host = v2_host(tmp_path / "node")
    first = {pid: t[-1] for pid, t in TENANTS.items()}
    daemon, path = start_simulated(start_daemon, tmp_path, scenario(first), (cgroup, proc),
                                   "--host-root", str(host), *ARGS)
    text = daemon.wait_for(billed(TENANTS, 800.0), path="/metrics", timeout=40)
    before = {key: s["gpustats_tenant_gpu_joules_total"]
              for key, s in tenant_series(text, GPU).items()}
    moved = {**first, 202: 0, 203: 45}
    write_scenario(path, scenario(moved))
    job_share = 45 / sum(moved.values())

    def settled(text: str):
        series = tenant_series(text, GPU).get(("job", f"job {JOB}"))
        return series is not None and series["gpustats_tenant_gpu_watts"] == pytest.approx(
            job_share * ACTIVE_WATTS, rel=0.01)

    text = daemon.wait_for(settled, path="/metrics", timeout=30)
    series = tenant_series(text, GPU)
    for pid, (kind, name, *_) in TENANTS.items():
        watts = series[(kind, name)]["gpustats_tenant_gpu_watts"]
        assert watts == pytest.approx(moved[pid] / 100 * ACTIVE_WATTS, rel=0.01, abs=0.01), \
            (kind, name, watts)
        assert series[(kind, name)]["gpustats_tenant_gpu_joules_total"] >= before[(kind, name)]
    assert len(samples(text, "gpustats_tenant_gpu_joules_total", kind="job")) == 1


def test_a_process_moved_to_another_cgroup_is_billed_to_its_new_tenant(start_daemon, tmp_path):
    """A process first seen in a Docker container is moved into a service (its
    ``/proc/<pid>/cgroup`` changes, as ``systemd-run --scope`` or a cgroup.procs write does):
    from the next tick it is the service's, and the container is billed no more."""
    cgroup, proc, host = tmp_path / "cgroup", tmp_path / "proc", tmp_path / "host"
    fakehost.start_cgroup_tree(cgroup)
    fakehost.copy_node_files(proc)
    docker, service = fakehost.docker_cgroup(WEB), fakehost.service_cgroup("train.service")
    for rel in (docker, service):
        fakehost.add_container(cgroup, rel)
    fakehost.add_process_files(proc, 301, fakehost.v2_cgroup_lines(docker), "python3", 1000)
    fakehost.add_passwd(host, USERS)
    fakehost.add_docker_container(host, WEB, "web")
    daemon, _ = start_simulated(start_daemon, tmp_path, scenario({301: 50}), (cgroup, proc),
                                "--host-root", str(host), *ARGS)
    container = ("container", "web")
    daemon.wait_for(lambda text: container in tenant_series(text, GPU), path="/metrics",
                    timeout=30)
    (proc / "301" / "cgroup").write_text(fakehost.v2_cgroup_lines(service))

    def moved(text: str):
        series = tenant_series(text, GPU).get(("service", "train.service"))
        return series is not None and series["gpustats_tenant_gpu_watts"] > 0
    text = daemon.wait_for(moved, path="/metrics", timeout=10)
    daemon.wait_ticks(3)
    _, text = daemon.get("/metrics")
    series = tenant_series(text, GPU)
    assert series[("service", "train.service")]["gpustats_tenant_gpu_watts"] == \
        pytest.approx(ACTIVE_WATTS, rel=0.01)
    assert series[container].get("gpustats_tenant_gpu_watts") in (0.0, None), series[container]
