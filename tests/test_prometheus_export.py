"""The /metrics exposition: golden text, absence, counters, negotiation, caching, validity."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.engine.store import SnapshotStore
from gpustats.export.metric_table import FAMILIES
from gpustats.export.prometheus import MetricsBodies, render
from tests.support.snapshots import A, B, sample_snapshot

GOLDEN = Path(__file__).parent / "golden" / "metrics_sample.txt"


def _text(snapshot=None):
    body, content_type = render(snapshot or sample_snapshot(), None)
    assert content_type.startswith("text/plain")
    return body.decode()


def _samples(text):
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def test_golden_exposition():
    text = _text()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_valid_no_nan_and_node_name_everywhere():
    text = _text()
    assert "NaN" not in text and "Inf" not in text
    samples = _samples(text)
    assert samples
    assert all(s.labels.get("node_name") == "node-1" for s in samples)


def test_absent_values_have_no_sample():
    samples = _samples(_text())
    lost_b = [s for s in samples if s.labels.get("gpu_uuid") == B]
    names = {s.name for s in lost_b}
    assert "gpustats_node_gpu_lost" in names and "gpustats_node_gpu_healthy" in names
    for absent in ("gpustats_node_gpu_watts", "gpustats_node_gpu_joules_total",
                   "gpustats_node_gpu_memory_used_bytes", "gpustats_node_gpu_duty_cycle_ratio"):
        assert absent not in names
    a_sat = {s.name for s in samples if s.labels.get("gpu_uuid") == A}
    assert "gpustats_node_gpu_sm_active_ratio" in a_sat
    assert "gpustats_node_gpu_sm_occupancy_ratio" not in a_sat      # absent in the window
    assert "gpustats_node_gpu_nvlink_bytes_per_second" not in a_sat


def test_every_declared_family_has_help_and_type():
    text = _text()
    for f in FAMILIES:
        exposed = f.name + ("_info" if f.kind == "info" else "") + \
            ("_total" if f.kind == "counter" else "")
        if exposed in text:
            assert f"# HELP {exposed} " in text and f"# TYPE {exposed} " in text


def test_counters_monotonic_across_scrapes():
    def counters(snapshot):
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for s in _samples(_text(snapshot)) if s.name.endswith("_total")}
    first, second = counters(sample_snapshot(1, 1.0)), counters(sample_snapshot(2, 1.5))
    assert first.keys() == second.keys() and first
    assert all(second[k] >= first[k] for k in first)


def test_cadvisor_compatible_series():
    samples = [s for s in _samples(_text()) if s.name == "container_accelerator_duty_cycle"]
    trainer = next(s for s in samples if s.labels["container"] == "trainer")
    assert trainer.labels["make"] == "nvidia" and trainer.labels["acc_id"] == A
    assert trainer.labels["pod"] == "trainer-0" and trainer.labels["namespace"] == "ml"
    assert trainer.value == 40


def test_openmetrics_negotiation_and_render_once():
    store = SnapshotStore()
    store.publish(sample_snapshot())
    renderer = MetricsBodies(store)
    body, content_type = renderer("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")
    text1, _ = renderer("text/plain")
    text2, _ = renderer(None)
    assert text1 is text2                      # the same bytes object: rendered once
    store.publish(sample_snapshot(8))
    assert renderer(None)[0] is not text1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics_is_clean():
    result = subprocess.run(["promtool", "check", "metrics"], input=_text(),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == ""
