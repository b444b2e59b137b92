"""Prometheus exposition of one snapshot: a stateless collector over the snapshot it is given.

The families are those of ``export.metric_table``, in its order: each scope's rows (one per
GPU, process, container's GPU, …, with their label values shown once) are built here, and
each family's getter reads its samples from them. A family left out (``--disable-metrics``) is
not built, and a scope that only left-out families read is not walked.

Absent values produce no sample (no NaN, no 0). Rendered bytes are memoized per snapshot and
format by the store, so concurrent scrapes of one snapshot render once; OpenMetrics is
negotiated from the Accept header through prometheus-client.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Iterable, Protocol, Sequence, cast

from prometheus_client.core import (
    CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gpustats.engine.store import SnapshotStore
from gpustats.export import kepler, kepler_table, metric_table
from gpustats.export.accelerators import container_view
from gpustats.export.dcgm import render_dcgm
from gpustats.export.metric_table import COUNTER, FAMILIES, GAUGE, INFO, Family, enabled
from gpustats.export.tenants import tenant_gpus
from gpustats.export.text import shown
from gpustats.model.device import DeviceIdentity
from gpustats.model.dra import ClaimDevice
from gpustats.model.snapshot import PodStats, Snapshot


Row = tuple[object, tuple[str, ...]]        # (what the getters read, shown label values)


def _label(value: object) -> str:
    """Every label value, names from the host included, shown by the one rule (export.text)."""
    return "" if value is None else shown(str(value))


def _row(entity: object, labels: Iterable[object]) -> Row:
    return entity, tuple(_label(v) for v in labels)


GpuLabels = dict[str, tuple[object, str, object]]    # UUID -> (gpu, gpu_uuid, vendor)


def _gpu(identity: DeviceIdentity) -> tuple[object, str, object]:
    """The label values of ``metric_table.GPU``: index, UUID and vendor."""
    return identity.index, identity.uuid, identity.vendor


def _gpu_of(uuid: str, gpus: GpuLabels) -> tuple[object, str, object]:
    """A GPU's labels by its UUID; one the snapshot does not list has its UUID only."""
    return gpus.get(uuid) or (None, uuid, None)


def _device_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(d, _gpu(d.identity)) for d in snapshot.devices]


def _health_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(d.health, _gpu(d.identity)) for d in snapshot.devices if d.health is not None]


def _saturation_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(d.saturation, _gpu(d.identity)) for d in snapshot.devices
            if d.saturation is not None]


def _mig_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(m, (*_gpu(d.identity), m.gpu_instance_id))
            for d in snapshot.devices for m in d.mig_instances]


def _process_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[Row]:
    return [_row(p, (p.pid, p.start_time_ticks, *_gpu_of(p.device_uuid, gpus),
                     p.gpu_instance_id, p.container_id, p.comm, p.uid, p.user))
            for p in snapshot.processes]


def _names(pod: PodStats | None) -> tuple[str | None, str | None]:
    return (pod.name, pod.namespace) if pod is not None else (None, None)


def _claim_labels(claim: ClaimDevice | None) -> tuple[str | None, str | None]:
    return (claim.claim_name, claim.claim_namespace) if claim is not None else (None, None)


def _container_gpu_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[Row]:
    return [_row(a, (c.container_id, c.name, *_names(pod), *_gpu_of(a.device_uuid, gpus),
                     a.gpu_instance_id, *_claim_labels(a.claim)))
            for pod, c in snapshot.containers_with_pods() for a in c.accelerators]


def _container_view_rows(snapshot: Snapshot, *_) -> list[Row]:
    """cAdvisor's view: the device, or a MIG tenant's own instance (acc_id MIG-…)."""
    devices = {d.identity.uuid: d for d in snapshot.devices}
    rows = []
    for pod, c in snapshot.containers_with_pods():
        for a in c.accelerators:
            device = devices.get(a.device_uuid)
            if device is not None:
                view = container_view(a, device)
                rows.append(_row(view, (device.identity.vendor, view.model, view.id, c.name,
                                        *_names(pod), c.cgroup_path, c.container_id)))
    return rows


def _unresolved_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(u, (c.container_id, c.name, *_names(pod), u.claim.claim_name,
                     u.claim.claim_namespace, u.claim.driver_name, u.claim.pool_name,
                     u.claim.device_name, u.reason))
            for pod, c in snapshot.containers_with_pods() for u in c.unresolved_claims]


