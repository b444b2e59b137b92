"""Tick cost on the real NVML of this machine (no simulator): one command, figures printed.

    python -m bench.real [--ticks 100]

Prints the GPUs found, median and p95 tick CPU and wall time, NVML calls per tick, and the
daemon's RSS; exits 0 with a note when NVML cannot load here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import psutil


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=100)
    args = parser.parse_args()
    from gpustats.cli import Daemon
    from gpustats.config import build_arg_parser, resolve

    with tempfile.TemporaryDirectory() as state:
        config = resolve(build_arg_parser().parse_args(
            ["--state-dir", state, "--pod-resources-socket", "", "--runtime-socket", ""]), {})
        daemon = Daemon(config)
        try:
            snapshot = daemon.collector.tick()
            if not snapshot.status.nvml_loaded:
                print(f"NVML not loaded here ({snapshot.status.nvml_error}); nothing to measure")
                return 0
            for _ in range(3):
                daemon.collector.tick()
            cpu, wall, calls = [], [], []
            for _ in range(args.ticks):
                c0, w0 = time.thread_time(), time.perf_counter()
                snapshot = daemon.collector.tick()
                cpu.append((time.thread_time() - c0) * 1000)
                wall.append((time.perf_counter() - w0) * 1000)
                calls.append(snapshot.status.nvml_calls_last_tick or 0)
            cpu.sort()
            wall.sort()
            result = {
                "gpus": [d.identity.name for d in snapshot.devices],
                "driver": snapshot.status.driver_version,
                "tick_cpu_ms_median": round(statistics.median(cpu), 3),
                "tick_cpu_ms_p95": round(cpu[int(0.95 * (len(cpu) - 1))], 3),
                "tick_wall_ms_median": round(statistics.median(wall), 3),
                "tick_wall_ms_p95": round(wall[int(0.95 * (len(wall) - 1))], 3),
                "nvml_calls_per_tick": round(statistics.mean(calls), 1),
                "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
            }
            print(json.dumps(result, indent=2))
        finally:
            daemon.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
