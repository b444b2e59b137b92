"""gpustats benchmarks: one command, a table on stdout, JSON in bench/results/latest.json.

    python -m bench.run            # full run (a few minutes)
    python -m bench.run --quick    # shorter measurements, same figures

Figures: tick CPU time (median, p95) and NVML calls per tick at named scales, the dormant
daemon's CPU per hour and RSS on a host without GPUs, serving at 1,000 containers beside the
ceiling (bench.serving: each body's rate over the same Flask + waitress stack serving those
bytes statically, identity and gzip, and RSS idle and under load), and gzip beside
identity for both at 8 GPUs and at 300 containers (requests per second, bytes on the wire;
``--encodings-only`` runs just that).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path


from bench.loadgen import run_load
from bench.dra import dra_spec, serve_kubelet_and_runtime
from bench.daemons import RESULTS, DaemonProc, cpu_seconds, free_port, wait_http
from bench.scenarios import fake_host, fake_log_layout, node_scenario, write_scenario
from bench.serving import measure_serving, print_serving

def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()


# ---------------------------------------------------------------- tick cost (in process)

# Ticks are spaced like a daemon's (GPM needs > 100 ms between samples); sleeping between
# ticks does not count in the tick's CPU time.
TICK_SPACING_SECONDS = 0.11
# Ticks come faster here than the daemon's default 5 s, so windows measured in seconds are
# scaled to hold what they hold at the defaults (the saturation window: 60 s = 12 ticks);
# tick counts (CPU/memory every other tick at 5 s ticks and 10 s stats) follow the config.
DEFAULT_TICK_SECONDS = 5.0
STEADY_STATE_ARGS = ("--saturation-window",
                     f"{60.0 / DEFAULT_TICK_SECONDS * TICK_SPACING_SECONDS:.2f}")


def measure_ticks(name: str, scenario: dict, workdir: Path, ticks: int,
                  extra_args: tuple[str, ...] = (), inspect=None) -> dict:
    from gpustats.cli import Daemon, settle_garbage_collector
    from gpustats.config import build_arg_parser, resolve
    from gpustats.export.prometheus import render

    path = write_scenario(workdir / f"{name}.yaml", scenario)
    args = build_arg_parser().parse_args(
        ["--simulate", path, "--state-dir", str(workdir / f"state-{name}"),
         "--pod-resources-socket", "", "--runtime-socket", "", *STEADY_STATE_ARGS, *extra_args])
    daemon = Daemon(resolve(args, {}))
    gc_thresholds = gc.get_threshold()
    settle_garbage_collector()          # as the daemon's main does after building it
    try:
        for _ in range(3):
            time.sleep(TICK_SPACING_SECONDS)
            daemon.housekeeper.tick()
        cpu_ms, driver_ms, calls, render_ms = [], [], [], []
        driver = daemon.simulator
        driver.measure_cpu = True
        for _ in range(ticks):
            time.sleep(TICK_SPACING_SECONDS)
            in_driver = driver.cpu_seconds
            start = time.thread_time()
            snapshot = daemon.housekeeper.tick()
            cpu_ms.append((time.thread_time() - start) * 1000.0)
            driver_ms.append((driver.cpu_seconds - in_driver) * 1000.0)
            calls.append(snapshot.status.nvml_calls_last_tick or 0)
            # /metrics is rendered once per snapshot (then served from memory): its cost.
            start = time.thread_time()
            render(snapshot, None, daemon.config.dcgm_compat)
            render_ms.append((time.thread_time() - start) * 1000.0)
        extra = inspect(daemon, snapshot) if inspect is not None else {}
    finally:
        daemon.close()
        gc.unfreeze()
        gc.set_threshold(*gc_thresholds)
    gpus = max(1, len(scenario["devices"]))
    own_ms = sorted(c - d for c, d in zip(cpu_ms, driver_ms))
    cpu_ms.sort()
    return {
        "scale": name,
        "gpus": len(scenario["devices"]),
        "processes": len(scenario.get("processes", [])),
        "tick_cpu_ms_median": round(statistics.median(cpu_ms), 3),
        "tick_cpu_ms_p95": round(cpu_ms[int(0.95 * (len(cpu_ms) - 1))], 3),
        # The same ticks without the CPU spent inside the simulated driver (which stands in
        # for the real driver's cost, measured by bench.real on a GPU machine).
        "simulated_driver_cpu_ms_median": round(statistics.median(driver_ms), 3),
        "tick_cpu_ms_median_without_driver": round(statistics.median(own_ms), 3),
        "nvml_calls_per_tick": round(statistics.mean(calls), 1),
        "nvml_calls_per_gpu_per_tick": round(statistics.mean(calls) / gpus, 2),
        "metrics_render_cpu_ms_median": round(statistics.median(render_ms), 3),
        **extra,
    }


def _container_scale(name: str, gpus: int, mig: int, processes: int, containers: int,
                     workdir: Path, ticks: int, log_entries: int = 0) -> dict:
    scenario = node_scenario(gpus, processes, mig_instances=mig)
    pids = [p["pid"] for p in scenario["processes"]]
    cgroup, proc = fake_host(workdir / f"host-{name}", containers, pids)
    logs = fake_log_layout(workdir / f"logs-{name}", containers, log_entries) \
        if log_entries else ""
    result = measure_ticks(name, scenario, workdir, ticks,
                           ("--cgroup-root", cgroup, "--proc-root", proc, "--log-root", logs))
    result["containers"] = containers
    if log_entries:
        result["log_entries"] = log_entries
        result["log_relist_cpu_ms"] = measure_log_relist(logs, containers, ticks)
    return result


def _dra_scale(name: str, gpus: int, pods: int, containers_per_pod: int, processes: int,
               workdir: Path, ticks: int, dra: bool = True) -> dict:
    """Pods whose every container holds the pod's DRA claim (a shared device, ``share_id`` set)
    on one of ``gpus`` GPUs: an in-process kubelet pod-resources server and CRI runtime, one
    transient CDI spec per claim. Ticks include CDI look-ups; specs are parsed once.
    ``dra=False``: the same GPUs held through device-plugin replicas (the control)."""
    scenario = node_scenario(gpus, processes)
    containers = pods * containers_per_pod
    pids = [p["pid"] for p in scenario["processes"]]
    cgroup, proc = fake_host(workdir / f"host-{name}", containers, pids, containers_per_pod)
    cdi = workdir / f"cdi-{name}"
    cdi.mkdir()
    for pod in range(pods):
        write_scenario(cdi / f"k8s.gpu.nvidia.com-claim_{pod:08x}.yaml", dra_spec(pod, gpus))
    servers = serve_kubelet_and_runtime(workdir, pods, containers_per_pod, gpus, dra)
    try:
        def inspect(daemon, snapshot):
            held = sum(len(c.accelerators) for p in snapshot.pods for c in p.containers)
            if not dra:
                return {"held_accelerators": held}
            claimed = sum(1 for p in snapshot.pods for c in p.containers
                          for a in c.accelerators if a.claim is not None)
            return {"cdi_spec_files": pods, "cdi_parses": daemon.cdi_specs.parses,
                    "claimed_accelerators": claimed, "held_accelerators": held}

        result = measure_ticks(name, scenario, workdir, ticks, (
            "--cgroup-root", cgroup, "--proc-root", proc, "--cdi-spec-dirs", str(cdi),
            "--pod-resources-socket", servers.pod_resources,
            "--runtime-socket", servers.runtime), inspect)
    finally:
        servers.stop()
    result["containers"] = containers
    result["ticks"] = ticks + 3                   # with the warm-up ticks
    return result


def measure_log_relist(log_root: str, containers: int, samples: int) -> dict:
    """CPU of naming passes that cannot use the cached listings: the first one (both listings,
    every name parsed, a readlink per container) and one after a pod started (a re-listing)."""
    from gpustats.sources.kubelet_logs import KubeletLogNames

    ids = [f"{i:064x}" for i in range(containers)]
    cold, churn = [], []
    for n in range(max(5, samples // 5)):
        source = KubeletLogNames(log_root)
        start = time.thread_time()
        source.names(ids)
        cold.append((time.thread_time() - start) * 1000.0)
        link = os.path.join(log_root, "containers", f"new-{n}_bench_c-{n + 10**7:064x}.log")
        os.symlink(f"/var/log/pods/bench_new-{n}_x/c/0.log", link)
        start = time.thread_time()
        source.names(ids)
        churn.append((time.thread_time() - start) * 1000.0)
        os.unlink(link)
    return {"cold_cpu_ms": round(statistics.median(cold), 3),
            "after_pod_start_cpu_ms": round(statistics.median(churn), 3)}


def measure_peers(scenario: dict, workdir: Path, samples: int) -> dict:
    """CPU per sample of gpustat's new_query() and nvitop's device snapshots, on the same
    simulated GPUs, in this process (installed from PyPI into the bench environment)."""
    import logging

    from gpustats.simulator import SimulatedNvml

    path = write_scenario(workdir / "peers.yaml", scenario)
    out: dict = {}
    sim = SimulatedNvml(path)
    sim.install()
    logging.disable(logging.CRITICAL)      # the peers log every FunctionNotFound they meet
    try:
        try:
            import gpustat
        except ImportError:
            out["gpustat"] = "not installed"
        else:
            gpustat.new_query()
            cpu = []
            for _ in range(samples):
                start = time.thread_time()
                gpustat.new_query()
                cpu.append((time.thread_time() - start) * 1000.0)
            out["gpustat_query_cpu_ms_median"] = round(statistics.median(cpu), 3)
        try:
            from nvitop import Device
        except ImportError:
            out["nvitop"] = "not installed"
        else:
            devices = Device.all()
            [d.as_snapshot() for d in devices]
            cpu = []
            for _ in range(samples):
                start = time.thread_time()
                [d.as_snapshot() for d in devices]
                cpu.append((time.thread_time() - start) * 1000.0)
            out["nvitop_snapshot_cpu_ms_median"] = round(statistics.median(cpu), 3)
    finally:
        logging.disable(logging.NOTSET)
        sim.uninstall()
    return out


# ---------------------------------------------------------------- daemons in subprocesses

def measure_idle_host(workdir: Path, seconds: float) -> dict:
    empty_sys = workdir / "empty-sys"
    (empty_sys / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    daemon = DaemonProc(["--sysfs-root", str(empty_sys), "--pod-resources-socket", "",
                         "--runtime-socket", ""], workdir)
    try:
        time.sleep(2.0)
        before = cpu_seconds(daemon.ps)
        time.sleep(seconds)
        cpu = cpu_seconds(daemon.ps) - before
        return {"idle_cpu_seconds_per_hour": round(cpu * 3600.0 / seconds, 2),
                "idle_measured_seconds": seconds,
                "idle_rss_mb": round(daemon.ps.memory_info().rss / 2**20, 1)}
    finally:
        daemon.stop()


def measure_node_exporter(seconds: float) -> dict | None:
    """Debian's prometheus-node-exporter /metrics under the same load, when installed."""
    import shutil

    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        return None
    port = free_port()
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics")
        body = _fetch(f"http://127.0.0.1:{port}/metrics")
        result = run_load(f"http://127.0.0.1:{port}/metrics", 32, seconds)
        return {"body_bytes": len(body), "rps": round(result.rps, 1),
                "p50_ms": _r(result.p50_ms), "p99_ms": _r(result.p99_ms)}
    finally:
        proc.terminate()
        proc.wait()


