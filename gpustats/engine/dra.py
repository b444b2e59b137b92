"""DRA claim devices → the GPUs (or MIG instances) they are, from the node alone.

Each claim device names CDI devices; their spec gives device nodes: ``/dev/nvidia<minor>`` is
the GPU with that NVML minor, and MIG capability nodes name a MIG instance through the minors
procfs lists. An ``NVIDIA_VISIBLE_DEVICES`` edit naming UUIDs counts too. No Kubernetes API.

Claims of NVIDIA's GPU driver that cannot be resolved are reported with a reason (one log
line each); claims of other drivers count only when their CDI nodes are NVIDIA GPU nodes.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping, Protocol

from gpustats.model.device import DeviceReading
from gpustats.model.dra import (
    UNRESOLVED_GPU_NOT_FOUND, UNRESOLVED_MIG_UNKNOWN, UNRESOLVED_NO_CDI_DEVICE,
    UNRESOLVED_NO_NVIDIA_NODE, UNRESOLVED_SPEC_NOT_FOUND, CdiDeviceNodes, ClaimDevice,
    MigCapability,
)

log = logging.getLogger(__name__)

GpuKey = tuple[str, int | None]          # (physical GPU UUID, GPU instance id or None)

# NVIDIA's DRA driver for GPUs (and its name before Kubernetes 1.31's structured parameters).
NVIDIA_GPU_DRIVERS = frozenset({"gpu.nvidia.com", "gpu.resource.nvidia.com"})
# Failures that say nothing about a foreign driver's devices being GPUs.
_NOT_OURS = frozenset({UNRESOLVED_NO_CDI_DEVICE, UNRESOLVED_SPEC_NOT_FOUND,
                       UNRESOLVED_NO_NVIDIA_NODE})


class CdiSource(Protocol):
    generation: int                       # changes whenever the set of CDI devices does

    def refresh(self) -> None: ...

    def lookup(self, name: str) -> CdiDeviceNodes | None: ...


class MigCapabilitySource(Protocol):
    def lookup(self, minor: int) -> MigCapability | None: ...


class GpuLookups(Protocol):
    """This tick's GPUs, as the container tracker indexes them."""

    by_minor: Mapping[int, str]
    by_uuid: Mapping[str, DeviceReading]
    mig_by_uuid: Mapping[str, GpuKey]


