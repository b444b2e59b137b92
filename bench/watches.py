"""Probe and scrape latency beside open watches, paired and interleaved in one run.

    python -m bench.watches [--watches 100] [--rounds 8] [--per-block 40]

The daemon runs on a simulated node (8 GPUs, 64 processes, 1 s ticks). Each round measures
``/healthz``, ``/metrics`` and ``/stats/summary`` (each request on a fresh connection, as a
kubelet probes and a scraper scrapes, the three paths interleaved) twice: with no watch open,
and with ``--watches`` watches of ``/api/v1/gpus?watch=true`` open, the order of the two
alternating by round, so a busy machine weighs on both alike. Both blocks follow the same
work (the watches opened; closed at once before the block without them). Printed: the
median of each path in each condition over all rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

from gpustats.watch_streams import WATCH_PER_CLIENT

PATHS = ("/healthz", "/metrics", "/stats/summary")
WATCH_REQUEST = b"GET /api/v1/gpus?watch=true HTTP/1.1\r\nHost: bench\r\n\r\n"


def open_watches(port: int, count: int, timeout: float = 10.0) -> list[socket.socket]:
    """``count`` watches, each open once its headers and first event have arrived; from as
    many loopback addresses as the daemon's cap of watches per client asks (127.0.0.1, .2,
    ...), as many watchers would hold them."""
    socks = []
    for n in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                        source_address=(f"127.0.0.{1 + n // WATCH_PER_CLIENT}",
                                                        0))
        sock.sendall(WATCH_REQUEST)
        socks.append(sock)
    for sock in socks:
        got = b""
        while b"\r\n\r\n" not in got or b'"ADDED"' not in got:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError(f"a watch closed before its first event: {got[:200]!r}")
            got += chunk
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def probe(port: int, path: str, timeout: float = 2.0) -> float:
    """Seconds for one GET of ``path`` on a fresh connection (raises unless 200)."""
    began = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: {resp.status}")
    finally:
        conn.close()
    return time.perf_counter() - began


def _block(port: int, per_block: int, samples: dict[str, list[float]]) -> None:
    for _ in range(per_block):
        for path in PATHS:
            samples[path].append(probe(port, path))


def paired_latency(port: int, watches: int = 100, rounds: int = 8,
                   per_block: int = 40) -> dict[str, dict[str, float]]:
    """Per path: median seconds with no watch open (``none``), with ``watches`` open
    (``watches``), and ``ratio`` (watches / none); blocks alternate by round."""
    none: dict[str, list[float]] = {p: [] for p in PATHS}
    held: dict[str, list[float]] = {p: [] for p in PATHS}
    _block(port, 5, {p: [] for p in PATHS})            # warm: bodies rendered, gzip off
    for round_ in range(rounds):
        for with_watches in ((False, True) if round_ % 2 == 0 else (True, False)):
            socks = open_watches(port, watches)      # the same work before either block
            if not with_watches:
                close_all(socks)
                time.sleep(0.05)
                _block(port, per_block, none)
                continue
            try:
                _block(port, per_block, held)
            finally:
                close_all(socks)
            time.sleep(0.05)                  # the closes noticed, out of the next block
    out = {}
    for path in PATHS:
        a, b = statistics.median(none[path]), statistics.median(held[path])
        out[path] = {"none": a, "watches": b, "ratio": b / a}
    return out


def main(argv: list[str] | None = None) -> int:
    from bench.daemons import DaemonProc
    from bench.scenarios import node_scenario, write_scenario

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watches", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-block", type=int, default=40)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        path = write_scenario(workdir / "watches.yaml", node_scenario(8, 64))
        daemon = DaemonProc(["--simulate", path, "--housekeeping-interval", "1"], workdir)
        try:
            figures = paired_latency(daemon.port, args.watches, args.rounds, args.per_block)
        finally:
            daemon.stop()
    for path, f in figures.items():
        print(f"{path:16} none {f['none'] * 1e3:7.3f} ms   {args.watches} watches "
              f"{f['watches'] * 1e3:7.3f} ms   ratio {f['ratio']:.3f}")
    print(json.dumps({"watches": args.watches, "figures": figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
