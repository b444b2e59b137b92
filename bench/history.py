"""Memory and serving cost of the history behind the page, at 8 GPUs x 300 containers.

    python -m bench.history              # 120 points per series (600 s at the 5 s default tick)
    python -m bench.history --points 600 # 600 points per series (600 s at a 1 s tick)

Two daemons run side by side on the same simulated node (8 GPUs, 300 processes, each in its own
container of a fake cgroup tree, 3 containers per pod): one with ``--history-duration 0``, one
with the history on. The history holds one row per tick per series, so its memory depends on
the number of points in the window, not on the seconds: the bench ticks every ``--tick``
seconds (default 1) with a duration of ``points x tick`` seconds, which fills the window in
a fraction of the real time and holds exactly as many rows as the full duration would at the
real tick (120 points = 600 s at the default 5 s). Both daemons serve the page, the summary and
(with history) the full history plain and gzipped before RSS is read, so the rendered bodies
the store keeps are counted. Figures go to stdout and bench/results/history.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.daemons import RESULTS, DaemonProc
from bench.scenarios import fake_host, node_scenario, write_scenario

GPUS, CONTAINERS = 8, 300


def _get(url: str, gzip_ok: bool = False) -> tuple[bytes, float]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as resp:
        body = resp.read()
    return body, (time.perf_counter() - started) * 1000.0


def _rss_mb(daemon: DaemonProc) -> float:
    return round(daemon.ps.memory_info().rss / 2**20, 1)


def run(points: int, tick: float, workdir: Path) -> dict:
    scenario = node_scenario(GPUS, CONTAINERS)
    path = write_scenario(workdir / "node.yaml", scenario)
    cgroup, proc = fake_host(workdir / "host", CONTAINERS,
                             [p["pid"] for p in scenario["processes"]])
    duration = max(1, round(points * tick))
    common = ["--simulate", path, "--cgroup-root", cgroup, "--proc-root", proc,
              "--pod-resources-socket", "", "--runtime-socket", "",
              "--housekeeping-interval", str(tick), "--log-level", "warning"]
    without = DaemonProc([*common, "--history-duration", "0"], workdir)
    with_history = DaemonProc([*common, "--history-duration", str(duration)], workdir)
    try:
        # Fill the window, then one more interval's worth so trimming is in steady state.
        time.sleep(duration * 1.2 + 2.0)
        out: dict = {"gpus": GPUS, "containers": CONTAINERS, "points_per_series": points,
                     "tick_seconds": tick, "history_duration_seconds": duration}
        for daemon in (without, with_history):
            for path_ in ("/", "/stats/summary"):
                _get(daemon.url(path_))
                _get(daemon.url(path_), gzip_ok=True)
        body, first_ms = _get(with_history.url("/api/v1/history"))
        zipped, _ = _get(with_history.url("/api/v1/history"), gzip_ok=True)
        doc = json.loads(body)
        series_points = sorted({len(c["points"]) for c in doc["containers"]})
        out.update({
            "history_series": {"gpus": len(doc["gpus"]), "containers": len(doc["containers"])},
            "points_per_container_series": series_points,
            "history_body_bytes": len(body), "history_body_gzip_bytes": len(zipped),
            "history_first_request_ms": round(first_ms, 1),
            "page_bytes": len(_get(with_history.url("/"))[0]),
            "page_gzip_bytes": len(_get(with_history.url("/"), gzip_ok=True)[0]),
        })
        # Requests of a watching page: the last few seconds, once per tick.
        seconds = max(1, round(3 * tick))
        small, small_ms = _get(with_history.url(f"/api/v1/history?seconds={seconds}"), True)
        out["history_incremental_gzip_bytes"] = len(small)
        out["history_incremental_first_request_ms"] = round(small_ms, 1)
        time.sleep(2.0)
        out["rss_mb_without_history"] = _rss_mb(without)
        out["rss_mb_with_history"] = _rss_mb(with_history)
        out["rss_mb_difference"] = round(out["rss_mb_with_history"]
                                         - out["rss_mb_without_history"], 1)
        return out
    finally:
        without.stop()
        with_history.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=120,
                        help="rows per series in the window (120 = 600 s at a 5 s tick)")
    parser.add_argument("--tick", type=float, default=1.0, help="housekeeping interval")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpustats-bench-history-") as tmp:
        result = run(args.points, args.tick, Path(tmp))
    for key, value in result.items():
        print(f"{key:<40}{value}")
    held = min(result["points_per_container_series"] or [0])
    if held < 0.95 * args.points:
        print(f"\nnote: ticks ran slower than --tick on this machine: {held} rows per series "
              f"held, not {args.points}; use a larger --tick for the full window")
    limit = 40.0
    verdict = "met" if result["rss_mb_difference"] <= limit else "NOT met"
    print(f"\nRSS with history <= {limit:g} MB above without: {result['rss_mb_difference']} MB "
          f"({verdict})")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "history.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