class ClaimResolver:
    """``begin_tick()`` once per tick that has claims, then ``resolve`` each claim device.

    Answers are kept while the CDI devices and this node's GPUs stay the same (a tick costs a
    dictionary look-up per claim); unresolved claims are worked out again every tick.
    """

    def __init__(self, specs: CdiSource, capabilities: MigCapabilitySource):
        self._specs = specs
        self._caps = capabilities
        self._logged: set[tuple[str, str, str]] = set()
        self._seen: set[tuple[str, str, str]] = set()
        self._answers: dict[ClaimDevice, tuple[GpuKey, ...]] = {}
        # The same answers by claim object: the kubelet's listing is kept between its calls,
        # so each tick hands the same objects (a look-up without hashing seven fields).
        self._answers_by_id: dict[int, tuple[ClaimDevice, tuple[GpuKey, ...]]] = {}
        self._valid_for: tuple[object, ...] | None = None
        self._devices: GpuLookups | None = None

    @property
    def generation(self) -> int:
        """Changes whenever the CDI devices do (as of the last ``begin_tick``)."""
        return self._specs.generation

    def begin_tick(self) -> None:
        self._specs.refresh()
        # Forget log keys of claims no longer listed, so a claim that comes back logs again.
        self._logged &= self._seen
        self._seen = set()

    def resolve(self, claim: ClaimDevice,
                devices: GpuLookups) -> tuple[tuple[GpuKey, ...], str | None]:
        """(GPU keys, None) when resolved; ((), reason) when not; ((), None) when not a GPU."""
        if devices is not self._devices:
            self._devices = devices
            valid_for = (self._specs.generation, _signature(devices))
            if valid_for != self._valid_for:
                self._valid_for = valid_for
                self._forget_answers()
        elif self._valid_for is not None and self._valid_for[0] != self._specs.generation:
            self._valid_for = (self._specs.generation, self._valid_for[1])
            self._forget_answers()
        same = self._answers_by_id.get(id(claim))
        if same is not None and same[0] is claim:
            return same[1], None
        known = self._answers.get(claim)
        if known is None:
            known, reason = self._work_out(claim, devices)
            if reason is not None:
                return known, reason
            if len(self._answers) > 65536:
                self._forget_answers()
            self._answers[claim] = known
        if len(self._answers_by_id) > 2 * len(self._answers) + 1024:
            self._answers_by_id = {}      # mostly objects of listings since replaced
        self._answers_by_id[id(claim)] = (claim, known)
        return known, None

    def _forget_answers(self) -> None:
        self._answers = {}
        self._answers_by_id = {}

    def _work_out(self, claim: ClaimDevice,
                  devices: GpuLookups) -> tuple[tuple[GpuKey, ...], str | None]:
        ours = claim.driver_name in NVIDIA_GPU_DRIVERS
        keys: dict[GpuKey, None] = {}
        reasons = []
        for name in claim.cdi_devices or ():
            nodes = self._specs.lookup(name)
            if nodes is None:
                reasons.append(UNRESOLVED_SPEC_NOT_FOUND)
                continue
            found, reason = self._keys(nodes, devices)
            keys.update(dict.fromkeys(found))
            if reason is not None:
                reasons.append(reason)
        if keys:
            return tuple(keys), None
        reason = reasons[0] if reasons else UNRESOLVED_NO_CDI_DEVICE
        if not ours and all(r in _NOT_OURS for r in reasons or (reason,)):
            return (), None
        self._report(claim, reason)
        return (), reason

    def _keys(self, nodes: CdiDeviceNodes,
              devices: GpuLookups) -> tuple[list[GpuKey], str | None]:
        mig: list[GpuKey] = []
        unknown_caps, missing = False, False
        for minor in nodes.capability_minors:
            cap = self._caps.lookup(minor)
            if cap is None:
                unknown_caps = True
                continue
            uuid = devices.by_minor.get(cap.gpu_minor)
            if uuid is None:
                missing = True
            else:
                mig.append((uuid, cap.gpu_instance_id))
        if mig:
            return mig, None
        by_uuid = _from_uuids(nodes.visible_device_uuids, devices)
        if by_uuid:
            return by_uuid, None
        full: list[GpuKey] = []
        for minor in nodes.gpu_minors:
            uuid = devices.by_minor.get(minor)
            if uuid is None:
                missing = True
                continue
            reading = devices.by_uuid.get(uuid)
            if unknown_caps and reading is not None and reading.mig_instances:
                return [], UNRESOLVED_MIG_UNKNOWN      # a MIG device whose instance is unknown
            full.append((uuid, None))
        if full:
            return full, None
        if missing or nodes.visible_device_uuids:
            return [], UNRESOLVED_GPU_NOT_FOUND
        if unknown_caps:
            return [], UNRESOLVED_MIG_UNKNOWN
        return [], UNRESOLVED_NO_NVIDIA_NODE

    def _report(self, claim: ClaimDevice, reason: str) -> None:
        key = (claim.claim_namespace, claim.claim_name, f"{claim.device_name}:{reason}")
        self._seen.add(key)
        if key in self._logged:
            return
        self._logged.add(key)
        # A spec missing for a listed claim is mostly the unprepare race: worth a line, no more.
        level = logging.INFO if reason == UNRESOLVED_SPEC_NOT_FOUND else logging.WARNING
        log.log(level, "DRA claim %s/%s device %s (driver %s, CDI %s) is not resolved to a "
                "GPU: %s", claim.claim_namespace, claim.claim_name, claim.device_name,
                claim.driver_name, ", ".join(claim.cdi_devices) or "none", reason)


def _signature(devices: GpuLookups) -> tuple[object, ...]:
    """What resolution depends on: minors, UUIDs, MIG instances."""
    return (tuple(sorted(devices.by_minor.items())), tuple(sorted(devices.mig_by_uuid.items())),
            tuple(sorted(u for u, r in devices.by_uuid.items() if r.mig_instances)))


def _from_uuids(uuids: Iterable[str], devices: GpuLookups) -> list[GpuKey]:
    out: list[GpuKey] = []
    for uuid in uuids:
        if uuid in devices.by_uuid:
            out.append((uuid, None))
        elif uuid in devices.mig_by_uuid:
            out.append(devices.mig_by_uuid[uuid])
    return out
