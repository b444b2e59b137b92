"""Pure parsing of cgroup paths into pod UID, QoS class, container ID and runtime.

Kubelet names pod cgroups ``pod<uid>`` (cgroupfs driver) or ``kubepods[-<qos>]-pod<uid_>.slice``
(systemd driver, ``-`` in the UID escaped as ``_``); guaranteed pods have no QoS level.
Runtimes name container cgroups ``cri-containerd-<id>.scope`` / ``<id>`` (containerd),
``crio-<id>[.scope]`` (CRI-O; ``crio-conmon-<id>`` is its monitor, not a container), and
``docker-<id>.scope`` / ``/docker/<id>`` (Docker), ``libpod-<id>.scope`` in machine.slice /
``libpod_parent/libpod-<id>`` (Podman), ``nerdctl-<id>.scope`` / ``<namespace>/<id>``
(containerd outside Kubernetes). A path below a container's cgroup (crun's ``container``
child, a kind node's own kubelet tree) belongs to that container.

Where a cgroup sits decides whose it can be: a pod only in the kubelet's tree (``kubepods`` at
the hierarchy's top), a container outside Kubernetes only where its runtime puts it. The same
names anywhere else (a user's delegated ``user@<uid>.service``, a service's own subtree) are
whoever owns that subtree's (``tenant_paths``): a tenant can name its cgroups as it likes,
never as another tenant's container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_CONTAINER = re.compile(
    r"^(?:(?P<prefix>cri-containerd|crio|docker|libpod-payload|libpod|nerdctl)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
_CONMON = re.compile(r"^crio-conmon-[0-9a-f]{64}(?:\.scope)?$")
_POD = re.compile(
    r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
    r"(?:\.slice)?$")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "crio", "docker": "docker",
             "libpod": "podman", "libpod-payload": "podman", "nerdctl": "containerd"}
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


def _top(path: str) -> tuple[list[str], str]:
    """The path's components without leading ``..``, and those (``/../..``; kept in the
    paths found, as they came): the kernel shows
    a cgroup outside the reader's cgroup namespace that way (cgroup_namespaces(7)), relative
    to a common ancestor of the reader's own cgroup."""
    components = [c for c in path.split("/") if c]
    start = 0
    while start < len(components) and components[start] == "..":
        start += 1
    return components[start:], "/.." * start


def _kubelet_top(first: str, outside: bool) -> bool:
    """Whether a path starting with ``first`` lies in the kubelet's cgroup root. Outside the
    reader's namespace (a DaemonSet's own pod cgroup as root) the shown path starts below
    the common ancestor, itself at the top or in the kubelet's tree (a QoS level, a pod, a
    container of the reader's own pod)."""
    if first.startswith("kubepods"):
        return True
    return outside and (first in QOS_CLASSES or _pod_uid(first) is not None
                        or _CONTAINER.match(first) is not None)


def _kubelet(components: list[str], above: str) -> CgroupPathInfo | None:
    """A pod or a pod's container in the kubelet's tree (``components`` start there)."""
    pod_uid = qos = pod_path = None
    for position, component in enumerate(components):
        if pod_uid is None:
            qos = _qos(component) or qos
            pod_uid = _pod_uid(component)
            if pod_uid is not None:
                pod_path = above + "/" + "/".join(components[:position + 1])
                continue
        if _CONMON.match(component):
            return None
        match = _CONTAINER.match(component)
        if match is not None:
            if pod_uid is not None and qos is None:
                qos = "guaranteed"
            return _container(match, components, position, above, pod_uid,
                              qos if pod_uid else None, pod_path)
    if pod_uid is not None:
        return CgroupPathInfo(container_id=None, runtime=None, pod_uid=pod_uid,
                              qos_class=qos or "guaranteed", container_path=None,
                              pod_path=pod_path)
    return None


def _container(match: re.Match[str], components: list[str], position: int, above: str,
               pod_uid: str | None = None, qos: str | None = None,
               pod_path: str | None = None) -> CgroupPathInfo:
    return CgroupPathInfo(
        container_id=match.group("id"),
        runtime=_runtime(match.group("prefix"), components[:position]),
        pod_uid=pod_uid, qos_class=qos,
        container_path=above + "/" + "/".join(components[:position + 1]), pod_path=pod_path)


