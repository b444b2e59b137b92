"""Pod and container names from the kubelet's log layout: directory and link names, never content.

The kubelet (and only the kubelet) lays out every container's log as
``<root>/pods/<namespace>_<pod>_<pod-uid>/<container>/<restart>.log`` and links it from
``<root>/containers/<pod>_<namespace>_<container>-<container-id>.log``. Kubernetes names are
DNS labels/subdomains and hold no ``_``, so the names split unambiguously; the link's target
gives the pod UID. An entry that does not parse (a foreign file, a pre-1.14 ``pods/<uid>``
directory, a link whose target disagrees with its name) is skipped and counted.

The kubelet cuts a link name longer than the ext4 limit to its first 251 characters before
``.log`` (kuberuntime ``logSymlink``), so a long pod name loses the end of the container ID and
perhaps of the container name. Such a cut link still names its pod and namespace; the container
name comes from its target, and the container ID by the prefix that is left when 12 or more hex
digits remain. A container of a pod with a cut link it cannot be told from is named by its pod
only, never taken for the pod's sandbox.

Each directory is re-listed only when its mtime changes (or was too recent to trust), so a
steady node costs two ``stat`` calls a tick however many entries it holds; a link's target is
read only for containers the tracker asks about, once per container ID.
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Mapping, Protocol, TypeVar

from gpustats.model.containers import ContainerNames

log = logging.getLogger(__name__)

DEFAULT_LOG_ROOT = "/var/log"

_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"                 # DNS-1123 label
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?"           # DNS-1123 subdomain
_UID = r"[0-9a-f][-0-9a-f]{0,63}"
_POD_DIR = re.compile(rf"^(?P<namespace>{_LABEL})_(?P<pod>{_SUBDOMAIN})_(?P<uid>{_UID})$")
_LINK = re.compile(rf"^(?P<pod>{_SUBDOMAIN})_(?P<namespace>{_LABEL})_(?P<container>{_LABEL})"
                   r"-(?P<id>[0-9a-f]{64})\.log$")
_CUT_LINK = re.compile(rf"^(?P<pod>{_SUBDOMAIN})_(?P<namespace>{_LABEL})_(?P<rest>[-a-z0-9]*)"
                       r"\.log$")
_LOG_FILE = re.compile(r"^[0-9]{1,9}\.log(?:\.[0-9]{8}-[0-9]{6})?(?:\.gz)?$")
_CONTAINER = re.compile(rf"^{_LABEL}$")

# kuberuntime logSymlink: ``<pod>_<namespace>_<container>-<id>`` cut to this, then ``.log``.
CUT_LINK_STEM = 255 - len(".log")
# The fewest container ID digits a cut link must keep to name one container by them (48 bits:
# as many as Docker's short IDs).
MIN_ID_PREFIX = 12
_HEX = re.compile(r"^[0-9a-f]*$")

# A directory whose mtime is this close to the time it was listed may change again within the
# same mtime tick (coarse timestamps): list it again next time rather than trust the cache.
_RACY_SECONDS = 2.0


@dataclass(frozen=True)
class PodLogDir:
    """``pods/<namespace>_<pod>_<uid>``: one pod's names."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class ContainerLogLink:
    """``containers/<pod>_<namespace>_<container>-<id>.log``: one container's names."""

    pod_name: str
    namespace: str
    container_name: str
    container_id: str


@dataclass(frozen=True)
class CutLogLink:
    """A link name the kubelet cut to fit 255 bytes: pod, namespace, and the start of
    ``<container>-<id>`` (``rest``), which cannot be split without the link's target."""

    pod_name: str
    namespace: str
    rest: str

    def split(self, container_name: str) -> str | None:
        """The container ID prefix left after ``container_name``; None if they disagree."""
        head = container_name + "-"
        if head.startswith(self.rest):
            return ""                                   # the cut fell in the name itself
        if self.rest.startswith(head) and _HEX.fullmatch(self.rest[len(head):]):
            return self.rest[len(head):]
        return None


def parse_pod_dir(name: str) -> PodLogDir:
    """``ml_trainer-0_5c3e…`` → namespace ``ml``, pod ``trainer-0``, UID. ValueError otherwise."""
    match = _POD_DIR.fullmatch(name)
    if match is None:
        raise ValueError(f"not a <namespace>_<pod>_<uid> pod log directory: {name!r}")
    return PodLogDir(match["namespace"], match["pod"], match["uid"])


def parse_container_link(name: str) -> ContainerLogLink:
    """``trainer-0_ml_main-<64 hex>.log`` → pod, namespace, container, container ID."""
    match = _LINK.fullmatch(name)
    if match is None:
        raise ValueError(f"not a <pod>_<namespace>_<container>-<id>.log link: {name!r}")
    return ContainerLogLink(match["pod"], match["namespace"], match["container"], match["id"])


