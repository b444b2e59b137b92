"""Prometheus exposition of one snapshot: a stateless collector over the snapshot it is given.

Absent values produce no sample (no NaN, no 0). Rendered bytes are memoized per snapshot and
format by the store, so concurrent scrapes of one snapshot render once; OpenMetrics is
negotiated from the Accept header through prometheus-client.
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Iterable

from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gpustats import __version__
from gpustats.export.accelerators import container_view
from gpustats.engine.store import SnapshotStore
from gpustats.export.dcgm import render_dcgm
from gpustats.export.metric_table import BY_NAME, COUNTER, FAMILIES, GAUGE
from gpustats.export.text import shown
from gpustats.model.dra import ClaimDevice
from gpustats.model.snapshot import Snapshot


def _label(value: object) -> str:
    """Every label value, names from the host included, shown by the one rule (export.text)."""
    return "" if value is None else shown(str(value))


class _Families:
    """Fresh metric families for one collect(), filled by name."""

    def __init__(self, node_name: str):
        self._node = shown(node_name)
        self._families: dict[str, Metric] = {}
        for f in FAMILIES:
            labels = ["node_name", *f.labels]
            if f.kind == COUNTER:
                metric = CounterMetricFamily(f.name, f.help, labels=labels, unit=f.unit)
            elif f.kind == GAUGE:
                metric = GaugeMetricFamily(f.name, f.help, labels=labels, unit=f.unit)
            else:
                metric = InfoMetricFamily(f.name, f.help, labels=labels)
            self._families[f.name] = metric

    def add(self, name: str, labels: Iterable[object], value: float | int | None) -> None:
        if value is None:
            return
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            return
        values = [self._node, *(_label(v) for v in labels)]
        assert len(values) == len(BY_NAME[name].labels) + 1, name
        self._families[name].add_metric(values, value)

    def info(self, name: str, labels: Iterable[object], extra: dict[str, str] | None = None) -> None:
        values = [self._node, *(_label(v) for v in labels)]
        self._families[name].add_metric(values, extra or {})

    def all(self) -> list[Metric]:
        return [m for m in self._families.values() if m.samples]


class SnapshotCollector:
    """``collect()`` builds every family from the snapshot ``get_snapshot`` returns."""

    def __init__(self, get_snapshot: Callable[[], Snapshot | None], node_name: str | None = None):
        self._get_snapshot = get_snapshot
        self._node_name = node_name

    def describe(self) -> list[Metric]:
        return []         # nothing is collected at registration

    def collect(self) -> list[Metric]:
        snapshot = self._get_snapshot()
        if snapshot is None:
            return []
        out = _Families(self._node_name or snapshot.node.node_name)
        out.info("gpustats_build", [__version__])
        gpu_index = {d.identity.uuid: d.identity.index for d in snapshot.devices}
        _devices(out, snapshot)
        _processes(out, snapshot, gpu_index)
        _containers(out, snapshot, gpu_index)
        _daemon(out, snapshot)
        return out.all()


def _devices(out: _Families, snapshot: Snapshot) -> None:
    for d in snapshot.devices:
        ident = d.identity
        g = (ident.index, ident.uuid)
        out.info("gpustats_node_gpu", [*g, ident.name, "nvidia", ident.pci_bus_id,
                                       ident.minor_number])
        out.add("gpustats_node_gpu_lost", g, 1 if d.lost else 0)
        out.add("gpustats_node_gpu_watts", g, d.power_watts)
        out.add("gpustats_node_gpu_joules", g, d.energy_joules)
        out.add("gpustats_node_gpu_idle_watts", g, d.idle_power_watts)
        out.add("gpustats_node_gpu_active_watts", g, d.active_power_watts)
        out.add("gpustats_node_gpu_active_joules", g, d.active_energy_joules)
        out.add("gpustats_node_gpu_unattributed_watts", g, d.unattributed_power_watts)
        out.add("gpustats_node_gpu_unattributed_joules", g, d.unattributed_energy_joules)
        out.add("gpustats_node_gpu_power_limit_watts", g, d.power_limit_watts)
        out.add("gpustats_node_gpu_temperature_celsius", g, d.temperature_celsius)
        out.add("gpustats_node_gpu_memory_used_bytes", g, d.memory_used_bytes)
        out.add("gpustats_node_gpu_memory_total_bytes", g, ident.memory_total_bytes)
        out.add("gpustats_node_gpu_duty_cycle_ratio", g,
                d.duty_cycle_percent / 100.0 if d.duty_cycle_percent is not None else None)
        if d.sharing_mode is not None:
            out.info("gpustats_node_gpu_sharing_mode", [*g, d.sharing_mode])
        if d.health is not None:
            out.add("gpustats_node_gpu_healthy", g, 1 if d.health.healthy else 0)
            out.add("gpustats_node_gpu_xid_errors", g, d.health.xid_error_count)
            for c in d.health.conditions:
                out.add("gpustats_node_gpu_condition", [*g, c.type, c.status, c.reason], 1)
        s = d.saturation
        if s is not None:
            for reason, ratio in s.throttle_violation_ratios or ():
                out.add("gpustats_node_gpu_throttle_violation_ratio", [*g, reason], ratio)
            for reason, ratio in s.throttle_reason_ratios or ():
                out.add("gpustats_node_gpu_throttle_reason_ratio", [*g, reason], ratio)
            out.add("gpustats_node_gpu_memory_used_ratio", [*g, "avg"], s.memory_used_ratio_avg)
            out.add("gpustats_node_gpu_memory_used_ratio", [*g, "max"], s.memory_used_ratio_max)
            out.add("gpustats_node_gpu_memory_pressure_ratio", g, s.memory_pressure_ratio)
            out.add("gpustats_node_gpu_sm_active_ratio", g, s.sm_active_avg)
            out.add("gpustats_node_gpu_sm_occupancy_ratio", g, s.sm_occupancy_avg)
            out.add("gpustats_node_gpu_dram_active_ratio", g, s.dram_active_avg)
            out.add("gpustats_node_gpu_pcie_bytes_per_second", [*g, "tx"], s.pcie_tx_bytes_avg)
            out.add("gpustats_node_gpu_pcie_bytes_per_second", [*g, "rx"], s.pcie_rx_bytes_avg)
            out.add("gpustats_node_gpu_nvlink_bytes_per_second", [*g, "tx"],
                    s.nvlink_tx_bytes_avg)
            out.add("gpustats_node_gpu_nvlink_bytes_per_second", [*g, "rx"],
                    s.nvlink_rx_bytes_avg)
        for m in d.mig_instances:
            mg = (*g, m.gpu_instance_id)
            out.info("gpustats_node_gpu_mig_instance", [*mg, m.uuid, m.profile])
            out.add("gpustats_node_gpu_mig_memory_used_bytes", mg, m.memory_used_bytes)
            out.add("gpustats_node_gpu_mig_activity_ratio", mg, m.activity_ratio)
            out.add("gpustats_node_gpu_mig_watts", mg, m.attributed_power_watts)
            out.add("gpustats_node_gpu_mig_joules", mg, m.attributed_energy_joules)


def _processes(out: _Families, snapshot: Snapshot, gpu_index: dict[str, int]) -> None:
    for p in snapshot.processes:
        labels = (p.pid, p.start_time_ticks, gpu_index.get(p.device_uuid), p.device_uuid,
                  p.gpu_instance_id, p.container_id)
        if p.share_method is not None:
            # Its own series: the counters' identity must not change when the method does.
            out.add("gpustats_process_gpu_share_method", (*labels, p.share_method), 1)
        out.add("gpustats_process_gpu_watts", labels, p.attributed_power_watts)
        out.add("gpustats_process_gpu_joules", labels, p.attributed_energy_joules)
        out.add("gpustats_process_gpu_compute_utilization_ratio", labels,
                p.compute_utilization_percent / 100.0
                if p.compute_utilization_percent is not None else None)
        out.add("gpustats_process_gpu_memory_used_bytes", labels, p.memory_used_bytes)


def _containers(out: _Families, snapshot: Snapshot, gpu_index: dict[str, int]) -> None:
    devices = {d.identity.uuid: d for d in snapshot.devices}
    owners = [(pod.name, pod.namespace, c) for pod in snapshot.pods for c in pod.containers]
    owners += [(None, None, c) for c in snapshot.containers]
    for pod_name, namespace, c in owners:
        for u in c.unresolved_claims:
            claim = u.claim
            out.add("gpustats_container_gpu_claim_unresolved",
                    (c.container_id, c.name, pod_name, namespace, claim.claim_name,
                     claim.claim_namespace, claim.driver_name, claim.pool_name,
                     claim.device_name, u.reason), 1)
        for a in c.accelerators:
            labels = (c.container_id, c.name, pod_name, namespace, gpu_index.get(a.device_uuid),
                      a.device_uuid, a.gpu_instance_id, *_claim_labels(a.claim))
            out.add("gpustats_container_gpu_watts", labels, a.attributed_power_watts)
            out.add("gpustats_container_gpu_joules", labels, a.attributed_energy_joules)
            out.add("gpustats_container_gpu_memory_used_bytes", labels,
                    a.process_memory_used_bytes)
            out.add("gpustats_container_gpu_compute_utilization_ratio", labels,
                    a.compute_utilization_percent / 100.0
                    if a.compute_utilization_percent is not None else None)
            device = devices.get(a.device_uuid)
            if device is not None:
                # cAdvisor's view: the device, or a MIG tenant's own instance (acc_id MIG-…).
                view = container_view(a, device)
                cadvisor = ("nvidia", view.model, view.id, c.name, pod_name, namespace,
                            c.cgroup_path, c.container_id)
                out.add("container_accelerator_duty_cycle", cadvisor, view.duty_cycle_percent)
                out.add("container_accelerator_memory_used_bytes", cadvisor,
                        view.memory_used_bytes)
                out.add("container_accelerator_memory_total_bytes", cadvisor,
                        view.memory_total_bytes)
    for pod in snapshot.pods:
        for a in pod.accelerators:
            labels = (pod.uid, pod.name, pod.namespace, gpu_index.get(a.device_uuid),
                      a.device_uuid, *_claim_labels(a.claim))
            out.add("gpustats_pod_gpu_watts", labels, a.attributed_power_watts)
            out.add("gpustats_pod_gpu_joules", labels, a.attributed_energy_joules)


def _claim_labels(claim: ClaimDevice | None) -> tuple[str | None, str | None]:
    return (claim.claim_name, claim.claim_namespace) if claim is not None else (None, None)


def _daemon(out: _Families, snapshot: Snapshot) -> None:
    status = snapshot.status
    for source, reason, count in status.collection_errors:
        out.add("gpustats_collection_errors", (source, reason), count)
    for state in status.sources:
        out.add("gpustats_source_last_success_timestamp_seconds", (state.source,),
                state.last_success_time)
        out.add("gpustats_source_failing", (state.source,), 1 if state.state == "failing" else 0)
    out.add("gpustats_tick_duration_seconds", (), status.tick_duration_seconds)
    out.add("gpustats_last_tick_timestamp_seconds", (), snapshot.taken_at)
    out.add("gpustats_nvml_loaded", (), 1 if status.nvml_loaded else 0)
    out.add("gpustats_gpus_on_pci_bus", (), status.gpus_on_pci_bus)
    out.add("gpustats_nvml_calls_last_tick", (), status.nvml_calls_last_tick)
    out.add("gpustats_snapshot_sequence", (), snapshot.sequence)


_OPENMETRICS_EOF = b"# EOF\n"


def render(snapshot: Snapshot, accept: str | None, dcgm_compat: bool = False,
           dcgm_hostname_label: str = "Hostname") -> tuple[bytes, str]:
    """The exposition of one snapshot in the format the Accept header negotiates; with
    ``dcgm_compat`` dcgm-exporter's families follow ours (before OpenMetrics' ``# EOF``), their
    node label named ``dcgm_hostname_label``."""
    encoder, content_type = choose_encoder(accept or "")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot))
    body = encoder(registry)
    if dcgm_compat:
        dcgm = render_dcgm(snapshot, hostname_label=dcgm_hostname_label)
        if body.endswith(_OPENMETRICS_EOF):
            body = body[:-len(_OPENMETRICS_EOF)] + dcgm + _OPENMETRICS_EOF
        else:
            body += dcgm
    return body, content_type


class MetricsRenderer:
    """``renderer(accept) -> (body, content type)``, rendered once per snapshot and format."""

    def __init__(self, store: SnapshotStore, dcgm_compat: bool = False,
                 dcgm_hostname_label: str = "Hostname"):
        self._store = store
        self._dcgm_compat = dcgm_compat
        self._dcgm_hostname_label = dcgm_hostname_label

    def negotiate(self, accept: str | None
                  ) -> tuple[Hashable, Callable[[Snapshot], bytes], str]:
        """(memo key, body builder, content type) of the format the Accept header asks for."""
        _, content_type = choose_encoder(accept or "")
        build = lambda s: render(s, accept, self._dcgm_compat,  # noqa: E731
                                 self._dcgm_hostname_label)[0]
        return ("metrics", content_type), build, content_type

    def __call__(self, accept: str | None) -> tuple[bytes, str]:
        key, build, content_type = self.negotiate(accept)
        rendered = self._store.render(key, build)
        if rendered is None:
            return b"", content_type
        return rendered[1], content_type
