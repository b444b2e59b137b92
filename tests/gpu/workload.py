"""A GPU workload for the real-GPU checks: bf16 matrix products at a chosen duty cycle.

    python -m tests.gpu.workload --seconds 30 --duty 0.5 [--jitter 0.5] [--report FILE]
                                 [--progress FILE]

Busy for ``duty`` of every period, idle for the rest. Periods last 100 ms ± ``jitter`` × 100 ms,
drawn at random: NVML credits a time-sliced GPU to one process per sampling instant, about six
a second, and a strict 100 ms period beats against that (on an H100, an 80 %/25 % pair of strict
periods was read as 66/34 where the work done split 83/17). Writes the matmuls per second it
achieved to ``--report`` so the overhead check can compare runs. ``--progress`` is rewritten
every period with the matmuls done so far: the work each of several workloads did in a window,
the fair split of the energy they drew (the same kernel costs the same energy whoever runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--duty", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--jitter", type=float, default=0.5,
                        help="each period lasts 100 ms × (1 ± jitter), uniformly (0: strict)")
    parser.add_argument("--report")
    parser.add_argument("--progress")
    args = parser.parse_args()
    import torch

    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    periods = random.Random()
    done = 0
    start = time.perf_counter()
    end = start + args.seconds
    while time.perf_counter() < end:
        period = 0.1 * periods.uniform(1.0 - args.jitter, 1.0 + args.jitter)
        slot = time.perf_counter()
        while time.perf_counter() - slot < period * args.duty:
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()
            done += 8
        if args.progress:
            _write(args.progress, {"matmuls": done})
        rest = period - (time.perf_counter() - slot)
        if rest > 0:
            time.sleep(rest)                  # measures: the idle part of the duty cycle
    elapsed = time.perf_counter() - start
    if args.report:
        _write(args.report, {"matmuls": done, "seconds": elapsed, "per_second": done / elapsed})


def _write(path: str, document: dict) -> None:
    """Whole or not at all: a reader never sees half a document."""
    with open(path + ".tmp", "w") as f:
        json.dump(document, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
