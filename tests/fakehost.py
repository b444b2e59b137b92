"""Fake cgroup v2 and /proc trees for end-to-end tests through the real daemon."""

from __future__ import annotations

from pathlib import Path

import yaml


def pod_uid(n: int) -> str:
    return f"{n:08x}-aaaa-4bbb-8ccc-{n:012x}"


def container_id(n: int) -> str:
    return f"{n:064x}"


def build(root: Path, placement: dict[int, tuple[int, int]]) -> tuple[Path, Path]:
    """``placement``: pid -> (pod number, container number). Returns (cgroup root, proc root)."""
    cgroup, proc = root / "cgroup", root / "proc"
    cgroup.mkdir(parents=True, exist_ok=True)
    proc.mkdir(parents=True, exist_ok=True)
    (cgroup / "cgroup.controllers").write_text("cpu memory\n")
    for pid, (pod, container) in placement.items():
        rel = (f"kubepods.slice/kubepods-pod{pod_uid(pod).replace('-', '_')}.slice/"
               f"cri-containerd-{container_id(container)}.scope")
        d = cgroup / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.stat").write_text("usage_usec 5000\n")
        (d / "memory.current").write_text("1048576\n")
        (d / "memory.stat").write_text("anon 1048576\ninactive_file 0\n")
        p = proc / str(pid)
        p.mkdir(parents=True, exist_ok=True)
        (p / "cgroup").write_text(f"0::/{rel}\n")
    for name in ("stat", "meminfo", "vmstat"):
        (proc / name).write_text(Path(f"/proc/{name}").read_text())
    boot_id = proc / "sys" / "kernel" / "random" / "boot_id"
    boot_id.parent.mkdir(parents=True, exist_ok=True)
    boot_id.write_text(Path("/proc/sys/kernel/random/boot_id").read_text())
    return cgroup, proc


def write_scenario(path: Path, scenario: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(scenario))
    tmp.replace(path)


def containers_by_id(summary: dict) -> dict[str, dict]:
    """Every container of the summary by its ID: in named pods a container nothing names is
    called by its ID; nameless pods' containers are listed at the top level with ``id``."""
    out = {c["name"]: c for p in summary["pods"] for c in p["containers"]}
    out.update({c["id"]: c for c in summary.get("containers", ())})
    return out


def metric_value(text: str, sample_name: str, /, **labels: str) -> float | None:
    """The value of the one sample named so whose labels include ``labels`` (None: none)."""
    from prometheus_client.parser import text_string_to_metric_families
    found = [s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) <= 1, (sample_name, labels, found)
    return found[0] if found else None
