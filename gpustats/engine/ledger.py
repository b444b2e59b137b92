"""The energy ledger: the one step of a tick that advances every energy counter.

It runs after attribution and after containers were mapped to GPUs, and is given the tick's
attributions (per GPU: device and active energy, each process's share) and who holds what
(which container each process is in, which GPUs and GPU instances each container holds, each
container's pod). From those alone it derives every level's energy of the tick, so that per GPU
and tick, by construction:

    Σ pods (+ containers in no pod) = Σ containers = Σ processes in containers
    Σ containers + unattributed = active;  Σ MIG instances = Σ processes placed on one
    Σ containers' idle shares + unallocated idle = energy − active − unobserved (its idle)

so a GPU's energy = Σ holders' (attributed + idle share) + unallocated idle + unattributed +
unobserved, the last being what its energy counter gained while the daemon did not observe it
(down between two runs, or the GPU lost): billed to no one.

Energy nobody can be billed for (active energy with no process, processes in no container,
processes NVML did not list) is counted as the GPU's *unattributed* energy, never dropped and
never given to a bystander. Where a GPU's processes are unknown, containers and pods on it get no
figure for the tick (absent), not an observed 0. Counters only ever grow (``EnergyCounters``
adds non-negative amounts only), and every owner that exists this tick is marked alive here.

Every watts figure derived from the ledger is the tick's energy over the tick's length, so the
attributed watts of a snapshot never exceed its active watts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from gpustats.attribution import instance_fractions
from gpustats.engine.counters import EnergyCounters, Owner
from gpustats.engine.idle_holders import holder_shares
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.device import DeviceReading
from gpustats.model.energy_keys import (
    ActiveKey, ContainerIdleKey, ContainerKey, DeviceKey, MigKey, PodIdleKey, PodKey, ProcessKey,
    UnallocatedIdleKey, UnattributedKey, UnobservedKey,
)


@dataclass(frozen=True)
class Holdings:
    """Who holds what this tick, as the container tracker mapped it."""

    # (GPU UUID, PID) -> the container the process runs in
    process_owner: Mapping[tuple[str, int], str] = field(default_factory=dict)
    # each container's GPU (or GPU instance) entry -> the pod it is shown under (None: no pod)
    held: Mapping[ContainerKey, str | None] = field(default_factory=dict)
    # the containers' and pods' owners to keep alive (every container and pod of the tick,
    # those of every ``held`` entry among them: the ledger marks them alive from here)
    alive: tuple[Owner, ...] = ()
    # the ``held`` entries no allocator names (seen through their processes only): each
    # tenant of those is one share of the idle (``idle_holders``), each other entry one
    by_process_only: frozenset[ContainerKey] = frozenset()


class Settled:
    """The ledger's answer for one tick: each key's energy this tick (missing: unknown this
    tick) and each GPU's tick length; totals are read from the counters it advanced."""

    __slots__ = ("counters", "tick", "dt", "_value")

    def __init__(self, counters: EnergyCounters, tick: dict[tuple, float] | None = None,
                 dt: dict[str, float] | None = None):
        self.counters = counters
        self.tick: dict[tuple, float] = {} if tick is None else tick
        self.dt: dict[str, float] = {} if dt is None else dt
        self._value = counters.value

    def total(self, key: tuple) -> float | None:
        """The counter after this tick (None: it never counted anything)."""
        return self._value(key)

    def figures(self, key: tuple, device_uuid: str) -> tuple[float | None, float | None]:
        """(watts, total) of the key: what every attributed entry of the snapshot shows."""
        joules = self.tick.get(key)
        if joules is None:
            return None, self._value(key)
        dt = self.dt.get(device_uuid)
        return (joules / dt if dt else None), self._value(key)

    def watts(self, key: tuple, device_uuid: str) -> float | None:
        """The key's energy this tick over the tick's length (None: unknown or no length)."""
        joules = self.tick.get(key)
        dt = self.dt.get(device_uuid)
        if joules is None or not dt:
            return None
        return joules / dt


