"""Tick CPU of two source trees at one scale, measured in pairs (noise-tolerant comparison).

    python -m bench.paired --base ../other-checkout [--new .] [--scale 8gpu-300c] [--pairs 60]

Each tree runs in its own process on the same scenario and fake host; the two tick in turn,
the order alternating from pair to pair, so load that comes and goes on the machine falls on
both alike. Reported: each tree's median tick CPU and the median of the per-pair ratios
new / base (the figure to hold to a budget such as "within 5 %").

On a busy machine single ticks are noisy (other processes' load lengthens some by a fifth or
more); ``--block K`` makes each pair K ticks of each tree, in turn, and compares the fastest
of each (the tick least disturbed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.run import STEADY_STATE_ARGS, TICK_SPACING_SECONDS
from bench.scenarios import fake_host, node_scenario, write_scenario

# name: (GPUs, MIG instances per GPU, processes, containers)
SCALES = {
    "8gpu-300c": (8, 0, 64, 300),
    "8gpu-1000c": (8, 0, 64, 1000),
    "8gpu-7mig-300c": (8, 7, 64, 300),
    "8gpu-3000c": (8, 0, 64, 3000),
}
WARMUP_TICKS = 5

# Run in a child process whose sys.path starts with the tree measured: builds the daemon, then
# answers each "tick" line on stdin with the tick's thread CPU in milliseconds.
WORKER = r"""
import gc, sys, time
sys.path.insert(0, sys.argv[1])
from gpustats.cli import Daemon, settle_garbage_collector
from gpustats.config import build_arg_parser, resolve
daemon = Daemon(resolve(build_arg_parser().parse_args(sys.argv[2:]), {}))
settle_garbage_collector()
# Trees from before the housekeeper got its name call it "collector".
housekeeper = getattr(daemon, "housekeeper", None) or daemon.collector
print("ready", flush=True)
for line in sys.stdin:
    start = time.thread_time()
    housekeeper.tick()
    print((time.thread_time() - start) * 1000.0, flush=True)
daemon.close()
"""


def paired_host(scale: tuple[int, int, int, int], workdir: Path):
    """The scenario and fake host of a scale (GPUs, MIG instances, processes, containers),
    written once; what each tree's daemon is started with, by tag."""
    gpus, mig, processes, containers = scale
    scenario = node_scenario(gpus, processes, mig_instances=mig)
    path = write_scenario(workdir / "scenario.yaml", scenario)
    cgroup, proc_root = fake_host(workdir / "host", containers,
                                  [p["pid"] for p in scenario["processes"]])

    def args(tag: str) -> list[str]:
        return ["--simulate", path, "--state-dir", str(workdir / f"state-{tag}"),
                "--pod-resources-socket", "", "--runtime-socket", "",
                "--cgroup-root", cgroup, "--proc-root", proc_root, "--log-root", "",
                *STEADY_STATE_ARGS]
    return args


def _start(tree: Path, daemon_args: list[str]) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(tree), *daemon_args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=str(tree), env=env)
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError(f"worker for {tree} did not start")
    return proc


def _tick(proc: subprocess.Popen) -> float:
    proc.stdin.write("tick\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def run_pairs(base: Path, new: Path, scale: str, pairs: int, workdir: Path,
              block: int = 1) -> dict:
    args = paired_host(SCALES[scale], workdir)
    workers = {"base": _start(base, args("base")), "new": _start(new, args("new"))}
    try:
        for _ in range(WARMUP_TICKS):
            for w in workers.values():
                time.sleep(TICK_SPACING_SECONDS)
                _tick(w)
        times = {"base": [], "new": []}
        for i in range(pairs):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")
            found = {"base": [], "new": []}
            for _ in range(block):
                for tag in order:
                    time.sleep(TICK_SPACING_SECONDS)
                    found[tag].append(_tick(workers[tag]))
            for tag, ticks in found.items():
                times[tag].append(min(ticks))
    finally:
        for w in workers.values():
            w.stdin.close()
            w.wait(timeout=30)
    return {
        "scale": scale, "pairs": pairs, "ticks_per_pair_and_tree": block,
        "base_tick_cpu_ms_median": round(statistics.median(times["base"]), 3),
        "new_tick_cpu_ms_median": round(statistics.median(times["new"]), 3),
        **pair_ratios(times),
        # The least disturbed ticks of each tree compared (less sensitive to passing load).
        "ratio_of_lower_quartiles": round(statistics.quantiles(times["new"], n=4)[0]
                                          / statistics.quantiles(times["base"], n=4)[0], 4),
    }


def pair_ratios(times: dict[str, list[float]]) -> dict:
    """The per-pair ratios new / base: their median and quartiles."""
    ratios = [n / b for n, b in zip(times["new"], times["base"]) if b > 0]
    return {"ratio_median": round(statistics.median(ratios), 4),
            "ratio_quartiles": [round(q, 4) for q in statistics.quantiles(ratios, n=4)]}


def paired_options(argv: list[str] | None, description: str, scales, *, pairs: int,
                   block: int, measured: str) -> argparse.Namespace:
    """The options every paired comparison takes: two source trees, a scale, pairs, block."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--base", required=True, type=Path, help="source tree of the baseline")
    parser.add_argument("--new", default=Path(__file__).resolve().parent.parent, type=Path,
                        help="source tree measured against it (default: this one)")
    parser.add_argument("--scale", default="8gpu-300c", choices=sorted(scales))
    parser.add_argument("--pairs", default=pairs, type=int)
    parser.add_argument("--block", default=block, type=int,
                        help=f"{measured} of each tree per pair; the fastest of each is compared")
    opts = parser.parse_args(argv)
    if opts.pairs < 4:
        parser.error("--pairs must be at least 4")
    if opts.block < 1:
        parser.error("--block must be at least 1")
    for tree in (opts.base, opts.new):
        if not (tree / "gpustats" / "cli.py").is_file():
            parser.error(f"{tree} is not a gpustats source tree")
    opts.base, opts.new = opts.base.resolve(), opts.new.resolve()
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = paired_options(argv, __doc__.splitlines()[0], SCALES, pairs=60, block=1,
                          measured="ticks")
    with tempfile.TemporaryDirectory(prefix="gpustats-paired-") as tmp:
        result = run_pairs(opts.base, opts.new, opts.scale, opts.pairs, Path(tmp), opts.block)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