def _pod_gpu_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[Row]:
    return [_row(a, (pod.uid, pod.name, pod.namespace, *_gpu_of(a.device_uuid, gpus),
                     *_claim_labels(a.claim)))
            for pod in snapshot.pods for a in pod.accelerators]


def _tenant_gpu_rows(snapshot: Snapshot, gpus: GpuLabels) -> list[Row]:
    """Each tenant once per physical GPU (export.tenants), with its kind's identity labels."""
    rows = []
    for t in tenant_gpus(snapshot):
        i = t.identity
        rows.append(_row(t, (*_gpu_of(t.device_uuid, gpus), i.kind, i.name, i.namespace, i.pod,
                             i.pod_uid, i.container_id, i.unit, i.uid, i.user, i.job_id,
                             i.step)))
    return rows


def _source_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(state, (state.source,)) for state in snapshot.status.sources]


def _vendor_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(v, (v.vendor,)) for v in snapshot.status.vendors]


def _error_rows(snapshot: Snapshot, *_) -> list[Row]:
    return [_row(error, error[:2]) for error in snapshot.status.collection_errors]


def _shown_rows(build: Callable[[Snapshot, GpuLabels], Iterable[tuple[object, tuple]]]
                ) -> Callable[[Snapshot, GpuLabels], list[Row]]:
    """A scope of export.kepler: its raw label values shown by the one rule."""
    return lambda snapshot, gpus: [_row(entity, labels) for entity, labels
                                   in build(snapshot, gpus)]


# Each scope's rows, built once per collect() and only when an enabled family reads them.
ROWS: dict[str, Callable[[Snapshot, GpuLabels], list[Row]]] = {
    metric_table.NODE: lambda snapshot, _: [(snapshot, ())],
    metric_table.DEVICE: _device_rows,
    metric_table.HEALTH: _health_rows,
    metric_table.SATURATION: _saturation_rows,
    metric_table.MIG_INSTANCE: _mig_rows,
    metric_table.GPU_PROCESS: _process_rows,
    metric_table.CONTAINER_GPU: _container_gpu_rows,
    metric_table.CONTAINER_VIEW: _container_view_rows,
    metric_table.UNRESOLVED: _unresolved_rows,
    metric_table.POD_GPU: _pod_gpu_rows,
    metric_table.TENANT_GPU: _tenant_gpu_rows,
    metric_table.SOURCE_STATE: _source_rows,
    metric_table.VENDOR_STATUS: _vendor_rows,
    metric_table.ERROR_COUNT: _error_rows,
    # --kepler-compat: Kepler's families (export.kepler_table) over their own scopes.
    **{scope: _shown_rows(build) for scope, build in kepler.ROWS.items()},
}


class _Samples(Protocol):
    """What ``_fill`` calls on a family: ``value`` is a number, or an info family's labels."""

    def add_metric(self, labels: Sequence[str], value: Any) -> None: ...


def _metric(f: Family) -> CounterMetricFamily | GaugeMetricFamily | InfoMetricFamily:
    labels = ["node_name", *f.labels]
    if f.kind == COUNTER:
        return CounterMetricFamily(f.name, f.help, labels=labels, unit=f.unit)
    if f.kind == GAUGE:
        return GaugeMetricFamily(f.name, f.help, labels=labels, unit=f.unit)
    return InfoMetricFamily(f.name, f.help, labels=labels)


def _number(value: float | int | None) -> float | None:
    """The sample value, or None for no sample: absent, NaN and infinite values give none."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def _fill(metric: _Samples, f: Family, node: str, rows: list[Row]) -> None:
    """``metric``'s samples from the family's getter over its scope's rows."""
    if f.samples is None:
        get = f.value
        assert get is not None           # a family has a value getter or a samples one
        for entity, labels in rows:
            value = _number(get(entity))
            if value is not None:
                metric.add_metric([node, *labels], value)
        return
    info = f.kind == INFO
    for entity, labels in rows:
        for extra, raw in f.samples(entity):
            values = [node, *labels, *(_label(v) for v in extra)]
            if info:
                metric.add_metric(values, {})
            else:
                value = _number(raw)
                if value is not None:
                    metric.add_metric(values, value)


