"""Billing invariants checked on scraped expositions, tick after tick.

Per GPU: Σ process = Σ container = Σ pod = Σ MIG instance = active joules (the energy above
idle that the GPU used while its processes held it); and no counter ever decreases, within a
run or across a restart.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

LEVELS = ("gpustats_process_gpu_joules", "gpustats_container_gpu_joules",
          "gpustats_pod_gpu_joules", "gpustats_node_gpu_mig_joules")
ACTIVE = "gpustats_node_gpu_active_joules"

Series = tuple[str, frozenset]


def counters(text: str) -> dict[Series, float]:
    """Every ``*_joules_total`` sample: the energy counters users bill by.

    (Self-observation counters such as ``gpustats_snapshot_sequence`` count since the
    daemon's start and legitimately restart with it.)
    """
    out = {}
    for family in text_string_to_metric_families(text):
        if family.type != "counter" or not family.name.endswith("_joules"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                out[(family.name, frozenset(sample.labels.items()))] = sample.value
    return out


def sums_by_gpu(values: dict[Series, float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (name, labels), value in values.items():
        if name in LEVELS or name == ACTIVE:
            out[dict(labels)["gpu_uuid"]][name] += value
    return out


def assert_conservation(text: str, rel: float = 0.02, mig: bool = False) -> None:
    """Σ at each level equals the GPU's active joules (within ``rel``)."""
    for uuid, levels in sums_by_gpu(counters(text)).items():
        active = levels.get(ACTIVE)
        if not active:
            continue
        for level in LEVELS:
            if level == "gpustats_node_gpu_mig_joules" and not mig:
                continue
            assert levels.get(level, 0.0) == pytest.approx(active, rel=rel, abs=1e-3), \
                (uuid, level, dict(levels))


def assert_never_decreased(before: dict[Series, float], after: dict[Series, float]) -> None:
    """Every counter present in both is at least what it was (a small float slack)."""
    lowered = {k: (before[k], after[k]) for k in before.keys() & after.keys()
               if after[k] < before[k] - 1e-6}
    assert not lowered, lowered
