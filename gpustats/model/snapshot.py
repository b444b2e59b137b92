"""The immutable snapshot every endpoint reads: one per housekeeping tick."""

from __future__ import annotations

from typing import Iterator

from gpustats.model.containers import ContainerUsage
from gpustats.model.device import DeviceIdentity, DeviceReading
from gpustats.model.dra import ClaimDevice, UnresolvedClaim
from gpustats.model.health import DeviceHealth, Saturation
from gpustats.model.host import NodeStats
from gpustats.model.record import record
from gpustats.model.sources import SourceState
from gpustats.model.tenants import KIND_CONTAINER, KIND_POD, TenantRef


@record
class MigInstanceStats:
    gpu_instance_id: int
    uuid: str | None = None
    profile: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    activity_ratio: float | None = None        # 0..1, from dcgm-exporter or GPM
    attributed_power_watts: float | None = None
    attributed_energy_joules: float | None = None   # cumulative


@record
class DeviceStats:
    """One physical GPU at the end of a tick. ``energy_joules`` is the daemon's monotonic total
    since it first saw the GPU. ``power_watts`` is the instantaneous reading; the active and
    attributed watts are the tick's energy over its length."""

    identity: DeviceIdentity
    lost: bool = False
    memory_used_bytes: int | None = None
    duty_cycle_percent: int | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    idle_power_watts: float | None = None
    active_power_watts: float | None = None
    active_energy_joules: float | None = None
    # The energy not active (whole − active), never below a value served before: a tick
    # whose energy counter could not be read still counts its active energy.
    idle_energy_joules: float | None = None
    # Active power and energy nobody could be billed for (no process, processes in no
    # container, or processes unknown): active = Σ containers + unattributed.
    unattributed_power_watts: float | None = None
    unattributed_energy_joules: float | None = None
    # Idle power and energy no tenant held the GPU for: idle = Σ holders' idle shares + this.
    unallocated_idle_power_watts: float | None = None
    unallocated_idle_energy_joules: float | None = None
    # Energy the GPU's counter gained while the daemon did not observe it (down, or the GPU
    # lost): energy = Σ holders' (attributed + idle share) + unallocated + unattributed + this.
    unobserved_energy_joules: float | None = None
    power_limit_watts: float | None = None
    temperature_celsius: int | None = None
    sharing_mode: str | None = None
    mig_instances: tuple[MigInstanceStats, ...] = ()
    health: DeviceHealth | None = None
    saturation: Saturation | None = None
    # The sweep these figures came from: raw NVML values for views that speak NVML's or
    # DCGM's vocabulary. None for a GPU kept from before an NVML outage.
    reading: DeviceReading | None = None


@record
class ProcessStats:
    pid: int
    device_uuid: str
    gpu_instance_id: int | None = None
    container_id: str | None = None
    memory_used_bytes: int | None = None
    compute_utilization_percent: float | None = None   # SM share as NVML reports it
    share_method: str | None = None
    attributed_power_watts: float | None = None
    attributed_energy_joules: float | None = None   # cumulative
    start_time_ticks: int | None = None      # /proc/<pid>/stat starttime: tells reused PIDs apart
    comm: str | None = None                  # /proc/<pid>/comm
    uid: int | None = None                   # the real UID (/proc/<pid>/status)
    user: str | None = None                  # the UID's name in the host's passwd
    # Ended (no longer on the GPU) and kept while its counter is retained: its energy and
    # owner served, its figures of the moment absent.
    ended: bool = False


@record
class ContainerAccelerator:
    """A GPU as seen from one container: device figures plus what its processes account for."""

    device_uuid: str
    reasons: tuple[str, ...] = ()
    gpu_instance_id: int | None = None
    mig_profile: str | None = None
    process_memory_used_bytes: int | None = None
    compute_utilization_percent: float | None = None
    attributed_power_watts: float | None = None
    attributed_energy_joules: float | None = None   # cumulative
    # Its share of the GPU's (or instance's) idle, as one of the tenants holding it
    idle_share_power_watts: float | None = None
    idle_share_energy_joules: float | None = None   # cumulative
    claim: ClaimDevice | None = None                # the DRA claim that allocated it
    replicas: tuple[int, ...] = ()     # device-plugin replicas held (time-slicing/MPS ``::N``)


