"""Whole-process CPU per tick of two source trees' daemons, run side by side (paired).

    python -m bench.daemon_cpu --base ../other-checkout [--new .] [--gpus 8] [--processes 32]
                               [--windows 12] [--window-seconds 10]

``bench.paired`` times the tick on the collecting thread; this counts every thread of a real
daemon (``python -m gpustats --simulate``, 1 s ticks, no containers): the event thread, the
persister, the HTTP server, the journal. Both daemons run at once on the same scenario, so load
that comes and goes on the machine falls on both alike; in each window both are read from
schedstat (to the nanosecond). Reported: each tree's median CPU per tick and the median of the
per-window ratios new / base.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.daemons import DaemonProc, cpu_seconds
from bench.scenarios import node_scenario, write_scenario

TICK_SECONDS = 1.0
WARMUP_SECONDS = 5.0


def fake_proc(root: Path, pids: list[int]) -> str:
    """A /proc whose ``pids`` run outside any container (in the root cgroup)."""
    for n, pid in enumerate(pids):
        d = root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text("0::/\n")
        fields = ["S"] + ["0"] * 18 + [str(1000 + n)] + ["0"] * 30
        (d / "stat").write_text(f"{pid} (worker) {' '.join(fields)}\n")
    for name in ("stat", "meminfo", "vmstat"):
        (root / name).write_text(Path(f"/proc/{name}").read_text())
    return str(root)


def run_windows(base: Path, new: Path, gpus: int, processes: int, windows: int,
                window_seconds: float, workdir: Path) -> dict:
    scenario = node_scenario(gpus, processes)
    path = write_scenario(workdir / "scenario.yaml", scenario)
    proc_root = fake_proc(workdir / "proc", [p["pid"] for p in scenario["processes"]])
    (workdir / "no-cgroups").mkdir()

    args = ["--simulate", path, "--housekeeping-interval", str(TICK_SECONDS),
            "--pod-resources-socket", "", "--runtime-socket", "", "--log-root", "",
            "--cgroup-root", str(workdir / "no-cgroups"), "--proc-root", proc_root]

    daemons = {"base": DaemonProc(args, workdir, base),
               "new": DaemonProc(args, workdir, new)}
    per_tick = {"base": [], "new": []}
    try:
        time.sleep(WARMUP_SECONDS)
        for _ in range(windows):
            before = {tag: cpu_seconds(d.ps) for tag, d in daemons.items()}
            time.sleep(window_seconds)
            for tag, d in daemons.items():
                per_tick[tag].append((cpu_seconds(d.ps) - before[tag]) * 1000.0
                                     * TICK_SECONDS / window_seconds)
    finally:
        for d in daemons.values():
            d.stop()
    ratios = [n / b for n, b in zip(per_tick["new"], per_tick["base"]) if b > 0]
    return {
        "gpus": gpus, "processes": processes, "containers": 0, "windows": windows,
        "window_seconds": window_seconds, "tick_seconds": TICK_SECONDS,
        "base_process_cpu_ms_per_tick_median": round(statistics.median(per_tick["base"]), 3),
        "new_process_cpu_ms_per_tick_median": round(statistics.median(per_tick["new"]), 3),
        "ratio_median": round(statistics.median(ratios), 4),
        "base_windows_ms": [round(v, 2) for v in per_tick["base"]],
        "new_windows_ms": [round(v, 2) for v in per_tick["new"]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, type=Path, help="source tree of the baseline")
    parser.add_argument("--new", default=Path(__file__).resolve().parent.parent, type=Path,
                        help="source tree measured against it (default: this one)")
    parser.add_argument("--gpus", default=8, type=int)
    parser.add_argument("--processes", default=32, type=int)
    parser.add_argument("--windows", default=12, type=int)
    parser.add_argument("--window-seconds", default=10.0, type=float)
    opts = parser.parse_args(argv)
    if opts.windows < 3:
        parser.error("--windows must be at least 3")
    if opts.window_seconds < 2 * TICK_SECONDS:
        parser.error(f"--window-seconds must be at least {2 * TICK_SECONDS}")
    for tree in (opts.base, opts.new):
        if not (tree / "gpustats" / "cli.py").is_file():
            parser.error(f"{tree} is not a gpustats source tree")
    with tempfile.TemporaryDirectory(prefix="gpustats-daemon-cpu-") as tmp:
        result = run_windows(opts.base.resolve(), opts.new.resolve(), opts.gpus,
                             opts.processes, opts.windows, opts.window_seconds, Path(tmp))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
