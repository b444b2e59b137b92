"""Whose a DRM client is when more than one process holds it.

A dup'ed, inherited or passed fd shows the same client (the same ``drm-client-id``) in every
process that holds it, and its engine time cannot be split by process: the kernel counts it
per open file. Passing a client over a unix socket to another tenant's process must not bill
that tenant, so the owner is decided in this order:

1. The kernel's clients list (``debugfs.py``) where it prints client IDs: the tgid it lists
   with the client's ID, if that process holds it. The DRM core moves that tgid to the process
   that last used the file (drm_file.c ``drm_file_update_pid``): the one submitting its work.
2. Every holder in the same cgroup (one tenant's processes: a fork inheriting its parent's
   fd): the lowest PID among them.
3. Otherwise the client has no owner: its engine time is the device's, unattributed, and its
   energy billed to no one rather than to a bystander.
"""

from __future__ import annotations

from typing import Callable, Mapping

from gpustats.sources.drm.fd_walk import Listed
from gpustats.sources.drm.fdinfo import DrmFdinfo

Held = tuple[int, "int | None", DrmFdinfo]          # (pid, node minor, its fdinfo)


def owners_of(holders: Mapping[tuple[object, ...], list[Held]],
              listed: Mapping[int, Listed] | None,
              cgroup_of: Callable[[int], str | None]) -> dict[tuple[object, ...], int]:
    """The owner PID of each client (by key) that has one."""
    listed_by_id: dict[int, set[int]] = {}
    for tgid, entries in (listed or {}).items():
        for _, client_id in entries:
            if client_id is not None:
                listed_by_id.setdefault(client_id, set()).add(tgid)
    owners = {}
    for key, held in holders.items():
        pids = sorted({pid for pid, _, _ in held})
        if len(pids) == 1:
            owners[key] = pids[0]
            continue
        owner = _owner(pids, held[0][2].client_id, listed_by_id, cgroup_of)
        if owner is not None:
            owners[key] = owner
    return owners


def _owner(pids: list[int], client_id: int | None, listed_by_id: Mapping[int, set[int]],
           cgroup_of: Callable[[int], str | None]) -> int | None:
    named = listed_by_id.get(client_id, set()) & set(pids) if client_id is not None else set()
    if len(named) == 1:
        return next(iter(named))
    cgroups = {cgroup_of(pid) for pid in pids}
    if len(cgroups) == 1 and None not in cgroups:
        return pids[0]
    return None
