"""Fake cgroup v2, /proc (with the driver's MIG capability files) and sysfs trees for
end-to-end tests through the real daemon."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpustats.fakehost import (add_container, add_process, container_cgroup, container_id,
                               copy_node_files, pod_uid, start_cgroup_tree)

__all__ = ["build", "container_id", "pod_uid", "write_scenario", "containers_by_id",
           "metric_value", "make_pci_device", "make_caps"]


def build(root: Path, placement: dict[int, tuple[int, int]]) -> tuple[Path, Path]:
    """``placement``: pid -> (pod number, container number). Returns (cgroup root, proc root)."""
    cgroup, proc = root / "cgroup", root / "proc"
    start_cgroup_tree(cgroup)
    proc.mkdir(parents=True, exist_ok=True)
    for pid, (pod, container) in placement.items():
        rel = container_cgroup(pod_uid(pod), container_id(container))
        add_container(cgroup, rel)
        add_process(proc, pid, rel)
    copy_node_files(proc)
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


def make_pci_device(sysfs: Path, address: str, vendor: str = "0x10de",
                    pci_class: str = "0x030200", device: str = "0x2330") -> None:
    d = sysfs / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True, exist_ok=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(pci_class + "\n")
    (d / "device").write_text(device + "\n")


def make_caps(proc, table):
    """table: {(gpu minor, gi, ci or None): capability minor}."""
    for (gpu, gi, ci), minor in table.items():
        d = proc / "driver" / "nvidia" / "capabilities" / f"gpu{gpu}" / "mig" / f"gi{gi}"
        if ci is not None:
            d = d / f"ci{ci}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "access").write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\n"
                                  "DeviceFileModify: 1\n")
