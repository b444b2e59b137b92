"""A hostile dcgm-exporter: a large /metrics body served fast on loopback, and its figures.

    python -m bench.hostile_exporter                  # 30 MB of activity series, 20 s
    python -m bench.hostile_exporter --kind other     # 30 MB of families gpustats does not read

``HostileExporter`` serves one body, built once, to every GET, from a thread that stops when
its event is set (the soak can run it beside its other attackers). Until ``arm()`` it serves a
node's honest body, so a daemon becomes ready on it first. Kinds:

- ``activity``: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` series, every one with distinct labels (the
  family gpustats reads, so a family filter alone does not bound the parse);
- ``other``: ``DCGM_FI_DEV_FB_USED`` series (a family gpustats skips).

``main`` starts a fresh daemon (8 simulated H100s with 7 MIG instances each, 1 s ticks) on the
exporter, arms it and prints JSON: tick duration (largest before and during the attack, and
the oldest snapshot ``/readyz`` reported), RSS (before, and the peak: the kernel's high-water
mark), whether ``dcgm_exporter`` was marked failing and why, and the probes of ``/healthz``,
``/readyz``, ``/stats/summary`` and ``/metrics`` (a fresh connection every 0.5 s, 1 s timeout).
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path


from bench.attackers import Probe
from bench.daemons import DaemonProc
from bench.scenarios import fake_host, gpu_uuid, node_scenario, write_scenario

ACTIVITY = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
OTHER = "DCGM_FI_DEV_FB_USED"
KINDS = {"activity": ACTIVITY, "other": OTHER}
BODY_BYTES = 30 * 1000 * 1000
WRITE_BYTES = 1 << 20            # the body goes out in pieces, so a stop is seen between them
GPUS, MIG_INSTANCES, FIRST_INSTANCE = 8, 7, 7


def _series_line(family: str, n: int) -> str:
    """One series as dcgm-exporter writes it on Kubernetes; ``n`` makes every label set new."""
    return (f'{family}{{gpu="{n % 16}",UUID="GPU-{n:08x}-0000-4000-8000-{n:012x}",'
            f'device="nvidia{n % 16}",modelName="NVIDIA H100 80GB HBM3",'
            f'GPU_I_PROFILE="1g.10gb",GPU_I_ID="{n % 7 + 7}",Hostname="node-1",'
            f'container="worker-{n}",namespace="team-{n % 97}",pod="job-{n}-0"}} 0.5\n')


def hostile_body(kind: str = "activity", size_bytes: int = BODY_BYTES) -> bytes:
    """At least ``size_bytes`` of Prometheus text: one family of distinct series."""
    family = KINDS[kind]
    lines = [f"# HELP {family} Hostile.\n# TYPE {family} gauge\n"]
    size = len(lines[0])
    while size < size_bytes:
        lines.append(_series_line(family, len(lines) - 1))
        size += len(lines[-1])
    return "".join(lines).encode()


def honest_body(gpus: int = GPUS, instances: int = MIG_INSTANCES) -> bytes:
    """What the simulated node's own exporter would serve: one activity series per instance."""
    return "".join(f'{ACTIVITY}{{gpu="{g}",UUID="{gpu_uuid(g)}",GPU_I_ID="{FIRST_INSTANCE + i}"}}'
                   f' 0.25\n' for g in range(gpus) for i in range(instances)).encode()


