"""The AMD backend on this machine's real ``/proc``, the daemon run as root with only the
capabilities the deployments keep (``setpriv``), beside a process of another user holding a
render node open: with ``CAP_DAC_READ_SEARCH`` and ``CAP_SYS_PTRACE`` its fd, link and fdinfo
are read and the ``amd`` source works; without ``CAP_DAC_READ_SEARCH`` it fails, saying so.

The machine has no GPU: the other user's process (UID 65534) holds ``/dev/dri/renderD128``, a
plain file made in a private mount namespace's overlay of ``/dev`` (the link's text is what
the source matches; nothing of the host's ``/dev`` changes), and the daemon's sysfs is a fake
tree with one amdgpu card whose render node that is. The file's fdinfo is a plain file's, so
no client is billed: what is shown is that the kernel lets the daemon read it, or refuses.
Skipped without root, ``setpriv`` or ``unshare``, or where the kernel refuses them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from gpustats import fakehost
from tests.support.drm_tree import DrmTree
from tests.support.paths import REPO_ROOT
from tests.support.waiting import poll

NOBODY = 65534
RENDER_NODE = "/dev/dri/renderD128"
HELD_FD = 3
AMD_GPU = "0000:19:00.0"
ARGS = ("--housekeeping-interval", "0.25", "--pod-resources-socket", "", "--runtime-socket", "",
        "--log-root", "", "--proc-root", "/proc")
CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE = 2, 19


def _setpriv(*caps: str) -> tuple[str, ...]:
    """``setpriv`` keeping only ``caps`` (as UID 0: the bounding set is what an exec keeps)."""
    keep = ",".join(["-all", *(f"+{c}" for c in caps)])
    return ("setpriv", f"--inh-caps={keep}", f"--ambient-caps={keep}", f"--bounding-set={keep}",
            "--")


@pytest.fixture
def kernel_allows_setpriv():
    if os.geteuid() != 0:
        pytest.skip("needs root: setpriv drops capabilities from a root process")
    for tool in ("setpriv", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    done = subprocess.run([*_setpriv("sys_ptrace"), "true"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"the kernel refuses setpriv here: {done.stderr.strip()}")


def _wait(predicate, what: str, timeout: float = 20.0):
    value = poll(predicate, timeout)
    if value:
        return value
    raise AssertionError(f"not in {timeout}s: {what}")


def _held_link(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/{HELD_FD}")
    except OSError:
        return None


@pytest.fixture
def holder(tmp_path, kernel_allows_setpriv):
    """The PID of a process of UID 65534 holding ``/dev/dri/renderD128`` open on fd 3."""
    mnt = tmp_path / "dev-overlay"
    mnt.mkdir()
    script = (f"mount -t tmpfs tmpfs {mnt} && mkdir {mnt}/upper {mnt}/work && "
              f"mount -t overlay overlay -o lowerdir=/dev,upperdir={mnt}/upper,"
              f"workdir={mnt}/work /dev && mkdir -p /dev/dri && : > {RENDER_NODE} && "
              f"exec setpriv --reuid {NOBODY} --regid {NOBODY} --clear-groups "
              f"sleep infinity {HELD_FD}<{RENDER_NODE}")
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                             script], stderr=subprocess.PIPE, text=True)
    try:
        def held():
            if proc.poll() is not None:
                pytest.skip(f"the kernel refuses the holder's mount namespace: "
                            f"{proc.stderr.read().strip() if proc.stderr else ''}")
            return _held_link(proc.pid) == RENDER_NODE
        _wait(held, "the holder opens the render node")
        assert os.stat(f"/proc/{proc.pid}").st_uid == NOBODY
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _node(tmp_path):
    """A fake sysfs with one amdgpu card (render node 128) and an empty cgroup v2 tree."""
    tree = DrmTree(tmp_path / "tree")
    tree.add_amd_gpu(AMD_GPU, card=0, product_name="AMD Instinct MI300X")
    cgroup = tmp_path / "cgroup"
    fakehost.start_cgroup_tree(cgroup)
    return ("--sysfs-root", str(tree.sysfs), "--cgroup-root", str(cgroup), *ARGS)


def _effective(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(x for x in f if x.startswith("CapEff:")).split()[1], 16)


def _refused_with_both(pid: int) -> bool:
    """Whether this kernel refuses a link of ``pid`` to root holding both capabilities."""
    done = subprocess.run([*_setpriv("dac_read_search", "sys_ptrace"), sys.executable, "-c",
                           f"import os; [os.readlink(f'/proc/{pid}/fd/{{n}}') "
                           f"for n in os.listdir('/proc/{pid}/fd')]"], capture_output=True,
                          text=True, timeout=60)
    return "PermissionError" in done.stderr


def _amd(body) -> dict | None:
    return next((s for s in body.get("sources", ()) if s["name"] == "amd"), None)


def test_both_capabilities_read_another_users_fdinfo_and_the_source_works(
        start_daemon, tmp_path, holder):
    daemon = start_daemon(*_node(tmp_path),
                          wrapper=_setpriv("dac_read_search", "sys_ptrace"))
    daemon.wait_ready()
    assert _effective(daemon.proc.pid) == 1 << CAP_DAC_READ_SEARCH | 1 << CAP_SYS_PTRACE
    sequence = daemon.wait_ticks(3)
    status = daemon.wait_for(lambda b: b["snapshotSequence"] >= sequence and _amd(b),
                             path="/api/v1/status")
    amd = _amd(status)
    assert amd["state"] == "ok", amd
    assert not [e for e in status["collectionErrors"] if e["reason"] == "fdinfo_refused"]
    # A process no capability opens (a sandbox's init, whose links this kernel refuses even
    # with both) is named, and fails nothing; the other user's process is not among them.
    if _refused_with_both(1):
        assert amd["lastErrorReason"] == "process_unreadable", amd
        assert amd["lastError"].startswith("PID 1")
    if amd.get("lastErrorReason") == "process_unreadable":
        assert f" {holder}," not in amd["lastError"] and f" {holder} " not in amd["lastError"]
    assert f"PID {holder}:" not in daemon.log()


def test_the_holders_fd_link_and_fdinfo_are_read(tmp_path, holder):
    """Under strace: the daemon lists the other user's fd directory, reads the link, and
    opens its fdinfo, each answered."""
    if shutil.which("strace") is None:
        pytest.skip("strace not installed")
    trace = tmp_path / "trace"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=openat,readlinkat,readlink", "-e", "signal=none",
         "-o", str(trace), *_setpriv("dac_read_search", "sys_ptrace"), sys.executable, "-m",
         "gpustats", "--once", "--state-dir", str(tmp_path / "state"), *_node(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = trace.read_text().splitlines()

    def answered(fragment: str) -> bool:
        return any(fragment in c and "= -1" not in c for c in calls)
    assert answered(f'"/proc/{holder}/fd"'), "fd directory"
    assert answered(f'"/proc/{holder}/fd/{HELD_FD}", "{RENDER_NODE}"'), "link"
    assert answered(f'"/proc/{holder}/fdinfo/{HELD_FD}"'), "fdinfo"
    assert f"PID {holder}:" not in done.stderr and "lacks CAP_" not in done.stderr


def test_without_dac_read_search_the_source_fails_naming_it(start_daemon, tmp_path, holder):
    daemon = start_daemon(*_node(tmp_path), wrapper=_setpriv("sys_ptrace"))
    daemon.wait_ready()
    assert _effective(daemon.proc.pid) == 1 << CAP_SYS_PTRACE
    status = daemon.wait_for(lambda b: (_amd(b) or {}).get("state") == "failing",
                             path="/api/v1/status")
    amd = _amd(status)
    assert amd["lastErrorReason"] == "fdinfo_refused"
    assert "the daemon lacks CAP_DAC_READ_SEARCH;" in amd["lastError"], amd
    assert "lacks CAP_DAC_READ_SEARCH (docs/security.md" in daemon.log()
    assert "lacks CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE" not in daemon.log()
