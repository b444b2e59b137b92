"""Real NVML against nvidia-smi, the energy counter against integrated power, and overhead."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cgroup_dirs import remove_when_left
from tests.support.nvidia_smi import nvidia_smi

REPO = Path(__file__).resolve().parents[2]


def test_identity_memory_power_agree_with_nvidia_smi(real_daemon):
    real_daemon.housekeeper.tick()
    snapshot = real_daemon.housekeeper.tick()
    rows = nvidia_smi("uuid,name,memory.total,memory.used,power.draw,pci.bus_id,index")
    smi = {r[0]: r for r in rows}
    assert len(snapshot.devices) == len(rows)
    for device in snapshot.devices:
        ident = device.identity
        row = smi[ident.uuid]
        assert ident.name == row[1]
        assert ident.memory_total_bytes // 2**20 == int(row[2])          # MiB, exact
        assert abs(device.memory_used_bytes // 2**20 - int(row[3])) <= 2  # moves between reads
        assert ident.pci_bus_id.lower().endswith(row[5].lower()[-12:])
        assert ident.index == int(row[6])
        smi_watts = float(row[4])
        assert device.power_watts == pytest.approx(smi_watts, rel=0.05, abs=3.0)


def test_energy_counter_matches_integrated_power():
    """The hardware counter's delta over 30 s is within 5% of the integral of sampled power."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        try:
            e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except pynvml.NVMLError_NotSupported:
            pytest.skip("this GPU has no energy counter")
        work = subprocess.Popen([sys.executable, "-m", "tests.gpu.workload", "--seconds", "32",
                                 "--duty", "0.6"], cwd=str(REPO))
        integrated = 0.0
        t_prev = time.monotonic()
        p_prev = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        t_start = t_prev
        while time.monotonic() - t_start < 30.0:
            time.sleep(0.1)               # measures: power sampled every 0.1 s for 30 s
            t = time.monotonic()
            p = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
            integrated += (p + p_prev) / 2 * (t - t_prev)
            t_prev, p_prev = t, p
        e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        work.wait(60)
    finally:
        pynvml.nvmlShutdown()
    counter_joules = (e1 - e0) / 1000.0
    print(f"energy counter {counter_joules:.1f} J, integrated power {integrated:.1f} J")
    assert counter_joules == pytest.approx(integrated, rel=0.05)


def _matmul_rate(seconds: float, tmp_path: Path, name: str) -> float:
    report = tmp_path / f"{name}.json"
    subprocess.run([sys.executable, "-m", "tests.gpu.workload", "--seconds", str(seconds),
                    "--duty", "1.0", "--report", str(report)], cwd=str(REPO), check=True)
    return json.loads(report.read_text())["per_second"]


def test_overhead_of_one_second_ticks(real_daemon, tmp_path):
    """A matmul loop keeps >= 99% of its throughput while the daemon ticks every second."""
    _matmul_rate(5, tmp_path, "warmup")
    without = _matmul_rate(20, tmp_path, "without")
    stop = threading.Event()

    def ticking():
        while not stop.is_set():
            real_daemon.housekeeper.tick()
            stop.wait(1.0)

    thread = threading.Thread(target=ticking)
    thread.start()
    try:
        with_daemon = _matmul_rate(20, tmp_path, "with")
    finally:
        stop.set()
        thread.join()
    ratio = with_daemon / without
    print(f"matmul/s without {without:.1f}, with daemon ticking {with_daemon:.1f}, "
          f"ratio {ratio:.4f}")
    assert ratio >= 0.99


def _v2_root() -> Path | None:
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (root / "cgroup.controllers").exists():
            return root
    return None


class _Containers:
    """Real cgroup v2 groups shaped like kubelet's, each holding a workload process."""

    def __init__(self, root: Path):
        self.root = root
        self.dirs: list[Path] = []
        self.procs: list[subprocess.Popen] = []

    def start(self, duty: float, seconds: float, progress: Path | None = None):
        import uuid
        pod, cid = uuid.uuid4(), uuid.uuid4().hex * 2
        group = self.root / "kubepods" / "besteffort" / f"pod{pod}" / cid
        try:
            group.mkdir(parents=True)
        except OSError as exc:
            pytest.skip(f"cannot create cgroups here: {exc}")
        self.dirs.append(group)
        extra = ["--progress", str(progress)] if progress is not None else []
        proc = subprocess.Popen([sys.executable, "-m", "tests.gpu.workload", "--seconds",
                                 str(seconds), "--duty", str(duty), *extra], cwd=str(REPO))
        self.procs.append(proc)
        try:
            (group / "cgroup.procs").write_text(str(proc.pid))
        except OSError as exc:
            pytest.skip(f"cannot move a process into a cgroup here: {exc}")
        return cid

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        for d in self.dirs:
            for p in (d, d.parent):
                remove_when_left(p, timeout=1)


