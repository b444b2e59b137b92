"""Every scalar value of one GPU, declared once: one ``DeviceValue`` row each.

A row says how the value is read from a ``DeviceStats`` (or its sweep, ``reading``), its unit,
and where it is shown: its key in the Summary API's ``node.accelerators[]`` and in the history
points, with its OpenAPI schema; its /metrics family; its figure on the page; whether the
history keeps it. The views walk the rows (``export.summary``, ``export.metric_table``,
``export.page``, ``export.history``, ``web.openapi`` and ``engine.history``), so a new device
value is one more row here. The table sits on the model floor because the history ring, in
the engine, reads it as the exporters do.

The GPU's identity and what is more than one number (the sharing mode, MIG instances, health,
saturation) stay hand-written where they are shown.
"""

from __future__ import annotations

from typing import Any, Callable

from gpustats.model.device import VENDOR_NVIDIA
from gpustats.model.record import record
from gpustats.model.snapshot import DeviceStats

Number = int | float

GAUGE, COUNTER = "gauge", "counter"

# OpenAPI schemas of the values.
COUNT = {"type": "integer", "minimum": 0}            # bytes
AMOUNT = {"type": "number", "minimum": 0}            # watts, joules
PERCENT = {"type": "integer", "minimum": 0, "maximum": 100}
INTEGER = {"type": "integer"}

# The kubelet's own AcceleratorStats keys after make, model and id (k8s.io/kubelet
# pkg/apis/stats/v1alpha1), in its order. Every other key is gpustats' extension, which a
# strict Summary leaves out: a new row never adds to the kubelet's shape.
KUBELET_KEYS = ("memoryTotal", "memoryUsed", "dutyCycle")


@record
class Metric:
    """The value's /metrics family. Its labels are every per-GPU family's (``gpu``,
    ``gpu_uuid``, ``vendor``, and ``node_name``)."""

    name: str            # a counter by its base name: the exposition adds ``_total``
    help: str
    unit: str = ""       # the unit the name ends with (Prometheus base units)
    kind: str = GAUGE    # GAUGE or COUNTER
    divisor: int = 1     # the value is divided by it: 100 makes a percent a ratio
    group: str = "gpu"   # the --disable-metrics group


@record
class Figure:
    """The value on the page's GPU card."""

    label: str
    # A str.format template for the value; None: the page's format for the row's unit
    # (bytes, watts, joules, percent).
    template: str | None = None
    of: str | None = None    # the row whose value this one is a part of: "used / total"
    # The vendors whose GPUs have it (model.device's VENDOR_*); None: every vendor's. Another
    # vendor's card leaves it out rather than show a concept its driver has not ("P0").
    vendors: tuple[str, ...] | None = None


@record
class DeviceValue:
    """One scalar value of a GPU and where it is shown; ``None`` for a place it is not."""

    name: str                # a ``DeviceStats`` field's name, where it is one
    unit: str                # bytes, watts, joules, celsius, percent; "" for a plain number
    description: str         # what the value is, for the API's readers
    key: str | None = None   # its JSON key (Summary, history points)
    schema: dict[str, Any] | None = None     # its OpenAPI schema, where it has a key
    digits: int | None = None      # decimals kept in the JSON and the history
    metric: Metric | None = None
    figure: Figure | None = None
    history: bool = False          # a point per history tick
    # How the value is read; None: the ``DeviceStats`` field of the row's name.
    read: Callable[[DeviceStats], Number | None] | None = None

    def value(self, device: DeviceStats) -> Number | None:
        """The value as read, ``None`` where it is absent."""
        return self.read(device) if self.read is not None else getattr(device, self.name)

    def rounded(self, device: DeviceStats) -> Number | None:
        """The value as the JSON and the history keep it."""
        value = self.value(device)
        return value if value is None or self.digits is None else round(value, self.digits)


def _memory_total(device: DeviceStats) -> int | None:
    return device.identity.memory_total_bytes


def _performance_state(device: DeviceStats) -> int | None:
    return device.reading.performance_state if device.reading is not None else None


