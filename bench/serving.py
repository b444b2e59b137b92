"""Serving beside its ceiling, and memory under load, measured in one run.

    python -m bench.serving [--containers 1000] [--seconds 3] [--rounds 3] [--base ../old-tree]

The daemon runs on a simulated node (8 GPUs, 64 processes) with ``--containers`` containers on
a fake cgroup tree, with its default configuration (5 s ticks: its per-tick work, bodies
rendered and compressed anew each tick, counts against it). Once its snapshot is steady (three
ticks, so attribution series exist), each body it serves (a few KB: ``/api/v1/gpus``; ``/metrics``;
``/stats/summary``), identity and gzip, is saved, and a ceiling process (bench.ceiling_app: the same
Flask + waitress stack) serves those exact bytes statically. Each figure is a ratio measured in this
run: the daemon's request rate over the ceiling's for the same bytes, load on each in turn,
``--rounds`` times (median). RSS is read when steady (idle), sampled during the load (peak) and
after it.

``--base TREE`` runs a second daemon from another source tree (an older checkout) beside this
one, on the same host tree, and loads the two in turn, the order alternating by round, so a
busy machine weighs on both alike: paired before/after figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from bench.loadgen import run_load
from bench.daemons import REPO, DaemonProc, cpu_seconds, free_port, wait_http
from bench.scenarios import fake_host, node_scenario, write_scenario

ENDPOINTS = (("gpus", "/api/v1/gpus"), ("metrics", "/metrics"), ("summary", "/stats/summary"))
CODINGS = ("identity", "gzip")
STEADY_TICKS = 3


def _fetch(url: str, coding: str) -> tuple[bytes, str | None]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": coding})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return resp.read(), resp.headers.get("Content-Encoding")   # urllib does not decode


def wait_steady(daemon: DaemonProc, ticks: int = STEADY_TICKS, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(daemon.url("/readyz"), timeout=5) as resp:
            if json.load(resp)["snapshotSequence"] >= ticks:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the daemon on port {daemon.port} made no {ticks} ticks in {timeout} s")


def _idle_cpu(daemon: DaemonProc, seconds: float = 5.0) -> float:
    """The daemon's CPU with no request (ticks, the event thread), as a fraction of one CPU:
    work that counts against it under load too, and not against the ceiling."""
    before = cpu_seconds(daemon.ps)
    time.sleep(seconds)
    return round((cpu_seconds(daemon.ps) - before) / seconds, 4)


class PeakRss:
    """Samples a process's RSS every ``period`` seconds in a thread; ``peak_mb`` the highest."""

    def __init__(self, process: psutil.Process, period: float = 0.05) -> None:
        self._process, self._period = process, period
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return _mb(self.peak)


def _median_ratio(ours: list, ceiling: list) -> float | None:
    ratios = [o / c for o, c in zip(ours, ceiling) if o and c]
    return round(statistics.median(ratios), 3) if ratios else None


def _mb(n: int) -> float:
    return round(n / 2**20, 1)


