"""Scenario files for benchmark scales (written to a temp dir at run time)."""

from __future__ import annotations

import yaml

H100 = "NVIDIA H100 80GB HBM3"
GIB = 1024 ** 3


def gpu_uuid(i: int) -> str:
    return f"GPU-{i:08x}-0000-4000-8000-{i:012x}"


def node_scenario(gpus: int, processes: int = 0, mig_instances: int = 0,
                  first_pid: int = 100000) -> dict:
    devices = []
    for i in range(gpus):
        device = {
            "uuid": gpu_uuid(i), "name": H100, "architecture": "hopper", "minor": i,
            "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "memory_total_bytes": 80 * GIB,
            "memory_used_bytes": 10 * GIB, "utilization_percent": 50, "power_watts": 300 + i,
            "power_limit_watts": 700, "temperature_celsius": 50,
            "clocks_event_reasons": ["sw_power_cap"],
            "violations": {"power_percent": 10, "thermal_percent": 0, "sync_boost_percent": 0,
                           "board_limit_percent": 0},
            "gpm": {"sm_active_percent": 40, "sm_occupancy_percent": 20,
                    "dram_active_percent": 30, "graphics_active_percent": 45,
                    "pcie_tx_bytes_per_second": 1.0e9, "pcie_rx_bytes_per_second": 2.0e9,
                    "nvlink_tx_bytes_per_second": 0, "nvlink_rx_bytes_per_second": 0},
        }
        if mig_instances:
            device["mig_instances"] = [
                {"gpu_instance_id": 7 + k, "compute_instance_id": 0, "profile": "1g.10gb",
                 "memory_total_bytes": 10 * GIB,
                 "gpm": {"sm_active_percent": 10 + k * 10}}
                for k in range(mig_instances)
            ]
        devices.append(device)
    procs = []
    for p in range(processes):
        gpu = p % gpus
        proc = {"pid": first_pid + p, "device": gpu_uuid(gpu), "memory_used_bytes": GIB}
        if mig_instances:
            proc["gpu_instance_id"] = 7 + (p // gpus) % mig_instances
        else:
            proc["sm_util_percent"] = 10 + (p % 5) * 10
        procs.append(proc)
    return {"devices": devices, "processes": procs}


def write_scenario(path, scenario: dict) -> str:
    with open(path, "w") as f:
        yaml.safe_dump(scenario, f)
    return str(path)


def fake_host(root, containers: int, pids: list[int], pods_of: int = 3) -> tuple[str, str]:
    """A cgroup v2 tree with ``containers`` containers (``pods_of`` per pod) and a /proc
    whose ``pids`` live in the first containers. Returns (cgroup root, proc root)."""
    import os

    cgroup = os.path.join(root, "cgroup")
    proc = os.path.join(root, "proc")
    os.makedirs(cgroup, exist_ok=True)
    with open(os.path.join(cgroup, "cgroup.controllers"), "w") as f:
        f.write("cpu memory\n")
    paths = []
    for i in range(containers):
        pod = f"{i // pods_of:08x}-0000-4000-8000-{i // pods_of:012x}"
        cid = f"{i:064x}"
        rel = (f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
               f"{pod.replace('-', '_')}.slice/cri-containerd-{cid}.scope")
        d = os.path.join(cgroup, rel)
        os.makedirs(d, exist_ok=True)
        # The container's files, and its pod's (a pod cgroup has them too, as on a node).
        for where in (d, os.path.dirname(d)):
            for name, text in (("cpu.stat", f"usage_usec {1000 * (i + 1)}\nuser_usec 1\n"),
                               ("memory.current", f"{(i + 1) << 20}\n"),
                               ("memory.stat", "anon 1048576\ninactive_file 4096\n"
                                               "pgfault 10\npgmajfault 0\n"),
                               ("memory.max", "max\n")):
                with open(os.path.join(where, name), "w") as f:
                    f.write(text)
        paths.append("/" + rel)
    for n, pid in enumerate(pids):
        d = os.path.join(proc, str(pid))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "cgroup"), "w") as f:
            f.write(f"0::{paths[n % len(paths)]}\n")
        with open(os.path.join(d, "stat"), "w") as f:     # proc(5); field 22: start ticks
            f.write(f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 "
                    + " ".join(["0"] * 12) + f" {1000 + n} " + " ".join(["0"] * 30) + "\n")
    for name in ("stat", "meminfo", "vmstat"):
        with open(f"/proc/{name}") as src, open(os.path.join(proc, name), "w") as dst:
            dst.write(src.read())
    return cgroup, proc


def fake_log_layout(root, containers: int, entries: int, pods_of: int = 3) -> str:
    """The kubelet's log layout for ``fake_host``'s containers, padded with foreign and
    dangling entries to ``entries`` names in all. Directory mtimes are set in the past, as on
    a node between pod starts. Returns the log root."""
    import os

    pods_dir, links_dir = os.path.join(root, "pods"), os.path.join(root, "containers")
    os.makedirs(pods_dir, exist_ok=True)
    os.makedirs(links_dir, exist_ok=True)
    made = 0
    for i in range(containers):
        n = i // pods_of
        pod, cid = f"{n:08x}-0000-4000-8000-{n:012x}", f"{i:064x}"
        pod_dir = f"bench_pod-{n}_{pod}"
        if i % pods_of == 0:
            os.makedirs(os.path.join(pods_dir, pod_dir))
            made += 1
        os.symlink(f"/var/log/pods/{pod_dir}/c{i}/0.log",
                   os.path.join(links_dir, f"pod-{n}_bench_c{i}-{cid}.log"))
        made += 1
    for j in range(max(0, entries - made)):
        if j % 2:
            os.symlink(f"/gone/{j}",
                       os.path.join(links_dir, f"stale-{j}_ns_c-{j + 10**6:064x}.log"))
        else:
            with open(os.path.join(links_dir, f"foreign {j}.txt"), "w"):
                pass
    for d in (pods_dir, links_dir):
        os.utime(d, (1_000_000_000, 1_000_000_000))
    return str(root)
