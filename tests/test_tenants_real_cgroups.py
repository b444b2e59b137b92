"""Every kind of tenant on this machine's real cgroups (root, cgroup v1 hierarchies with
systemd's named one and v2 at ``/sys/fs/cgroup/unified``): a systemd service, a user's session,
a Slurm step in v1's layout and one in v2's, and a loose process, each a real sleeping process
moved into its cgroup, listed on a simulated GPU by its real PID; the daemon reads the real
``/proc`` and ``/sys/fs/cgroup`` and bills each its true share.

Only uniquely named cgroups are made (a random tag in every name, or below a directory that has
one), and only those are removed, after their processes are killed, also on failure. Skipped,
with the reason, where cgroups cannot be made (not root, a hierarchy missing).
"""

from __future__ import annotations

import os
import random
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from gpustats import fakehost
from gpustats.sources.cgroup_paths import parse_cgroup_path
from gpustats.sources.tenant_paths import any_layout_tenant, parse_tenant_path
from tests.support.gpus import GPU_A as GPU, device
from tests.support.cgroup_dirs import make_recorded, remove_when_left
from tests.support.waiting import wait_until
from tests.support.tenant_series import (
    ACTIVE_WATTS, IDLE_WATTS, POWER_WATTS, assert_billed_by_truth, billed, samples,
    tenant_series,
)

CGROUP = Path("/sys/fs/cgroup")
# (kind of hierarchy in /proc/<pid>/cgroup, its directory below CGROUP)
HIERARCHIES = {"name=systemd": "systemd", "": "unified", "cpuacct": "cpuacct",
               "memory": "memory"}
# A process that names itself (``comm``) and sleeps with no child, so killing it empties its
# cgroup at once.
SLEEPER = 'printf %s "$0" > /proc/$$/comm && read never'


def _mounted(directory: str) -> bool:
    return (CGROUP / directory / "cgroup.procs").is_file()


def _hierarchy_dir(controllers: str) -> Path | None:
    """The directory of a ``/proc/<pid>/cgroup`` line's hierarchy (v2: the unified mount)."""
    if controllers == "":
        return CGROUP / "unified" if _mounted("unified") else \
            (CGROUP if (CGROUP / "cgroup.controllers").exists() else None)
    for name in (controllers, controllers.removeprefix("name=")):
        if _mounted(name):
            return CGROUP / name
    return None


class RealCgroups:
    """The cgroups and processes one test made, to be undone in reverse."""

    def __init__(self, tag: str):
        self.tag = tag
        self.created: list[Path] = []
        self.procs: list[subprocess.Popen] = []

    def make(self, directory: str, rel: str) -> Path:
        """``CGROUP/directory/rel``, making (and recording) each missing component."""
        return make_recorded(CGROUP / directory / rel, self.created)

    def spawn(self, comm: str, uid: int = 0) -> subprocess.Popen:
        """A sleeping process named ``comm`` running as ``uid``, out of any tenant it
        inherited from this test's own cgroups."""
        proc = subprocess.Popen(["/bin/sh", "-c", SLEEPER, comm], stdin=subprocess.PIPE,
                                user=uid if uid else None)
        self.procs.append(proc)
        assert wait_until(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == comm),\
            f"{comm} did not name itself"
        self._leave_inherited_tenants(proc.pid)
        return proc

    def _leave_inherited_tenants(self, pid: int) -> None:
        """Where the process's cgroup (this test's own) names a tenant or a container, as in
        a user's session, it is moved to that hierarchy's root: else it would be billed there."""
        for controllers, path in _lines(pid):
            if parse_tenant_path(path) is None and parse_cgroup_path(path) is None \
                    and any_layout_tenant(path) is None:
                continue
            root = _hierarchy_dir(controllers)
            try:
                if root is None:
                    raise OSError("no such hierarchy mounted")
                (root / "cgroup.procs").write_text(str(pid))
            except OSError as exc:
                pytest.skip(f"cannot take a process out of {controllers}:{path}: {exc}")

    @staticmethod
    def join(proc: subprocess.Popen, group: Path) -> None:
        (group / "cgroup.procs").write_text(str(proc.pid))

    def undo(self) -> list[str]:
        """Kill the processes, then remove what was made, deepest first; what could not be
        removed, by path."""
        for proc in self.procs:
            proc.kill()
            proc.wait()
        left = []
        for d in sorted(self.created, key=lambda p: len(p.parts), reverse=True):
            if not remove_when_left(d):
                left.append(str(d))
        return left


def _lines(pid: int) -> list[tuple[str, str]]:
    out = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        out.append((controllers, path))
    return out


@pytest.fixture
def real_cgroups():
    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root")
    missing = [f"{CGROUP / d} ({name or 'cgroup2'})" for name, d in HIERARCHIES.items()
               if not _mounted(d)]
    if missing:
        pytest.skip("no cgroup hierarchy at " + ", ".join(missing))
    made = RealCgroups(uuid.uuid4().hex[:10])
    try:
        yield made
    finally:
        left = made.undo()
        assert not left, f"cgroups made by the test left behind: {left}"


