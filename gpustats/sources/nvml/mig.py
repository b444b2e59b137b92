"""MIG instances of one GPU: the layout (which instances exist) and each tick's readings.

The sweep reads the layout when MIG mode turns on, on a MIG configuration change event, at a
bounded cadence, and when a process names a GPU instance the layout lacks or an instance's
memory read fails (see ``sweep.py``). A re-read asks, per MIG device index, for its handle,
UUID and name (which carries the profile): 1 call, then 3 per instance and 1 per empty index,
22 calls on a GPU with 7 instances. An instance whose UUID and name are already known keeps
what was read of it; a new one costs 2 calls more (its GPU and compute instance ids). Each
tick every instance's memory is read, idle ones too (1 call per instance: 56 per tick at
8 GPUs x 7 instances), and where GPM is supported every instance is sampled: an instance with
processes costs a sample and a metrics read, an idle one a sample only (1 call per idle instance
and tick), so the first tick of a new tenant on an instance the layout already has pairs with a
sample one tick old and its activity is known; an instance created with its tenant still has
no sample before its first busy tick (the layout learns of it then), and is assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import pynvml

from gpustats.model.device import MigInstanceReading, ProcessReading
from gpustats.sources.nvml.gpm import GpmSampler
from gpustats.sources.nvml.query import NOT_FOUND, Querier

_MIG_PROFILE = re.compile(r"MIG\s+(\S+)$")


def parse_mig_profile(device_name: str | None) -> str | None:
    """``"NVIDIA H100 80GB HBM3 MIG 1g.10gb"`` → ``"1g.10gb"``."""
    if not device_name:
        return None
    match = _MIG_PROFILE.search(device_name)
    return match.group(1) if match else None


@dataclass
class MigInstance:
    """One MIG device as the layout read found it; ``memory_total_bytes`` is the last read."""

    handle: Any
    gpu_instance_id: int
    compute_instance_id: int | None
    uuid: str | None
    name: str | None                     # the MIG device's name, ending in its profile
    profile: str | None
    memory_total_bytes: int | None = None

    @property
    def label(self) -> str:
        return f"{self.gpu_instance_id}:{self.profile or '?'}"


def read_layout(q: Querier, uuid: str, handle: Any,
                known: list[MigInstance]) -> list[MigInstance]:
    """The GPU's MIG devices now; one whose UUID and name are in ``known`` is taken from it (with
    the handle just given, as a handle names an index, not an instance)."""
    count = q.read(uuid, "mig_device_count", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    by_identity = {(m.uuid, m.name): m for m in known if m.uuid is not None}
    instances = []
    for index in range(count):
        mh = q.read(uuid, "mig_handle", pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle,
                    index, not_found=NOT_FOUND)
        if mh is None or mh is NOT_FOUND:
            continue
        mig_uuid = q.read(uuid, "mig_uuid", pynvml.nvmlDeviceGetUUID, mh)
        name = q.read(uuid, "mig_name", pynvml.nvmlDeviceGetName, mh)
        seen = by_identity.get((mig_uuid, name)) if mig_uuid is not None else None
        if seen is not None:
            instances.append(replace(seen, handle=mh))
            continue
        gi = q.read(uuid, "mig_gpu_instance_id", pynvml.nvmlDeviceGetGpuInstanceId, mh)
        if gi is None:
            continue
        ci = q.read(uuid, "mig_compute_instance_id", pynvml.nvmlDeviceGetComputeInstanceId, mh)
        instances.append(MigInstance(handle=mh, gpu_instance_id=int(gi),
                                     compute_instance_id=int(ci) if ci is not None else None,
                                     uuid=mig_uuid, name=name,
                                     profile=parse_mig_profile(name)))
    return instances


def layout_change(before: list[MigInstance],
                  after: list[MigInstance]) -> tuple[list[MigInstance], list[MigInstance]]:
    """(destroyed, created): instances of ``before`` not in ``after`` and the reverse, an
    instance being its GPU instance id, UUID and name."""
    def key(m: MigInstance) -> tuple[object, ...]:
        return (m.gpu_instance_id, m.uuid, m.name)
    kept_before, kept_after = {key(m) for m in before}, {key(m) for m in after}
    return ([m for m in before if key(m) not in kept_after],
            [m for m in after if key(m) not in kept_before])


def mig_readings(q: Querier, gpm: GpmSampler, uuid: str, handle: Any,
                 instances: list[MigInstance],
                 processes: tuple[ProcessReading, ...]) -> tuple[MigInstanceReading, ...]:
    """Per instance: its processes (from the parent's list), memory (every instance, idle ones
    too) and, for busy ones, GPM (idle ones are only sampled)."""
    by_instance: dict[int, list[ProcessReading]] = {}
    for p in processes:
        if p.gpu_instance_id is not None:
            by_instance.setdefault(p.gpu_instance_id, []).append(p)
    readings = []
    for inst in instances:
        procs = tuple(by_instance.get(inst.gpu_instance_id, ()))
        memory = q.read(uuid, "mig_memory", pynvml.nvmlDeviceGetMemoryInfo, inst.handle)
        if memory is not None:
            inst.memory_total_bytes = int(memory.total)
        readings.append(MigInstanceReading(
            gpu_instance_id=inst.gpu_instance_id,
            compute_instance_id=inst.compute_instance_id,
            uuid=inst.uuid, profile=inst.profile,
            memory_total_bytes=inst.memory_total_bytes,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            processes=procs,
            gpm=gpm.mig_instance(uuid, handle, inst.gpu_instance_id, busy=bool(procs)),
        ))
    return tuple(readings)
