"""The usage database's costs: its writes against the tick, and a year's query and size.

    python -m bench.usage tick [--pairs 30] [--tenants 1000]
    python -m bench.usage alongside [--pairs 30] [--tenants 1000]
    python -m bench.usage query [--tenants 1000] [--namespaces 50] [--days 365]

``tick``: a daemon on 8 simulated GPUs with ``--tenants`` containers, each with a process on a
GPU (so each is billed every tick). In each pair, in turn, one tick's CPU (the housekeeping
thread's) and the CPU of writing that tick's usage (what the writer thread spends on it: the
gains worked out and the one transaction). Reported: the medians and the median per-pair ratio
usage / tick. The tick itself only hands its snapshot over.

``alongside``: the tick's wall time while the writer thread writes the tick before (as the
daemon runs them), against a tick with the writer idle, in pairs: what the writes cost the tick
(the budget: 5 %). SQLite leaves the interpreter's lock while it works; the writer's Python
part contends with the tick for it.

``query``: a database as a node of ``--tenants`` tenants, each on one GPU every hour, leaves
after ``--days`` (each day in a daily row, the last 90 in hourly rows too); its size on disk,
and the time of the year's report by namespace (one row per namespace, then one per namespace
and month): wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.paired import WARMUP_TICKS, paired_host

GPUS = 8


def tick_costs(pairs: int, tenants: int) -> dict:
    from gpustats.cli import Daemon, settle_garbage_collector
    from gpustats.config import build_arg_parser, resolve

    with tempfile.TemporaryDirectory(prefix="gpustats-usage-bench-") as workdir:
        args = paired_host((GPUS, 0, tenants, tenants), Path(workdir))("usage")
        daemon = Daemon(resolve(build_arg_parser().parse_args(args), {}))
        settle_garbage_collector()
        assert daemon.usage is not None
        try:
            for _ in range(WARMUP_TICKS):
                daemon.usage.record(daemon.housekeeper.tick())
            ticks, writes = [], []
            for _ in range(pairs):
                start = time.thread_time()
                snapshot = daemon.housekeeper.tick()
                ticks.append((time.thread_time() - start) * 1000.0)
                start = time.thread_time()
                daemon.usage.record(snapshot)
                writes.append((time.thread_time() - start) * 1000.0)
            billed = sum(1 for _, c in snapshot.containers_with_pods() if c.accelerators)
            size = sum(os.path.getsize(p) for p in Path(workdir).glob("state-usage/usage.sq*"))
        finally:
            daemon.close()
    return {"pairs": pairs, "gpus": GPUS, "tenants_billed": billed,
            "tick_cpu_ms_median": round(statistics.median(ticks), 2),
            "usage_write_cpu_ms_median": round(statistics.median(writes), 2),
            "usage_over_tick_median_ratio": round(statistics.median(
                w / t for w, t in zip(writes, ticks)), 4),
            "database_bytes": size}


def tick_alongside(pairs: int, tenants: int) -> dict:
    """The tick's wall time with the writer thread writing the previous tick's usage at the
    same time, against a tick with the writer idle, in pairs (order alternating)."""
    from gpustats.cli import Daemon, settle_garbage_collector
    from gpustats.config import build_arg_parser, resolve

    with tempfile.TemporaryDirectory(prefix="gpustats-usage-bench-") as workdir:
        args = paired_host((GPUS, 0, tenants, tenants), Path(workdir))("usage")
        daemon = Daemon(resolve(build_arg_parser().parse_args(args), {}))
        usage = daemon.usage
        assert usage is not None
        usage.start()
        settle_garbage_collector()
        tick = daemon.housekeeper.tick
        try:
            snapshot = tick()
            for _ in range(WARMUP_TICKS):
                usage.observe(snapshot)
                usage.wait_recorded(snapshot.sequence, 10.0)
                snapshot = tick()
            alongside, alone = [], []
            for n in range(pairs):
                for writing in ((True, False) if n % 2 else (False, True)):
                    if writing:
                        usage.observe(snapshot)          # written while the next tick runs
                    start = time.perf_counter()
                    following = tick()
                    (alongside if writing else alone).append(time.perf_counter() - start)
                    usage.observe(snapshot)
                    usage.wait_recorded(snapshot.sequence, 10.0)
                    snapshot = following
        finally:
            daemon.close()
    return {"pairs": pairs, "tick_ms_alone_median": round(statistics.median(alone) * 1000, 2),
            "tick_ms_alongside_writes_median": round(statistics.median(alongside) * 1000, 2),
            "alongside_over_alone_median_ratio": round(statistics.median(
                a / b for a, b in zip(alongside, alone)), 4)}


def _fill(db, tenants: int, namespaces: int, days: int, hourly_days: int, end: int) -> None:
    db.executemany("INSERT INTO tenants(id, key, kind, namespace, pod, container, node) "
                   "VALUES (?, ?, 'pod', ?, ?, ?, 'node')",
                   [(t, f"{t:064x}", f"ns-{t % namespaces}", f"pod-{t}", "main")
                    for t in range(1, tenants + 1)])
    db.executemany("INSERT INTO gpus(id, uuid) VALUES (?, ?)",
                   [(g, f"GPU-{g:08x}") for g in range(1, GPUS + 1)])
    hourly_start = end - hourly_days * 86400
    start = end - days * 86400
    for day in range(start, end, 86400):          # every ended day; its hours while kept
        db.executemany("INSERT INTO daily VALUES (?, ?, ?, ?, ?, ?, ?)",
                       [(day, t, t % GPUS + 1, 86400.0 * 250, 86400.0 * 50, 2.0, 9000.0)
                        for t in range(1, tenants + 1)])
    for hour in range(max(start, hourly_start), end, 3600):
        db.executemany("INSERT INTO hourly VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [(hour, t, t % GPUS + 1, 3600.0 * 250, 3600.0 * 50, 0.08, 380.0,
                         1e9, 1e8) for t in range(1, tenants + 1)])
    db.execute("INSERT OR REPLACE INTO meta VALUES ('rolled_until', ?)", (str(end),))
    db.commit()


def query_costs(tenants: int, namespaces: int, days: int, keep: str | None = None) -> dict:
    from gpustats.usage.database import open_database
    from gpustats.usage.query import UsageQuery, run_query

    end = int(time.time()) // 86400 * 86400
    with tempfile.TemporaryDirectory(prefix="gpustats-usage-bench-") as workdir:
        path = os.path.join(keep or workdir, "usage.sqlite")
        writer = open_database(path)
        writer.isolation_level = ""            # one transaction for the fill
        began = time.monotonic()
        _fill(writer, tenants, namespaces, days, min(days, 90), end)
        filled = time.monotonic() - began
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        writer.close()
        size = sum(os.path.getsize(p) for p in Path(keep or workdir).glob("usage.sq*"))
        reader = open_database(path, read_only=True)
        timings = {}
        for step in (None, "month"):
            query = UsageQuery(end - days * 86400, end, ("namespace",), step)
            began, cpu = time.monotonic(), time.thread_time()
            rows = run_query(reader, query, seconds=60.0)
            timings[step or "whole"] = (round(time.monotonic() - began, 3), len(rows),
                                        round(time.thread_time() - cpu, 3))
        reader.close()
    rows_kept = tenants * (min(days, 90) * 24 + days)
    return {"tenants": tenants, "namespaces": namespaces, "days": days, "rows": rows_kept,
            "database_bytes": size, "bytes_per_row": round(size / rows_kept, 1),
            "fill_seconds": round(filled, 1),
            "year_by_namespace_seconds": timings["whole"][0],
            "year_by_namespace_and_month_seconds": timings["month"][0],
            "year_by_namespace_cpu_seconds": timings["whole"][2],
            "year_by_namespace_and_month_cpu_seconds": timings["month"][2],
            "answer_rows": {k: v[1] for k, v in timings.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.usage")
    parser.add_argument("what", choices=("tick", "alongside", "query"))
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--keep", metavar="DIR", help="query: leave the database in DIR")
    args = parser.parse_args(argv)
    if args.what == "tick":
        result = tick_costs(args.pairs, args.tenants)
    elif args.what == "alongside":
        result = tick_alongside(args.pairs, args.tenants)
    else:
        result = query_costs(args.tenants, args.namespaces, args.days, args.keep)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
