"""/metrics render CPU of two source trees at one scale, measured in pairs.

    python -m bench.paired_render --base ../other-checkout [--new .] [--scale 8gpu-512p]

Each tree runs in its own process on the same scenario and fake host, ticks until attribution
series exist, then renders its latest snapshot's /metrics (text format) on request; the two
render in turn, the order alternating from pair to pair, and each pair compares the fastest of
``--block`` renders of each. Reported: each tree's median and the median of the per-pair
ratios new / base (the figure held to "no slower than 5 %").
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.paired import SCALES as TICK_SCALES, pair_ratios, paired_host, paired_options
from bench.run import TICK_SPACING_SECONDS

# name: (GPUs, MIG instances per GPU, processes, containers)
SCALES = {**TICK_SCALES, "8gpu-512p": (8, 0, 512, 100)}
WARMUP_TICKS = 6

WORKER = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from gpustats.cli import Daemon
from gpustats.config import build_arg_parser, resolve
from gpustats.export.prometheus import render
daemon = Daemon(resolve(build_arg_parser().parse_args(sys.argv[3:]), {}))
ticker = getattr(daemon, "housekeeper", None) or daemon.collector   # the name differs by tree
for _ in range(int(sys.argv[2])):
    time.sleep(0.11)
    snapshot = ticker.tick()
print("ready", len(render(snapshot, None)[0]), flush=True)
for line in sys.stdin:
    start = time.thread_time()
    render(snapshot, None)
    print((time.thread_time() - start) * 1000.0, flush=True)
daemon.close()
"""


def _start(tree: Path, daemon_args: list[str]) -> tuple[subprocess.Popen, int]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(tree), str(WARMUP_TICKS),
                             *daemon_args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=str(tree), env=env)
    word, _, size = proc.stdout.readline().partition(" ")
    if word != "ready":
        raise RuntimeError(f"worker for {tree} did not start")
    return proc, int(size)


def _render(proc: subprocess.Popen) -> float:
    proc.stdin.write("render\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def run_pairs(base: Path, new: Path, scale: str, pairs: int, block: int, workdir: Path) -> dict:
    args = paired_host(SCALES[scale], workdir)
    started = {"base": _start(base, args("base")), "new": _start(new, args("new"))}
    workers = {tag: proc for tag, (proc, _) in started.items()}
    try:
        times: dict[str, list[float]] = {"base": [], "new": []}
        for i in range(pairs):
            for tag in (("base", "new") if i % 2 == 0 else ("new", "base")):
                times[tag].append(min(_render(workers[tag]) for _ in range(block)))
                time.sleep(TICK_SPACING_SECONDS / 10)
    finally:
        for proc in workers.values():
            proc.stdin.close()
            proc.wait(timeout=30)
    return {
        "scale": scale, "pairs": pairs, "renders_per_pair_and_tree": block,
        "base_body_bytes": started["base"][1], "new_body_bytes": started["new"][1],
        "base_render_cpu_ms_median": round(statistics.median(times["base"]), 3),
        "new_render_cpu_ms_median": round(statistics.median(times["new"]), 3),
        **pair_ratios(times),
    }


def main(argv: list[str] | None = None) -> int:
    opts = paired_options(argv, __doc__.splitlines()[0], SCALES, pairs=30, block=3,
                          measured="renders")
    with tempfile.TemporaryDirectory(prefix="gpustats-paired-render-") as tmp:
        result = run_pairs(opts.base, opts.new, opts.scale, opts.pairs, opts.block, Path(tmp))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
