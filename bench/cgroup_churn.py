"""Cost of cgroup discovery per tick while cgroups churn in one subtree of a large tree.

    python -m bench.cgroup_churn                 # 20,000 directories, 30 ticks per mode
    python -m bench.cgroup_churn --dirs 5000 --ticks 10 --churn plain

A fake cgroup v2 tree of about ``--dirs`` directories (``--pods`` pods with three containers
each under ``kubepods.slice``, 250 by default, the top of the kubelet's usual max-pods; the
rest plain directories under ``system.slice``) is discovered once;
then, each tick, five cgroups are made or removed in turn in one place (a mkdir or rmdir every
0.2 s at a 1 s tick) before ``discover()``: container cgroups in one pod (``--churn
containers``, a crash-looping container; what is found changes every tick) or plain cgroups
under one unit (``--churn plain``, sessions; nothing found changes). Two modes on the same tree:

- ``inotify``: only what inotify names is looked at again (the daemon as it is);
- ``full-walk``: every tick walks the whole tree, as the daemon did on every change before it
  kept the last walk (inotify off gives exactly that walk).

Figures: CPU seconds of ``discover()`` per tick (median, p95) and directories listed per tick,
on stdout and in bench/results/cgroup_churn_<churn>.json.

    python -m bench.cgroup_churn --memory 20000

instead makes ``--memory`` cgroups, a thousand a tick, and removes them, twice: Docker-named
cgroups in a user's delegated ``user@.service`` (never walked), then container cgroups in one
pod (the node's, kept while they are there, up to the cap). Figures: this process's RSS after
the first walk, at each peak, and after each removal (the goal: back within 10 MB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.daemons import RESULTS
from gpustats.dir_changes import DirectoryChanges
from gpustats.hostfs import HostRoots
from gpustats.sources.cgroup_tree import list_subdirs
from gpustats.sources.cgroups import CgroupReader

CHURN_PER_TICK = 5


def build_tree(root: Path, dirs: int, pods: int) -> int:
    """A v2 tree of about ``dirs`` directories; how many it has."""
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    made = 0
    slice_ = root / "kubepods.slice" / "kubepods-burstable.slice"
    for p in range(pods):
        pod = slice_ / f"kubepods-burstable-pod{p:08x}_aaaa_4bbb_8ccc_{p:012x}.slice"
        for c in range(3):
            (pod / f"cri-containerd-{p * 10 + c:064x}.scope").mkdir(parents=True)
        made += 4
    units = root / "system.slice"
    unit = 0
    while made < dirs:
        for sub in range(9):
            (units / f"unit{unit}.service" / f"s{sub}").mkdir(parents=True)
        made += 10
        unit += 1
    (units / "churn.service").mkdir()
    return made + 5


def measure(root: Path, ticks: int, inotify: bool, churn_containers: bool) -> dict:
    listed = []

    def counting(directory: str):
        listed.append(directory)
        return list_subdirs(directory)

    reader = CgroupReader(HostRoots(cgroup=str(root)), list_dirs=counting)
    if not inotify:
        reader._changes.close()           # no events: every discovery walks the whole tree
    elif reader._changes.unavailable:
        raise SystemExit(f"inotify unavailable: {reader._changes.unavailable}")
    reader.discover()
    if churn_containers:
        churn = next((root / "kubepods.slice" / "kubepods-burstable.slice").iterdir())
    else:
        churn = root / "system.slice" / "churn.service"
    cpu, counts, step = [], [], 0
    for _ in range(ticks):
        for _ in range(CHURN_PER_TICK):
            n = step // 2
            group = churn / (f"cri-containerd-{0xc0ffee000000 + n:064x}.scope"
                             if churn_containers else f"session-{n}.scope")
            if step % 2 == 0:
                group.mkdir()
            else:
                group.rmdir()
            step += 1
        listed.clear()
        start = time.process_time()
        reader.discover()
        reader.end_tick()
        cpu.append(time.process_time() - start)
        counts.append(len(listed))
    reader.close()
    cpu.sort()
    return {"mode": "inotify" if inotify else "full-walk",
            "discover_cpu_ms_median": round(statistics.median(cpu) * 1000, 3),
            "discover_cpu_ms_p95": round(cpu[int(0.95 * (len(cpu) - 1))] * 1000, 3),
            "dirs_listed_per_tick_median": statistics.median(counts)}


def _rss_mb() -> float:
    import gc

    import psutil

    gc.collect()
    return round(psutil.Process().memory_info().rss / 2**20, 2)


def measure_memory(root: Path, count: int) -> dict:
    """RSS while ``count`` cgroups come and go, twice, in a pod and in a user's subtree."""
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    reader.discover()
    reader.end_tick()
    out: dict = {"rss_mb_start": _rss_mb()}
    pod = next((root / "kubepods.slice" / "kubepods-burstable.slice").iterdir())
    user = root / "user.slice" / "user-1002.slice" / "user@1002.service" / "app.slice"
    user.mkdir(parents=True)
    for place, parent, name in (("user", user, "docker-{:064x}.scope"),
                                ("pod", pod, "cri-containerd-{:064x}.scope")):
        peak = 0.0
        for _ in range(2):
            for n in range(count):
                (parent / name.format(0xbeef0000 + n)).mkdir()
                if n % 1000 == 999:
                    found = reader.discover()
                    reader.end_tick()
            peak = max(peak, _rss_mb())
            out[f"{place}_containers_found_at_peak"] = len(found.containers)
            for n in range(count):
                (parent / name.format(0xbeef0000 + n)).rmdir()
            reader.discover()
            reader.end_tick()
        out[f"{place}_rss_mb_peak"] = peak
        out[f"{place}_rss_mb_after"] = _rss_mb()
    reader.close()
    out["user_rss_mb_left"] = round(out["user_rss_mb_after"] - out["rss_mb_start"], 2)
    out["pod_rss_mb_left"] = round(out["pod_rss_mb_after"] - out["rss_mb_start"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", type=int, default=20000)
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--churn", choices=("containers", "plain"), default="containers")
    parser.add_argument("--memory", type=int, default=0, metavar="N",
                        help="measure RSS while N cgroups come and go instead")
    args = parser.parse_args(argv)
    if DirectoryChanges().unavailable:
        raise SystemExit("inotify unavailable here")
    if args.memory:
        with tempfile.TemporaryDirectory(prefix="gpustats-churn-") as tmp:
            root = Path(tmp) / "cgroup"
            build_tree(root, 2000, 50)
            print(json.dumps(measure_memory(root, args.memory), indent=2))
        return 0
    with tempfile.TemporaryDirectory(prefix="gpustats-churn-") as tmp:
        root = Path(tmp) / "cgroup"
        total = build_tree(root, args.dirs, args.pods)
        results = [measure(root, args.ticks, inotify, args.churn == "containers")
                   for inotify in (False, True)]
    report = {"directories": total, "pods": args.pods, "ticks": args.ticks, "churn": args.churn,
              "churn_per_tick": CHURN_PER_TICK, "results": results}
    print(f"{total} directories ({args.pods} pods), {CHURN_PER_TICK} mkdir/rmdir of"
          f" {args.churn} cgroups per tick, {args.ticks} ticks")
    print(f"{'mode':<10} {'cpu ms median':>14} {'cpu ms p95':>11} {'dirs listed':>12}")
    for r in results:
        print(f"{r['mode']:<10} {r['discover_cpu_ms_median']:>14} {r['discover_cpu_ms_p95']:>11}"
              f" {r['dirs_listed_per_tick_median']:>12}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"cgroup_churn_{args.churn}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
