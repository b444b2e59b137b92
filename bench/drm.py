"""Cost of an AMD GPU's sweep per tick on a node with many processes: the DRM client scan.

    python -m bench.drm                      # 1,000 processes, 8 of them on the GPU, 48 ticks
    python -m bench.drm --processes 5000 --fds 64 --gpu-processes 32
    python -m bench.drm --attack dups       # + 50 processes × 4,096 dups of their DRM fd
    python -m bench.drm --attack crowd      # + 50 × (4,095 /dev/null + 1 DRM fd)
    python -m bench.drm --kernel-list       # debugfs names the GPU processes: only they are read

A fake node in the kernel's formats: one amdgpu device (sysfs and hwmon) and ``--processes``
processes under ``/proc``, each with ``--fds`` open files (``/dev/null``, sockets, files), of
which ``--gpu-processes`` also hold a DRM client (a ``/dev/dri/renderD128`` link and its
fdinfo, engine time growing between ticks). ``DrmSweeper.sweep()`` runs tick after tick as
the daemon runs it: the first tick lists every process, later ones the processes known to
hold a DRM fd and new ones, and every 12th tick every process again (a process may open the
GPU later). A new process appears every tick (listed once when it does).

``--kernel-list`` writes the kernel's clients list (debugfs ``dri/0/clients``) naming the
GPU processes (and the attackers), so only they are read. ``--attack`` adds
``--attack-processes`` processes from ``bench/attackers.py`` (each with its own client,
engine time still). The slowest tick's wall time is reported too.

Figures: CPU seconds per sweep on the first tick, on the ticks between full rescans (median,
p95), on the rescan ticks (median), the mean over a rescan period, and files read per tick,
on stdout and in bench/results/drm.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.attackers import drm_fd_crowd, drm_fd_dups
from bench.daemons import RESULTS
from gpustats.hostfs import HostRoots
from gpustats.model.device import VENDOR_AMD
from gpustats.sources.drm.sweep import DrmSweeper

GPU = "0000:19:00.0"
RESCAN_EVERY = 12


def amdgpu_fdinfo(client_id: int, gfx_ns: int, pdev: str = GPU) -> str:
    """An amdgpu DRM client's fdinfo (amdgpu_fdinfo.c) on the GPU at ``pdev``."""
    return (f"pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t1051\ndrm-driver:\tamdgpu\n"
            f"drm-client-id:\t{client_id}\ndrm-pdev:\t{pdev}\npasid:\t32770\n"
            f"drm-total-vram:\t2 GiB\ndrm-resident-vram:\t2097152 KiB\n"
            f"drm-engine-gfx:\t{gfx_ns} ns\n")


def build_node(root: Path, processes: int, fds: int, gpu_processes: int) -> list[Path]:
    """The tree; the fdinfo files of the GPU processes' clients."""
    device = root / "sys" / "bus" / "pci" / "devices" / GPU
    (root / "sys" / "bus" / "pci" / "drivers" / "amdgpu").mkdir(parents=True)
    for name, value in (("vendor", "0x1002"), ("device", "0x74a1"), ("class", "0x120000"),
                        ("gpu_busy_percent", "60"), ("mem_info_vram_total", str(192 << 30)),
                        ("mem_info_vram_used", str(16 << 30)),
                        ("unique_id", "2b4a1c0e9f8d7e6a")):
        device.mkdir(parents=True, exist_ok=True)
        (device / name).write_text(value + "\n")
    (device / "driver").symlink_to("../../../bus/pci/drivers/amdgpu")
    for node, minor in (("card0", 0), ("renderD128", 128)):
        (device / "drm" / node).mkdir(parents=True)
        (device / "drm" / node / "dev").write_text(f"226:{minor}\n")
    hwmon = device / "hwmon" / "hwmon3"
    hwmon.mkdir(parents=True)
    for name, value in (("name", "amdgpu"), ("power1_average", "550000000"),
                        ("power1_cap", "750000000"), ("temp1_input", "51000")):
        (hwmon / name).write_text(value + "\n")
    gpu_files = []
    for n in range(processes):
        gpu_files += add_process(root / "proc", 1000 + n, fds, n < gpu_processes)
    return gpu_files


def add_process(proc: Path, pid: int, fds: int, on_gpu: bool) -> list[Path]:
    fd_dir, info_dir = proc / str(pid) / "fd", proc / str(pid) / "fdinfo"
    fd_dir.mkdir(parents=True)
    info_dir.mkdir()
    for fd in range(fds):
        target = ("/dev/null", f"socket:[{pid * 100 + fd}]", f"/var/log/app-{fd}.log")[fd % 3]
        (fd_dir / str(fd)).symlink_to(target)
    if not on_gpu:
        return []
    (fd_dir / str(fds)).symlink_to("/dev/dri/renderD128")
    info = info_dir / str(fds)
    info.write_text(amdgpu_fdinfo(pid, 0))
    return [info]


ATTACKS = {"dups": drm_fd_dups, "crowd": drm_fd_crowd}