class HostileExporter:
    """``body`` on ``url`` once armed (``honest`` before), from a thread; stops on ``stop``.

    Bounded: one body held, each connection's thread ends when its body is written, the
    client hangs up, or ``stop`` is set."""

    def __init__(self, stop: threading.Event, kind: str = "activity",
                 size_bytes: int = BODY_BYTES, honest: bytes | None = None):
        self.stop = stop
        self.body = hostile_body(kind, size_bytes)
        self.honest = honest_body() if honest is None else honest
        self.armed = False
        self.requests = 0
        self.hostile_requests = 0
        self.sent = 0
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.server.timeout = 0.1
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    @property
    def series(self) -> int:
        return self.body.count(b"\n") - 2

    def start(self) -> HostileExporter:
        self.thread.start()
        return self

    def arm(self) -> None:
        self.armed = True

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)

    def _serve(self) -> None:
        try:
            while not self.stop.is_set():
                self.server.handle_request()
        finally:
            self.server.server_close()

    def _write(self, out, body: bytes) -> None:
        for i in range(0, len(body), WRITE_BYTES):
            if self.stop.is_set():
                return
            try:
                out.write(body[i:i + WRITE_BYTES])
            except OSError:
                return              # the client stopped reading and hung up
            self.sent += min(WRITE_BYTES, len(body) - i)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"     # kept alive, as Go's net/http does
            timeout = 5.0                     # an idle kept-alive connection ends

            def do_GET(self) -> None:
                exporter.requests += 1
                body = exporter.body if exporter.armed else exporter.honest
                if exporter.armed:
                    exporter.hostile_requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                exporter._write(self.wfile, body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


# ---------------------------------------------------------------- against a fresh daemon

FAILING = re.compile(r'gpustats_source_failing\{[^}]*source="dcgm_exporter"[^}]*\} 1(\.0)?\n')


def _get(url: str, timeout: float = 5.0) -> tuple[int | None, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except OSError:
        return None, b""


class Sampler:
    """Every ``every`` seconds: the last tick's duration, the snapshot's age, RSS."""

    def __init__(self, daemon: DaemonProc, stop: threading.Event, every: float = 0.2):
        self.daemon = daemon
        self.stop = stop
        self.every = every
        self.tick_seconds: list[float] = []
        self.snapshot_ages: list[float] = []
        self.rss_mb: list[float] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()

    def sample(self) -> None:
        status, body = _get(self.daemon.url("/api/v1/status"))
        if status == 200:
            tick = json.loads(body).get("tickDurationSeconds")
            if tick is not None:
                self.tick_seconds.append(tick)
        status, body = _get(self.daemon.url("/readyz"))
        if status == 200:
            self.snapshot_ages.append(json.loads(body)["snapshotAgeSeconds"])
        self.rss_mb.append(self.daemon.ps.memory_info().rss / 2**20)


def peak_rss_mb(pid: int) -> float | None:
    """The kernel's high-water mark of ``pid``'s resident memory (VmHWM)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def dcgm_source(daemon: DaemonProc) -> dict:
    """``dcgm_exporter``'s state from /api/v1/status and whether /metrics shows it failing."""
    status, body = _get(daemon.url("/api/v1/status"))
    sources = {s["name"]: s for s in json.loads(body)["sources"]} if status == 200 else {}
    mine = sources.get("dcgm_exporter", {})
    errors = {e["reason"]: e["count"] for e in json.loads(body).get("collectionErrors", [])
              if e["source"] == "dcgm_exporter"} if status == 200 else {}
    _, metrics = _get(daemon.url("/metrics"))
    return {"source_state": mine.get("state"), "source_reason": mine.get("lastErrorReason"),
            "source_failing_in_metrics": bool(FAILING.search(metrics.decode())),
            "collection_errors": errors}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def start_daemon(workdir: Path, exporter_url: str, interval: float) -> DaemonProc:
    scenario = node_scenario(GPUS, 16, mig_instances=MIG_INSTANCES)
    cgroup, proc = fake_host(workdir / "host", 16, [p["pid"] for p in scenario["processes"]])
    path = write_scenario(workdir / "node.yaml", scenario)
    return DaemonProc(["--simulate", path, "--cgroup-root", cgroup, "--proc-root", proc,
                       "--housekeeping-interval", str(interval), "--pod-resources-socket", "",
                       "--runtime-socket", "", "--dcgm-exporter-url", exporter_url], workdir)


def run_attack(seconds: float = 20.0, kind: str = "activity", size_bytes: int = BODY_BYTES,
               interval: float = 1.0, warmup: float = 3.0) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="gpustats-hostile-exporter-"))
    stop = threading.Event()
    exporter = HostileExporter(stop, kind, size_bytes).start()
    daemon = start_daemon(workdir, exporter.url, interval)
    try:
        calm = Sampler(daemon, threading.Event())
        for _ in range(int(warmup / calm.every)):
            time.sleep(calm.every)
            calm.sample()
        rss_before = daemon.ps.memory_info().rss / 2**20
        exporter.arm()
        probes = {path: Probe(daemon.port, stop, path)
                  for path in ("/healthz", "/readyz", "/stats/summary", "/metrics")}
        sampler = Sampler(daemon, stop)
        for worker in (*probes.values(), sampler):
            worker.thread.start()
        time.sleep(seconds)
        stop.set()
        for worker in (*probes.values(), sampler):
            worker.thread.join(10)
        sampler.sample()
        return {
            "kind": kind, "body_bytes": len(exporter.body), "body_series": exporter.series,
            "seconds": seconds, "housekeeping_interval_seconds": interval,
            "exporter_requests_hostile": exporter.hostile_requests,
            "tick_seconds_max_before": _round(max(calm.tick_seconds, default=None)),
            "tick_seconds_max": _round(max(sampler.tick_seconds, default=None)),
            "snapshot_age_seconds_max": _round(max(sampler.snapshot_ages, default=None)),
            "rss_mb_before": _round(rss_before, 1),
            "rss_mb_sampled_max": _round(max(sampler.rss_mb, default=None), 1),
            "rss_mb_peak": _round(peak_rss_mb(daemon.proc.pid), 1),
            **dcgm_source(daemon),
            "probes": {path: probe.figures() for path, probe in probes.items()},
        }
    finally:
        stop.set()
        daemon.stop()
        exporter.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--kind", choices=sorted(KINDS), default="activity")
    parser.add_argument("--size-mb", type=float, default=BODY_BYTES / 1e6,
                        help="body size in MB (10^6 bytes)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="the daemon's --housekeeping-interval")
    args = parser.parse_args()
    result = run_attack(args.seconds, args.kind, int(args.size_mb * 1e6), args.interval)
    ok = (result["tick_seconds_max"] is not None and result["tick_seconds_max"] < args.interval
          and result["source_failing_in_metrics"]
          and all(p["failures"] == 0 for p in result["probes"].values()))
    result["targets_met"] = ok
    print(json.dumps(result, indent=2))
    print("targets:", "met" if ok else "NOT met", "(every tick under the interval, "
          "dcgm_exporter failing in /metrics, every probe of /healthz, /readyz, /stats/summary "
          "and /metrics answered 200 within 1 s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
