"""A GPU process's command and UID (``/proc/<pid>/comm`` and ``status``), and the service,
session or Slurm step its ``/proc/<pid>/cgroup`` names, against fake /proc trees."""

import os

import pytest

from gpustats.hostfs import HostRoots
from gpustats.sources.procs import (
    COMM_BYTES, ProcessIdentity, ProcReader, container_from_paths, parse_comm, parse_proc_cgroup,
    parse_real_uid, tenant_from_paths,
)

CID = "9be25294a1b0c7d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7"


def status_text(real_uid: int, effective_uid: int | None = None) -> str:
    """``/proc/<pid>/status`` as Linux 6.x writes it (the lines before and after ``Uid:``)."""
    euid = real_uid if effective_uid is None else effective_uid
    return (f"Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\n"
            f"Pid:\t4242\nPPid:\t1\nTracerPid:\t0\n"
            f"Uid:\t{real_uid}\t{euid}\t{euid}\t{euid}\nGid:\t100\t100\t100\t100\n"
            f"FDSize:\t256\nGroups:\t100 27\nVmPeak:\t 1234 kB\n")


def make_process(proc, pid, *, comm=b"python3\n", status=None, cgroup=None):
    d = proc / str(pid)
    d.mkdir(parents=True)
    if comm is not None:
        (d / "comm").write_bytes(comm)
    if status is not None:
        (d / "status").write_text(status)
    if cgroup is not None:
        (d / "cgroup").write_text(cgroup)
    return d


@pytest.fixture
def proc(tmp_path):
    return tmp_path / "proc"


def reader(proc, report=None):
    return ProcReader(HostRoots(proc=str(proc)), report)


def test_command_and_real_uid(proc):
    make_process(proc, 4242, status=status_text(1000, effective_uid=0))    # a setuid binary
    assert reader(proc).identity(4242) == ProcessIdentity("python3", 1000)


def test_a_gone_process_has_no_identity(proc):
    proc.mkdir()
    assert reader(proc).identity(4242) is None


def test_each_half_is_absent_on_its_own(proc):
    make_process(proc, 1, comm=None, status=status_text(0))
    make_process(proc, 2, status=None)
    make_process(proc, 3, status="Name:\tpython3\nState:\tR (running)\n")   # no Uid: line
    r = reader(proc)
    assert r.identity(1) == ProcessIdentity(None, 0)
    assert r.identity(2) == ProcessIdentity("python3", None)
    assert r.identity(3) == ProcessIdentity("python3", None)


def test_comm_is_bounded_and_decoded_with_replacement(proc):
    make_process(proc, 1, comm=b"x" * 100 + b"\n", status=status_text(0))
    make_process(proc, 2, comm=b"tr\xffin\n", status=status_text(0))
    make_process(proc, 3, comm=b"kworker/u16:0-events_unbound\n", status=status_text(0))
    r = reader(proc)
    assert r.identity(1).comm == "x" * COMM_BYTES
    assert r.identity(2).comm == "tr\ufffdin"
    assert r.identity(3).comm == "kworker/u16:0-events_unbound"


def test_a_fifo_is_refused_and_reported(proc):
    d = make_process(proc, 7, comm=None, status=status_text(1000))
    os.mkfifo(d / "comm")
    refused = []
    assert reader(proc, refused.append).identity(7) == ProcessIdentity(None, 1000)
    assert [exc.reason for exc in refused] == ["not_regular_file"]


@pytest.mark.parametrize("text", [
    "", "Name:\tx\n", "Uid:\n", "Uid:\t-1\t0\t0\t0\n", "Uid:\tabc\t0\t0\t0\n",
    "Uid:\t\u0661\u0662\t0\t0\t0\n",                  # digits, but not ASCII ones
    "Uid:\t4294967296\t0\t0\t0\n",                    # beyond uid_t
])
def test_status_without_a_real_uid(text):
    with pytest.raises(ValueError):
        parse_real_uid(text)


def test_parse_comm_strips_only_the_newline():
    assert parse_comm(b"my prog \n") == "my prog "
    assert parse_comm(b"") == ""


# ------------------------------------------------------------------ tenants from cgroups


def test_v2_paths():
    assert tenant_from_paths({"": "/system.slice/sshd.service"}).unit == "sshd.service"
    session = tenant_from_paths({"": "/user.slice/user-1000.slice/session-4.scope"})
    assert (session.kind, session.uid) == ("session", 1000)
    step = tenant_from_paths(
        {"": "/system.slice/slurmstepd.scope/job_88/step_0/user/task_0"})
    assert (step.kind, step.job_id, step.step) == ("job", "88", "0")
    assert tenant_from_paths({"": "/"}) is None


V1_SLURM_STEP = """\
12:pids:/slurm/uid_1000/job_88/step_0
11:freezer:/slurm/uid_1000/job_88/step_0
10:memory:/slurm/uid_1000/job_88/step_0/task_0
9:devices:/slurm/uid_1000/job_88/step_0
8:cpu,cpuacct:/slurm/uid_1000/job_88/step_0/task_0
7:cpuset:/slurm/uid_1000/job_88/step_0
1:name=systemd:/system.slice/slurmd.service
0::/system.slice/slurmd.service
"""


def test_a_v1_slurm_step_beats_slurmd_in_the_systemd_hierarchy():
    """On v1 and hybrid hosts slurmstepd's tasks stay in slurmd.service for systemd."""
    paths = parse_proc_cgroup(V1_SLURM_STEP)
    step = tenant_from_paths(paths)
    assert (step.kind, step.job_id, step.step, step.uid) == ("job", "88", "0", 1000)
    assert step.cgroup_path == "/slurm/uid_1000/job_88/step_0"
    # With only one controller's hierarchy showing the step, it is still found.
    only_freezer = {k: v for k, v in paths.items() if k in ("freezer", "name=systemd", "")}
    assert tenant_from_paths(only_freezer).kind == "job"


def test_v1_units_come_from_the_systemd_hierarchy():
    paths = parse_proc_cgroup("""\
10:memory:/user.slice
8:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-1000.slice/session-2.scope
""")
    session = tenant_from_paths(paths)
    assert (session.kind, session.uid) == ("session", 1000)
    # A v1 host without name=systemd: the controllers' paths.
    no_systemd = {"cpuacct": "/system.slice/ml.service", "memory": "/system.slice/ml.service"}
    assert tenant_from_paths(no_systemd).unit == "ml.service"


def test_containers_are_left_to_container_from_paths():
    paths = parse_proc_cgroup(f"0::/system.slice/docker-{CID}.scope\n")
    assert tenant_from_paths(paths) is None
    assert container_from_paths(paths).info.container_id == CID


def test_owner_of_reads_the_processes_cgroup_file(proc):
    make_process(proc, 10, cgroup="0::/system.slice/nvidia-persistenced.service\n")
    make_process(proc, 11, cgroup=V1_SLURM_STEP)
    make_process(proc, 12, cgroup="0::/\n")
    r = reader(proc)
    assert r.owner_of(10).tenant.unit == "nvidia-persistenced.service"
    assert r.owner_of(11).tenant.key == "job:88:0"
    assert r.owner_of(12).tenant.kind == "process"     # in no service, session or job
    assert r.owner_of(13) is None                      # gone


def test_a_command_name_with_a_line_separator_forges_no_uid_line():
    # The Name: line is the process's own comm: U+2028 or U+0085 in it is no line end.
    from gpustats.sources.procs import parse_real_uid

    status = "Name:\tx\u2028Uid:\t0\nState:\tS\nUid:\t1002\t1002\t1002\t1002\n"
    assert parse_real_uid(status) == 1002
