"""Host processes are read through ``--proc-root`` alone (the DaemonSet mounts the host's
procfs read-only at /host/proc instead of joining the host's PID namespace).

The fake proc tree's PIDs lie above the kernel's PID_MAX_LIMIT (2^22), so no process of the
machine running the tests can have them: a process mapped to its container can only have
been read from the fake tree, and every file the daemon opens is recorded besides.
"""

import builtins
import os

import pytest

from tests.support.fakehost import build, container_id, write_scenario
from tests.support.gpus import GPU_C as GPU

PID_MAX_LIMIT = 1 << 22                     # include/linux/threads.h, 64-bit
PIDS = (PID_MAX_LIMIT + 7, PID_MAX_LIMIT + 8)
START_TICKS = {PIDS[0]: 123456, PIDS[1]: 234567}


def _stat_line(pid: int, start: int) -> str:
    # proc(5): pid (comm) state, then fields 4..; field 22 is the start time.
    fields = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 30
    return f"{pid} (python3 (worker)) {' '.join(fields)}\n"


@pytest.fixture
def opened(monkeypatch):
    """Every path the process opens, lists or stats from here on."""
    paths = []
    # builtins.open too: psutil opens procfs files with it, not with os.open.
    for module, name in ((os, "open"), (os, "scandir"), (os, "listdir"), (os, "stat"),
                         (os, "lstat"), (builtins, "open")):
        real = getattr(module, name)

        def recording(path=".", *args, _real=real, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)):
                paths.append(os.fsdecode(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(module, name, recording)
    return paths


def test_processes_map_to_containers_through_the_proc_root_alone(tmp_path, in_process_daemon,
                                                                 opened):
    cgroup, proc = build(tmp_path / "host", {PIDS[0]: (1, 1), PIDS[1]: (2, 2)})
    for pid, start in START_TICKS.items():
        (proc / str(pid) / "stat").write_text(_stat_line(pid, start))
    write_scenario(tmp_path / "s.yaml", {
        "devices": [{"uuid": GPU, "minor": 0, "power_watts": 300}],
        "processes": [{"pid": pid, "device": GPU, "sm_util_percent": 40} for pid in PIDS]})
    assert not any(os.path.exists(f"/proc/{pid}") for pid in PIDS)
    daemon = in_process_daemon("--simulate", str(tmp_path / "s.yaml"), "--cgroup-root",
                               str(cgroup), "--proc-root", str(proc), "--idle-power-watts", "100")
    opened.clear()
    for _ in range(3):
        snapshot = daemon.housekeeper.tick()
    by_pid = {p.pid: p for p in snapshot.processes}
    assert {pid: by_pid[pid].container_id for pid in PIDS} == \
        {PIDS[0]: container_id(1), PIDS[1]: container_id(2)}
    assert {pid: by_pid[pid].start_time_ticks for pid in PIDS} == START_TICKS
    on_gpu = {c.container_id for pod in snapshot.pods for c in pod.containers
              if any(a.device_uuid == GPU for a in c.accelerators)}
    on_gpu |= {c.container_id for c in snapshot.containers
               if any(a.device_uuid == GPU for a in c.accelerators)}
    assert on_gpu == {container_id(1), container_id(2)}
    assert any(p.startswith(f"{proc}/{PIDS[0]}/") for p in opened)       # the hook sees reads
    assert f"{proc}/stat" in opened                                       # psutil's too
    host_proc = [p for p in opened if p == "/proc" or p.startswith("/proc/")]
    assert host_proc == []


def test_node_cpu_and_boot_time_come_from_the_proc_root(tmp_path, in_process_daemon, opened):
    """psutil, pointed at --proc-root at start-up, reads the fake tree's /proc/stat."""
    cgroup, proc = build(tmp_path / "host", {})
    (proc / "stat").write_text("cpu  300 0 200 9000 0 0 0 0 0 0\nbtime 1111111111\n")
    write_scenario(tmp_path / "s.yaml", {"devices": [{"uuid": GPU, "minor": 0}]})
    daemon = in_process_daemon("--simulate", str(tmp_path / "s.yaml"), "--cgroup-root",
                               str(cgroup), "--proc-root", str(proc))
    opened.clear()
    node = daemon.housekeeper.tick().node
    assert node.start_time == 1111111111.0
    from gpustats.sources.node import CLOCK_TICKS_PER_SECOND as HZ
    assert node.cpu.usage_core_nano_seconds == 500 * 1_000_000_000 // HZ
    assert f"{proc}/stat" in opened
    assert [p for p in opened if p == "/proc" or p.startswith("/proc/")] == []
