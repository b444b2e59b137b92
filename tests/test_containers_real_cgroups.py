"""End to end on real cgroups (root): a v1 container mapped through devices.list and a v2
container found through NVML's process list, each holding a real process.

Skipped, with the reason, where cgroups cannot be created (not root, no v1 hierarchies).
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support.cgroup_dirs import make_recorded, remove_when_left
from tests.support.fakehost import metric_value
from tests.support.invariants import assert_attributed_watts
from tests.support.waiting import poll

CGROUP = Path("/sys/fs/cgroup")
GPU0 = "GPU-00000000-1111-4111-8111-000000000000"
GPU1 = "GPU-00000000-1111-4111-8111-000000000001"
# Pages charged before joining stay with the old memory cgroup, so allocate after joining.
BUSY = ("import time\ntime.sleep(0.3)\nheld = bytearray(48 << 20)\n"
        "while True:\n    sum(range(20000)); time.sleep(0.002)\n")


def _own_v1_path(controller: str) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return "/"


@pytest.fixture
def cgroups():
    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root")
    for controller in ("devices", "memory"):
        if not (CGROUP / controller / "cgroup.procs").exists():
            pytest.skip(f"no cgroup v1 '{controller}' hierarchy at {CGROUP / controller}")
    cpuacct = next((CGROUP / n for n in ("cpuacct", "cpu,cpuacct")
                    if (CGROUP / n / "cpuacct.usage").exists()), None)
    if cpuacct is None:
        pytest.skip("no cgroup v1 cpuacct hierarchy")
    created: list[Path] = []
    procs: list[subprocess.Popen] = []
    try:
        yield {"created": created, "procs": procs, "cpuacct": cpuacct}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
            remove_when_left(d, timeout=1)


def _join(proc: subprocess.Popen, group: Path) -> None:
    (group / "cgroup.procs").write_text(str(proc.pid))


def test_v1_devices_list_and_v2_process_path(cgroups, start_daemon, tmp_path):
    created = cgroups["created"]
    uid1, uid2 = str(uuid.uuid4()), str(uuid.uuid4())
    cid1, cid2 = uuid.uuid4().hex * 2, uuid.uuid4().hex * 2
    rel1 = f"kubepods/burstable/pod{uid1}/{cid1}"
    try:
        devices = CGROUP / "devices" / rel1
        make_recorded(devices, created)
        (devices / "devices.deny").write_text("a")
        (devices / "devices.allow").write_text("c 195:0 rw")
        cpu = cgroups["cpuacct"] / rel1
        make_recorded(cpu, created)
        own_memory = _own_v1_path("memory").lstrip("/")
        memory = CGROUP / "memory" / own_memory / rel1
        make_recorded(memory, created)
    except OSError as exc:
        pytest.skip(f"cannot create v1 cgroups here: {exc}")

    worker = subprocess.Popen([sys.executable, "-c", BUSY])
    cgroups["procs"].append(worker)
    for group in (devices, cpu, memory):
        _join(worker, group)

    v2_worker = None
    unified = CGROUP / "unified"
    if (unified / "cgroup.procs").exists():
        v2_group = unified / f"kubepods/besteffort/pod{uid2}/{cid2}"
        try:
            make_recorded(v2_group, created)
            v2_worker = subprocess.Popen([sys.executable, "-c", BUSY])
            cgroups["procs"].append(v2_worker)
            _join(v2_worker, v2_group)
        except OSError:
            v2_worker = None

    processes = [{"pid": worker.pid, "device": GPU0, "sm_util_percent": 60,
                  "memory_used_bytes": 1 << 30}]
    if v2_worker is not None:
        processes.append({"pid": v2_worker.pid, "device": GPU1, "sm_util_percent": 30,
                          "memory_used_bytes": 1 << 29})
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "devices": [{"uuid": GPU0, "minor": 0, "power_watts": 300},
                    {"uuid": GPU1, "minor": 1, "power_watts": 200}],
        "processes": processes}))
    daemon = start_daemon("--simulate", str(scenario), "--housekeeping-interval", "0.3",
                          "--cgroup-root", str(CGROUP), "--pod-resources-socket", "",
                          "--runtime-socket", "", "--idle-power-watts", "100",
                          "--kubelet-cgroup-parent", _own_v1_path("memory"))
    daemon.wait_ready()

    def of_pod(summary, uid):
        # No name source: the pods are nameless, so their containers are listed at the top
        # level with the pod's UID (never in pods[] with empty names).
        assert summary["pods"] == []
        return next((c for c in summary.get("containers", ()) if c.get("podUid") == uid), None)

    summary = daemon.wait_for(
        lambda s: of_pod(s, uid1) and of_pod(s, uid1)["cpu"].get("usageNanoCores")
        and of_pod(s, uid1)["memory"].get("workingSetBytes", 0) > 40 << 20
        and of_pod(s, uid1).get("accelerators", [{}])[0].get(
            "attributedEnergyJoules", 0) > 0, timeout=20)
    container = of_pod(summary, uid1)
    assert container["id"] == cid1 and "name" not in container   # known by its ID only
    assert container["cpu"]["usageCoreNanoSeconds"] > 0
    assert container["memory"]["workingSetBytes"] > 40 << 20     # the 48 MiB it holds
    assert container["startTime"]
    acc = container["accelerators"][0]
    assert acc["id"] == GPU0 and acc["make"] == "nvidia"
    assert acc["processMemoryUsed"] == 1 << 30
    assert acc["computeUtilization"] == 60
    assert acc["attributedPowerWatts"] > 0
    assert_attributed_watts(daemon, 200.0, GPU0, cid1)   # 300 W − 100 W idle
    assert metric_value(daemon.get("/metrics")[1], "gpustats_pod_gpu_joules_total",
                        pod_uid=uid1, gpu_uuid=GPU0) > 0

    if v2_worker is not None:
        summary = daemon.wait_for(lambda s: of_pod(s, uid2) is not None, timeout=10)
        c2 = of_pod(summary, uid2)
        assert c2["id"] == cid2
        assert c2["accelerators"][0]["id"] == GPU1
        assert c2["cpu"]["usageCoreNanoSeconds"] > 0      # v2 cpu.stat
    else:
        pytest.skip("no cgroup v2 hierarchy at /sys/fs/cgroup/unified for the second half")


def test_a_cgroup_made_after_the_first_walk_is_found_and_read(cgroups):
    """Discovery re-walks real cgroupfs on inotify's word: a container cgroup made after the
    first walk is found by the next one, its kept files read, and it is gone once removed."""
    from gpustats.hostfs import HostRoots
    from gpustats.sources.cgroups import CgroupReader

    reader = CgroupReader(HostRoots(cgroup=str(CGROUP)), kept_files=64)
    try:
        reader.discover()
        reader.end_tick()
        cid = f"{os.getpid():064x}"
        # containerd's cgroupfs layout outside Kubernetes: <namespace>/<id> at the top.
        group = CGROUP / "memory" / f"gpustats-late-{uuid.uuid4().hex[:8]}" / cid
        try:
            make_recorded(group, cgroups["created"])
        except OSError as exc:
            pytest.skip(f"cannot create v1 cgroups here: {exc}")
        found = reader.discover()
        assert cid in found.containers
        usage = reader.usage(cid, found.containers[cid].cgroup)
        assert usage.memory is not None and usage.memory.usage_bytes == 0     # nothing in it
        reader.end_tick()
        for d in sorted(cgroups["created"], key=lambda p: len(p.parts), reverse=True):
            d.rmdir()
        cgroups["created"].clear()
        assert cid not in reader.discover().containers
        reader.end_tick()
    finally:
        reader.close()


def test_churn_on_real_cgroupfs_lists_only_the_subtree_that_changed(cgroups):
    """Container cgroups made and removed under one subtree of the real hierarchies (v1 memory
    and, where mounted, the v2 one at /sys/fs/cgroup/unified): each is found and gone at the
    next discovery, and no directory of the first walk is listed again."""
    from gpustats.hostfs import HostRoots
    from gpustats.sources.cgroup_tree import list_subdirs
    from gpustats.sources.cgroups import CgroupReader

    listed = []
    reader = CgroupReader(HostRoots(cgroup=str(CGROUP)),
                          list_dirs=lambda d: listed.append(d) or list_subdirs(d))
    if reader._changes.unavailable:
        pytest.skip(reader._changes.unavailable)
    try:
        reader.discover()
        first = set(listed)
        listed.clear()
        top = f"gpustats-churn-{uuid.uuid4().hex[:8]}"
        roots = [CGROUP / "memory"] + ([CGROUP / "unified"]
                                       if (CGROUP / "unified" / "cgroup.procs").exists() else [])
        for round_ in range(3):
            cid = uuid.uuid4().hex * 2
            groups = [root / top / cid for root in roots]     # containerd: <namespace>/<id>
            try:
                for group in groups:
                    make_recorded(group, cgroups["created"])
            except OSError as exc:
                pytest.skip(f"cannot create cgroups here: {exc}")
            found = reader.discover()
            assert set(dict(found.containers[cid].cgroup.paths)) == \
                {"memory"} | ({""} if len(roots) == 2 else set())
            assert not first & set(listed), sorted(first & set(listed))[:5]
            # The first round lists the directory made above the container; later rounds
            # list nothing of ours (a container's cgroup is not descended into).
            ours = {d for d in listed if f"/{top}" in d}
            assert ours == ({str(root / top) for root in roots} if round_ == 0 else set())
            listed.clear()
            for group in groups:
                group.rmdir()
                cgroups["created"].remove(group)
            assert cid not in reader.discover().containers
            assert not first & set(listed)
            listed.clear()
    finally:
        reader.close()


def test_a_daemon_in_its_own_pid_namespace_maps_host_pids_through_the_host_proc(cgroups,
                                                                                tmp_path):
    """As the DaemonSet runs it (no hostPID): the daemon in a PID namespace of its own, the
    host's procfs bound read-only at the --proc-root. The host PID the GPU reports, which the
    daemon cannot see in its own /proc nor signal, is mapped to its container."""
    import shutil

    from tests.support.daemon import SERVING, http_get

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    uid, cid = str(uuid.uuid4()), uuid.uuid4().hex * 2
    memory = CGROUP / "memory" / _own_v1_path("memory").lstrip("/") / \
        f"kubepods/besteffort/pod{uid}/{cid}"
    try:
        make_recorded(memory, cgroups["created"])
    except OSError as exc:
        pytest.skip(f"cannot create v1 cgroups here: {exc}")
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    cgroups["procs"].append(worker)
    _join(worker, memory)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "devices": [{"uuid": GPU0, "minor": 0, "power_watts": 300}],
        "processes": [{"pid": worker.pid, "device": GPU0, "memory_used_bytes": 1 << 30}]}))
    host_proc = tmp_path / "host-proc"
    host_proc.mkdir()
    daemon = " ".join([
        sys.executable, "-m", "gpustats", "--listen=127.0.0.1:0",
        f"--state-dir={tmp_path / 'state'}", f"--simulate={scenario}",
        f"--cgroup-root={CGROUP}", f"--proc-root={host_proc}", "--pod-resources-socket=",
        "--runtime-socket=", "--housekeeping-interval=0.3", "--idle-power-watts=100",
        f"--kubelet-cgroup-parent={_own_v1_path('memory')}"])
    # The host's procfs kept (read-only) before a procfs of the new namespace covers /proc;
    # the worker is neither in that /proc nor reachable by kill(2) from inside.
    script = (f"mount --bind /proc {host_proc} && mount -o remount,bind,ro {host_proc} && "
              f"mount -t proc proc /proc && test ! -e /proc/{worker.pid}/cgroup && "
              f"! kill -0 {worker.pid} 2>/dev/null && exec {daemon}")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    with open(tmp_path / "daemon.log", "w") as log:
        proc = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child",
                                 "sh", "-c", script], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def billed() -> tuple[dict | None] | None:
            if proc.poll() is not None:
                return (None,)
            serving = SERVING.search((tmp_path / "daemon.log").read_text())
            try:
                if serving is None:
                    raise OSError("not serving yet")
                status, body = http_get(f"http://127.0.0.1:{serving.group(1)}/stats/summary")
            except OSError:
                return None
            if status != 200:
                return None
            container = next((c for c in body.get("containers", ())
                              if c.get("podUid") == uid and c.get("accelerators")), None)
            return (container,) if container is not None else None

        found = (poll(billed, timeout=20, interval=0.3) or (None,))[0]
        output = (tmp_path / "daemon.log").read_text()
        if found is None and "unshare failed" in output:
            pytest.skip(f"cannot make namespaces here: {output[-300:]}")
        assert found is not None, output[-3000:]
        assert found["id"] == cid and found["accelerators"][0]["id"] == GPU0
        assert found["accelerators"][0]["processMemoryUsed"] == 1 << 30
    finally:
        proc.kill()               # --kill-child: the daemon dies with unshare
        proc.wait(10)
