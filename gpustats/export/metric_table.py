"""Every Prometheus family gpustats exposes, declared once: name, type, help, labels.

Every series also carries ``node_name``. Counters are declared by their base name; the
exposition adds ``_total``. Units follow Prometheus base units (watts, joules, bytes,
seconds, ratios 0..1) and end the name.
"""

from __future__ import annotations

from dataclasses import dataclass

GAUGE, COUNTER, INFO = "gauge", "counter", "info"

GPU = ("gpu", "gpu_uuid")
CONTAINER = ("container_id", "container", "pod", "namespace", "gpu", "gpu_uuid",
             "gpu_instance_id", "claim", "claim_namespace")
POD = ("pod_uid", "pod", "namespace", "gpu", "gpu_uuid", "claim", "claim_namespace")
# Identity only: a label whose value can change mid-life (how the share was computed) would
# split a counter into a new series and break rate(); the method has its own gauge.
# A process is its PID and its start time (clock ticks after boot, /proc/<pid>/stat field 22):
# a reused PID is a new series, never a counter that steps down. Empty when unknown.
PROCESS = ("pid", "pid_start_ticks", "gpu", "gpu_uuid", "gpu_instance_id", "container_id")
MIG = ("gpu", "gpu_uuid", "gpu_instance_id")
CADVISOR = ("make", "model", "acc_id", "container", "pod", "namespace", "id", "name")


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""