# In the order of their /metrics families.
DEVICE_VALUES: tuple[DeviceValue, ...] = (
    DeviceValue(
        "power_watts", "watts", "Power draw (the instantaneous reading).", "powerWatts",
        AMOUNT, 3, Metric("gpustats_node_gpu_watts", "GPU power draw.", "watts"),
        Figure("power", of="power_limit_watts"), history=True),
    DeviceValue(
        "energy_joules", "joules", "Energy counted since gpustats first saw the GPU "
        "(monotonic across driver reloads and restarts).", "energyJoules", AMOUNT, 3,
        Metric("gpustats_node_gpu_joules",
               "GPU energy counted since gpustats first saw the GPU (from the GPU's energy "
               "counter deltas), monotonic across driver reloads and restarts.", "joules",
               COUNTER),
        Figure("energy")),
    DeviceValue(
        "idle_power_watts", "watts", "Idle power: configured, or learned from idle ticks "
        "(absent until the GPU was seen idle).", "idlePowerWatts", AMOUNT, 3,
        Metric("gpustats_node_gpu_idle_watts",
               "GPU idle power: configured, or the lowest power that held for three idle "
               "ticks (absent until the GPU was seen idle).", "watts"),
        Figure("idle"), history=True),
    DeviceValue(
        "active_power_watts", "watts", "Power above idle over the tick.", "activePowerWatts",
        AMOUNT, 3,
        Metric("gpustats_node_gpu_active_watts",
               "GPU power above idle: the tick's active energy over the tick's length.",
               "watts"),
        Figure("active"), history=True),
    DeviceValue(
        "active_energy_joules", "joules", "Energy above idle.",
        metric=Metric("gpustats_node_gpu_active_joules", "GPU energy above idle.", "joules",
                      COUNTER)),
    DeviceValue(
        "unattributed_power_watts", "watts", "Power above idle that no container is billed "
        "for, over the tick.", "unattributedPowerWatts", AMOUNT, 3,
        Metric("gpustats_node_gpu_unattributed_watts",
               "GPU power above idle that no container is billed for (no process, processes "
               "in no container, or processes unknown), over the tick.", "watts")),
    DeviceValue(
        "unattributed_energy_joules", "joules", "Energy above idle that no container is "
        "billed for.", "unattributedEnergyJoules", AMOUNT, 3,
        Metric("gpustats_node_gpu_unattributed_joules",
               "GPU energy above idle that no container is billed for; with the containers' "
               "energy it adds up to the active energy.", "joules", COUNTER)),
    DeviceValue(
        "unallocated_idle_power_watts", "watts", "Idle power no tenant held the GPU for, "
        "over the tick.", "unallocatedIdlePowerWatts", AMOUNT, 3,
        Metric("gpustats_node_gpu_unallocated_idle_watts",
               "GPU idle power no tenant held the GPU (or that part of it) for, over the "
               "tick.", "watts"), history=True),
    DeviceValue(
        "unallocated_idle_energy_joules", "joules", "Idle energy no tenant held the GPU for.",
        "unallocatedIdleEnergyJoules", AMOUNT, 3,
        Metric("gpustats_node_gpu_unallocated_idle_joules",
               "GPU idle energy no tenant held the GPU for; with the holders' idle shares it "
               "adds up to the idle energy.", "joules", COUNTER)),
    DeviceValue(
        "unobserved_energy_joules", "joules", "Energy the GPU's counter gained while gpustats "
        "did not observe it (not running, or the GPU lost): billed to no one.",
        "unobservedEnergyJoules", AMOUNT, 3,
        Metric("gpustats_node_gpu_unobserved_joules",
               "GPU energy its counter gained while gpustats did not observe it (not running, "
               "or the GPU lost), billed to no one; with the holders' energy and idle shares, "
               "the unallocated idle and the unattributed energy it adds up to the GPU's "
               "energy.", "joules", COUNTER),
        Figure("unobserved")),
    DeviceValue(
        "power_limit_watts", "watts", "Enforced power limit.", "powerLimitWatts", AMOUNT, 3,
        Metric("gpustats_node_gpu_power_limit_watts", "Enforced GPU power limit.", "watts")),
    DeviceValue(
        "temperature_celsius", "celsius", "Core temperature.", "temperatureCelsius",
        INTEGER, None,
        Metric("gpustats_node_gpu_temperature_celsius", "GPU core temperature.", "celsius"),
        Figure("temperature", "{} °C"), history=True),
    DeviceValue(
        "memory_used_bytes", "bytes", "Framebuffer memory in use.", "memoryUsed", COUNT, None,
        Metric("gpustats_node_gpu_memory_used_bytes", "GPU framebuffer memory in use.",
               "bytes"),
        Figure("memory", of="memory_total_bytes"), history=True),
    DeviceValue(
        "memory_total_bytes", "bytes", "Framebuffer memory.", "memoryTotal", COUNT, None,
        Metric("gpustats_node_gpu_memory_total_bytes", "GPU framebuffer memory.", "bytes"),
        read=_memory_total),
    DeviceValue(
        "duty_cycle_percent", "percent", "Percent of the last sample period the GPU was busy.",
        "dutyCycle", PERCENT, None,
        Metric("gpustats_node_gpu_duty_cycle_ratio",
               "Share of the last sample period the GPU was busy (NVML utilization).",
               "ratio", divisor=100),
        Figure("duty cycle"), history=True),
    DeviceValue(
        "performance_state", "", "Performance state: 0 (P0, the most performance) to 15 "
        "(P15, the least).", "performanceState",
        {"type": "integer", "minimum": 0, "maximum": 15}, None,
        Metric("gpustats_node_gpu_performance_state",
               "Performance state of the GPU: 0 (P0, the most performance) to 15 (P15, the "
               "least)."),
        Figure("performance state", "P{}", vendors=(VENDOR_NVIDIA,)), history=True,
        read=_performance_state),
)
