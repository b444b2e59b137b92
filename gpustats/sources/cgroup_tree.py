"""The container and pod cgroups of each hierarchy, kept between ticks and looked at again
only where inotify says a directory came or went.

The trees are walked in full at the start, when the hierarchies change, when the kernel's
event queue overflowed, and at every update while inotify is unavailable. Otherwise a
directory made is walked with what is below it, and one removed is dropped with what was
below it: a subtree where cgroups churn costs its own size a tick, not the whole tree's.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Iterable, Iterator

from gpustats.dir_changes import DirectoryChanges
from gpustats.sources.cgroup_paths import CgroupPathInfo, may_hold_node_cgroups, parse_cgroup_path

MAX_DEPTH = 12
# The most container and pod cgroups kept per hierarchy. Only root makes cgroups where they
# are looked for (the kubelet's tree, the runtimes' parents); past this many, the rest are
# left out and the source says so (``over_cap``), so a runaway runtime costs bounded memory.
MAX_FOUND = 10_000

ListDirs = Callable[[str], "list[str] | None"]


def list_subdirs(directory: str) -> list[str] | None:
    """Names of the subdirectories (symlinks not followed); ``None`` when it cannot be listed
    (it vanished between listing its parent and reading it, or is unreadable)."""
    try:
        with os.scandir(directory) as it:
            return [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except OSError:
        return None


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


class _Hierarchy:
    """One hierarchy's directories as last seen. Paths are relative to its root: ``""`` is
    the root, ``"/a/b"`` below it."""

    __slots__ = ("controller", "root", "listed", "found")

    def __init__(self, controller: str, root: str):
        self.controller = controller
        self.root = root
        # Each directory listed (descended into) → its watch and its subdirectories' names.
        self.listed: dict[str, tuple[int | None, tuple[str, ...]]] = {}
        # Each container's or pod's own cgroup → what its path says (not descended below a
        # container: what is below it belongs to it).
        self.found: dict[str, CgroupPathInfo] = {}


class CgroupTree:
    """Container and pod cgroups of the hierarchies handed to ``reset``, kept up to date by
    ``update``. ``list_dirs`` lists a directory's subdirectories (injectable: tests count
    what is listed)."""

    def __init__(self, changes: DirectoryChanges, list_dirs: ListDirs = list_subdirs,
                 max_found: int = MAX_FOUND, kubelet_parent: str = ""):
        self._changes = changes
        self._kubelet_parent = kubelet_parent
        self.max_found = max_found
        self.over_cap = False                 # a container or pod cgroup was left out
        self._list = list_dirs
        self._hierarchies: list[_Hierarchy] = []
        # Watch → the directories it watches (one, but for hierarchies mounted together).
        self._at_watch: dict[int, tuple[tuple[_Hierarchy, str], ...]] = {}
        self._stale = True
        # A directory that is there but could not be listed (EMFILE, EACCES...): no event will
        # come for what is below it, so the next update walks everything again.
        self._unlisted = False
        self._found_changed = False

    def reset(self, hierarchies: Iterable[tuple[str, str]]) -> None:
        """Hierarchies as (controller, root directory); the next update walks them in full."""
        self._hierarchies = [_Hierarchy(controller, root) for controller, root in hierarchies]
        self._stale = True

    def update(self) -> bool:
        """Brings the tree up to date; True when a container or pod cgroup may have come or
        gone (directories that name neither can churn without changing what is found)."""
        events = self._changes.events()
        if events is None or self._stale or self._unlisted:
            self._walk_all()
            return True
        dirty: dict[_Hierarchy, set[str]] = {}
        for event in events:
            for hierarchy, rel in self._at_watch.get(event.watch, ()):
                dirty.setdefault(hierarchy, set()).add(f"{rel}/{event.name}")
        if not dirty:
            return False
        if self.over_cap:                      # what was left out may fit now
            self._walk_all()
            return True
        self._found_changed = False
        dropped: set[int] = set()
        for hierarchy, paths in dirty.items():
            for rel in sorted(paths):
                if not _below_any(rel, paths):
                    self._look_again(hierarchy, rel, dropped)
        self._unwatch(dropped)
        return self._found_changed

    def found(self) -> Iterator[tuple[str, str, CgroupPathInfo]]:
        """(controller, path, what it says) of every container and pod cgroup, hierarchy by
        hierarchy."""
        for hierarchy in self._hierarchies:
            for rel, info in hierarchy.found.items():
                yield hierarchy.controller, rel, info

    def groups(self) -> set[str]:
        """The paths of every container and pod cgroup, whatever the hierarchy."""
        return {rel for hierarchy in self._hierarchies for rel in hierarchy.found}

    # ------------------------------------------------------------------ walking

    def _walk_all(self) -> None:
        before = set(self._at_watch)
        self._at_watch = {}
        self._unlisted = False
        self.over_cap = False
        for hierarchy in self._hierarchies:
            hierarchy.listed.clear()
            hierarchy.found.clear()
            self._walk(hierarchy, "")
        self._stale = False
        self._unwatch(before)

    def _walk(self, hierarchy: _Hierarchy, start: str) -> None:
        """Lists ``start`` and what is below it, watching each directory before listing it
        (so nothing made in between goes unseen)."""
        stack = [start]
        while stack:
            rel = stack.pop()
            directory = hierarchy.root + rel
            wd = self._changes.watch(directory)
            names = self._list(directory)
            if names is None:
                if _is_dir(directory):
                    self._unlisted = True     # there, but not listed: walk again next time
                continue        # gone: its parent's watch says so
            hierarchy.listed[rel] = (wd, tuple(names))       # most are leaves: () is shared
            if wd is not None:
                self._at_watch[wd] = self._at_watch.get(wd, ()) + ((hierarchy, rel),)
            depth = rel.count("/") + 1
            for name in names:
                child = f"{rel}/{name}"
                if self._classify(hierarchy, child) and depth < MAX_DEPTH:
                    stack.append(child)

    def _classify(self, hierarchy: _Hierarchy, rel: str) -> bool:
        """Records a container or pod cgroup; whether to descend into ``rel`` (only where
        one may be found below)."""
        info = parse_cgroup_path(rel, self._kubelet_parent)
        if info is None:
            return may_hold_node_cgroups(rel, self._kubelet_parent)
        if info.container_id is not None:
            self._record(hierarchy, rel, info)
            return False
        if info.pod_uid is not None and info.pod_path == rel:
            self._record(hierarchy, rel, info)
        return True

    def _record(self, hierarchy: _Hierarchy, rel: str, info: CgroupPathInfo) -> None:
        if len(hierarchy.found) >= self.max_found:
            self.over_cap = True
            return
        hierarchy.found[rel] = info
        self._found_changed = True

    def _look_again(self, hierarchy: _Hierarchy, rel: str, dropped: set[int]) -> None:
        """``rel`` came, went or was renamed: what was known of it is dropped, and what is
        there now walked."""
        parent, _, name = rel.rpartition("/")
        listed = hierarchy.listed.get(parent)
        if listed is None:
            return                 # its parent went too (or was never descended into)
        self._drop(hierarchy, rel, dropped)
        wd, names = listed
        names = tuple(n for n in names if n != name)
        there = _is_dir(hierarchy.root + rel)
        hierarchy.listed[parent] = (wd, names + (name,) if there else names)
        if not there:
            return
        if self._classify(hierarchy, rel) and rel.count("/") < MAX_DEPTH:
            self._walk(hierarchy, rel)

    def _drop(self, hierarchy: _Hierarchy, start: str, dropped: set[int]) -> None:
        stack = [start]
        while stack:
            rel = stack.pop()
            if hierarchy.found.pop(rel, None) is not None:
                self._found_changed = True
            listed = hierarchy.listed.pop(rel, None)
            if listed is None:
                continue
            wd, names = listed
            if wd is not None:
                places = tuple(p for p in self._at_watch.get(wd, ())
                               if p != (hierarchy, rel))
                if places:
                    self._at_watch[wd] = places
                else:
                    self._at_watch.pop(wd, None)
                dropped.add(wd)
            stack.extend(f"{rel}/{n}" for n in names)

    def _unwatch(self, watches: set[int]) -> None:
        """Stops the watches no directory of ours holds any more (a directory renamed out of
        sight; one removed took its watch with it)."""
        for wd in watches:
            if wd not in self._at_watch:
                self._changes.unwatch(wd)


def _below_any(rel: str, paths: set[str]) -> bool:
    """Whether an ancestor of ``rel`` is among ``paths`` (looking at it covers ``rel``)."""
    parent = rel.rpartition("/")[0]
    while parent:
        if parent in paths:
            return True
        parent = parent.rpartition("/")[0]
    return False
