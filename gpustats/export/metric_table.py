"""Every Prometheus family gpustats exposes, declared once: name, type, help, labels, the
group that turns it off (``--disable-metrics``), and where its value comes from. The families
of a GPU's scalar values are built from their rows in ``model.device_values``.

Every series also carries ``node_name``. Counters are declared by their base name; the
exposition adds ``_total``. Units follow Prometheus base units (watts, joules, bytes,
seconds, ratios 0..1) and end the name.

A family's samples come from the rows of its *scope* (one row per GPU, per process, per
container's GPU, …; ``export.prometheus`` builds them with their label values): ``value``
gives one sample per row, ``samples`` gives ``(extra label values, value)`` pairs for families
with labels beyond the scope's. A value of ``None`` gives no sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Iterable

from gpustats import __version__
from gpustats.model.device_values import DEVICE_VALUES, DeviceValue

GAUGE, COUNTER, INFO = "gauge", "counter", "info"

# Every family of one GPU, or of a part or tenant of one, carries the GPU's index, UUID and
# vendor (model.device's VENDOR_*; empty when unknown).
GPU = ("gpu", "gpu_uuid", "vendor")
CONTAINER = ("container_id", "container", "pod", "namespace", *GPU, "gpu_instance_id", "claim",
             "claim_namespace")
POD = ("pod_uid", "pod", "namespace", *GPU, "claim", "claim_namespace")
# Identity only: a label whose value can change mid-life (how the share was computed) would
# split a counter into a new series and break rate(); the method has its own gauge.
# A process is its PID and its start time (clock ticks after boot, /proc/<pid>/stat field 22):
# a reused PID is a new series, never a counter that steps down. Empty when unknown.
# Then its command (/proc/<pid>/comm), real UID and the UID's user name.
PROCESS = ("pid", "pid_start_ticks", *GPU, "gpu_instance_id", "container_id", "comm", "uid",
           "user")
MIG = (*GPU, "gpu_instance_id")
# A tenant of any kind on one GPU: its kind, the name it is shown by, and the identity labels of
# every kind (empty where not its kind's, or unknown).
TENANT = (*GPU, "kind", "tenant", "namespace", "pod", "pod_uid", "container_id", "unit", "uid",
          "user", "job_id", "step")
CADVISOR = ("make", "model", "acc_id", "container", "pod", "namespace", "id", "name")
CLAIM = ("container_id", "container", "pod", "namespace", "claim", "claim_namespace",
         "driver", "pool", "device", "reason")
SOURCE = ("source",)
ERROR = ("source", "reason")

# Scopes: what one row is (the object the getters are given) and the labels it carries.
NODE = "node"              # the Snapshot; no labels
DEVICE = "device"          # DeviceStats; GPU
HEALTH = "health"          # DeviceHealth of a GPU that has one; GPU
SATURATION = "saturation"  # Saturation of a GPU that has one; GPU
MIG_INSTANCE = "mig"       # MigInstanceStats; MIG
GPU_PROCESS = "process"    # ProcessStats; PROCESS
CONTAINER_GPU = "container_gpu"    # ContainerAccelerator; CONTAINER
CONTAINER_VIEW = "container_view"  # AcceleratorView (the container's view of a GPU); CADVISOR
UNRESOLVED = "unresolved"  # UnresolvedClaim; CLAIM
POD_GPU = "pod_gpu"        # PodAccelerator; POD
TENANT_GPU = "tenant_gpu"  # export.tenants.TenantGpu (a tenant on one physical GPU); TENANT
SOURCE_STATE = "source"    # SourceState; SOURCE
VENDOR_STATUS = "vendor"   # VendorStatus; vendor
ERROR_COUNT = "error"      # (source, reason, count); ERROR

# Groups for --disable-metrics (cAdvisor's convention): each family is in one. ``dcgm`` holds
# the --dcgm-compat families, declared in export.dcgm_table and rendered by export.dcgm;
# ``kepler`` the --kepler-compat families, rows of export.kepler_table built by export.kepler.
DCGM = "dcgm"
KEPLER = "kepler"
GROUPS = ("gpu", "health", "saturation", "mig", "process", "container", "pod", "tenant",
          "cadvisor", "daemon", DCGM, KEPLER)

Value = Callable[[Any], "float | int | None"]
Samples = Callable[[Any], Iterable[tuple[tuple[object, ...], "float | int | None"]]]


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    group: str = "daemon"
    scope: str = NODE
    value: Value | None = None       # one sample per row
    samples: Samples | None = None   # (extra label values, value) pairs per row


def _ratio_of_percent(name: str) -> Value:
    get = attrgetter(name)

    def ratio(row: Any) -> float | None:
        percent = get(row)
        return percent / 100.0 if percent is not None else None
    return ratio


def _one_if(name: str) -> Value:
    get = attrgetter(name)
    return lambda row: 1 if get(row) else 0


def _one(row: Any) -> int:
    return 1


def _pairs(name: str) -> Samples:
    """``((label, value), ...)`` held in one field, ``None`` for none, as samples."""
    get = attrgetter(name)
    return lambda row: (((label,), value) for label, value in get(row) or ())


def _directions(tx: str, rx: str) -> Samples:
    get_tx, get_rx = attrgetter(tx), attrgetter(rx)
    return lambda row: ((("tx",), get_tx(row)), (("rx",), get_rx(row)))


def _device_info(d: Any) -> tuple[tuple[tuple[object, ...], int], ...]:
    ident = d.identity
    return (((ident.name, ident.pci_bus_id, ident.minor_number), 1),)


def _device_value(row: DeviceValue) -> Value:
    """The getter of a device value's family: the value, over the family's divisor."""
    divisor = row.metric.divisor if row.metric is not None else 1
    if divisor == 1:
        return row.value

    def scaled(device: Any) -> float | None:
        value = row.value(device)
        return value / divisor if value is not None else None
    return scaled


def _device_families() -> tuple[Family, ...]:
    """The families of the device values that declare one (``model.device_values``)."""
    return tuple(Family(m.name, m.kind, m.help, GPU, m.unit, group=m.group, scope=DEVICE,
                        value=_device_value(row))
                 for row in DEVICE_VALUES if (m := row.metric) is not None)


def _sharing_mode(d: Any) -> tuple[tuple[tuple[object, ...], int], ...]:
    return (((d.sharing_mode,), 1),) if d.sharing_mode is not None else ()


def _conditions(h: Any) -> Iterable[tuple[tuple[object, ...], int]]:
    return (((c.type, c.status, c.reason), 1) for c in h.conditions)


def _counter(name: str) -> Value:
    """A field of the saturation counters (``None`` where the GPU has none)."""
    get = attrgetter(name)
    return lambda s: get(s.counters) if s.counters is not None else None


def _counter_pairs(name: str) -> Samples:
    get = attrgetter(name)
    return lambda s: (((label,), value) for label, value in
                      (get(s.counters) if s.counters is not None else None) or ())


def _memory_used_ratios(s: Any) -> tuple[tuple[tuple[object, ...], float | None], ...]:
    return ((("avg",), s.memory_used_ratio_avg), (("max",), s.memory_used_ratio_max))


def _share_method(p: Any) -> tuple[tuple[tuple[object, ...], int], ...]:
    # Its own series: the counters' identity must not change when the method does.
    return (((p.share_method,), 1),) if p.share_method is not None else ()


_at = attrgetter

FAMILIES: tuple[Family, ...] = (
    Family("gpustats_build", INFO, "gpustats build information.", ("version",),
           samples=lambda snapshot: (((__version__,), 1),)),
    Family("gpustats_node_gpu", INFO, "GPU identity: index, UUID, name, vendor, PCI bus id.",
           GPU + ("gpu_name", "pci_bus_id", "minor_number"),
           group="gpu", scope=DEVICE, samples=_device_info),
    *_device_families(),
    Family("gpustats_node_gpu_sharing_mode", INFO,
           "How the GPU is shared: exclusive, time-slicing, mps or mig.", GPU + ("mode",),
           group="gpu", scope=DEVICE, samples=_sharing_mode),
    Family("gpustats_node_gpu_lost", GAUGE, "1 when NVML answers GPU_IS_LOST for the GPU.", GPU,
           group="health", scope=DEVICE, value=_one_if("lost")),
    Family("gpustats_node_gpu_healthy", GAUGE, "1 when every health condition is True.", GPU,
           group="health", scope=HEALTH, value=_one_if("healthy")),
    Family("gpustats_node_gpu_condition", GAUGE,
           "Health conditions of the GPU (value 1): NVMLReady, EccHealth, RowRemapHealth "
           "(NVIDIA); RasHealth, RetiredPagesHealth, ResetHealth, PciBusHealth (AMD and Intel, "
           "from the kernel's files); Ready (every other one True).",
           GPU + ("type", "status", "reason"), group="health", scope=HEALTH,
           samples=_conditions),
    Family("gpustats_node_gpu_xid_errors", COUNTER,
           "XID error events by XID, every event counted (ignored application XIDs included; "
           "at most 64 series per GPU, further XIDs under xid=\"other\").", GPU + ("xid",),
           group="health", scope=HEALTH, samples=_pairs("xid_counts")),
    Family("gpustats_node_gpu_throttle_violation_ratio", GAUGE,
           "Share of the saturation window spent throttled, by violation counter.",
           GPU + ("reason",), "ratio", group="saturation", scope=SATURATION,
           samples=_pairs("throttle_violation_ratios")),
    Family("gpustats_node_gpu_throttle_reason_ratio", GAUGE,
           "Share of samples in the saturation window with a clocks-event reason set.",
           GPU + ("reason",), "ratio", group="saturation", scope=SATURATION,
           samples=_pairs("throttle_reason_ratios")),
    Family("gpustats_node_gpu_memory_used_ratio", GAUGE,
           "Framebuffer used/total over the saturation window (stat avg or max).",
           GPU + ("stat",), "ratio", group="saturation", scope=SATURATION,
           samples=_memory_used_ratios),
    Family("gpustats_node_gpu_memory_pressure_ratio", GAUGE,
           "Share of samples with framebuffer use at or above the pressure threshold.", GPU,
           "ratio", group="saturation", scope=SATURATION, value=_at("memory_pressure_ratio")),
    Family("gpustats_node_gpu_sm_active_ratio", GAUGE, "GPM SM activity, window average.", GPU,
           "ratio", group="saturation", scope=SATURATION, value=_at("sm_active_avg")),
    Family("gpustats_node_gpu_sm_occupancy_ratio", GAUGE, "GPM SM occupancy, window average.",
           GPU, "ratio", group="saturation", scope=SATURATION, value=_at("sm_occupancy_avg")),
    Family("gpustats_node_gpu_dram_active_ratio", GAUGE, "GPM DRAM activity, window average.",
           GPU, "ratio", group="saturation", scope=SATURATION, value=_at("dram_active_avg")),
    Family("gpustats_node_gpu_dram_active_max_ratio", GAUGE,
           "GPM DRAM activity, window maximum.", GPU, "ratio", group="saturation",
           scope=SATURATION, value=_at("dram_active_max")),
    Family("gpustats_node_gpu_pcie_bytes_per_second", GAUGE, "PCIe throughput, window average.",
           GPU + ("direction",), group="saturation", scope=SATURATION,
           samples=_directions("pcie_tx_bytes_avg", "pcie_rx_bytes_avg")),
    Family("gpustats_node_gpu_nvlink_bytes_per_second", GAUGE,
           "NVLink throughput, window average.", GPU + ("direction",),
           group="saturation", scope=SATURATION,
           samples=_directions("nvlink_tx_bytes_avg", "nvlink_rx_bytes_avg")),
    # What the window's ratios are built from, so any window is an increase() apart. Counted
    # since the daemon started (not kept across restarts: a restart is a counter reset).
    Family("gpustats_node_gpu_throttle_violation_seconds", COUNTER,
           "Seconds throttled, by violation policy (the driver's cumulative counters' "
           "increases since gpustats started).", GPU + ("policy",), "seconds",
           group="saturation", scope=SATURATION,
           samples=_counter_pairs("throttle_violation_seconds")),
    Family("gpustats_node_gpu_throttle_reason_seconds", COUNTER,
           "Seconds between samples that ended with a clocks-event reason set, since gpustats "
           "started.", GPU + ("reason",), "seconds", group="saturation", scope=SATURATION,
           samples=_counter_pairs("throttle_reason_seconds")),
    Family("gpustats_node_gpu_memory_pressure_seconds", COUNTER,
           "Seconds between samples that ended with framebuffer use at or above the pressure "
           "threshold, since gpustats started.", GPU, "seconds", group="saturation",
           scope=SATURATION, value=_counter("memory_pressure_seconds")),
    Family("gpustats_node_gpu_saturation_sampled_seconds", COUNTER,
           "Seconds between consecutive saturation samples (the time the seconds counters "
           "cover), since gpustats started.", GPU, "seconds", group="saturation",
           scope=SATURATION, value=_counter("sampled_seconds")),
    Family("gpustats_node_gpu_saturation_samples", COUNTER,
           "Saturation samples taken, since gpustats started.", GPU, group="saturation",
           scope=SATURATION, value=_counter("samples")),
    Family("gpustats_node_gpu_mig_instance", INFO, "MIG GPU instance identity.",
           MIG + ("mig_uuid", "profile"), group="mig", scope=MIG_INSTANCE,
           samples=lambda m: (((m.uuid, m.profile), 1),)),
    Family("gpustats_node_gpu_mig_memory_used_bytes", GAUGE, "Memory used in a MIG instance.",
           MIG, "bytes", group="mig", scope=MIG_INSTANCE, value=_at("memory_used_bytes")),
    Family("gpustats_node_gpu_mig_activity_ratio", GAUGE,
           "MIG instance activity (dcgm-exporter or GPM).", MIG, "ratio",
           group="mig", scope=MIG_INSTANCE, value=_at("activity_ratio")),
    Family("gpustats_node_gpu_mig_watts", GAUGE, "Active power attributed to a MIG instance.",
           MIG, "watts", group="mig", scope=MIG_INSTANCE, value=_at("attributed_power_watts")),
    Family("gpustats_node_gpu_mig_joules", COUNTER, "Active energy attributed to a MIG instance.",
           MIG, "joules", group="mig", scope=MIG_INSTANCE, value=_at("attributed_energy_joules")),
    Family("gpustats_process_gpu_watts", GAUGE, "Active GPU power attributed to a process.",
           PROCESS, "watts", group="process", scope=GPU_PROCESS,
           value=_at("attributed_power_watts")),
    Family("gpustats_process_gpu_joules", COUNTER, "Active GPU energy attributed to a process.",
           PROCESS, "joules", group="process", scope=GPU_PROCESS,
           value=_at("attributed_energy_joules")),
    Family("gpustats_process_gpu_compute_utilization_ratio", GAUGE,
           "SM utilization of the process over the tick, as NVML reports it.", PROCESS, "ratio",
           group="process", scope=GPU_PROCESS,
           value=_ratio_of_percent("compute_utilization_percent")),
    Family("gpustats_process_gpu_memory_used_bytes", GAUGE, "GPU memory held by the process.",
           PROCESS, "bytes", group="process", scope=GPU_PROCESS, value=_at("memory_used_bytes")),
    Family("gpustats_process_gpu_share_method", GAUGE,
           "How the process's share of active power was computed this tick (value 1): "
           "exclusive, sm-utilization, engine-time (the engine time the driver measured: AMD, "
           "Intel), accounting (ended between ticks: NVML's accounting record), equal-split, "
           "mig-activity, mig-assumed-activity (an instance without activity data, given the "
           "mean of the others) or mig-equal-split.",
           PROCESS + ("method",), group="process", scope=GPU_PROCESS, samples=_share_method),
    Family("gpustats_container_gpu_watts", GAUGE, "Active GPU power attributed to a container.",
           CONTAINER, "watts", group="container", scope=CONTAINER_GPU,
           value=_at("attributed_power_watts")),
    Family("gpustats_container_gpu_joules", COUNTER,
           "Active GPU energy attributed to a container.", CONTAINER, "joules",
           group="container", scope=CONTAINER_GPU, value=_at("attributed_energy_joules")),
    Family("gpustats_container_gpu_idle_share_watts", GAUGE,
           "The container's share of the idle power of a GPU (or MIG instance) it holds, "
           "over the tick.", CONTAINER, "watts", group="container", scope=CONTAINER_GPU,
           value=_at("idle_share_power_watts")),
    Family("gpustats_container_gpu_idle_share_joules", COUNTER,
           "The container's share of the idle energy of a GPU it holds: one share per "
           "allocation, or per tenant seen through its processes only, by instance size on "
           "a MIG GPU.", CONTAINER, "joules",
           group="container", scope=CONTAINER_GPU, value=_at("idle_share_energy_joules")),
    Family("gpustats_container_gpu_memory_used_bytes", GAUGE,
           "GPU memory held by the container's processes.", CONTAINER, "bytes",
           group="container", scope=CONTAINER_GPU, value=_at("process_memory_used_bytes")),
    Family("gpustats_container_gpu_compute_utilization_ratio", GAUGE,
           "Share of SM time the container's processes had over the tick (at most 1, also "
           "when MPS clients' percentages add up past 100).", CONTAINER, "ratio",
           group="container", scope=CONTAINER_GPU,
           value=_ratio_of_percent("compute_utilization_percent")),
    Family("gpustats_container_gpu_claim_unresolved", GAUGE,
           "1 for each DRA claim device a container holds that is not resolved to a GPU.",
           CLAIM, group="container", scope=UNRESOLVED, value=_one),
    Family("gpustats_pod_gpu_watts", GAUGE, "Active GPU power attributed to a pod.", POD,
           "watts", group="pod", scope=POD_GPU, value=_at("attributed_power_watts")),
    Family("gpustats_pod_gpu_joules", COUNTER,
           "Active GPU energy attributed to a pod (containers gone included).", POD, "joules",
           group="pod", scope=POD_GPU, value=_at("attributed_energy_joules")),
    Family("gpustats_pod_gpu_idle_share_watts", GAUGE,
           "The pod's share of the idle power of a GPU its containers hold, over the tick.",
           POD, "watts", group="pod", scope=POD_GPU, value=_at("idle_share_power_watts")),
    Family("gpustats_pod_gpu_idle_share_joules", COUNTER,
           "The pod's share of the idle energy of a GPU its containers hold (containers gone "
           "included).", POD, "joules", group="pod", scope=POD_GPU,
           value=_at("idle_share_energy_joules")),
    Family("gpustats_tenant_gpu_watts", GAUGE,
           "Active GPU power attributed to a tenant (a pod, a container outside pods, a "
           "service, a user's sessions, a Slurm job step or a process) over the tick; a "
           "tenant on several MIG instances of the GPU: their sum.", TENANT, "watts",
           group="tenant", scope=TENANT_GPU, value=_at("attributed_power_watts")),
    Family("gpustats_tenant_gpu_joules", COUNTER,
           "Active GPU energy attributed to a tenant (ended ones included while their "
           "counters are retained); per GPU, with the unattributed energy it adds up to the "
           "active energy.", TENANT, "joules",
           group="tenant", scope=TENANT_GPU, value=_at("attributed_energy_joules")),
    Family("gpustats_tenant_gpu_idle_share_watts", GAUGE,
           "The tenant's share of the idle power of a GPU it holds, over the tick.", TENANT,
           "watts", group="tenant", scope=TENANT_GPU, value=_at("idle_share_power_watts")),
    Family("gpustats_tenant_gpu_idle_share_joules", COUNTER,
           "The tenant's share of the idle energy of a GPU it holds; per GPU, with the "
           "unallocated idle energy it adds up to the idle energy.", TENANT, "joules",
           group="tenant", scope=TENANT_GPU, value=_at("idle_share_energy_joules")),
    Family("container_accelerator_duty_cycle", GAUGE,
           "Percent of time over the past sample period during which the accelerator was "
           "actively processing.", CADVISOR,
           group="cadvisor", scope=CONTAINER_VIEW, value=_at("duty_cycle_percent")),
    Family("container_accelerator_memory_used_bytes", GAUGE, "Total accelerator memory allocated.",
           CADVISOR, "bytes", group="cadvisor", scope=CONTAINER_VIEW,
           value=_at("memory_used_bytes")),
    Family("container_accelerator_memory_total_bytes", GAUGE, "Total accelerator memory.",
           CADVISOR, "bytes", group="cadvisor", scope=CONTAINER_VIEW,
           value=_at("memory_total_bytes")),
    Family("gpustats_collection_errors", COUNTER, "Values that could not be collected, by why.",
           ERROR, scope=ERROR_COUNT, value=lambda error: error[2]),
    Family("gpustats_source_last_success_timestamp_seconds", GAUGE,
           "Unix time of the source's last successful read.", SOURCE, "seconds",
           scope=SOURCE_STATE, value=_at("last_success_time")),
    Family("gpustats_source_failing", GAUGE,
           "1 while the source is failing (its last read failed), 0 otherwise.", SOURCE,
           scope=SOURCE_STATE, value=lambda state: 1 if state.state == "failing" else 0),
    Family("gpustats_tick_duration_seconds", GAUGE, "Wall time of the last collection tick.",
           (), "seconds", value=_at("status.tick_duration_seconds")),
    Family("gpustats_last_tick_timestamp_seconds", GAUGE,
           "Unix time at the end of the last collection tick.", (), "seconds",
           value=_at("taken_at")),
    Family("gpustats_nvml_loaded", GAUGE, "1 while an NVML session is open.",
           value=_one_if("status.nvml_loaded")),
    Family("gpustats_gpus_on_pci_bus", GAUGE, "NVIDIA GPUs found on the PCI bus.",
           value=_at("status.gpus_on_pci_bus")),
    Family("gpustats_vendor_gpus_on_pci_bus", GAUGE,
           "GPUs of the vendor found on the PCI bus (NVIDIA, AMD, Intel).", ("vendor",),
           scope=VENDOR_STATUS, value=_at("gpus_on_pci_bus")),
    Family("gpustats_vendor_interface_open", GAUGE,
           "1 while the vendor's interface is open (NVML; AMD's and Intel's sysfs and DRM "
           "fdinfo), 0 while its GPUs wait for it.", ("vendor",), scope=VENDOR_STATUS,
           value=lambda v: 1 if v.interface_open else 0),
    Family("gpustats_nvml_calls_last_tick", GAUGE, "NVML calls made by the last tick.",
           value=_at("status.nvml_calls_last_tick")),
    Family("gpustats_snapshot_sequence", COUNTER, "Snapshots published since start.",
           value=_at("sequence")),
)

BY_NAME = {f.name: f for f in FAMILIES}


def enabled(disabled_groups: Iterable[str] = ()) -> tuple[Family, ...]:
    """The families of every group not named in ``disabled_groups``, in table order."""
    off = frozenset(disabled_groups)
    return tuple(f for f in FAMILIES if f.group not in off)
