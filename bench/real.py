"""Tick cost on this machine's NVML: one command, figures printed.

    python -m bench.real [--ticks 100] [--interval 0.2] [--without-field-values] [--energy-every N]
                         [--simulate-gpus N | --simulate SCENARIO] [-- DAEMON FLAGS...]

Prints the GPUs found, median and p95 tick CPU and wall time, NVML calls per tick, the tick's
CPU split by phase (node, GPU sweep — NVML itself and the Python around it —, energy
accounting, containers, health and saturation, the rest), and the CPU cost of each NVML
function (calls per tick, mean and p95 µs per call, share of the tick). CPU is the thread's
CPU time, which includes the time the driver's ioctls spend in the kernel.

``--without-field-values`` hides ``nvmlDeviceGetFieldValues`` (FunctionNotFound, as on an old
driver) so the same machine shows the cost before batching. ``--simulate-gpus N`` runs against
N simulated H100s (no GPU needed: the figures are then the simulator's, not a driver's).
Exits 0 with a note when NVML cannot load here.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pynvml


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.95 * (len(ordered) - 1))] if ordered else 0.0


class NvmlProfile:
    """Wraps pynvml's public functions: CPU and wall time of each outermost call, by name.

    The sweep looks pynvml functions up at call time, so the wrappers see every call; nested
    calls (a wrapper calling its versioned variant) count once, under the outer name. The
    calls the sweep makes straight through pynvml's symbol lookup (field values, process lists
    into kept arrays) are seen by wrapping that lookup: each C function it hands out is timed
    under its own name, or missing when hidden.
    """

    def __init__(self) -> None:
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self.wall: dict[str, list[float]] = defaultdict(list)
        self._local = threading.local()
        self._originals: dict[str, object] = {}
        self.recording = True

    def install(self, *, hide: tuple[str, ...] = ()) -> None:
        for name in dir(pynvml):
            fn = getattr(pynvml, name)
            if not name.startswith("nvml") or not callable(fn) or isinstance(fn, type):
                continue
            self._originals[name] = fn
            setattr(pynvml, name, self._hidden(name) if name in hide else self._timed(name, fn))
        lookup = pynvml._nvmlGetFunctionPointer
        self._originals["_nvmlGetFunctionPointer"] = lookup

        def timed_lookup(name: str):
            if name in hide:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return self._timed(name, lookup(name))
        pynvml._nvmlGetFunctionPointer = timed_lookup

    def uninstall(self) -> None:
        for name, fn in self._originals.items():
            setattr(pynvml, name, fn)
        self._originals.clear()

    def reset(self) -> None:
        self.cpu.clear()
        self.wall.clear()

    def _timed(self, name: str, fn):
        local = self._local

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if getattr(local, "depth", 0) or not self.recording:
                return fn(*args, **kwargs)
            local.depth = 1
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
                key = _field_call_name(name, args) if name == "nvmlDeviceGetFieldValues" else name
                self.cpu[key].append(cpu)
                self.wall[key].append(wall)
                local.depth = 0
        return timed

    @staticmethod
    def _hidden(name: str):
        def hidden(*args, **kwargs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        hidden.__name__ = name
        return hidden


def _field_call_name(name: str, args: tuple) -> str:
    """Field-value calls by what they carry: whether the energy counter is among the fields
    shows what the energy read costs inside the batch."""
    try:
        if len(args) == 3 and hasattr(args[2], "_obj"):     # the C call: byref(field array)
            ids = [entry.fieldId for entry in args[2]._obj]
        else:
            ids = [i if isinstance(i, int) else i[0] for i in args[1]]
    except (AttributeError, IndexError, TypeError):
        return name
    energy = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION in ids
    return f"{name} ({len(ids)} fields{', energy' if energy else ''})"


class PhaseProfile:
    """Wraps the housekeeper's per-phase guard: CPU per phase label, summed per tick."""

    def __init__(self, housekeeper) -> None:
        self.current: dict[str, float] = defaultdict(float)
        guard = housekeeper._guard

        def timed_guard(what, fn, default):
            phase = what.split(" of ")[0]          # "energy accounting of GPU-…" -> one phase
            c0 = time.thread_time()
            try:
                return guard(what, fn, default)
            finally:
                self.current[phase] += time.thread_time() - c0

        housekeeper._guard = timed_guard

    def take(self) -> dict[str, float]:
        out, self.current = dict(self.current), defaultdict(float)
        return out


