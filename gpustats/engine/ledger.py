"""The energy ledger: the one step of a tick that advances every energy counter.

It runs after attribution and after containers were mapped to GPUs, and is given the tick's
attributions (per GPU: device and active energy, each process's share) and who holds what
(which container each process is in, which GPUs and GPU instances each container holds, each
container's pod). From those alone it derives every level's energy of the tick, so that per GPU
and tick, by construction:

    Σ pods (+ containers in no pod) = Σ containers = Σ processes in containers
    Σ containers + unattributed = active;  Σ MIG instances = Σ processes placed on one

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
from typing import Iterable, Mapping

from gpustats.engine.counters import EnergyCounters, Owner
from gpustats.model.attribution import DeviceAttribution
from gpustats.model.device import DeviceReading
from gpustats.model.energy_keys import (
    ActiveKey, ContainerKey, DeviceKey, MigKey, PodKey, ProcessKey, UnattributedKey,
)


@dataclass(frozen=True)
class Holdings:
    """Who holds what this tick, as the container tracker mapped it."""

    # (GPU UUID, PID) -> the container the process runs in
    process_owner: Mapping[tuple[str, int], str] = field(default_factory=dict)
    # each container's GPU (or GPU instance) entry -> the pod it is shown under (None: no pod)
    held: Mapping[ContainerKey, str | None] = field(default_factory=dict)
    # the containers' and pods' owners to keep alive (every container and pod of the tick)
    alive: tuple[Owner, ...] = ()


@dataclass
class Settled:
    """The ledger's answer for one tick: each key's energy this tick (missing: unknown this
    tick) and each GPU's tick length; totals are read from the counters it advanced."""

    counters: EnergyCounters
    tick: dict[tuple, float] = field(default_factory=dict)
    dt: dict[str, float] = field(default_factory=dict)
    totals: dict[tuple, float] = field(default_factory=dict)

    def total(self, key: tuple) -> float | None:
        """The counter after this tick (None: it never counted anything)."""
        found = self.totals.get(key)
        return found if found is not None else self.counters.value(key)

    def figures(self, key: tuple, device_uuid: str) -> tuple[float | None, float | None]:
        """(watts, total) of the key: what every attributed entry of the snapshot shows."""
        total = self.totals.get(key)
        if total is None:
            return None, self.counters.value(key)
        joules = self.tick.get(key)
        dt = self.dt.get(device_uuid)
        return (joules / dt if joules is not None and dt else None), total

    def watts(self, key: tuple, device_uuid: str) -> float | None:
        """The key's energy this tick over the tick's length (None: unknown or no length)."""
        joules = self.tick.get(key)
        dt = self.dt.get(device_uuid)
        if joules is None or not dt:
            return None
        return joules / dt


class EnergyLedger:
    def __init__(self, counters: EnergyCounters):
        self._counters = counters

    def settle(self, readings: Iterable[DeviceReading],
               attributions: Mapping[str, DeviceAttribution],
               starts: Mapping[tuple[str, int], int | None],
               holdings: Holdings | None = None) -> Settled:
        """Advance every counter by the tick's energies; ``starts`` gives each listed process's
        start time (its counter's key)."""
        counters = self._counters
        holdings = holdings or Holdings()
        settled = Settled(counters)
        tick, totals = settled.tick, settled.totals
        alive: list[Owner] = list(holdings.alive)
        # (container ID, GPU UUID) -> [(GPU instance id, joules)] of its processes this tick
        owned: dict[tuple[str, str], list[tuple[int | None, float]]] = {}
        accounted: set[str] = set()
        owner_of = holdings.process_owner
        advance = counters.advance
        for reading in readings:
            uuid = reading.identity.uuid
            alive.append(("gpu", uuid))
            attribution = attributions.get(uuid)
            if attribution is None:
                continue                       # lost, or its accounting failed: kept, not grown
            settled.dt[uuid] = attribution.dt_seconds
            if attribution.device_energy_joules is not None:
                key = DeviceKey(uuid)
                totals[key] = advance(key, attribution.device_energy_joules)
            active = attribution.tick_active_energy_joules
            if active is not None:
                key = ActiveKey(uuid)
                totals[key] = advance(key, active)
                tick[key] = active
            known = active is not None and attribution.processes_known
            if known:
                accounted.add(uuid)
            shares: dict[tuple[int, int | None], float] = {}
            for share in attribution.processes:
                if share.energy_joules is not None:
                    slot = (share.pid, share.gpu_instance_id)
                    shares[slot] = shares.get(slot, 0.0) + share.energy_joules
            mig: dict[int, float] = {}
            seen: set[tuple[int, int | None]] = set()
            for p in reading.processes:
                pid, gi = p.pid, p.gpu_instance_id
                slot = (pid, gi)
                if slot in seen:
                    continue
                seen.add(slot)
                process = (uuid, pid)
                key = ProcessKey(uuid, pid, starts.get(process))
                joules = shares.get(slot)
                if joules is None:
                    alive.append(key)
                    continue
                totals[key] = advance(key, joules)
                tick[key] = tick.get(key, 0.0) + joules
                if gi is not None:
                    mig[gi] = mig.get(gi, 0.0) + joules
                cid = owner_of.get(process)
                if cid is not None:
                    owned.setdefault((cid, uuid), []).append((gi, joules))
            if known:
                for inst in reading.mig_instances:
                    key = MigKey(uuid, inst.gpu_instance_id)
                    joules = mig.get(inst.gpu_instance_id, 0.0)
                    totals[key] = self._grow(key, joules)      # its owner is the GPU, alive
                    tick[key] = joules
        # Each process is billed once, to one entry of its container: the GPU instance it
        # runs on where the container holds that instance, else the whole GPU.
        held = holdings.held
        containers: dict[ContainerKey, float] = {}
        for (cid, uuid), shares in owned.items():
            for gi, joules in shares:
                key = ContainerKey(cid, uuid, gi) if gi is not None else None
                if key is None or key not in held:
                    key = ContainerKey(cid, uuid, None)
                    if key not in held:
                        continue              # no entry of the container: unattributed
                containers[key] = containers.get(key, 0.0) + joules
        billed: dict[str, float] = {}
        pods: dict[PodKey, float] = {}
        for key, pod in held.items():
            uuid = key[2]
            if uuid not in accounted:
                continue                      # unknown this tick: absent, its total kept
            joules = containers.get(key, 0.0)
            totals[key] = self._grow(key, joules)
            tick[key] = joules
            billed[uuid] = billed.get(uuid, 0.0) + joules
            if pod is not None:
                pod_key = PodKey(pod, uuid)
                pods[pod_key] = pods.get(pod_key, 0.0) + joules
        for key, joules in pods.items():
            totals[key] = self._grow(key, joules)
            tick[key] = joules
        for uuid in settled.dt:
            active = tick.get(ActiveKey(uuid))
            if active is None:
                continue
            # Whatever no container is billed for (all of it when the processes are unknown).
            left = max(0.0, active - billed.get(uuid, 0.0)) if uuid in accounted else active
            key = UnattributedKey(uuid)
            totals[key] = self._grow(key, left)
            tick[key] = left
        counters.mark_alive(alive)
        return settled

    def _grow(self, key: tuple, joules: float) -> float:
        """A counter after this tick. One that exists and gains nothing is only read (its owner
        is marked alive at the end of the step, with every owner of the tick)."""
        if not joules:
            total = self._counters.value(key)
            if total is not None:
                return total
        return self._counters.advance(key, joules)
