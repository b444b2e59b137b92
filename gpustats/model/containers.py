"""Containers and pods found on the host, and which GPUs each one uses."""

from __future__ import annotations

from dataclasses import field

from gpustats.model.dra import ClaimDevice
from gpustats.model.host import CpuStats, MemoryStats
from gpustats.model.record import record
from gpustats.model.tenants import TenantRef

# Why a container is mapped to a GPU (recorded per mapping in the snapshot).
REASON_DEVICES_LIST = "devices.list"
REASON_NVML_PROCESS = "nvml-process"
REASON_POD_RESOURCES = "pod-resources"
REASON_DRA = "dra"                    # a ResourceClaim device, resolved through CDI


@record
class CgroupRef:
    """Where a container's cgroup lives: one path per v1 controller, or the v2 path."""

    # controller name ("devices", "cpuacct", "memory", ...) -> path relative to that hierarchy;
    # the key "" holds the unified (v2) path.
    paths: tuple[tuple[str, str], ...]
    _by_controller: dict[str, str] = field(init=False, repr=False, compare=False)
    # The path a container is shown by: v2's, else memory's, cpuacct's, devices', the first.
    main_path: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The first path of each controller, looked up several times per container and tick.
        by_controller: dict[str, str] = {}
        for name, path in self.paths:
            by_controller.setdefault(name, path)
        object.__setattr__(self, "_by_controller", by_controller)
        main = next((by_controller[c] for c in ("", "memory", "cpuacct", "devices")
                     if c in by_controller), self.paths[0][1] if self.paths else None)
        object.__setattr__(self, "main_path", main)

    def path(self, controller: str) -> str | None:
        return self._by_controller.get(controller)


@record
class ContainerIdentity:
    """A container as its cgroup path names it (names filled in from pod-resources/runtime)."""

    container_id: str                 # 64-hex runtime id
    runtime: str | None = None        # "containerd", "crio", "docker"
    pod_uid: str | None = None
    qos_class: str | None = None      # "guaranteed", "burstable", "besteffort"
    cgroup: CgroupRef | None = None
    name: str | None = None           # container name from the pod spec
    pod_name: str | None = None
    pod_namespace: str | None = None
    # A tenant that is no container (a service, a session, a job, a process); its key is
    # ``container_id``. None: a container.
    tenant: TenantRef | None = None


@record
class ContainerUsage:
    """CPU and memory of one container (or pod) cgroup, as the kubelet reports them."""

    start_time: float | None = None
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None


@record
class DeviceRef:
    """A device ID as a device plugin reports it, parsed."""

    kind: str                          # "gpu" or "mig" (NVIDIA), "pci" (AMD), "card" (Intel)
    # GPU-… or MIG-… (legacy MIG-GPU-…/gi/ci kept whole); a PCI address (0000:19:00.0); a
    # DRM card (card0)
    uuid: str
    replica: int | None = None         # time-slicing / MPS replica (``::N`` suffix)
    parent_uuid: str | None = None     # legacy MIG-GPU-<uuid>/<gi>/<ci>: the parent GPU
    gpu_instance_id: int | None = None


@record
class PodDeviceAllocation:
    """One device the kubelet allocated to one container (pod-resources ``List``).

    Device-plugin devices carry ``device``; DRA claim devices carry ``claim`` instead (their
    GPU is known only once CDI resolves them).
    """

    pod_name: str
    pod_namespace: str
    container_name: str
    resource_name: str
    device_id: str
    device: DeviceRef | None
    claim: ClaimDevice | None = None


@record
class ContainerNames:
    """Kubernetes names of a container from the runtime's labels."""

    pod_name: str | None
    pod_namespace: str | None
    pod_uid: str | None
    container_name: str | None
    is_sandbox: bool = False