def families(snapshot: Snapshot, node_name: str,
             table: tuple[Family, ...] = FAMILIES) -> list[Metric]:
    """The families of ``table`` that have samples in this snapshot, in table order; a scope
    no family of ``table`` reads is not walked."""
    node = shown(node_name)
    gpus = {d.identity.uuid: _gpu(d.identity) for d in snapshot.devices}
    rows: dict[str, list[Row]] = {}
    out: list[Metric] = []
    for f in table:
        scope_rows = rows.get(f.scope)
        if scope_rows is None:
            scope_rows = rows[f.scope] = ROWS[f.scope](snapshot, gpus)
        metric = _metric(f)
        _fill(metric, f, node, scope_rows)
        if metric.samples:
            out.append(metric)
    return out


class PrometheusView:
    """A prometheus-client collector: ``collect()`` builds the table's families (all, or those
    of the groups left enabled) from the snapshot ``get_snapshot`` returns."""

    def __init__(self, get_snapshot: Callable[[], Snapshot | None], node_name: str | None = None,
                 table: tuple[Family, ...] = FAMILIES):
        self._get_snapshot = get_snapshot
        self._node_name = node_name
        self._table = table

    def describe(self) -> list[Metric]:
        return []         # nothing is collected at registration

    def collect(self) -> list[Metric]:
        snapshot = self._get_snapshot()
        if snapshot is None:
            return []
        return families(snapshot, self._node_name or snapshot.node.node_name, self._table)


_OPENMETRICS_EOF = b"# EOF\n"


def render(snapshot: Snapshot, accept: str | None, dcgm_compat: bool = False,
           dcgm_hostname_label: str = "Hostname",
           disabled_groups: Iterable[str] = (), kepler_compat: bool = False
           ) -> tuple[bytes, str]:
    """The exposition of one snapshot in the format the Accept header negotiates; with
    ``kepler_compat`` Kepler's families (``export.kepler_table``) follow ours, and with
    ``dcgm_compat`` dcgm-exporter's follow those (before OpenMetrics' ``# EOF``), their
    node label named ``dcgm_hostname_label``. The families of ``disabled_groups``
    (of ``metric_table.GROUPS``) are not built."""
    disabled = frozenset(disabled_groups)
    encoder, content_type = choose_encoder(accept or "")
    registry = CollectorRegistry(auto_describe=False)
    table = enabled(disabled) if disabled else FAMILIES
    if kepler_compat and metric_table.KEPLER not in disabled:
        table += kepler_table.FAMILIES
    registry.register(PrometheusView(lambda: snapshot, table=table))
    body = encoder(registry)
    if dcgm_compat and metric_table.DCGM not in disabled:
        openmetrics = body.endswith(_OPENMETRICS_EOF)
        dcgm = render_dcgm(snapshot, hostname_label=dcgm_hostname_label, openmetrics=openmetrics)
        if openmetrics:
            body = body[:-len(_OPENMETRICS_EOF)] + dcgm + _OPENMETRICS_EOF
        else:
            body += dcgm
    return body, content_type


class MetricsBodies:
    """The /metrics body of the latest snapshot in the format an Accept header negotiates:
    ``bodies(accept) -> (body, content type)``, rendered once per snapshot and format."""

    def __init__(self, store: SnapshotStore, dcgm_compat: bool = False,
                 dcgm_hostname_label: str = "Hostname", disabled_groups: Iterable[str] = (),
                 kepler_compat: bool = False):
        self._store = store
        self._dcgm_compat = dcgm_compat
        self._dcgm_hostname_label = dcgm_hostname_label
        self._disabled_groups = frozenset(disabled_groups)
        self._kepler_compat = kepler_compat

    def negotiate(self, accept: str | None
                  ) -> tuple[Hashable, Callable[[Snapshot], bytes], str]:
        """(memo key, body builder, content type) of the format the Accept header asks for."""
        _, content_type = choose_encoder(accept or "")
        build = lambda s: render(s, accept, self._dcgm_compat,  # noqa: E731
                                 self._dcgm_hostname_label, self._disabled_groups,
                                 self._kepler_compat)[0]
        return ("metrics", content_type), build, content_type

    def __call__(self, accept: str | None) -> tuple[bytes, str]:
        key, build, content_type = self.negotiate(accept)
        rendered = self._store.render(key, build)
        if rendered is None:
            return b"", content_type
        return cast(bytes, rendered[1]), content_type     # what ``build`` gave for ``key``