@pytest.fixture
def containers():
    root = _v2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy")
    c = _Containers(root)
    yield c
    c.close()


def _idle_watts() -> float:
    """The GPU's power at rest, measured before the workloads start.

    With the workloads already running, "the lowest power seen" would be a loaded power and
    leave almost nothing active to attribute; operators configure idle power the same way.
    """
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        readings = []
        for _ in range(10):
            readings.append(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            time.sleep(0.1)               # measures: ten readings 0.1 s apart
    finally:
        pynvml.nvmlShutdown()
    return min(readings)


def _daemon_on(tmp_path, cgroup_root: Path, idle_watts: float):
    from gpustats.cli import Daemon
    from gpustats.config import build_arg_parser, resolve

    args = build_arg_parser().parse_args([
        "--state-dir", str(tmp_path / "state"), "--pod-resources-socket", "",
        "--runtime-socket", "", "--cgroup-root", str(cgroup_root),
        "--idle-power-watts", f"{idle_watts:.1f}"])
    return Daemon(resolve(args, {}))


def _container_energy(snapshot, cid):
    for pod in snapshot.pods:
        for c in pod.containers:
            if c.container_id == cid and c.accelerators:
                return c.accelerators[0].attributed_energy_joules or 0.0
    return 0.0


def test_workload_in_a_cgroup_is_attributed_to_its_container(containers, tmp_path):
    idle = _idle_watts()
    cid = containers.start(duty=1.0, seconds=25)
    daemon = _daemon_on(tmp_path, containers.root, idle)
    try:
        time.sleep(8)              # measures: CUDA start-up, then the process in NVML's list
        snapshot = None
        for _ in range(10):
            snapshot = daemon.housekeeper.tick()
            time.sleep(1)          # measures: ticks 1 s apart
        energy = _container_energy(snapshot, cid)
        device = snapshot.devices[0]
        print(f"container {cid[:12]} attributed {energy:.1f} J; device active "
              f"{device.active_energy_joules:.1f} J, power {device.power_watts} W, "
              f"idle {device.idle_power_watts} W")
        assert energy > 0
        total = sum(p.attributed_energy_joules or 0 for p in snapshot.processes)
        assert total <= (device.active_energy_joules or 0) * 1.001 + 1e-6   # Σ attributed ≤ active
    finally:
        daemon.close()


def _matmuls_done(progress: Path) -> int:
    try:
        return json.loads(progress.read_text())["matmuls"]
    except (OSError, ValueError, KeyError):
        return 0                      # not started its first period yet


def test_two_duty_cycles_split_as_the_work_they_did(containers, tmp_path):
    """Two containers running the same kernel at 80 % and 25 % duty share the GPU by time
    slicing: each is billed the share of the active energy that its share of the work done
    (matmuls, the same energy apiece) says, within 0.15. NVML credits the GPU to one process
    per sampling instant (about six a second), so 20 s gives about 120 instants: a binomial
    spread of about 0.04 around the true share."""
    idle = _idle_watts()
    progress = [tmp_path / "busy.json", tmp_path / "light.json"]
    busy = containers.start(duty=0.8, seconds=40, progress=progress[0])
    light = containers.start(duty=0.25, seconds=40, progress=progress[1])
    daemon = _daemon_on(tmp_path, containers.root, idle)
    try:
        time.sleep(8)              # measures: CUDA start-up, then the process in NVML's list
        snapshot = daemon.housekeeper.tick()
        start_energy = [_container_energy(snapshot, c) for c in (busy, light)]
        start_work = [_matmuls_done(p) for p in progress]
        for _ in range(20):
            time.sleep(1)          # measures: ticks 1 s apart
            snapshot = daemon.housekeeper.tick()
        energy = [_container_energy(snapshot, c) - e for c, e in zip((busy, light), start_energy)]
        work = [_matmuls_done(p) - w for p, w in zip(progress, start_work)]
        print(f"busy {energy[0]:.1f} J for {work[0]} matmuls, light {energy[1]:.1f} J for "
              f"{work[1]} matmuls")
        assert sum(energy) > 0 and sum(work) > 0
        energy_share, work_share = energy[0] / sum(energy), work[0] / sum(work)
        print(f"busy share: energy {energy_share:.3f}, work {work_share:.3f}")
        assert abs(energy_share - work_share) <= 0.15
        device = snapshot.devices[0]
        total = sum(p.attributed_energy_joules or 0 for p in snapshot.processes)
        assert total <= (device.active_energy_joules or 0) * 1.001 + 1e-6
    finally:
        daemon.close()