class EnergyLedger:
    def __init__(self, counters: EnergyCounters, *, boot_id: str | None = None):
        self._counters = counters
        self._boot_id = boot_id

    def process_key(self, device_uuid: str, pid: int, start_time_ticks: int | None
                    ) -> ProcessKey:
        """A listed process's counter key: GPU, PID and start time, in this boot."""
        return ProcessKey(device_uuid, pid, start_time_ticks, self._boot_id)

    def settle(self, readings: Iterable[DeviceReading],
               attributions: Mapping[str, DeviceAttribution],
               starts: Mapping[tuple[str, int], int | None],
               holdings: Holdings | None = None) -> Settled:
        """Advance every counter by the tick's energies; ``starts`` gives each listed process's
        start time (its counter's key).

        The tick's energies are gathered first, then every counter is advanced in one step
        (one lock, one clock reading): a counter that exists and gains nothing is only kept.
        """
        counters = self._counters
        holdings = holdings or Holdings()
        settled = Settled(counters)
        energy = _TickEnergy(settled.tick, holdings, self.process_key)
        for reading in readings:
            uuid = reading.identity.uuid
            energy.alive.append(("gpu", uuid))
            attribution = attributions.get(uuid)
            if attribution is None:
                continue                       # lost, or its accounting failed: kept, not grown
            settled.dt[uuid] = attribution.dt_seconds
            energy.device(reading, attribution, starts)
            energy.share_idle(reading, attribution)
        energy.bill_containers_and_pods()
        energy.leave_unattributed(settled.dt)
        counters.advance_all(settled.tick.items())
        # Every owner of the tick: its containers and pods, GPUs and listed processes.
        counters.mark_alive(holdings.alive)
        counters.mark_alive(energy.alive)
        return settled