FAMILIES: tuple[Family, ...] = (
    Family("gpustats_build", INFO, "gpustats build information.", ("version",)),
    Family("gpustats_node_gpu", INFO, "GPU identity: index, UUID, name, vendor, PCI bus id.",
           GPU + ("gpu_name", "vendor", "pci_bus_id", "minor_number")),
    Family("gpustats_node_gpu_watts", GAUGE, "GPU power draw.", GPU, "watts"),
    Family("gpustats_node_gpu_joules", COUNTER,
           "GPU energy counted since gpustats first saw the GPU (from the GPU's energy counter "
           "deltas), monotonic across driver reloads and restarts.",
           GPU, "joules"),
    Family("gpustats_node_gpu_idle_watts", GAUGE,
           "GPU idle power: configured, or the lowest power that held for three ticks (the "
           "highest seen until three readings are in).", GPU, "watts"),
    Family("gpustats_node_gpu_active_watts", GAUGE,
           "GPU power above idle: the tick's active energy over the tick's length.", GPU,
           "watts"),
    Family("gpustats_node_gpu_active_joules", COUNTER, "GPU energy above idle.", GPU, "joules"),
    Family("gpustats_node_gpu_unattributed_watts", GAUGE,
           "GPU power above idle that no container is billed for (no process, processes in no "
           "container, or processes unknown), over the tick.", GPU, "watts"),
    Family("gpustats_node_gpu_unattributed_joules", COUNTER,
           "GPU energy above idle that no container is billed for; with the containers' "
           "energy it adds up to the active energy.", GPU, "joules"),
    Family("gpustats_node_gpu_power_limit_watts", GAUGE, "Enforced GPU power limit.", GPU,
           "watts"),
    Family("gpustats_node_gpu_temperature_celsius", GAUGE, "GPU core temperature.", GPU,
           "celsius"),
    Family("gpustats_node_gpu_memory_used_bytes", GAUGE, "GPU framebuffer memory in use.", GPU,
           "bytes"),
    Family("gpustats_node_gpu_memory_total_bytes", GAUGE, "GPU framebuffer memory.", GPU,
           "bytes"),
    Family("gpustats_node_gpu_duty_cycle_ratio", GAUGE,
           "Share of the last sample period the GPU was busy (NVML utilization).", GPU, "ratio"),
    Family("gpustats_node_gpu_sharing_mode", INFO,
           "How the GPU is shared: exclusive, time-slicing, mps or mig.", GPU + ("mode",)),
    Family("gpustats_node_gpu_lost", GAUGE, "1 when NVML answers GPU_IS_LOST for the GPU.", GPU),
    Family("gpustats_node_gpu_healthy", GAUGE, "1 when every health condition is True.", GPU),
    Family("gpustats_node_gpu_condition", GAUGE, "Health conditions of the GPU (value 1).",
           GPU + ("type", "status", "reason")),
    Family("gpustats_node_gpu_xid_errors", COUNTER,
           "XID error events, every event counted (ignored application XIDs included).", GPU),
    Family("gpustats_node_gpu_throttle_violation_ratio", GAUGE,
           "Share of the saturation window spent throttled, by violation counter.",
           GPU + ("reason",), "ratio"),
    Family("gpustats_node_gpu_throttle_reason_ratio", GAUGE,
           "Share of samples in the saturation window with a clocks-event reason set.",
           GPU + ("reason",), "ratio"),
    Family("gpustats_node_gpu_memory_used_ratio", GAUGE,
           "Framebuffer used/total over the saturation window (stat avg or max).",
           GPU + ("stat",), "ratio"),
    Family("gpustats_node_gpu_memory_pressure_ratio", GAUGE,
           "Share of samples with framebuffer use at or above the pressure threshold.", GPU,
           "ratio"),
    Family("gpustats_node_gpu_sm_active_ratio", GAUGE, "GPM SM activity, window average.", GPU,
           "ratio"),
    Family("gpustats_node_gpu_sm_occupancy_ratio", GAUGE, "GPM SM occupancy, window average.",
           GPU, "ratio"),
    Family("gpustats_node_gpu_dram_active_ratio", GAUGE, "GPM DRAM activity, window average.",
           GPU, "ratio"),
    Family("gpustats_node_gpu_pcie_bytes_per_second", GAUGE, "PCIe throughput, window average.",
           GPU + ("direction",)),
    Family("gpustats_node_gpu_nvlink_bytes_per_second", GAUGE,
           "NVLink throughput, window average.", GPU + ("direction",)),
    Family("gpustats_node_gpu_mig_instance", INFO, "MIG GPU instance identity.",
           MIG + ("mig_uuid", "profile")),
    Family("gpustats_node_gpu_mig_memory_used_bytes", GAUGE, "Memory used in a MIG instance.",
           MIG, "bytes"),
    Family("gpustats_node_gpu_mig_activity_ratio", GAUGE,
           "MIG instance activity (dcgm-exporter or GPM).", MIG, "ratio"),
    Family("gpustats_node_gpu_mig_watts", GAUGE, "Active power attributed to a MIG instance.",
           MIG, "watts"),
    Family("gpustats_node_gpu_mig_joules", COUNTER, "Active energy attributed to a MIG instance.",
           MIG, "joules"),
    Family("gpustats_process_gpu_watts", GAUGE, "Active GPU power attributed to a process.",
           PROCESS, "watts"),
    Family("gpustats_process_gpu_joules", COUNTER, "Active GPU energy attributed to a process.",
           PROCESS, "joules"),
    Family("gpustats_process_gpu_compute_utilization_ratio", GAUGE,
           "SM utilization of the process over the tick, as NVML reports it.", PROCESS, "ratio"),
    Family("gpustats_process_gpu_memory_used_bytes", GAUGE, "GPU memory held by the process.",
           PROCESS, "bytes"),
    Family("gpustats_process_gpu_share_method", GAUGE,
           "How the process's share of active power was computed this tick (value 1): "
           "exclusive, sm-utilization, equal-split, mig-activity, mig-assumed-activity (an "
           "instance without activity data, given the mean of the others) or mig-equal-split.",
           PROCESS + ("method",)),
    Family("gpustats_container_gpu_watts", GAUGE, "Active GPU power attributed to a container.",
           CONTAINER, "watts"),
    Family("gpustats_container_gpu_joules", COUNTER,
           "Active GPU energy attributed to a container.", CONTAINER, "joules"),
    Family("gpustats_container_gpu_memory_used_bytes", GAUGE,
           "GPU memory held by the container's processes.", CONTAINER, "bytes"),
    Family("gpustats_container_gpu_compute_utilization_ratio", GAUGE,
           "Share of SM time the container's processes had over the tick (at most 1, also "
           "when MPS clients' percentages add up past 100).", CONTAINER, "ratio"),
    Family("gpustats_container_gpu_claim_unresolved", GAUGE,
           "1 for each DRA claim device a container holds that is not resolved to a GPU.",
           ("container_id", "container", "pod", "namespace", "claim", "claim_namespace",
            "driver", "pool", "device", "reason")),
    Family("gpustats_pod_gpu_watts", GAUGE, "Active GPU power attributed to a pod.", POD,
           "watts"),
    Family("gpustats_pod_gpu_joules", COUNTER,
           "Active GPU energy attributed to a pod (containers gone included).", POD, "joules"),
    Family("container_accelerator_duty_cycle", GAUGE,
           "Percent of time over the past sample period during which the accelerator was "
           "actively processing.", CADVISOR),
    Family("container_accelerator_memory_used_bytes", GAUGE, "Total accelerator memory allocated.",
           CADVISOR, "bytes"),
    Family("container_accelerator_memory_total_bytes", GAUGE, "Total accelerator memory.",
           CADVISOR, "bytes"),
    Family("gpustats_collection_errors", COUNTER, "Values that could not be collected, by why.",
           ("source", "reason")),
    Family("gpustats_source_last_success_timestamp_seconds", GAUGE,
           "Unix time of the source's last successful read.", ("source",), "seconds"),
    Family("gpustats_source_failing", GAUGE,
           "1 while the source is failing (its last read failed), 0 otherwise.", ("source",)),
    Family("gpustats_tick_duration_seconds", GAUGE, "Wall time of the last collection tick.",
           (), "seconds"),
    Family("gpustats_last_tick_timestamp_seconds", GAUGE,
           "Unix time at the end of the last collection tick.", (), "seconds"),
    Family("gpustats_nvml_loaded", GAUGE, "1 while an NVML session is open."),
    Family("gpustats_gpus_on_pci_bus", GAUGE, "NVIDIA GPUs found on the PCI bus."),
    Family("gpustats_nvml_calls_last_tick", GAUGE, "NVML calls made by the last tick."),
    Family("gpustats_snapshot_sequence", COUNTER, "Snapshots published since start."),
)

BY_NAME = {f.name: f for f in FAMILIES}