def _wire_bytes(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as resp:
        return len(resp.read())            # urllib does not decode gzip: bytes as sent


def measure_encodings(workdir: Path, seconds: float, rounds: int = 2) -> list[dict]:
    """gzip beside identity for /metrics and /stats/summary at 8 GPUs (64 processes) and at
    300 containers: req/s at 32 connections and bytes on the wire. The two encodings take
    turns (``rounds`` each) so a noisy machine weighs on both alike."""
    scenario = node_scenario(8, 64)
    pids = [p["pid"] for p in scenario["processes"]]
    cgroup, proc = fake_host(workdir / "host-encodings", 300, pids)
    path = write_scenario(workdir / "encodings.yaml", scenario)
    rows = []
    for scale, extra in (("8gpu-64proc", ["--cgroup-root", str(workdir / "no-cgroups")]),
                         ("8gpu-300c", ["--cgroup-root", cgroup, "--proc-root", proc])):
        daemon = DaemonProc(["--simulate", path, "--pod-resources-socket", "",
                             "--runtime-socket", "", *extra], workdir)
        try:
            time.sleep(3.0)
            for endpoint in ("/metrics", "/stats/summary"):
                url = daemon.url(endpoint)
                results: dict[str, list] = {"identity": [], "gzip": []}
                for _ in range(rounds):
                    for coding in ("identity", "gzip"):
                        headers = {"Accept-Encoding": coding}
                        results[coding].append(run_load(url, 32, seconds, headers))
                row = {"scale": scale, "endpoint": endpoint}
                for coding, runs in results.items():
                    row[coding] = {
                        "bytes": _wire_bytes(url, {"Accept-Encoding": coding}),
                        "rps": round(statistics.mean(r.rps for r in runs), 1),
                        "p99_ms": _r(statistics.mean(r.p99_ms or 0.0 for r in runs)),
                        "errors": sum(r.errors + r.non_2xx for r in runs),
                        "tool": runs[0].tool,
                    }
                row["gzip_over_identity_rps"] = round(
                    row["gzip"]["rps"] / row["identity"]["rps"], 3) if row["identity"]["rps"] \
                    else None
                rows.append(row)
        finally:
            daemon.stop()
    return rows


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# ---------------------------------------------------------------- report

class _Targets:
    """Targets as rows: a figure (``None`` when not measured) and whether it holds."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, name: str, value, ok: bool) -> None:
        self.rows.append({"target": name, "value": value,
                          "met": None if value is None else bool(ok)})

    def at_most(self, name: str, value, limit: float) -> None:
        self.add(name, value, value is not None and value <= limit)

    def at_least(self, name: str, value, floor: float) -> None:
        self.add(name, value, value is not None and value >= floor)


def _tick_targets(targets: _Targets, report: dict) -> None:
    scales = {s["scale"]: s for s in report["scales"]}

    def tick(scale: str):
        return scales.get(scale, {}).get("tick_cpu_ms_median")

    def calls(scale: str):
        return scales.get(scale, {}).get("nvml_calls_per_gpu_per_tick")

    targets.at_most("tick <= 5 ms CPU (8 GPUs, no containers)", tick("8gpu"), 5)
    targets.at_most("<= 10 NVML calls per GPU per tick (8 GPUs, 64 processes)",
                    calls("8gpu-64proc"), 10)
    targets.at_most("<= 10 NVML calls per GPU per tick with --dcgm-compat (8 GPUs, 64 "
                    "processes)", calls("8gpu-64proc-dcgm"), 10)
    targets.at_most("tick <= 15 ms CPU (8 GPUs, 64 processes, 300 containers)",
                    tick("8gpu-300c"), 15)
    targets.at_most("tick <= 15 ms CPU named from a 10,000-entry log layout (300 containers)",
                    tick("8gpu-300c-10klogs"), 15)
    targets.at_most("tick <= 15 ms CPU with attribution (8x7 MIG, 64 processes, 300 "
                    "containers)", tick("8gpu-7mig-300c"), 15)
    targets.at_most("tick <= 40 ms CPU (8 GPUs, 64 processes, 3,000 containers)",
                    tick("8gpu-3000c"), 40)
    tdra, control = tick("8gpu-dra-110p"), tick("8gpu-devplugin-110p")
    targets.at_most("tick <= 15 ms CPU with DRA claims (8 GPUs, 110 pods, 330 containers)",
                    tdra, 15)
    targets.at_most("DRA claims cost <= 10% over the same GPUs held by device plugin (ratio)",
                    round(tdra / control, 2) if tdra and control else None, 1.1)
    dra = scales.get("8gpu-dra-110p", {})
    parses = dra.get("cdi_parses")
    targets.add("CDI spec files parsed once each, not per tick (parses / files)",
                None if parses is None else round(parses / dra["cdi_spec_files"], 2),
                parses is not None and parses == dra["cdi_spec_files"])
    targets.at_most("growth linear in containers (3000 vs 300 <= x10)",
                    report.get("growth_ratio_3000c_over_300c"), 10.5)
    gp = (report.get("peers") or {}).get("gpustat_query_cpu_ms_median")
    ours = tick("8gpu-64proc")
    targets.at_most("tick CPU <= 0.5x gpustat new_query() (8 GPUs, 64 processes)",
                    round(ours / gp, 3) if gp and ours else None, 0.5)


def _serving_targets(targets: _Targets, report: dict) -> None:
    serving = ((report.get("serving") or {}).get("trees") or {}).get("new") or {}
    containers = (report.get("serving") or {}).get("containers")
    targets.at_most(f"RSS <= 60 MB under serving load (8 GPUs, {containers} containers, peak)",
                    serving.get("rss_load_peak_mb"), 60)
    cases = serving.get("cases") or {}
    for row in cases.values():
        targets.at_least(f"{row['endpoint']} {row['coding']} ({row['bytes']} B) >= 0.9x the "
                         "ceiling (req per CPU-s)", row.get("cpu_ratio_to_ceiling"), 0.9)
    ne = (report.get("node_exporter") or {}).get("rps")
    for case in ("summary identity", "metrics identity"):
        rps = statistics.median(cases.get(case, {}).get("rps") or [0])
        targets.at_least(f"{case.split()[0]} >= 10x node_exporter /metrics req/s",
                         round(rps / ne, 2) if ne and rps else None, 10)
    for row in report.get("encodings") or ():
        targets.at_least(f"{row['endpoint']} gzip >= 0.9x identity req/s ({row['scale']})",
                         row.get("gzip_over_identity_rps"), 0.9)


def evaluate_targets(report: dict) -> list[dict]:
    """Every target of the benchmark brief, with the figure and met / not met."""
    targets = _Targets()
    _tick_targets(targets, report)
    idle = report.get("idle_host", {}).get("idle_cpu_seconds_per_hour")
    targets.add("idle host < 1 s CPU per hour", idle, idle is not None and idle < 1)
    _serving_targets(targets, report)
    return targets.rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter measurements")
    parser.add_argument("--skip-serving", action="store_true")
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--skip-encodings", action="store_true")
    parser.add_argument("--encodings-only", action="store_true",
                        help="only gzip beside identity at 8 GPUs and at 300 containers")
    args = parser.parse_args(argv)
    ticks = 30 if args.quick else 100
    load_seconds = 3.0 if args.quick else 10.0
    idle_seconds = 20.0 if args.quick else 120.0

    report: dict = {"scales": [], "machine": {"cpus": os.cpu_count()}}
    if args.encodings_only:
        with tempfile.TemporaryDirectory(prefix="gpustats-bench-") as tmp:
            report["encodings"] = measure_encodings(Path(tmp), load_seconds)
        _print_encodings(report["encodings"])
        return 0
    with tempfile.TemporaryDirectory(prefix="gpustats-bench-") as tmp:
        workdir = Path(tmp)
        report["scales"].append(measure_ticks("1gpu-idle", node_scenario(1), workdir, ticks))
        report["scales"].append(measure_ticks("8gpu", node_scenario(8), workdir, ticks))
        report["scales"].append(measure_ticks("8gpu-64proc", node_scenario(8, 64), workdir, ticks))
        report["scales"].append(measure_ticks("8gpu-64proc-dcgm", node_scenario(8, 64), workdir,
                                              ticks, ("--dcgm-compat",)))
        report["scales"].append(_container_scale("8gpu-300c", 8, 0, 64, 300, workdir, ticks))
        report["scales"].append(_container_scale("8gpu-300c-10klogs", 8, 0, 64, 300, workdir,
                                                 ticks, log_entries=10_000))
        report["scales"].append(_container_scale("8gpu-3000c", 8, 0, 64, 3000, workdir, ticks))
        report["scales"].append(_container_scale("8gpu-7mig-300c", 8, 7, 64, 300, workdir, ticks))
        report["scales"].append(_container_scale("8gpu-7mig-3000c", 8, 7, 64, 3000, workdir,
                                                 ticks))
        report["scales"].append(_dra_scale("8gpu-devplugin-110p", 8, 110, 3, 64, workdir, ticks,
                                           dra=False))
        report["scales"].append(_dra_scale("8gpu-dra-110p", 8, 110, 3, 64, workdir, ticks))
        by_name = {s["scale"]: s for s in report["scales"]}
        report["growth_ratio_3000c_over_300c"] = round(
            by_name["8gpu-3000c"]["tick_cpu_ms_median"]
            / by_name["8gpu-300c"]["tick_cpu_ms_median"], 2)
        report["peers"] = measure_peers(node_scenario(8, 64), workdir, ticks)
        if not args.skip_idle:
            report["idle_host"] = measure_idle_host(workdir, idle_seconds)
        if not args.skip_serving:

            report["serving"] = measure_serving(workdir, 1000, load_seconds,
                                                rounds=2 if args.quick else 3)
            report["node_exporter"] = measure_node_exporter(load_seconds)
        if not args.skip_encodings:
            report["encodings"] = measure_encodings(workdir, load_seconds)
    report["targets"] = evaluate_targets(report)

    print_report(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(report, indent=2))
    print(f"\nJSON: {RESULTS / 'latest.json'}")
    return 0


def print_report(report: dict) -> None:
    _print_figures(report)
    print(f"\n{'target':<78}{'value':>10}  result")
    for row in report["targets"]:
        verdict = "n/a" if row["met"] is None else "met" if row["met"] else "NOT met"
        print(f"{row['target']:<78}{row['value']!s:>10}  {verdict}")


def _print_figures(report: dict) -> None:
    print(f"{'scale':<20}{'gpus':>5}{'procs':>7}{'ctrs':>6}{'tick ms med':>13}{'p95':>8}"
          f"{'in driver':>11}{'calls/tick':>12}{'calls/gpu':>11}")
    for s in report["scales"]:
        print(f"{s['scale']:<20}{s['gpus']:>5}{s['processes']:>7}{s.get('containers', 0):>6}"
              f"{s['tick_cpu_ms_median']:>13}{s['tick_cpu_ms_p95']:>8}"
              f"{s['simulated_driver_cpu_ms_median']:>11}"
              f"{s['nvml_calls_per_tick']:>12}{s['nvml_calls_per_gpu_per_tick']:>11}")
    print("(in driver: CPU ms per tick inside the simulated driver, part of the tick's figure; "
          "a real driver's cost is bench.real's)")
    for s in report["scales"]:
        if "log_relist_cpu_ms" in s:
            r = s["log_relist_cpu_ms"]
            print(f"{s['scale']}: naming from {s['log_entries']} log entries: first pass "
                  f"{r['cold_cpu_ms']} ms CPU, a tick after a pod started "
                  f"{r['after_pod_start_cpu_ms']} ms CPU")
    print("/metrics render CPU ms per snapshot: " + ", ".join(
        f"{s['scale']} {s['metrics_render_cpu_ms_median']}" for s in report["scales"]
        if "metrics_render_cpu_ms_median" in s))
    for s in report["scales"]:
        if "cdi_parses" in s:
            print(f"{s['scale']}: {s['claimed_accelerators']} claimed accelerators, "
                  f"{s['cdi_parses']} CDI parses for {s['cdi_spec_files']} spec files "
                  f"over {s['ticks']} ticks")
    if "growth_ratio_3000c_over_300c" in report:
        print(f"growth 3000 vs 300 containers: x{report['growth_ratio_3000c_over_300c']} "
              "(linear would be x10 or less)")
    idle = report.get("idle_host")
    if idle:
        print(f"\nidle host (no GPU): {idle['idle_cpu_seconds_per_hour']} s CPU/hour, "
              f"RSS {idle['idle_rss_mb']} MB")
    peers = report.get("peers")
    if peers:
        print(f"\npeers on the same simulated node (CPU ms per sample): {peers}")
    ne = report.get("node_exporter")
    if ne:
        print(f"node_exporter /metrics: {ne['rps']} req/s, p99 {ne['p99_ms']} ms "
              f"({ne['body_bytes']} bytes)")
    if report.get("encodings"):
        _print_encodings(report["encodings"])
    if report.get("serving"):

        print_serving(report["serving"])


def _print_encodings(encodings: list[dict]) -> None:
    print(f"\n{'scale':<13}{'endpoint':<16}{'identity B':>11}{'gzip B':>9}{'id req/s':>10}"
          f"{'gz req/s':>10}{'gz/id':>7}{'id p99':>8}{'gz p99':>8}{'errors':>7}")
    for row in encodings:
        i, g = row["identity"], row["gzip"]
        print(f"{row['scale']:<13}{row['endpoint']:<16}{i['bytes']:>11}{g['bytes']:>9}"
              f"{i['rps']:>10}{g['rps']:>10}{row['gzip_over_identity_rps']!s:>7}"
              f"{i['p99_ms']!s:>8}{g['p99_ms']!s:>8}{i['errors'] + g['errors']:>7}")


if __name__ == "__main__":
    raise SystemExit(main())