def _kernel_list(root: Path, pids: list[int]) -> None:
    """drm_debugfs.c ``drm_clients_info`` of card0 (6.8 to 6.13: no name or ID column)."""
    lines = [f"{'command':>20} {'tgid':>5} {'dev':>3} master a {'uid':>5} {'magic':>10}"]
    lines += [f"{'python3':>20} {pid:5d} {128:3d}   n    n {1000:5d} {0:10d}" for pid in pids]
    path = root / "sys" / "kernel" / "debug" / "dri" / "0" / "clients"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def run(processes: int, fds: int, gpu_processes: int, ticks: int, attack: str | None = None,
        attack_processes: int = 50, kernel_list: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="gpustats-bench-drm-") as tmp:
        root = Path(tmp)
        gpu_files = build_node(root, processes, fds, gpu_processes)
        listed = list(range(1000, 1000 + gpu_processes))
        if attack is not None:
            listed += ATTACKS[attack](root / "proc", 100_000, amdgpu_fdinfo(0, 0).replace(
                "drm-client-id:\t0", "drm-client-id:\t{pid}"), processes=attack_processes)
        if kernel_list:
            _kernel_list(root, listed)
        sweeper = DrmSweeper(VENDOR_AMD, HostRoots(sysfs=str(root / "sys"),
                                                   proc=str(root / "proc")),
                             rescan_every=RESCAN_EVERY)
        seconds, calls, walls, short_ticks = [], [], [], 0
        for tick in range(ticks):
            for n, info in enumerate(gpu_files):      # the clients' engines move
                info.write_text(amdgpu_fdinfo(1000 + n, (tick + 1) * 2_000_000_000))
            add_process(root / "proc", 1000 + processes + tick, fds, False)
            before_calls = sweeper.calls
            started, wall = time.process_time(), time.monotonic()
            readings = sweeper.sweep()
            seconds.append(time.process_time() - started)
            walls.append(time.monotonic() - wall)
            calls.append(sweeper.calls - before_calls)
            honest = {p.pid for p in readings[0].processes if p.pid < 100_000}
            short_ticks += len(honest) < gpu_processes
            assert attack is not None or len(honest) == gpu_processes, readings
    rescans = [s for t, s in enumerate(seconds) if t % RESCAN_EVERY == 0 and t > 0]
    between = [s for t, s in enumerate(seconds) if t % RESCAN_EVERY != 0]
    period = seconds[1:1 + RESCAN_EVERY * ((ticks - 1) // RESCAN_EVERY)] or seconds
    return {
        "processes": processes, "fds_per_process": fds, "gpu_processes": gpu_processes,
        "ticks": ticks, "attack": attack, "kernel_list": kernel_list,
        "attack_processes": attack_processes if attack is not None else 0,
        "slowest_tick_wall_seconds": round(max(walls), 6),
        "ticks_missing_gpu_processes": short_ticks,
        "first_tick_seconds": round(seconds[0], 6),
        "between_rescans_median_seconds": round(statistics.median(between), 6),
        "between_rescans_p95_seconds": round(sorted(between)[int(0.95 * (len(between) - 1))],
                                             6),
        "rescan_median_seconds": round(statistics.median(rescans), 6) if rescans else None,
        "mean_per_tick_seconds": round(statistics.fmean(period), 6),
        "files_read_between_rescans_median": statistics.median(
            c for t, c in enumerate(calls) if t % RESCAN_EVERY != 0),
        "files_read_rescan_median": statistics.median(
            c for t, c in enumerate(calls) if t % RESCAN_EVERY == 0 and t > 0)
        if rescans else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drm", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--fds", type=int, default=16, help="open files per process")
    parser.add_argument("--gpu-processes", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=4 * RESCAN_EVERY + 1)
    parser.add_argument("--attack", choices=sorted(ATTACKS))
    parser.add_argument("--attack-processes", type=int, default=50)
    parser.add_argument("--kernel-list", action="store_true",
                        help="the kernel's DRM clients list (debugfs) names the GPU processes")
    args = parser.parse_args(argv)
    if not 0 < args.gpu_processes <= args.processes or args.ticks < 2 or args.fds < 0:
        parser.error("need 0 < --gpu-processes <= --processes, --ticks >= 2, --fds >= 0")
    result = run(args.processes, args.fds, args.gpu_processes, args.ticks, args.attack,
                 args.attack_processes, args.kernel_list)
    print(f"{result['processes']} processes × {result['fds_per_process']} open files, "
          f"{result['gpu_processes']} on the GPU, {result['ticks']} ticks (CPU per sweep):")
    print(f"  first tick (every process)      {result['first_tick_seconds'] * 1e3:8.2f} ms")
    print(f"  between full rescans  median    "
          f"{result['between_rescans_median_seconds'] * 1e3:8.2f} ms   p95 "
          f"{result['between_rescans_p95_seconds'] * 1e3:.2f} ms   "
          f"({result['files_read_between_rescans_median']:.0f} files read)")
    if result["rescan_median_seconds"] is not None:
        print(f"  full rescan (every 12th tick)   {result['rescan_median_seconds'] * 1e3:8.2f} ms"
              f"   ({result['files_read_rescan_median']:.0f} files read)")
    print(f"  mean per tick                   {result['mean_per_tick_seconds'] * 1e3:8.2f} ms")
    print(f"  slowest tick (wall)             "
          f"{result['slowest_tick_wall_seconds'] * 1e3:8.2f} ms   "
          f"({result['ticks_missing_gpu_processes']} ticks left a GPU process for later)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "drm.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
