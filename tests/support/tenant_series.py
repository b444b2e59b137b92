"""Tenant series on a scraped exposition, and billing every tenant by the truth a scenario
gives (each process's SM share of one time-sliced GPU's active power)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gpus import GPU_A as GPU

POWER_WATTS, IDLE_WATTS = 600.0, 100.0
ACTIVE_WATTS = POWER_WATTS - IDLE_WATTS


def samples(text: str, name: str, **labels: str) -> list:
    """Every sample named so whose labels include ``labels``."""
    return [s for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def one(text: str, name: str, **labels: str) -> float | None:
    found = samples(text, name, **labels)
    assert len(found) <= 1, (name, labels, found)
    return found[0].value if found else None


def tenant_series(text: str, gpu: str) -> dict[tuple[str, str], dict]:
    """(kind, tenant) → the labels and values of its tenant series on ``gpu``."""
    out: dict[tuple[str, str], dict] = {}
    for name in ("gpustats_tenant_gpu_watts", "gpustats_tenant_gpu_joules_total"):
        for s in samples(text, name, gpu_uuid=gpu):
            key = (s.labels["kind"], s.labels["tenant"])
            entry = out.setdefault(key, {"labels": s.labels})
            entry[name] = s.value
    return out


def billed(tenants: dict, enough_joules: float):
    """A wait predicate: every tenant has its series and the tenants together were billed
    ``enough_joules``."""
    def predicate(text: str):
        series = tenant_series(text, GPU)
        if not all((kind, name) in series for kind, name, *_ in tenants.values()):
            return None
        if sum(s.get("gpustats_tenant_gpu_joules_total", 0.0) for s in series.values()) \
                < enough_joules:
            return None
        return text
    return predicate


def assert_billed_by_truth(text: str, tenants: dict, gpu: str, active_watts: float) -> None:
    """Each tenant's power is its SM share of the active power, and its energy its SM share of
    what the tenants were billed, within 1 %; Σ tenants + unattributed = active within 1 %."""
    series = tenant_series(text, gpu)
    total_sm = sum(t[-1] for t in tenants.values())
    joules = {(kind, name): series[(kind, name)]["gpustats_tenant_gpu_joules_total"]
              for kind, name, *_ in tenants.values()}
    billed_joules = sum(joules.values())
    for kind, name, *_, sm in tenants.values():
        truth = sm / total_sm
        watts = series[(kind, name)]["gpustats_tenant_gpu_watts"]
        assert watts == pytest.approx(truth * active_watts, rel=0.01), (kind, name, series)
        assert joules[(kind, name)] / billed_joules == pytest.approx(truth, rel=0.01), \
            (kind, name, joules)
    # Nothing is billed to a tenant that is not one of these.
    assert set(series) == set(joules), sorted(set(series) - set(joules))
    active = one(text, "gpustats_node_gpu_active_joules_total", gpu_uuid=gpu)
    unattributed = one(text, "gpustats_node_gpu_unattributed_joules_total", gpu_uuid=gpu)
    assert active is not None and unattributed is not None
    assert billed_joules + unattributed == pytest.approx(active, rel=0.01), \
        (billed_joules, unattributed, active)
    assert unattributed < 0.5 * billed_joules, (unattributed, billed_joules)
