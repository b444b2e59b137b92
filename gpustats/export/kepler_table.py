"""Kepler's GPU metric vocabulary (``--kepler-compat``), declared once as ``metric_table`` rows.

Names, types, labels and when a series exists are those of Kepler's collector
(``internal/exporter/prometheus/collector/power_collector.go`` and ``gpuinfo.go``): node series
carry ``gpu, gpu_uuid, gpu_name, vendor``; process, container and pod series carry no GPU label
(one series per workload, summed over its GPUs) and exist only while their value is above zero.
No Kepler release has EP-003's ``kepler_process_gpu_compute_utilization``: it is not served
(``gpustats_process_gpu_sm_utilization`` has the figure). Every series also carries
``node_name`` (added by ``export.prometheus``).

What the figures mean in gpustats' terms (the README says where they differ from Kepler's):

* node: the GPU's whole energy and power, its idle power, its active power and energy (above
  idle), and its idle energy (whole minus active, never below a value served before:
  ``DeviceStats.idle_energy_joules``);
* process, container, pod: the *active* energy and power attributed to them, as Kepler's are;
  the idle shares gpustats bills to holders are in its own ``*_idle_share_*`` families.

``state`` is ``running`` while the owner lives and ``terminated`` while its counter is kept
after it ended (a terminated owner has joules and no watts sample). Rows are built by
``export.kepler``, one per label set; a value of ``None`` gives no sample.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from gpustats.export.metric_table import COUNTER, GAUGE, KEPLER, Family, Value

# Scopes: what one row is (see export.kepler) and the labels it carries.
KEPLER_GPU = "kepler_gpu"              # DeviceStats; NODE_GPU
KEPLER_PROCESS = "kepler_process"      # kepler.Usage of a process on a GPU; PROCESS
KEPLER_CONTAINER = "kepler_container"  # kepler.Usage of a container on a GPU; CONTAINER
KEPLER_POD = "kepler_pod"              # kepler.Usage of a pod on a GPU; POD

NODE_GPU = ("gpu", "gpu_uuid", "gpu_name", "vendor")
PROCESS = ("pid", "comm", "exe", "type", "state", "container_id", "vm_id")
CONTAINER = ("container_id", "container_name", "runtime", "state", "pod_id")
POD = ("pod_id", "pod_name", "pod_namespace", "state")

# Kepler's literals
RUNNING, TERMINATED = "running", "terminated"
REGULAR, CONTAINER_PROCESS = "regular", "container"      # a process's ``type``
UNKNOWN_RUNTIME = "unknown"                              # a container's ``runtime``

_at = attrgetter


def _positive(name: str) -> Value:
    """A workload's figure, served only while above zero (Kepler's ``if … > 0``)."""
    get = attrgetter(name)

    def value(row: Any) -> float | int | None:
        v = get(row)
        return v if v is not None and v > 0 else None
    return value


def _node(name: str, kind: str, help: str, unit: str, value: Value) -> Family:
    return Family(name, kind, help, NODE_GPU, unit, group=KEPLER, scope=KEPLER_GPU, value=value)


FAMILIES: tuple[Family, ...] = (
    _node("kepler_node_gpu_info", GAUGE,
          "GPU device information for mapping index to UUID/name.", "", lambda d: 1),
    _node("kepler_node_gpu_joules", COUNTER,
          "Total energy consumption of GPU at node level in joules.", "joules",
          _at("energy_joules")),
    _node("kepler_node_gpu_watts", GAUGE,
          "Total power consumption of GPU at node level in watts.", "watts", _at("power_watts")),
    _node("kepler_node_gpu_idle_watts", GAUGE,
          "Idle power consumption of GPU at node level in watts (configured, else learned).",
          "watts", _at("idle_power_watts")),
    _node("kepler_node_gpu_active_watts", GAUGE,
          "GPU active power (total - idle) in watts, over the last tick.", "watts",
          _at("active_power_watts")),
    _node("kepler_node_gpu_active_joules", COUNTER,
          "Energy consumption of GPU above idle at node level in joules.", "joules",
          _at("active_energy_joules")),
    _node("kepler_node_gpu_idle_joules", COUNTER,
          "Energy consumption of GPU at idle at node level in joules (total - active).",
          "joules", _at("idle_energy_joules")),
    Family("kepler_process_gpu_joules", COUNTER,
           "Energy consumption of gpu at process level in joules (active energy, its GPUs "
           "summed).", PROCESS, "joules", group=KEPLER, scope=KEPLER_PROCESS,
           value=_positive("joules")),
    Family("kepler_process_gpu_watts", GAUGE,
           "Power consumption of gpu at process level in watts (active power, its GPUs "
           "summed).", PROCESS, "watts", group=KEPLER, scope=KEPLER_PROCESS,
           value=_positive("watts")),
    Family("kepler_container_gpu_joules", COUNTER,
           "Energy consumption of gpu at container level in joules (active energy, its GPUs "
           "summed).", CONTAINER, "joules", group=KEPLER, scope=KEPLER_CONTAINER,
           value=_positive("joules")),
    Family("kepler_container_gpu_watts", GAUGE,
           "Power consumption of gpu at container level in watts (active power, its GPUs "
           "summed).", CONTAINER, "watts", group=KEPLER, scope=KEPLER_CONTAINER,
           value=_positive("watts")),
    Family("kepler_pod_gpu_joules", COUNTER,
           "Energy consumption of gpu at pod level in joules (active energy, its GPUs "
           "summed).", POD, "joules", group=KEPLER, scope=KEPLER_POD,
           value=_positive("joules")),
    Family("kepler_pod_gpu_watts", GAUGE,
           "Power consumption of gpu at pod level in watts (active power, its GPUs summed).",
           POD, "watts", group=KEPLER, scope=KEPLER_POD, value=_positive("watts")),
)

NAMES = frozenset(f.name for f in FAMILIES)
