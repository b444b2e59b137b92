"""Pure parsing of cgroup paths into pod UID, QoS class, container ID and runtime.

Kubelet names pod cgroups ``pod<uid>`` (cgroupfs driver) or ``kubepods[-<qos>]-pod<uid_>.slice``
(systemd driver, ``-`` in the UID escaped as ``_``); guaranteed pods have no QoS level.
Runtimes name container cgroups ``cri-containerd-<id>.scope`` / ``<id>`` (containerd),
``crio-<id>[.scope]`` (CRI-O; ``crio-conmon-<id>`` is its monitor, not a container), and
``docker-<id>.scope`` / ``/docker/<id>`` (Docker). ``kubepods`` may sit anywhere in the path
(a nested root, a runtime inside a container); a path below a container's cgroup (crun's
``container`` child) belongs to that container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONTAINER = re.compile(
    r"^(?:(?P<prefix>cri-containerd|crio|docker|libpod-payload|libpod)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
_CONMON = re.compile(r"^crio-conmon-[0-9a-f]{64}(?:\.scope)?$")
_POD = re.compile(
    r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?$")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "crio", "docker": "docker",
             "libpod": "podman", "libpod-payload": "podman"}
QOS_CLASSES = ("burstable", "besteffort")


@dataclass(frozen=True)
class CgroupPathInfo:
    """What a cgroup path says about its owner; ``container_id`` None for a pod cgroup."""

    container_id: str | None
    runtime: str | None
    pod_uid: str | None
    qos_class: str | None
    container_path: str | None     # the path up to and including the container component
    pod_path: str | None           # the path up to and including the pod component


def _pod_uid(component: str) -> str | None:
    """The pod UID a ``pod<uid>`` (or systemd ``kubepods-...-pod<uid>.slice``) component names."""
    if not (component.startswith("pod") or component.startswith("kubepods")):
        return None
    pod = _POD.search(component)
    return pod.group("uid").replace("_", "-") if pod is not None else None


def _runtime(prefix: str | None, parents: list[str]) -> str | None:
    """The runtime a container component's prefix names (a bare ID under ``docker/``: docker)."""
    runtime = _RUNTIMES.get(prefix) if prefix else None
    if runtime is None and parents and parents[-1] == "docker":
        runtime = "docker"
    return runtime


def _qos(component: str) -> str | None:
    for qos in QOS_CLASSES:
        if component == qos or component.startswith(f"kubepods-{qos}") \
                or component == f"kubepods-{qos}.slice":
            return qos
    return None


def parse_cgroup_path(path: str) -> CgroupPathInfo | None:
    """Parse one cgroup path (relative to a hierarchy root). ``None``: neither pod nor container.

    ``/kubepods/burstable/pod<uid>/<64-hex>`` gives that UID, QoS ``burstable`` and the
    container ID; ``/kubepods/pod<uid>`` alone is a guaranteed pod's own cgroup.
    """
    components = [c for c in path.split("/") if c]
    pod_uid = qos = pod_path = None
    in_kubepods = False
    for position, component in enumerate(components):
        if component.endswith(".mount"):
            return None
        if component.startswith("kubepods"):
            in_kubepods = True
        if in_kubepods and pod_uid is None:
            qos = _qos(component) or qos
            pod_uid = _pod_uid(component)
            if pod_uid is not None:
                pod_path = "/" + "/".join(components[:position + 1])
                continue
        if _CONMON.match(component):
            return None
        match = _CONTAINER.match(component)
        if match is not None:
            if pod_uid is not None and qos is None:
                qos = "guaranteed"
            return CgroupPathInfo(
                container_id=match.group("id"),
                runtime=_runtime(match.group("prefix"), components[:position]),
                pod_uid=pod_uid, qos_class=qos if pod_uid else None,
                container_path="/" + "/".join(components[:position + 1]),
                pod_path=pod_path)
    if pod_uid is not None:
        return CgroupPathInfo(container_id=None, runtime=None, pod_uid=pod_uid,
                              qos_class=qos or "guaranteed", container_path=None,
                              pod_path=pod_path)
    return None