def measure_serving(workdir: Path, containers: int = 1000, seconds: float = 3.0,
                    rounds: int = 3, connections: int = 16,
                    base: Path | None = None) -> dict:
    scenario = node_scenario(8, 64)
    cgroup, proc = fake_host(workdir / "host-serving", containers,
                             [p["pid"] for p in scenario["processes"]])
    path = write_scenario(workdir / "serving.yaml", scenario)
    args = ["--simulate", path, "--pod-resources-socket", "", "--runtime-socket", "",
            "--cgroup-root", cgroup, "--proc-root", proc]        # the default 5 s tick
    trees = {"new": REPO, **({"base": base.resolve()} if base is not None else {})}
    daemons: dict[str, DaemonProc] = {}
    ceiling = None
    try:
        for name, tree in trees.items():
            daemons[name] = DaemonProc(args, workdir, tree=tree)
        for daemon in daemons.values():
            wait_steady(daemon)
        report: dict = {"containers": containers, "connections": connections,
                        "seconds": seconds, "rounds": rounds, "trees": {}}
        bodies = workdir / "ceiling-bodies"
        bodies.mkdir(exist_ok=True)
        names: dict[tuple[str, str, str], str] = {}
        for tree, daemon in daemons.items():
            report["trees"][tree] = {"rss_idle_mb": _mb(daemon.ps.memory_info().rss),
                                     "idle_cpu_fraction": _idle_cpu(daemon), "cases": {}}
            for case, endpoint in ENDPOINTS:
                for coding in CODINGS:
                    body, encoded = _fetch(daemon.url(endpoint), coding)
                    name = f"{tree}-{case}-{coding}" + (".gz" if encoded == "gzip" else "")
                    (bodies / name).write_bytes(body)
                    names[tree, case, coding] = name
                    report["trees"][tree]["cases"][f"{case} {coding}"] = {
                        "endpoint": endpoint, "coding": coding, "bytes": len(body),
                        "sent_as": encoded or "identity", "rps": [], "ceiling_rps": [],
                        "per_cpu_s": [], "ceiling_per_cpu_s": []}
        port = free_port()
        ceiling = subprocess.Popen(
            [sys.executable, "-m", "bench.ceiling_app", "--port", str(port),
             "--body-dir", str(bodies)], cwd=str(REPO))
        wait_http(f"http://127.0.0.1:{port}/body/{names['new', 'gpus', 'identity']}")
        ceiling_ps = psutil.Process(ceiling.pid)
        peaks = {tree: PeakRss(daemon.ps) for tree, daemon in daemons.items()}
        for r in range(rounds):
            order = list(daemons) if r % 2 == 0 else list(reversed(daemons))
            for case, endpoint in ENDPOINTS:
                for coding in CODINGS:
                    headers = {"Accept-Encoding": coding}
                    for tree in order:
                        row = report["trees"][tree]["cases"][f"{case} {coding}"]
                        cpu = cpu_seconds(daemons[tree].ps)
                        ours = run_load(daemons[tree].url(endpoint), connections, seconds,
                                        headers)
                        cpu = cpu_seconds(daemons[tree].ps) - cpu
                        ref_cpu = cpu_seconds(ceiling_ps)
                        ref = run_load(f"http://127.0.0.1:{port}/body/{names[tree, case, coding]}",
                                       connections, seconds, headers)
                        ref_cpu = cpu_seconds(ceiling_ps) - ref_cpu
                        row["rps"].append(round(ours.rps, 1))
                        row["ceiling_rps"].append(round(ref.rps, 1))
                        # Requests per CPU-second of the server: steadier than req/s on a
                        # machine whose other load comes and goes.
                        row["per_cpu_s"].append(round(ours.requests / cpu, 1) if cpu else None)
                        row["ceiling_per_cpu_s"].append(
                            round(ref.requests / ref_cpu, 1) if ref_cpu else None)
                        row["errors"] = row.get("errors", 0) + ours.errors + ours.non_2xx
        for tree, daemon in daemons.items():
            figures = report["trees"][tree]
            figures["rss_load_peak_mb"] = peaks[tree].stop()
            figures["rss_after_load_mb"] = _mb(daemon.ps.memory_info().rss)
            for row in figures["cases"].values():
                row["ratio_to_ceiling"] = _median_ratio(row["rps"], row["ceiling_rps"])
                row["cpu_ratio_to_ceiling"] = _median_ratio(row["per_cpu_s"],
                                                            row["ceiling_per_cpu_s"])
        return report
    finally:
        if ceiling is not None:
            ceiling.terminate()
            ceiling.wait()
        for daemon in daemons.values():
            daemon.stop()


def print_serving(report: dict) -> None:
    print(f"\nserving at {report['containers']} containers, {report['connections']} connections,"
          f" {report['rounds']} rounds of {report['seconds']} s (ratio: median of the rounds)")
    for tree, figures in report["trees"].items():
        print(f"[{tree}] RSS idle {figures['rss_idle_mb']} MB, under load (peak) "
              f"{figures['rss_load_peak_mb']} MB, after load {figures['rss_after_load_mb']} MB;"
              f" CPU with no request {figures['idle_cpu_fraction']:.1%} of one CPU")
        print(f"  {'case':<18}{'bytes':>9}{'req/s':>9}{'ceiling':>9}{'ratio':>7}"
              f"{'req/cpu-s':>11}{'ceiling':>9}{'ratio':>7}{'errors':>7}")
        for case, row in figures["cases"].items():
            print(f"  {case:<18}{row['bytes']:>9}{_median(row['rps'])!s:>9}"
                  f"{_median(row['ceiling_rps'])!s:>9}{row['ratio_to_ceiling']!s:>7}"
                  f"{_median(row['per_cpu_s'])!s:>11}{_median(row['ceiling_per_cpu_s'])!s:>9}"
                  f"{row['cpu_ratio_to_ceiling']!s:>7}{row.get('errors', 0):>7}")


def _median(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--base", type=Path, help="another source tree, measured in turn")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpustats-serving-") as tmp:
        report = measure_serving(Path(tmp), args.containers, args.seconds, args.rounds,
                                 args.connections, args.base)
    print_serving(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