def test_every_kind_of_tenant_on_real_cgroups(real_cgroups, start_daemon, tmp_path):
    made, tag = real_cgroups, real_cgroups.tag
    session_uid = random.randint(3_000_000_000, 3_900_000_000)   # a user this host has not
    job_v1, job_v2 = random.randint(10**8, 10**9), random.randint(10**8, 10**9)
    unit = f"gpustats-test-{tag}.service"
    service = f"system.slice/{unit}"
    session = fakehost.session_cgroup(session_uid, tag)
    # Slurm's multi-slurmd names: slurm_<node> (v1), <node>_slurmstepd.scope (v2).
    step_v1 = f"slurm_gpustats-test-{tag}/uid_0/job_{job_v1}/step_0/task_0"
    step_v2 = (f"system.slice/gpustats-test-{tag}_slurmstepd.scope/job_{job_v2}/step_0/"
               "user/task_0")
    try:
        groups = {
            "service": [made.make("systemd", service), made.make("unified", service)],
            "session": [made.make("systemd", session), made.make("unified", session)],
            "step_v1": [made.make("cpuacct", step_v1), made.make("memory", step_v1)],
            "step_v2": [made.make("unified", step_v2)],
        }
    except OSError as exc:
        pytest.skip(f"cannot create cgroups here: {exc}")

    procs = {
        "service": made.spawn("gt-service"),
        "session": made.spawn("gt-notebook", session_uid),
        "step_v1": made.spawn("gt-step-v1"),
        "step_v2": made.spawn("gt-step-v2"),
        "loose": made.spawn("gt-loose"),
    }
    try:
        for name, targets in groups.items():
            for group in targets:
                made.join(procs[name], group)
    except OSError as exc:
        pytest.skip(f"cannot move processes into cgroups here: {exc}")
    lines = {name: dict(_lines(p.pid)) for name, p in procs.items()}
    assert lines["step_v1"]["cpuacct"] == "/" + step_v1, lines["step_v1"]
    assert lines["step_v2"][""] == "/" + step_v2, lines["step_v2"]

    # pid: (kind, tenant name, comm, uid, SM utilization %)
    tenants = {
        procs["service"].pid: ("service", unit, "gt-service", 0, 30),
        procs["session"].pid: ("session", "gt-user", "gt-notebook", session_uid, 25),
        procs["step_v1"].pid: ("job", f"job {job_v1}", "gt-step-v1", 0, 20),
        procs["step_v2"].pid: ("job", f"job {job_v2}", "gt-step-v2", 0, 15),
        procs["loose"].pid: ("process", "gt-loose", "gt-loose", 0, 10),
    }
    host = tmp_path / "host"
    fakehost.add_passwd(host, {session_uid: "gt-user"})
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "devices": [device(power_watts=POWER_WATTS, utilization_percent=100)],
        "processes": [{"pid": pid, "device": GPU, "sm_util_percent": t[-1],
                       "memory_used_bytes": 1 << 30} for pid, t in tenants.items()]}))
    daemon = start_daemon("--simulate", str(scenario), "--proc-root", "/proc",
                          "--cgroup-root", str(CGROUP), "--host-root", str(host),
                          "--pod-resources-socket", "", "--runtime-socket", "", "--log-root", "",
                          "--housekeeping-interval", "0.2", "--idle-power-watts", str(IDLE_WATTS))
    daemon.wait_ready()
    text = daemon.wait_for(billed(tenants, 1500.0), path="/metrics", timeout=40)
    assert_billed_by_truth(text, tenants, GPU, ACTIVE_WATTS)

    labels = {key: s["labels"] for key, s in tenant_series(text, GPU).items()}
    assert labels[("service", unit)]["unit"] == unit
    assert (labels[("session", "gt-user")]["uid"], labels[("session", "gt-user")]["user"]) \
        == (str(session_uid), "gt-user")
    for job in (job_v1, job_v2):
        found = labels[("job", f"job {job}")]
        assert (found["job_id"], found["step"], found["uid"], found["user"]) \
            == (str(job), "0", "0", "root")
    for pid, (_, _, comm, uid, _) in tenants.items():
        process = samples(text, "gpustats_process_gpu_joules_total", pid=str(pid))
        assert len(process) == 1, (pid, process)
        assert (process[0].labels["comm"], process[0].labels["uid"]) == (comm, str(uid))
    # The summary lists each with its own cgroup (the unit's, the session scope's, the
    # step's), none for the loose process.
    status, summary = daemon.get("/stats/summary")
    assert status == 200
    cgroups = {t["name"]: t.get("cgroup") for t in summary.get("tenants", ())}
    assert cgroups == {
        unit: "/" + service, "gt-user": "/" + session,
        f"job {job_v1}": "/" + step_v1.rsplit("/", 1)[0],
        f"job {job_v2}": "/" + step_v2.rsplit("/", 2)[0], "gt-loose": None}, cgroups