def parse_cut_link(name: str) -> CutLogLink:
    """A link name the kubelet cut (exactly 255 characters) → pod, namespace, the rest."""
    match = _CUT_LINK.fullmatch(name)
    if len(name) != CUT_LINK_STEM + len(".log") or match is None:
        raise ValueError(f"not a cut <pod>_<namespace>_<container>-<id>.log link: {name!r}")
    return CutLogLink(match["pod"], match["namespace"], match["rest"])


def parse_any_link(name: str) -> ContainerLogLink | CutLogLink:
    """A whole link name, else a cut one; ValueError for neither."""
    try:
        return parse_container_link(name)
    except ValueError:
        return parse_cut_link(name)


def parse_link_target(target: str) -> tuple[PodLogDir, str]:
    """``/var/log/pods/<ns>_<pod>_<uid>/<container>/<n>.log`` → (pod dir, container name).

    Only the last three components count: the target is a host path, which need not exist in
    this mount namespace (the link may be dangling here and still name its container).
    """
    parts = target.replace("\\", "/").rstrip("/").split("/")
    if len(parts) < 3 or not _LOG_FILE.fullmatch(parts[-1]) \
            or not _CONTAINER.fullmatch(parts[-2]):
        raise ValueError(f"not a pods/<ns>_<pod>_<uid>/<container>/<n>.log target: {target!r}")
    return parse_pod_dir(parts[-3]), parts[-2]


def names_of(link: ContainerLogLink, target: tuple[PodLogDir, str] | None) -> ContainerNames:
    """The names one link gives; the UID only when the target agrees with the link's name."""
    uid = None
    if target is not None:
        pod, container = target
        if (pod.namespace, pod.name, container) != (link.namespace, link.pod_name,
                                                    link.container_name):
            raise ValueError("link name and target name different containers")
        uid = pod.uid
    return ContainerNames(pod_name=link.pod_name, pod_namespace=link.namespace, pod_uid=uid,
                          container_name=link.container_name)


class ErrorCounter(Protocol):
    def record(self, source: str, reason: str, count: int = 1) -> None: ...


class _Listing:
    """One directory's entry names, re-listed when its mtime changes."""

    def __init__(self, path: str, wall: Callable[[], float]):
        self.path = path
        self._wall = wall
        self._stamp: tuple[int, int, int] | None = None
        self._racy = True
        self.names: tuple[str, ...] = ()
        self.listings = 0

    def refresh(self) -> bool:
        """True when the names changed since the last call (the directory was re-listed)."""
        try:
            st = os.stat(self.path)
        except OSError:
            changed = self._stamp is not None or bool(self.names)
            self._stamp, self.names = None, ()
            return changed
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if stamp == self._stamp and not self._racy:
            return False
        listed_at = self._wall()
        try:
            with os.scandir(self.path) as it:
                names = tuple(entry.name for entry in it)
        except OSError as exc:
            log.warning("cannot list %s: %s", self.path, exc.strerror or exc)
            names = ()
        self.listings += 1
        self._stamp = stamp
        self._racy = listed_at - st.st_mtime_ns / 1e9 < _RACY_SECONDS
        changed = names != self.names
        self.names = names
        return changed


