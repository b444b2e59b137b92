"""The kubelet's log layout (/var/log/pods and /var/log/containers) as a fake host tree."""

import os
from pathlib import Path


def layout(root: Path, pods: dict[tuple[str, str, str], dict[str, str]]) -> None:
    """``pods``: (namespace, pod, uid) -> {container name: container id}, as the kubelet lays
    them out (absolute host-path link targets, which dangle under ``root``)."""
    (root / "pods").mkdir(parents=True, exist_ok=True)
    (root / "containers").mkdir(parents=True, exist_ok=True)
    for (namespace, pod, uid), containers in pods.items():
        pod_dir = root / "pods" / f"{namespace}_{pod}_{uid}"
        for name, cid in containers.items():
            (pod_dir / name).mkdir(parents=True, exist_ok=True)
            (pod_dir / name / "0.log").write_text("never read\n")
            os.symlink(f"/var/log/pods/{namespace}_{pod}_{uid}/{name}/0.log",
                       root / "containers" / f"{pod}_{namespace}_{name}-{cid}.log")
