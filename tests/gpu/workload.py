"""A GPU workload for the real-GPU checks: bf16 matrix products at a chosen duty cycle.

    python -m tests.gpu.workload --seconds 30 --duty 0.5 [--report FILE]

Busy for ``duty`` of every 100 ms period, idle for the rest; writes the matmuls per second it
achieved to ``--report`` so the overhead check can compare runs.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--duty", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--report")
    args = parser.parse_args()
    import torch

    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    period = 0.1
    done = 0
    start = time.perf_counter()
    end = start + args.seconds
    while time.perf_counter() < end:
        slot = time.perf_counter()
        while time.perf_counter() - slot < period * args.duty:
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()
            done += 8
        rest = period - (time.perf_counter() - slot)
        if rest > 0:
            time.sleep(rest)
    elapsed = time.perf_counter() - start
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"matmuls": done, "seconds": elapsed, "per_second": done / elapsed}, f)


if __name__ == "__main__":
    main()