class _TickEnergy:
    """The energies of one tick as the ledger gathers them, GPU by GPU, then per container,
    pod and GPU's unattributed rest."""

    def __init__(self, tick: dict[tuple, float], holdings: Holdings,
                 process_key: Callable[[str, int, int | None], ProcessKey]):
        self.tick = tick
        self._process_key = process_key
        self.alive: list[Owner] = []
        self._owner_of = holdings.process_owner
        self._held = holdings.held
        self._by_process_only = holdings.by_process_only
        self._holders: dict[str, list[tuple[str, int | None]]] | None = None
        # Each container entry's energy this tick (looked up by the plain tuple, equal to the
        # typed key ``held`` is keyed by), and the GPUs whose processes are all known.
        self._containers: dict[tuple, float] = {}
        self._accounted: set[str] = set()
        self._billed: dict[str, float] = {}         # per GPU: what its containers are billed

    def device(self, reading: DeviceReading, attribution: DeviceAttribution,
               starts: Mapping[tuple[str, int], int | None]) -> None:
        """One GPU's device, active, process and MIG instance energies."""
        tick, uuid = self.tick, reading.identity.uuid
        if attribution.device_energy_joules is not None:
            tick[DeviceKey(uuid)] = attribution.device_energy_joules
            # What the counter gained beyond the tick: the energy of a gap no one observed.
            tick[UnobservedKey(uuid)] = max(0.0, attribution.device_energy_joules
                                            - (attribution.tick_energy_joules or 0.0))
        active = attribution.tick_active_energy_joules
        if active is not None:
            tick[ActiveKey(uuid)] = active
        known = active is not None and attribution.processes_known
        if known:
            self._accounted.add(uuid)
        mig = self._processes(reading, _shares(attribution), starts)
        if known:
            for inst in reading.mig_instances:          # their owner is the GPU, alive
                tick[MigKey(uuid, inst.gpu_instance_id)] = mig.get(inst.gpu_instance_id, 0.0)

    def _processes(self, reading: DeviceReading, shares: dict[tuple[int, int | None], float],
                   starts: Mapping[tuple[str, int], int | None]) -> dict[int, float]:
        """Each listed process's energy (once per process and GPU instance), billed to its
        container; returns each GPU instance's sum."""
        tick, uuid = self.tick, reading.identity.uuid
        mig: dict[int, float] = {}
        seen: set[tuple[int, int | None]] = set()
        for p in reading.processes:
            pid, gi = p.pid, p.gpu_instance_id
            slot = (pid, gi)
            if slot in seen:
                continue
            seen.add(slot)
            key = self._process_key(uuid, pid, starts.get((uuid, pid)))
            self.alive.append(key)
            joules = shares.get(slot)
            if joules is None:
                continue
            tick[key] = tick.get(key, 0.0) + joules
            if gi is not None:
                mig[gi] = mig.get(gi, 0.0) + joules
            self._bill(uuid, pid, gi, joules)
        return mig

    def _bill(self, uuid: str, pid: int, gi: int | None, joules: float) -> None:
        """Each process is billed once, to one entry of its container: the GPU instance it
        runs on where the container holds that instance, else the whole GPU; neither held:
        unattributed."""
        cid = self._owner_of.get((uuid, pid))
        if cid is None:
            return
        held = self._held
        entry = ("container", cid, uuid, gi)
        if gi is not None and entry not in held:
            entry = ("container", cid, uuid, None)
        if entry in held:
            self._containers[entry] = self._containers.get(entry, 0.0) + joules

    def share_idle(self, reading: DeviceReading, attribution: DeviceAttribution) -> None:
        """The GPU's idle energy of the tick (its energy above none of its active), split
        among the tenants holding it (one share per allocation, or per tenant seen through
        its processes only; by instance size on a MIG GPU), each pod the sum of its
        containers'; what no one holds is the GPU's unallocated idle. Absent
        while the GPU has no idle known (all of its energy is active then)."""
        total, active = attribution.tick_energy_joules, attribution.tick_active_energy_joules
        if total is None or active is None or attribution.idle_power_watts is None:
            return
        uuid, tick = reading.identity.uuid, self.tick
        holders = self._holders_by_gpu().get(uuid, ())
        fractions = instance_fractions(reading.identity.memory_total_bytes,
                                       reading.mig_instances) if reading.mig_enabled else None
        shares, unallocated = holder_shares(max(0.0, total - active), uuid, holders, self._held,
                                            self._by_process_only, fractions)
        pods: dict[str, float] = {}
        for (cid, gi), joules in shares.items():
            tick[ContainerIdleKey(cid, uuid, gi)] = joules
            pod = self._held.get(ContainerKey(cid, uuid, gi))
            if pod is not None:
                pods[pod] = pods.get(pod, 0.0) + joules
        for pod, joules in pods.items():
            tick[PodIdleKey(pod, uuid)] = joules
        tick[UnallocatedIdleKey(uuid)] = unallocated

    def _holders_by_gpu(self) -> dict[str, list[tuple[str, int | None]]]:
        """(container, GPU instance) of each held entry, by GPU: grouped once a tick."""
        if self._holders is None:
            self._holders = {}
            for key in self._held:
                self._holders.setdefault(key[2], []).append((key[1], key[3]))
        return self._holders

    def bill_containers_and_pods(self) -> None:
        """Each held entry's energy on a GPU whose processes are known (else absent, its
        total kept), and each pod's sum of them."""
        tick, containers, accounted = self.tick, self._containers, self._accounted
        pods: dict[tuple[str, str], float] = {}
        for key, pod in self._held.items():
            uuid = key[2]
            if uuid not in accounted:
                continue
            joules = tick[key] = containers.get(key, 0.0)
            self._billed[uuid] = self._billed.get(uuid, 0.0) + joules
            if pod is not None:
                slot = (pod, uuid)
                pods[slot] = pods.get(slot, 0.0) + joules
        for (pod, uuid), joules in pods.items():
            tick[PodKey(pod, uuid)] = joules

    def leave_unattributed(self, dts: Mapping[str, float]) -> None:
        """Whatever no container is billed for (all of it when the processes are unknown)."""
        tick = self.tick
        for uuid in dts:
            active = tick.get(ActiveKey(uuid))
            if active is None:
                continue
            left = max(0.0, active - self._billed.get(uuid, 0.0)) \
                if uuid in self._accounted else active
            tick[UnattributedKey(uuid)] = left


def _shares(attribution: DeviceAttribution) -> dict[tuple[int, int | None], float]:
    """Each (PID, GPU instance)'s energy in the attribution, summed."""
    shares: dict[tuple[int, int | None], float] = {}
    for share in attribution.processes:
        if share.energy_joules is not None:
            slot = (share.pid, share.gpu_instance_id)
            shares[slot] = shares.get(slot, 0.0) + share.energy_joules
    return shares