class KubeletLogNames:
    """Names by container ID (link names) and by pod UID (pod directory names)."""

    def __init__(self, log_root: str = DEFAULT_LOG_ROOT, *, errors: ErrorCounter | None = None,
                 wall: Callable[[], float] = time.time):
        self._root = log_root
        self._errors = errors
        self._pods = _Listing(os.path.join(log_root, "pods"), wall)
        self._links = _Listing(os.path.join(log_root, "containers"), wall)
        self._by_uid: dict[str, PodLogDir] = {}
        self._by_id: dict[str, list[tuple[str, ContainerLogLink]]] = {}
        # Cut links by (namespace, pod), and what each one's target says (read once per link).
        self._cut: dict[tuple[str, str], list[tuple[str, CutLogLink]]] = {}
        self._cut_names: dict[str, tuple[ContainerNames, str | None] | None] = {}
        # The cut links that tell their container, by the first MIN_ID_PREFIX ID digits.
        self._cut_index: dict[str, list[tuple[ContainerNames, str]]] | None = None
        self._resolved: dict[str, ContainerNames] = {}
        self._pod_memo: dict[str, PodLogDir | None] = {}
        self._link_memo: dict[str, ContainerLogLink | CutLogLink | None] = {}
        # The last answer, while the listings stay the same: (containers asked for, names).
        self._answer: tuple[dict, dict[str, ContainerNames]] | None = None
        # Entry names in the last listings that did not parse (each counted once, when new).
        self.skipped_pod_dirs: frozenset[str] = frozenset()
        self.skipped_links: frozenset[str] = frozenset()

    def names(self, containers: Iterable[str] | Mapping[str, object]
              ) -> dict[str, ContainerNames]:
        """Names for the wanted container IDs; a mapping's values may carry ``pod_uid``."""
        changed = self._refresh()
        wanted = containers if isinstance(containers, Mapping) else dict.fromkeys(containers)
        last = self._answer
        if not changed and last is not None and last[0] == wanted:
            return dict(last[1])      # the same listings and containers: the same names
        for gone in set(self._resolved) - set(wanted):
            del self._resolved[gone]
        out: dict[str, ContainerNames] = {}
        for cid, identity in wanted.items():
            uid = getattr(identity, "pod_uid", None)
            names = self._container(cid)
            if names is None and self._cut:
                names = self._cut_container(cid, uid)
            if names is None:
                pod = self._by_uid.get(uid or "")
                if pod is not None:
                    # The pod's directory names the pod. The kubelet links every container
                    # right after creating it, before starting it; a container of a known pod
                    # without a link is the pod's sandbox (or, for the few milliseconds
                    # between create and link, a container its next tick will name) -
                    # unless a cut link of the pod may be its own.
                    names = ContainerNames(pod.name, pod.namespace, pod.uid, None,
                                           is_sandbox=not self._undecided_cut_links(pod))
            if names is not None:
                out[cid] = names
        self._answer = (dict(wanted), out)
        return dict(out)

    def _container(self, cid: str) -> ContainerNames | None:
        cached = self._resolved.get(cid)
        if cached is not None:
            return cached
        candidates = []
        for file_name, link in self._by_id.get(cid, ()):
            try:
                target = parse_link_target(
                    os.readlink(os.path.join(self._links.path, file_name)))
            except (OSError, ValueError):
                target = None      # vanished, not a link, or not a log path: the name holds
            try:
                candidates.append(names_of(link, target))
            except ValueError:
                log.debug("log link %s points at another container's log; skipped", file_name)
                self._count("container_link", {file_name})
        # Links the target confirms outrank those it does not; two different answers: none.
        confirmed = {n for n in candidates if n.pod_uid is not None}
        answers = confirmed or set(candidates)
        if len(answers) != 1:
            self._by_id.pop(cid, None)
            if len(answers) > 1:
                log.debug("container %s has %d conflicting log links; left unnamed", cid,
                          len(answers))
            return None
        names = answers.pop()
        if names.pod_uid is None:
            # names_of gives both names (the link's); only the UID may be missing.
            assert names.pod_namespace is not None and names.pod_name is not None
            pod = self._pod_named(names.pod_namespace, names.pod_name)
            if pod is not None:
                names = ContainerNames(pod.name, pod.namespace, pod.uid, names.container_name)
        self._resolved[cid] = names
        return names

    def _cut_link_names(self, file_name: str, link: CutLogLink
                        ) -> tuple[ContainerNames, str | None] | None:
        """(names, container ID prefix or None when too short to tell) one cut link gives;
        None when its target names another container. The container name comes from the
        target (its directory in the pod's log dir); without a readable target, from the one
        split of the name that leaves an ID prefix long enough to tell."""
        if file_name in self._cut_names:
            return self._cut_names[file_name]
        try:
            target = parse_link_target(os.readlink(os.path.join(self._links.path, file_name)))
        except (OSError, ValueError):
            target = None
        answer: tuple[ContainerNames, str | None] | None
        if target is not None:
            pod, container = target
            prefix = link.split(container)
            if (pod.namespace, pod.name) != (link.namespace, link.pod_name) or prefix is None:
                log.debug("cut log link %s points at another container's log; skipped",
                          file_name)
                self._count("container_link", {file_name})
                answer = None
            else:
                answer = (ContainerNames(pod.name, pod.namespace, pod.uid, container),
                          prefix if len(prefix) >= MIN_ID_PREFIX else None)
        else:
            named = self._pod_named(link.namespace, link.pod_name)
            uid = named.uid if named is not None else None
            splits = [(link.rest[:i], link.rest[i + 1:]) for i, c in enumerate(link.rest)
                      if c == "-" and _CONTAINER.fullmatch(link.rest[:i])
                      and len(link.rest) - i - 1 >= MIN_ID_PREFIX
                      and _HEX.fullmatch(link.rest[i + 1:])]
            if len(splits) == 1:
                container, prefix = splits[0]
                answer = (ContainerNames(link.pod_name, link.namespace, uid, container), prefix)
            else:
                answer = (ContainerNames(link.pod_name, link.namespace, uid, None), None)
        self._cut_names[file_name] = answer
        return answer

    def _cut_container(self, cid: str, pod_uid: str | None) -> ContainerNames | None:
        """The names of the one cut link whose ID prefix is ``cid``'s (and whose pod, where
        both are known, is the container's)."""
        if self._cut_index is None:
            index: dict[str, list[tuple[ContainerNames, str]]] = {}
            for links in self._cut.values():
                for file_name, link in links:
                    found = self._cut_link_names(file_name, link)
                    if found is not None and found[1] is not None:
                        index.setdefault(found[1][:MIN_ID_PREFIX], []).append(
                            (found[0], found[1]))
            self._cut_index = index
        answers = {names for names, prefix in self._cut_index.get(cid[:MIN_ID_PREFIX], ())
                   if cid.startswith(prefix)
                   and (pod_uid is None or names.pod_uid in (None, pod_uid))}
        if len(answers) != 1:
            return None
        names = answers.pop()
        self._resolved[cid] = names
        return names

    def _undecided_cut_links(self, pod: PodLogDir) -> bool:
        """True when a cut link of ``pod`` keeps too little of its container ID to tell which
        container it is (or its target disagrees with it): an unlinked container of the pod
        may then be that one."""
        for file_name, link in self._cut.get((pod.namespace, pod.name), ()):
            found = self._cut_link_names(file_name, link)
            if found is None or (found[1] is None and found[0].pod_uid in (None, pod.uid)):
                return True
        return False

    def _pod_named(self, namespace: str, name: str) -> PodLogDir | None:
        found = [p for p in self._by_uid.values() if (p.namespace, p.name) == (namespace, name)]
        return found[0] if len(found) == 1 else None   # two UIDs (a re-created pod): unknown

    def _refresh(self) -> bool:
        """Re-reads the listings whose directory changed; True when any names changed."""
        # Names parsed in an earlier listing are not parsed again: a re-listing after one pod
        # started costs the directory read and the new names only.
        pods_changed = self._pods.refresh()
        if pods_changed:
            self._pod_memo = _parse_all(self._pods.names, parse_pod_dir, self._pod_memo)
            skipped = frozenset(n for n, p in self._pod_memo.items() if p is None)
            self._count("pod_dir", skipped - self.skipped_pod_dirs)
            self.skipped_pod_dirs = skipped
            self._by_uid = {p.uid: p for p in self._pod_memo.values() if p is not None}
            # Names stay valid while their pod's directory does; the rest are worked out again.
            self._resolved = {cid: n for cid, n in self._resolved.items()
                              if n.pod_uid in self._by_uid}
            self._cut_names = {}       # a cut link without a target takes its UID from here
            self._cut_index = None
        links_changed = self._links.refresh()
        if links_changed:
            self._link_memo = _parse_all(self._links.names, parse_any_link, self._link_memo)
            skipped = frozenset(n for n, p in self._link_memo.items() if p is None)
            self._count("container_link", skipped - self.skipped_links)
            self.skipped_links = skipped
            by_id: dict[str, list[tuple[str, ContainerLogLink]]] = {}
            cut: dict[tuple[str, str], list[tuple[str, CutLogLink]]] = {}
            for name, link in self._link_memo.items():
                if isinstance(link, ContainerLogLink):
                    by_id.setdefault(link.container_id, []).append((name, link))
                elif link is not None:
                    cut.setdefault((link.namespace, link.pod_name), []).append((name, link))
            self._by_id = by_id
            self._cut = cut
            self._cut_names = {n: v for n, v in self._cut_names.items()
                               if n in self._link_memo}
            self._cut_index = None
            self._resolved = {cid: n for cid, n in self._resolved.items() if cid in by_id}
        return pods_changed or links_changed

    def _count(self, kind: str, new: Collection[str]) -> None:
        if not new:
            return
        log.debug("%d new entries under %s are not kubelet %s names; skipped", len(new),
                  self._root, kind.replace("_", " "))
        if self._errors is not None:
            self._errors.record("kubelet_logs", f"unparseable_{kind}", len(new))


T = TypeVar("T")


def _parse_all(names: tuple[str, ...], parse: Callable[[str], T], memo: dict[str, T | None]
               ) -> dict[str, T | None]:
    """``name -> parse(name)`` (None where it does not parse), reusing ``memo``'s answers."""
    out = {}
    for name in names:
        if name in memo:
            out[name] = memo[name]
            continue
        try:
            out[name] = parse(name)
        except ValueError:
            out[name] = None
    return out