@record
class ContainerStats:
    container_id: str
    name: str | None = None
    runtime: str | None = None
    cgroup_path: str | None = None
    pod_uid: str | None = None
    usage: ContainerUsage = ContainerUsage()
    accelerators: tuple[ContainerAccelerator, ...] = ()
    unresolved_claims: tuple[UnresolvedClaim, ...] = ()
    # The tenant outside Kubernetes pods and runtime containers this entry is (a service, a
    # session, a job, a process); None: a container (of a pod where ``pod_uid``).
    tenant: TenantRef | None = None
    # Whose the tenant is: the UID its cgroup names (a session's, a job's), else its GPU
    # processes' real UID where they all have one (a service's, a container's outside pods);
    # and that UID's name in the host's passwd.
    uid: int | None = None
    user: str | None = None
    # Ended (no cgroup or process left) and kept while its counters are retained: served in
    # /metrics, listed nowhere live tenants are.
    ended: bool = False

    @property
    def kind(self) -> str:
        """The tenant kind (``model.tenants.TENANT_KINDS``) this entry bills."""
        if self.tenant is not None:
            return self.tenant.kind
        return KIND_POD if self.pod_uid is not None else KIND_CONTAINER


@record
class PodAccelerator:
    device_uuid: str
    attributed_power_watts: float | None = None
    attributed_energy_joules: float | None = None   # cumulative, includes gone containers
    claim: ClaimDevice | None = None
    idle_share_power_watts: float | None = None
    idle_share_energy_joules: float | None = None   # cumulative, includes gone containers


@record
class PodStats:
    uid: str
    name: str | None = None
    namespace: str | None = None
    usage: ContainerUsage = ContainerUsage()
    containers: tuple[ContainerStats, ...] = ()
    accelerators: tuple[PodAccelerator, ...] = ()
    # The UID of the pod listed under this one's namespace/name instead (a pod re-created
    # under its name, as a StatefulSet's are); None: this one is listed. Its counters are
    # served all the same.
    superseded_by: str | None = None
    # The pod has ended (no cgroup, no container left) and is kept while its counters are
    # retained: served in /metrics, listed nowhere a live pod is.
    ended: bool = False


@record
class VendorStatus:
    """One vendor's GPUs found on the PCI bus, and whether its interface is open."""

    vendor: str
    gpus_on_pci_bus: int = 0
    interface_open: bool = False


@record
class DaemonStatus:
    """Self-observation: NVML state and collection health."""

    gpus_on_pci_bus: int = 0                    # NVIDIA's: what NVML's gate counts
    nvml_loaded: bool = False
    nvml_error: str | None = None
    driver_version: str | None = None
    tick_duration_seconds: float | None = None
    nvml_calls_last_tick: int | None = None
    # (source, reason) -> cumulative count of values that could not be collected
    collection_errors: tuple[tuple[str, str, int], ...] = ()
    sources: tuple[SourceState, ...] = ()       # each data source's state, by name
    vendors: tuple[VendorStatus, ...] = ()      # every vendor's, NVIDIA's included
    dcgm_exporter_url: str | None = None        # the exporter read (configured or found)


@record
class Snapshot:
    sequence: int
    taken_at: float                 # epoch seconds at the end of the tick
    monotonic: float                # monotonic seconds at the end of the tick
    node: NodeStats
    devices: tuple[DeviceStats, ...] = ()
    processes: tuple[ProcessStats, ...] = ()
    pods: tuple[PodStats, ...] = ()
    containers: tuple[ContainerStats, ...] = ()   # outside Kubernetes pods
    status: DaemonStatus = DaemonStatus()

    def listed_pods(self) -> tuple[PodStats, ...]:
        """The pods a view keyed by namespace/name lists (the Summary API, the page): live
        ones, at most one per namespace/name, as the kubelet lists them; ``pods`` holds every
        pod whose counters are served."""
        return tuple(p for p in self.pods if p.superseded_by is None and not p.ended)

    def containers_with_pods(self) -> Iterator[tuple[PodStats | None, ContainerStats]]:
        """Every container with the pod it runs in: the pods' containers in pod order, then
        the containers outside pods (pod ``None``)."""
        for pod in self.pods:
            for container in pod.containers:
                yield pod, container
        for container in self.containers:
            yield None, container
