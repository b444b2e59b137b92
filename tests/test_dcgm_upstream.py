"""dcgm-exporter's default counters file against the project's table (facts read from
dcgm-exporter's source, kept with the commit), units on the wire, per-XID counts, and every
vocabulary's /metrics body valid under prometheus-client's OpenMetrics parser."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import \
    text_string_to_metric_families as openmetrics_families

from gpustats.export.dcgm import render_dcgm
from gpustats.export.dcgm_counters import DEFAULT_COUNTERS
from gpustats.export.dcgm_table import DEVICE_FIELDS, NAMES, XID
from gpustats.export.prometheus import render
from gpustats.health import count_xid
from gpustats.model.health import XID_OTHER, XID_SERIES_CAP, XID_WINDOW_SECONDS
from tests.support.dcgm_snapshot import dcgm_snapshot, one_sample, samples
from tests.support.snapshots import sample_snapshot

FACTS = json.loads((Path(__file__).parent / "peers" / "dcgm_default_counters.json").read_text())
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
_FIELDS = {f.name: f for f in (*DEVICE_FIELDS, XID)}


def test_facts_name_their_origin():
    origin = FACTS["origin"]
    assert origin["repository"] == "NVIDIA/dcgm-exporter"
    assert origin["path"] == "etc/default-counters.csv"
    assert re.fullmatch(r"[0-9a-f]{40}", origin["commit"])


def test_the_table_has_every_field_of_the_file_with_its_type_and_unit():
    table = [[c.name, c.kind, c.unit, c.enabled] for c in DEFAULT_COUNTERS]
    assert table == FACTS["fields"]


def test_served_fields_are_served_with_upstreams_type_and_unit():
    for c in DEFAULT_COUNTERS:
        assert (c.name in NAMES) == (c.not_served is None), c.name
        if c.not_served is None:
            field = _FIELDS[c.name]
            assert field.kind == c.kind, c.name
            if c.unit:
                assert f"(in {c.unit})" in field.help, (c.name, field.help)


def test_violation_counters_in_nanoseconds():
    text = render_dcgm(dcgm_snapshot()).decode()
    # The driver's counters are in ns; dcgm-exporter serves DCGM's field as it is.
    assert one_sample(text, "DCGM_FI_DEV_POWER_VIOLATION", gpu="0")[1] == 2_000_000_123
    assert one_sample(text, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu="0")[1] == 7_000
    assert "Throttling duration due to power constraints (in ns)." in text


# ----------------------------------------------------------------------- per-XID counts

def test_xids_counted_per_code_at_most_64_series_per_gpu():
    health = dcgm_snapshot().devices[1].health
    for i in range(100):
        health = count_xid(health, 1000 + i, 10.0 + i)
    counts = dict(health.xid_counts)
    assert len(counts) == XID_SERIES_CAP and counts[XID_OTHER] == 100 - (XID_SERIES_CAP - 1)
    assert sum(counts.values()) == health.xid_error_count == 100
    assert health.last_xid == 1099


def test_the_window_keeps_only_its_own_events():
    health = dcgm_snapshot().devices[1].health
    health = count_xid(health, 79, 0.0)
    health = count_xid(health, 48, XID_WINDOW_SECONDS + 1)
    assert health.recent_xids == ((48, XID_WINDOW_SECONDS + 1),)
    assert dict(health.xid_counts) == {"79": 1, "48": 1}


def _with_xids(now: float):
    snap = dcgm_snapshot()
    a = snap.devices[0]
    health = a.health
    for code, when in ((79, now - 400), (48, now - 10), (48, now - 5), (13, now - 1)):
        health = count_xid(health, code, when)
    return replace(snap, taken_at=now, devices=(replace(a, health=health), snap.devices[1]))


def test_dcgm_xid_count_per_xid_over_its_window():
    text = render_dcgm(_with_xids(1000.0)).decode()
    found = {lab["xid"]: v for lab, v in samples(text, "DCGM_EXP_XID_ERRORS_COUNT")}
    assert found == {"48": 2, "13": 1}         # XID 79 fell out of the 5-minute window
    labels, _ = one_sample(text, "DCGM_EXP_XID_ERRORS_COUNT", xid="48")
    assert labels["window_size_in_ms"] == "300000" and labels["pod"] == "train-0"
    assert "# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge" in text


def test_own_xid_counter_has_an_xid_label():
    text = render(_with_xids(1000.0), None)[0].decode()
    found = {lab["xid"]: v for lab, v in samples(text, "gpustats_node_gpu_xid_errors")
             if lab["gpu"] == "0"}
    assert found == {"79": 1, "48": 2, "13": 1}


# -------------------------------------------------------- OpenMetrics in every vocabulary

VOCABULARIES = {"own": {}, "dcgm": {"dcgm_compat": True}, "kepler": {"kepler_compat": True},
                "all": {"dcgm_compat": True, "kepler_compat": True}}


@pytest.mark.parametrize("vocabulary", sorted(VOCABULARIES))
@pytest.mark.parametrize("snapshot", [_with_xids(1000.0), dcgm_snapshot(holders=2),
                                      sample_snapshot()], ids=["xids", "dcgm", "sample"])
def test_openmetrics_body_parses_in_every_vocabulary(vocabulary, snapshot):
    body, content_type = render(snapshot, OPENMETRICS, **VOCABULARIES[vocabulary])
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(body.decode())}
    assert families
    if "dcgm_compat" in VOCABULARIES[vocabulary] and snapshot.devices[0].reading is not None:
        energy = families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
        # dcgm-exporter's counters keep their bare names: typed unknown in OpenMetrics.
        assert energy.type == "unknown"
        assert {s.name for s in energy.samples} == {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}


# ------------------------------------------------- the default counters against the simulator

GIB, MIB = 1 << 30, 1 << 20
TRUTH = {
    "uuid": "GPU-5f2e7c9a-0000-1111-2222-333344445555", "minor": 0,
    "memory_total_bytes": 80 * GIB, "memory_used_bytes": 20 * GIB,
    "memory_reserved_bytes": 512 * MIB, "utilization_percent": 87,
    "memory_utilization_percent": 41, "encoder_utilization_percent": 3,
    "decoder_utilization_percent": 9, "power_watts": 612.5, "temperature_celsius": 64,
    "memory_temperature_celsius": 71, "sm_clock_mhz": 1755, "memory_clock_mhz": 2619,
    "pcie_replay_count": 4,
    "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": False, "failure": True},
    "violations": {"power_percent": 20, "thermal_percent": 10},
}
# The scenario's figure of each default counter served, in dcgm-exporter's unit; the counters
# the simulator runs (energy, violations) are checked against the driver's own counters.
EXPECTED = {
    "DCGM_FI_DEV_SM_CLOCK": 1755, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_MEMORY_TEMP": 71,
    "DCGM_FI_DEV_GPU_TEMP": 64, "DCGM_FI_DEV_POWER_USAGE": 612.5,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 4, "DCGM_FI_DEV_GPU_UTIL": 87,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 41, "DCGM_FI_DEV_ENC_UTIL": 3, "DCGM_FI_DEV_DEC_UTIL": 9,
    "DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_DEV_FB_USED": 20 * 1024,
    "DCGM_FI_DEV_FB_FREE": 80 * 1024 - 20 * 1024 - 512,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1,
}
COUNTED = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_counter_millijoules",
           "DCGM_FI_DEV_POWER_VIOLATION": "violations.power_ns",
           "DCGM_FI_DEV_THERMAL_VIOLATION": "violations.thermal_ns",
           "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": "violations.sync_boost_ns",
           "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": "violations.board_limit_ns"}


def test_every_served_default_counter_is_the_simulated_truth_in_its_unit(tmp_path,
                                                                         in_process_daemon):
    from tests.support.fakehost import build, write_scenario
    write_scenario(tmp_path / "s.yaml", {"devices": [TRUTH]})
    started = time.time()
    cgroup, proc = build(tmp_path / "host", {})
    daemon = in_process_daemon("--simulate", str(tmp_path / "s.yaml"), "--cgroup-root",
                               str(cgroup), "--proc-root", str(proc), "--dcgm-exporter-url",
                               "none")
    daemon.housekeeper.tick()
    snapshot = daemon.housekeeper.tick()
    reading = snapshot.devices[0].reading
    text = render(snapshot, None, dcgm_compat=True)[0].decode()
    served = [c for c in DEFAULT_COUNTERS if c.not_served is None]
    assert {c.name for c in served} == set(EXPECTED) | set(COUNTED)
    for c in served:
        got = one_sample(text, c.name, gpu="0")[1]
        if c.name in EXPECTED:
            assert got == pytest.approx(EXPECTED[c.name]), c.name
        else:
            raw = reading
            for part in COUNTED[c.name].split("."):
                raw = getattr(raw, part)
            assert got == raw, c.name              # the driver's counter, its unit unchanged
    # ns, not µs: 20 % and 10 % of the time the simulator ran, one twice the other.
    assert reading.violations.power_ns == pytest.approx(2 * reading.violations.thermal_ns,
                                                        rel=0.05)
    # At most 20 % of the time since the scenario was written, in ns; in µs it would be
    # 1,000 times less than the simulator's own count.
    served_ns = one_sample(text, "DCGM_FI_DEV_POWER_VIOLATION", gpu="0")[1]
    assert served_ns == reading.violations.power_ns
    assert 0 < served_ns <= 0.2 * (time.time() - started) * 1e9 * 1.05
