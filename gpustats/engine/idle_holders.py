"""Whose shares a GPU's idle is split into: one share per allocation, one per tenant seen only
through its processes.

Where an allocator names the holders (pod-resources, DRA, cgroup v1 ``devices.list``), each
allocation (a container's entry on the GPU or MIG instance) is one share. Where holding is seen
only through processes, each tenant is one share, whatever its number of containers or
processes: a pod's containers seen so split the pod's one share equally, and a pod that also
holds the same GPU (or instance) by an allocation takes its process-only containers into that
allocation's share. On a MIG GPU the shares are by instance size first
(``attribution.idle_shares``), then as above within each instance.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping

from gpustats.attribution import idle_shares
from gpustats.model.energy_keys import ContainerKey

Entry = tuple[str, int | None]          # (container or tenant key, GPU instance id)


def holder_shares(idle_joules: float, uuid: str, entries: Iterable[Entry],
                  held: Mapping[ContainerKey, str | None],
                  by_process_only: Collection[ContainerKey],
                  fractions: Mapping[int, float] | None,
                  ) -> tuple[dict[Entry, float], float]:
    """Each held entry's share of ``idle_joules`` on GPU ``uuid`` and the unallocated rest;
    ``held``: each entry's pod (None: none), by the entry's key (equal to the plain tuple
    ``("container", cid, uuid, gi)``); ``by_process_only``: the entries no allocator
    names."""
    entries = list(entries)
    seen = [e for e in entries if ("container", e[0], uuid, e[1]) in by_process_only]
    if not seen:                               # every entry an allocation: one share each
        return idle_shares(idle_joules, entries, fractions)
    seen_set = set(seen)
    allocated_by_pod: dict[tuple[str, int | None], str] = {}
    for cid, gi in sorted(e for e in entries if e not in seen_set):
        pod = held.get(("container", cid, uuid, gi))         # type: ignore[call-overload]
        if pod is not None:
            allocated_by_pod.setdefault((pod, gi), cid)
    units: dict[Entry, list[Entry]] = {}
    for cid, gi in entries:
        name = f"a:{cid}"
        if (cid, gi) in seen_set:
            pod = held.get(("container", cid, uuid, gi))     # type: ignore[call-overload]
            allocation = allocated_by_pod.get((pod, gi)) if pod is not None else None
            name = f"a:{allocation}" if allocation is not None else \
                f"p:{pod}" if pod is not None else f"t:{cid}"
        units.setdefault((name, gi), []).append((cid, gi))
    shares, unallocated = idle_shares(idle_joules, units, fractions)
    out: dict[Entry, float] = {}
    for slot, members in units.items():
        for member in members:
            out[member] = shares.get(slot, 0.0) / len(members)
    return out, unallocated
