"""Typed keys of the energy counters, one per kind of owner.

Each key *is* the tuple the state files store (``("process", gpu_uuid, pid, start,
boot_id)``, …): a ``tuple`` subclass with named fields, so it hashes and compares equal to the
plain tuple a state file was read into. A change of a key's shape is a change of the state
files' format (``state_files.FORMAT_VERSION``).
"""

from __future__ import annotations

from operator import itemgetter


class DeviceKey(tuple):
    """The GPU's whole energy, since gpustats first saw it."""

    __slots__ = ()
    kind = "device"
    device_uuid = property(itemgetter(1))

    def __new__(cls, device_uuid: str) -> DeviceKey:
        return tuple.__new__(cls, ("device", device_uuid))


class ActiveKey(tuple):
    """The GPU's energy above idle."""

    __slots__ = ()
    kind = "device_active"
    device_uuid = property(itemgetter(1))

    def __new__(cls, device_uuid: str) -> ActiveKey:
        return tuple.__new__(cls, ("device_active", device_uuid))


class UnattributedKey(tuple):
    """The GPU's active energy nobody could be billed for: no process, processes in no
    container, or processes unknown."""

    __slots__ = ()
    kind = "unattributed"
    device_uuid = property(itemgetter(1))

    def __new__(cls, device_uuid: str) -> UnattributedKey:
        return tuple.__new__(cls, ("unattributed", device_uuid))


class UnobservedKey(tuple):
    """The GPU's energy while the daemon did not observe it (down between two runs, or the
    GPU lost), which its hardware counter ran on through: billed to no one."""

    __slots__ = ()
    kind = "unobserved"
    device_uuid = property(itemgetter(1))

    def __new__(cls, device_uuid: str) -> UnobservedKey:
        return tuple.__new__(cls, ("unobserved", device_uuid))


class ProcessKey(tuple):
    """A process on a GPU: its PID and start time in one boot. A reused PID is a new process,
    and so is the same PID with the same start time after a reboot.

    A boot not known is left out of the key (as in keys stored before state format 3), so a
    key without a boot never equals one with a boot: a live process of a known boot never
    continues a counter of an unknown one."""

    __slots__ = ()
    kind = "process"
    device_uuid = property(itemgetter(1))
    pid = property(itemgetter(2))
    start_time_ticks = property(itemgetter(3))

    def __new__(cls, device_uuid: str, pid: int, start_time_ticks: int | None,
                boot_id: str | None = None) -> ProcessKey:
        parts = ("process", device_uuid, pid, start_time_ticks)
        return tuple.__new__(cls, parts if boot_id is None else (*parts, boot_id))

    @property
    def boot_id(self) -> str | None:
        """The boot the process runs in (``None``: not known)."""
        return self[4] if len(self) > 4 else None


class MigKey(tuple):
    """A MIG GPU instance."""

    __slots__ = ()
    kind = "mig"
    device_uuid = property(itemgetter(1))
    gpu_instance_id = property(itemgetter(2))

    def __new__(cls, device_uuid: str, gpu_instance_id: int) -> MigKey:
        return tuple.__new__(cls, ("mig", device_uuid, gpu_instance_id))


class ContainerKey(tuple):
    """A container on a GPU, or on one of its instances (``gpu_instance_id``)."""

    __slots__ = ()
    kind = "container"
    container_id = property(itemgetter(1))
    device_uuid = property(itemgetter(2))
    gpu_instance_id = property(itemgetter(3))

    def __new__(cls, container_id: str, device_uuid: str,
                gpu_instance_id: int | None) -> ContainerKey:
        return tuple.__new__(cls, ("container", container_id, device_uuid, gpu_instance_id))


class PodKey(tuple):
    """A pod on a GPU (its containers' energy, those gone included)."""

    __slots__ = ()
    kind = "pod"
    pod_uid = property(itemgetter(1))
    device_uuid = property(itemgetter(2))

    def __new__(cls, pod_uid: str, device_uuid: str) -> PodKey:
        return tuple.__new__(cls, ("pod", pod_uid, device_uuid))


class ContainerIdleKey(tuple):
    """A container's share of the idle energy of a GPU (or GPU instance) it holds."""

    __slots__ = ()
    kind = "container_idle"
    container_id = property(itemgetter(1))
    device_uuid = property(itemgetter(2))
    gpu_instance_id = property(itemgetter(3))

    def __new__(cls, container_id: str, device_uuid: str,
                gpu_instance_id: int | None) -> ContainerIdleKey:
        return tuple.__new__(cls, ("container_idle", container_id, device_uuid,
                                   gpu_instance_id))


class PodIdleKey(tuple):
    """A pod's share of a GPU's idle energy (its containers', those gone included)."""

    __slots__ = ()
    kind = "pod_idle"
    pod_uid = property(itemgetter(1))
    device_uuid = property(itemgetter(2))

    def __new__(cls, pod_uid: str, device_uuid: str) -> PodIdleKey:
        return tuple.__new__(cls, ("pod_idle", pod_uid, device_uuid))


class UnallocatedIdleKey(tuple):
    """The GPU's idle energy no tenant held it for."""

    __slots__ = ()
    kind = "unallocated_idle"
    device_uuid = property(itemgetter(1))

    def __new__(cls, device_uuid: str) -> UnallocatedIdleKey:
        return tuple.__new__(cls, ("unallocated_idle", device_uuid))


__all__ = ["ActiveKey", "ContainerIdleKey", "ContainerKey", "DeviceKey", "MigKey", "PodIdleKey",
           "PodKey", "ProcessKey", "UnallocatedIdleKey", "UnattributedKey", "UnobservedKey"]