def _daemon_args(args: argparse.Namespace, state: str, workdir: Path) -> list[str]:
    argv = ["--state-dir", state, "--pod-resources-socket", "", "--runtime-socket", "",
            "--energy-every", str(args.energy_every)]
    if args.simulate_gpus:
        from bench.scenarios import node_scenario, write_scenario
        path = write_scenario(workdir / "real.yaml",
                              node_scenario(args.simulate_gpus, args.simulate_processes))
        argv += ["--simulate", path]
    elif args.simulate:
        argv += ["--simulate", args.simulate]
    return argv + list(args.daemon_args)


def measure(args: argparse.Namespace) -> dict | None:
    from gpustats.cli import Daemon, settle_garbage_collector
    from gpustats.config import build_arg_parser, resolve

    nvml = NvmlProfile()
    nvml.install(hide=("nvmlDeviceGetFieldValues",) if args.without_field_values else ())
    with tempfile.TemporaryDirectory(prefix="gpustats-real-") as tmp:
        argv = _daemon_args(args, str(Path(tmp) / "state"), Path(tmp))
        daemon = Daemon(resolve(build_arg_parser().parse_args(argv), {}))
        settle_garbage_collector()          # as the daemon's main does after building it
        phases = PhaseProfile(daemon.housekeeper)
        try:
            snapshot = daemon.housekeeper.tick()
            if not snapshot.status.nvml_loaded:
                why = snapshot.status.nvml_error or (
                    "no NVIDIA GPU on the PCI bus" if not snapshot.status.gpus_on_pci_bus
                    else "not loaded")
                print(f"NVML not loaded here ({why}); nothing to measure "
                      "(--simulate-gpus N runs against the simulator)")
                return None
            for _ in range(max(3, args.energy_every)):
                time.sleep(args.interval)
                daemon.housekeeper.tick()
            nvml.reset()
            phases.take()
            cpu, wall, calls, split = [], [], [], defaultdict(list)
            for _ in range(args.ticks):
                time.sleep(args.interval)
                nvml_before = sum(map(sum, nvml.cpu.values()))
                c0, w0 = time.thread_time(), time.perf_counter()
                snapshot = daemon.housekeeper.tick()
                tick_cpu = time.thread_time() - c0
                wall.append(time.perf_counter() - w0)
                cpu.append(tick_cpu)
                calls.append(snapshot.status.nvml_calls_last_tick or 0)
                tick_phases = phases.take()
                nvml_cpu = sum(map(sum, nvml.cpu.values())) - nvml_before
                sweep = tick_phases.pop("GPU sweep", 0.0)
                split["GPU sweep: NVML calls"].append(nvml_cpu)
                split["GPU sweep: Python around them"].append(max(0.0, sweep - nvml_cpu))
                for phase, seconds in tick_phases.items():
                    split[phase].append(seconds)
                split["snapshot build and the rest"].append(
                    max(0.0, tick_cpu - sweep - sum(tick_phases.values())))
            nvml.recording = False                 # leave the shutdown calls out
        finally:
            daemon.close()
            nvml.uninstall()
    ms = 1000.0
    median_cpu = statistics.median(cpu)
    gpus = max(1, len(snapshot.devices))
    functions = []
    for name, samples in nvml.cpu.items():
        functions.append({
            "function": name,
            "calls_per_tick": round(len(samples) / args.ticks, 2),
            "cpu_us_mean": round(statistics.mean(samples) * 1e6, 1),
            "cpu_us_p95": round(_p95(samples) * 1e6, 1),
            "wall_us_mean": round(statistics.mean(nvml.wall[name]) * 1e6, 1),
            "share_of_tick_cpu": round(sum(samples) / args.ticks / median_cpu, 3)
            if median_cpu else None,
        })
    functions.sort(key=lambda f: -f["cpu_us_mean"] * f["calls_per_tick"])
    return {
        "gpus": [d.identity.name for d in snapshot.devices],
        "driver": snapshot.status.driver_version,
        "simulated": bool(args.simulate_gpus or args.simulate),
        "field_values": not args.without_field_values,
        "energy_every": args.energy_every,
        "ticks": args.ticks,
        "interval_seconds": args.interval,
        "tick_cpu_ms_median": round(median_cpu * ms, 3),
        "tick_cpu_ms_p95": round(_p95(cpu) * ms, 3),
        "tick_wall_ms_median": round(statistics.median(wall) * ms, 3),
        "tick_wall_ms_p95": round(_p95(wall) * ms, 3),
        "nvml_calls_per_tick": round(statistics.mean(calls), 1),
        "nvml_calls_per_gpu_per_tick": round(statistics.mean(calls) / gpus, 2),
        "tick_cpu_split_ms_median": {phase: round(statistics.median(v) * ms, 3)
                                     for phase, v in split.items()},
        "nvml_functions": functions,
        "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1),
    }


