"""A bounded HTTP/1.1 keep-alive load generator: N connections, each a thread, for D seconds.

The same generator measures gpustats and the reference servers, so ratios compare like with
like; absolute figures are bounded by this generator's own CPU on a small machine. wrk is used
instead when it is installed (``run_load`` picks it).
"""

from __future__ import annotations

import http.client
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class LoadResult:
    tool: str
    requests: int
    errors: int
    non_2xx: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[index]


def python_load(url: str, connections: int = 32, seconds: float = 5.0,
                headers: dict[str, str] | None = None) -> LoadResult:
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    stop_at = time.perf_counter() + seconds
    latencies: list[list[float]] = [[] for _ in range(connections)]
    counters = [[0, 0] for _ in range(connections)]   # errors, non-2xx

    def worker(i: int) -> None:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        mine = latencies[i]
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            try:
                conn.request("GET", path, headers=headers or {})
                resp = conn.getresponse()
                resp.read()
                if not 200 <= resp.status < 300:
                    counters[i][1] += 1
            except (OSError, http.client.HTTPException):
                counters[i][0] += 1
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
                continue
            mine.append((time.perf_counter() - start) * 1000.0)
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    merged = sorted(x for per in latencies for x in per)
    return LoadResult("python", len(merged), sum(c[0] for c in counters),
                      sum(c[1] for c in counters), elapsed,
                      _percentile(merged, 0.50), _percentile(merged, 0.99))


_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _wrk_ms(text: str) -> float | None:
    match = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    return float(match.group(1)) * _WRK_UNITS[match.group(2)] if match else None


def wrk_load(url: str, connections: int = 32, seconds: float = 5.0,
             headers: dict[str, str] | None = None) -> LoadResult:
    cmd = ["wrk", "-t", "2", "-c", str(connections), "-d", f"{seconds:.0f}s", "--latency", url]
    for key, value in (headers or {}).items():
        cmd[1:1] = ["-H", f"{key}: {value}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    secs = re.search(r"requests in ([\d.]+)(ms|s|m)", out)
    elapsed = float(secs.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[secs.group(2)]
    p50 = re.search(r"^\s*50%[ \t]+(\S+)", out, re.M)      # the --latency table, not a
    p99 = re.search(r"^\s*99%[ \t]+(\S+)", out, re.M)      # "75.50%" in the stats above
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return LoadResult("wrk", requests, sum(int(g) for g in errors.groups()) if errors else 0,
                      int(non_2xx.group(1)) if non_2xx else 0, elapsed,
                      _wrk_ms(p50.group(1)) if p50 else None,
                      _wrk_ms(p99.group(1)) if p99 else None)


def run_load(url: str, connections: int = 32, seconds: float = 5.0,
             headers: dict[str, str] | None = None) -> LoadResult:
    if shutil.which("wrk"):
        return wrk_load(url, connections, seconds, headers)
    return python_load(url, connections, seconds, headers)
