"""Soak: the daemon under sustained scrapes, container churn and changing load.

    python -m bench.soak                 # 10 minutes, 32 clients, 10 containers/s churn
    python -m bench.soak --seconds 60

32 client threads hit /stats/summary and /metrics in turn; containers are created and removed
at ``--churn`` per second (real cgroup v2 groups under /sys/fs/cgroup/unified where this user
may create them, a fake cgroup tree otherwise); the simulated GPUs' power and utilization
change every second. Beside them, unless ``--no-attackers``: 200 idle sockets, 100 sockets
trickling a header byte a second, a stream of POSTs declaring 300 MB bodies, a stream of
requests framed by both Content-Length and Transfer-Encoding with a second request smuggled
after them, 8 connections pipelining 330 /metrics requests and never reading, and 24
pipelining 273 /openapi.json requests and reading 2 KB every 2 s, on the data port, and 100
more trickling sockets on the health port (more than its 64 connections)
(``bench/attackers.py``); a kubelet whose pod-resources reply lists 2,000 pods x 50 GPU
replicas (``bench/hostile_kubelet.py``) and a dcgm-exporter serving 30 MB of activity series
for the one MIG GPU (``bench/hostile_exporter.py``); a user who names cgroups in its
delegated subtree after a bystander's Docker container and a pod's container, and makes
``--flood`` Docker-named cgroups there, and a process named with terminal control bytes
(``bench/soak_tenants.py``); on the node's AMD GPU, ``--drm-processes`` processes of that
user each holding ``--drm-fds`` fds, half of them dups of its DRM client's fd, half
``/dev/null`` before it (``bench/soak_drm.py``); one client holding 64 watches it never reads,
while another asks for one every 2 s (``attackers.WatchHoarder``); while probes time /healthz,
/readyz, /stats/summary and /metrics on fresh connections (1 s timeout) on the data port and
/healthz on the separate health port.
The GPU processes are tenants of every kind on a fake /proc (Docker containers, pods,
services, sessions). Reported: requests, 5xx and errors, RSS after warm-up and at the end
(medians of up to 30 seconds: ``rss_window``), thread count over time, the attack figures,
the tick's wall time, and each bystander tenant's share of its GPU's active energy;
``--compare`` runs without attackers first and gives how far any bystander's share moved
under attack (the user's processes run in its session then: the same work, split the same
way).
The history window is set to the warm-up, so it is full (steady) when RSS is first taken.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import psutil
import yaml

from bench import attackers as attack
from bench import soak_drm
from bench import soak_tenants as tenants
from bench.hostile_exporter import HostileExporter
from bench.hostile_kubelet import HostileKubelet, hostile_reply
from bench.daemons import DaemonProc, free_port
from bench.scenarios import node_scenario

REAL_V2 = Path("/sys/fs/cgroup/unified")


def _can_use_real_cgroups() -> bool:
    if os.geteuid() != 0 or not (REAL_V2 / "cgroup.procs").exists():
        return False
    probe = REAL_V2 / f"gpustats-soak-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


class Churn:
    """Creates and removes container cgroups at a steady rate."""

    def __init__(self, base: Path, per_second: float, fake: bool):
        self.base = base
        self.per_second = per_second
        self.fake = fake
        self.live: list[Path] = []
        self.created = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _make(self) -> None:
        pod = uuid.uuid4()
        d = self.base / "kubepods" / "besteffort" / f"pod{pod}" / (uuid.uuid4().hex * 2)
        d.mkdir(parents=True, exist_ok=True)
        if self.fake:
            (d / "cpu.stat").write_text("usage_usec 1000\n")
            (d / "memory.current").write_text("4096\n")
            (d / "memory.stat").write_text("anon 4096\ninactive_file 0\n")
        self.live.append(d)
        self.created += 1

    def _remove(self, d: Path) -> None:
        if self.fake:
            shutil.rmtree(d.parent, ignore_errors=True)
        else:
            for p in (d, d.parent):
                try:
                    p.rmdir()
                except OSError:
                    pass

    def _run(self) -> None:
        interval = 1.0 / self.per_second
        while not self._stop.wait(interval):
            self._make()
            if len(self.live) > 20:
                self._remove(self.live.pop(0))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for d in self.live:
            self._remove(d)
        if not self.fake:
            for p in (self.base / "kubepods" / "besteffort", self.base / "kubepods"):
                try:
                    p.rmdir()
                except OSError:
                    pass


def with_a_mig_gpu(scenario: dict, instances: int = 3) -> dict:
    """The scenario's last GPU in MIG mode, its processes spread over its instances: the
    daemon scrapes dcgm-exporter only for MIG activity."""
    last = scenario["devices"][-1]
    last["mig_instances"] = [
        {"gpu_instance_id": 7 + k, "compute_instance_id": 0, "profile": "1g.10gb",
         "memory_total_bytes": 10 << 30} for k in range(instances)]
    on_it = [p for p in scenario["processes"] if p["device"] == last["uuid"]]
    for k, process in enumerate(on_it):
        process.pop("sm_util_percent", None)
        process["gpu_instance_id"] = 7 + k % instances
    return scenario


def rss_window(seconds_after_warmup: int) -> int:
    """Seconds of RSS samples whose median is taken after the warm-up and at the end: half of
    what follows the warm-up, between 5 and 30. Under the attackers RSS swings by 10 to 15 MB
    over tens of seconds (the hostile kubelet's reply every 15 s, the dcgm-exporter's 30 MB
    every 10 s): medians of five seconds landed on a peak or a trough (at 300 s, 89.6 MB after
    the warm-up, 98.7 MB at the end, the tenths of the run between 90.7 and 104.2 MB with no
    slope) and read as 10 % growth."""
    return max(5, min(30, seconds_after_warmup // 2))


def median_rss(samples: list[dict]) -> float | None:
    """The median RSS of ``samples``: growth is a leak's slope, not one transient peak (a
    hostile kubelet's reply costs ~15 MB for a fraction of a second every 15 s)."""
    values = sorted(s["rss_mb"] for s in samples)
    return values[len(values) // 2] if values else None


def run_soak(seconds: float, clients: int = 32, churn: float = 10.0,
             warmup: float = 5.0, workdir: Path | None = None, attackers: bool = True,
             flood: int = 20_000, drm_processes: int = 50, drm_fds: int = 4096) -> dict:
    own_tmp = workdir is None
    # In memory where it can be: the fd attackers' files are hundreds of thousands.
    shm = Path("/dev/shm")
    workdir = Path(tempfile.mkdtemp(prefix="gpustats-soak-", dir=shm if shm.is_dir() else None)) \
        if own_tmp else workdir
    real = _can_use_real_cgroups()
    if real:
        cgroup_root, base = "/sys/fs/cgroup", REAL_V2
    else:
        base = workdir / "cgroup"
        base.mkdir(parents=True, exist_ok=True)
        (base / "cgroup.controllers").write_text("cpu memory\n")
        cgroup_root = str(base)
    # The same GPUs and processes with attackers or without (--compare compares their bills).
    scenario = with_a_mig_gpu(node_scenario(8, 32))
    tenants.add_processes(scenario)
    soak_drm.add_amd_gpu(scenario)
    tenants.build_proc(workdir / "proc", scenario, attack=attackers)
    state_dir = workdir / "state"
    drm_attackers = soak_drm.plant_fd_attackers(
        soak_drm.drm_proc_root(state_dir), workdir / "proc", drm_processes, drm_fds, attackers)
    flooded = tenants.flood(base, min(flood, 2_000) if real else flood) if attackers else 0
    scenario_path = workdir / "soak.yaml"

    def write_scenario(step: int) -> None:
        for i, d in enumerate(scenario["devices"]):
            d["power_watts"] = 150 + (step * 37 + i * 11) % 500
            if "mig_instances" not in d:
                d["utilization_percent"] = (step * 13 + i * 7) % 100
        tmp = scenario_path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(scenario))
        tmp.replace(scenario_path)

    write_scenario(0)
    health_port = free_port()
    stop_peers: list = []           # how each hostile source is stopped
    sources = ["--pod-resources-socket", "", "--runtime-socket", ""]
    if attackers:
        # A kubelet answering 2,000 pods x 50 GPU replicas, and a dcgm-exporter serving 30 MB
        # of activity series: both refused, neither may cost a tick or memory.
        kubelet = HostileKubelet(workdir / "kubelet.sock", hostile_reply()).start()
        exporter = HostileExporter(threading.Event()).start()
        exporter.arm()
        stop_peers = [kubelet.stop, exporter.close]
        sources = ["--pod-resources-socket", kubelet.socket_path, "--runtime-socket", "",
                   "--dcgm-exporter-url", exporter.url]
    daemon = DaemonProc(["--simulate", str(scenario_path), "--state-dir", str(state_dir),
                         "--cgroup-root", cgroup_root,
                         "--proc-root", str(workdir / "proc"),
                         "--housekeeping-interval", "1", *sources, "--idle-power-watts", "100",
                         "--health-listen", f"127.0.0.1:{health_port}",
                         # The history ring grows until its window is full (every churned
                         # container keeps its rows for the window): make it full by the end
                         # of the warm-up, so RSS growth after it is a leak, not the ring
                         # filling. Its own bound is measured by bench.history.
                         "--history-duration", str(max(1, int(warmup)))], workdir)
    churner = Churn(base, churn, fake=not real)
    stop = threading.Event()
    counts = {"requests": 0, "5xx": 0, "errors": 0}
    lock = threading.Lock()

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        paths = ("/stats/summary", "/metrics")
        n = i
        while not stop.is_set():
            n += 1
            try:
                conn.request("GET", paths[n % 2])
                resp = conn.getresponse()
                resp.read()
                with lock:
                    counts["requests"] += 1
                    if resp.status >= 500:
                        counts["5xx"] += 1
            except (OSError, http.client.HTTPException):
                with lock:
                    counts["errors"] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    proc = psutil.Process(daemon.proc.pid)
    samples = []
    attack_stop = threading.Event()
    attacks = attack.start_all(daemon.port, daemon.proc.pid, attack_stop, health_port) \
        if attackers else None
    hoarder = attack.start_watch_hoarder(daemon.port, attack_stop) if attackers else None
    billing: dict = {}
    ticks: list[float | None] = []          # the last tick's wall time, each second after warm-up
    try:
        churner.start()
        for t in threads:
            t.start()
        started = time.monotonic()
        step = 0
        rss_warm = None
        while time.monotonic() - started < seconds:
            time.sleep(1.0)
            step += 1
            write_scenario(step)
            elapsed = time.monotonic() - started
            sample = {"t": round(elapsed, 1), "rss_mb": round(proc.memory_info().rss / 2**20, 2),
                      "threads": proc.num_threads()}
            samples.append(sample)
            if rss_warm is None and elapsed >= warmup:
                rss_warm = sample["rss_mb"]
            if elapsed >= warmup:
                ticks.append(daemon_status(daemon.port).get("tickDurationSeconds"))
        billing = _billing(daemon.port, attackers)
        billing["collection_errors"] = {
            f"{e['source']} {e['reason']}": e["count"]
            for e in daemon_status(daemon.port).get("collectionErrors", ())}
    finally:
        stop.set()
        attack_stop.set()
        for t in threads:
            t.join(15)
        # Attackers finish before the daemon stops: a POST cut off by the shutdown is no answer.
        attack_report = attack.report(attacks) if attacks is not None else None
        if attack_report is not None:
            attack_report.update(hostile_sources(daemon.port))
            if hoarder is not None:
                hoarder.thread.join(10)
                attack_report.update(hoarder.figures())
            attack_report["flooded_cgroups"] = flooded
        churner.stop()
        tenants.unflood(base, flooded)
        daemon.stop()
        for stop_peer in stop_peers:
            stop_peer()
    after_warm = [s for s in samples if s["t"] >= warmup] or samples
    window = rss_window(len(after_warm))
    rss_warm = median_rss(after_warm[:window]) if after_warm else rss_warm
    rss_end = median_rss(samples[-window:])
    seen_ticks = [t for t in ticks if t is not None]
    result = {
        "seconds": seconds, "clients": clients, "churn_per_second": churn,
        "real_cgroups": real, "containers_created": churner.created,
        "requests": counts["requests"], "http_5xx": counts["5xx"],
        "client_errors": counts["errors"],
        "rss_mb_after_warmup": rss_warm, "rss_mb_end": rss_end,
        "rss_growth_ratio": round(rss_end / rss_warm - 1, 4) if rss_warm else None,
        # RSS at each tenth of the run after warm-up: a plateau or a slope
        "rss_mb_trajectory": [after_warm[min(len(after_warm) - 1, i * len(after_warm) // 10)]
                              ["rss_mb"] for i in range(11)],
        "threads_min": min(s["threads"] for s in after_warm),
        "threads_max": max(s["threads"] for s in after_warm),
        "drm_fd_attackers": len(drm_attackers) if attackers else 0,
        "drm_fds_each": drm_fds if attackers else 1,
        "tick_seconds_max": max(seen_ticks, default=None),
        "tick_seconds_median": sorted(seen_ticks)[len(seen_ticks) // 2] if seen_ticks else None,
        "tick_samples": len(seen_ticks),
    }
    if attack_report is not None:
        result["attack"] = attack_report
    result.update(billing)
    if own_tmp:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _billing(port: int, attackers: bool) -> dict:
    """The bystanders' shares of their GPUs' active energy, what the summary lists, and
    (attacked) whether the page shows the odd name's control bytes raw."""
    try:
        summary = json.loads(tenants.fetch(port, "/stats/summary"))
        out = {"bystander_shares": tenants.bystander_shares(tenants.fetch(port, "/metrics")),
               "summary_containers": len(summary.get("containers", ())),
               "summary_tenants": len(summary.get("tenants", ())),
               "summary_pods": len(summary.get("pods", ()))}
        if attackers:
            out["page_clean"] = tenants.page_is_clean(port)
        return out
    except (OSError, ValueError) as exc:
        return {"billing_error": repr(exc)}


def daemon_status(port: int) -> dict:
    """The daemon's ``/api/v1/status`` (empty when not had)."""
    try:
        return json.loads(tenants.fetch(port, "/api/v1/status"))
    except (OSError, ValueError):
        return {}


def hostile_sources(port: int) -> dict:
    """Whether the daemon took the hostile kubelet and exporter for failing sources."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    out = {}
    for source in ("pod_resources", "dcgm_exporter"):
        match = re.search(r'gpustats_source_failing\{[^}]*source="' + source + r'"[^}]*\} (\S+)',
                          text)
        out[f"{source}_failing"] = float(match.group(1)) if match else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--churn", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--no-attackers", action="store_true",
                        help="clients and churn only: no idle, trickling, large-POST or "
                        "smuggling peers")
    parser.add_argument("--flood", type=int, default=20_000,
                        help="Docker-named cgroups the attacking user makes in its subtree "
                        "(at most 2,000 on a real cgroup tree)")
    parser.add_argument("--drm-processes", type=int, default=50,
                        help="the user's processes on the AMD GPU, each flooding its fd table "
                        "(half with dups of its DRM fd, half with /dev/null before it)")
    parser.add_argument("--drm-fds", type=int, default=4096,
                        help="fds each of those processes holds")
    parser.add_argument("--compare", action="store_true",
                        help="a run without attackers first: how far each bystander's bill "
                        "moves under attack")
    args = parser.parse_args()
    drm = {"drm_processes": args.drm_processes, "drm_fds": args.drm_fds}
    base = run_soak(args.seconds, args.clients, args.churn, args.warmup, attackers=False,
                    **drm) if args.compare and not args.no_attackers else None
    result = run_soak(args.seconds, args.clients, args.churn, args.warmup,
                      attackers=not args.no_attackers, flood=args.flood, **drm)
    if base is not None:
        result["without_attackers"] = {k: v for k, v in base.items() if k != "bystander_shares"}
        result["bystanders_vs_without_attackers"] = tenants.compare_shares(
            base.get("bystander_shares", {}), result.get("bystander_shares", {}))
    shares = result.pop("bystander_shares", {})
    result["bystander_tenants"] = len(shares)
    print(json.dumps(result, indent=2))
    ok = (result["http_5xx"] == 0 and (result["rss_growth_ratio"] or 0) < 0.05
          and result["threads_min"] == result["threads_max"])
    if "attack" in result:
        a = result["attack"]
        ok = ok and a["spooled_files_max"] == 0 and a["large_posts_other"] == 0 \
            and a["probe_healthz_health_port"]["failures"] == 0 \
            and a["smuggled_answered"] == 0 and a["smuggling_other"] == 0 \
            and all(a[f"probe_{name}"]["failures"] == 0
                    and (a[f"probe_{name}"]["max_ms"] or 0) < 1000
                    for name in ("healthz", "readyz", "summary", "metrics")) \
            and a.get("pod_resources_failing") == 1 and a.get("dcgm_exporter_failing") == 1 \
            and result.get("page_clean") is True \
            and a["other_client_statuses"].get("200", 0) == sum(
                a["other_client_statuses"].values())
    if "bystanders_vs_without_attackers" in result:
        moved = result["bystanders_vs_without_attackers"]["max_relative_change"]
        ok = ok and moved is not None and moved <= 0.01
    print("targets:", "met" if ok else "NOT met",
          "(zero 5xx, RSS growth < 5% after warm-up, thread count constant; with attackers: "
          "every large POST refused with 413, nothing spooled, every doubly framed request "
          "refused with 400 and the request smuggled after it never answered, every /healthz "
          "probe on the health port answered within 1 s, every probe on the data port answered "
          "within 1 s (the errors of any that failed are listed), the hostile "
          "kubelet and exporter refused as failing sources, the page free of raw control "
          "bytes, every other client's watch granted; with --compare, every bystander's share "
          "of its GPU's energy within 1 % of the run without attackers)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