def print_report(r: dict) -> None:
    where = "simulated" if r["simulated"] else "real NVML"
    print(f"{len(r['gpus'])} GPU(s) ({where}, driver {r['driver']}): "
          f"{', '.join(sorted(set(r['gpus'])))}")
    print(f"field values: {'on' if r['field_values'] else 'hidden'}; energy read every "
          f"{r['energy_every']} tick(s); {r['ticks']} ticks")
    print(f"tick CPU median {r['tick_cpu_ms_median']} ms, p95 {r['tick_cpu_ms_p95']} ms; wall "
          f"median {r['tick_wall_ms_median']} ms, p95 {r['tick_wall_ms_p95']} ms; NVML calls "
          f"{r['nvml_calls_per_tick']}/tick ({r['nvml_calls_per_gpu_per_tick']}/GPU); "
          f"RSS {r['rss_mb']} MB")
    print("\ntick CPU split (median ms):")
    for phase, value in sorted(r["tick_cpu_split_ms_median"].items(), key=lambda kv: -kv[1]):
        print(f"  {phase:<34}{value:>9}")
    print(f"\n{'NVML function':<48}{'calls/tick':>11}{'CPU us':>9}{'p95':>9}{'wall us':>9}"
          f"{'tick %':>8}")
    for f in r["nvml_functions"]:
        share = f"{100 * f['share_of_tick_cpu']:.1f}" if f["share_of_tick_cpu"] is not None else "-"
        print(f"{f['function']:<48}{f['calls_per_tick']:>11}{f['cpu_us_mean']:>9}"
              f"{f['cpu_us_p95']:>9}{f['wall_us_mean']:>9}{share:>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--without-field-values", action="store_true",
                        help="hide nvmlDeviceGetFieldValues: every reading through its own call")
    parser.add_argument("--energy-every", type=int, default=1)
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between ticks (GPM needs > 0.1 s between samples)")
    parser.add_argument("--simulate-gpus", type=int, default=0,
                        help="run against this many simulated H100s instead of the real NVML")
    parser.add_argument("--simulate-processes", type=int, default=0)
    parser.add_argument("--simulate", metavar="SCENARIO", default=None)
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the figures")
    parser.add_argument("daemon_args", nargs="*", help="after --: more gpustats flags")
    args = parser.parse_args(argv)
    if args.ticks < 1 or args.energy_every < 1:
        parser.error("--ticks and --energy-every must be >= 1")
    result = measure(args)
    if result is None:
        return 0
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