# Where runtimes outside Kubernetes put a container, below the hierarchy's root (cgroup v2,
# or each v1 hierarchy): systemd's driver makes ``<runtime>-<id>.scope`` in system.slice
# (Docker, nerdctl) or machine.slice (Podman); cgroupfs drivers make ``docker/<id>``,
# ``libpod_parent/libpod-<id>`` and containerd's ``<namespace>/<id>``. Only root makes cgroups
# there; the same names anywhere else are made by whoever owns that subtree.
_SYSTEMD_PARENTS = {"system.slice": ("docker", "cri-containerd", "crio", "nerdctl", "libpod"),
                    "machine.slice": ("libpod",)}
_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,75}")   # containerd's namespace names


def _system(components: list[str], above: str) -> CgroupPathInfo | None:
    """A container where its runtime puts one (``components[0]`` is the hierarchy's top)."""
    if len(components) < 2:
        return None
    parent, name = components[0], components[1]
    match = _CONTAINER.match(name)
    if match is None:
        return None
    prefix = match.group("prefix")
    if parent in _SYSTEMD_PARENTS:
        if prefix in _SYSTEMD_PARENTS[parent] and name.endswith(".scope"):
            return _container(match, components, 1, above)
        return None
    if parent == "libpod_parent":
        return _container(match, components, 1, above) if prefix == "libpod" else None
    if prefix is None and _parent_of_node_containers(parent):
        info = _container(match, components, 1, above)      # docker/<id>, <namespace>/<id>
        return info if info.runtime else replace(info, runtime="containerd")
    return None


def _parent_of_node_containers(name: str) -> bool:
    """Whether a top-level cgroup may hold node containers as children (``_system``)."""
    return name in _SYSTEMD_PARENTS or name == "libpod_parent" or (
        _NAMESPACE.fullmatch(name) is not None and not name.startswith("lxc")
        and not name.endswith((".slice", ".service", ".scope")))


def _below(components: list[str], kubelet_parent: str) -> int | None:
    """How many leading components are the configured kubelet parent's (None: not below)."""
    parent = [c for c in kubelet_parent.split("/") if c]
    if parent and components[:len(parent)] == parent:
        return len(parent)
    return None


def may_hold_node_cgroups(path: str, kubelet_parent: str = "") -> bool:
    """Whether a cgroup that is no pod or node container may have one below it: the
    kubelet's tree (or the way to its configured parent), or a top-level parent of runtimes'
    containers. A walk goes no further (a user's or a service's subtree holds none, however
    many cgroups it makes)."""
    components, above = _top(path)
    if not components:
        return True
    parent = [c for c in kubelet_parent.split("/") if c]
    if not above and parent and (parent[:len(components)] == components or (
            components[:len(parent)] == parent and components[len(parent)].startswith(
                "kubepods"))):
        return True
    if _kubelet_top(components[0], bool(above)):
        return True
    return len(components) == 1 and _parent_of_node_containers(components[0])


def parse_cgroup_path(path: str, kubelet_parent: str = "") -> CgroupPathInfo | None:
    """A pod or node container one cgroup path (relative to a hierarchy root) names, by where
    it sits. ``None``: neither (see ``tenant_paths`` for what else it may be).

    ``/kubepods/burstable/pod<uid>/<64-hex>`` gives that UID, QoS ``burstable`` and the
    container ID; ``/kubepods/pod<uid>`` alone is a guaranteed pod's own cgroup. Pods only in
    the kubelet's tree (``kubepods`` at the top); containers outside Kubernetes only where
    their runtime puts them (``_system``). What is below a container's cgroup is its own.
    ``kubelet_parent``: where else the kubelet's ``kubepods`` sits (``/a/b``; "": the top only).
    """
    components, above = _top(path)
    if not components or any(c.endswith(".mount") for c in components):
        return None
    skip = _below(components, kubelet_parent) if not above else None
    if skip is not None and len(components) > skip and components[skip].startswith("kubepods"):
        return _kubelet(components[skip:], "/" + "/".join(components[:skip]))
    if _kubelet_top(components[0], bool(above)):
        return _kubelet(components, above)
    return _system(components, above)
