"""The energy state's documents, built and parsed without files."""

from __future__ import annotations

import json

import pytest

from gpustats.engine.state_files import FORMAT_VERSION, NewerStateVersion
from gpustats.engine.state_schema import (
    SCHEMA_VERSION, DeviceRecord, journal_entry, parse_journal_entry, parse_state_document,
    state_document,
)
from gpustats.model.energy_keys import ProcessKey

RECORD = DeviceRecord(idle_watts=61.5, energy_counter_mj=12, boot_id="b", read_at=3.0, index=0)


def test_a_snapshot_document_parses_back_to_what_built_it():
    counters = [(("device", "GPU-a"), 10.0, 99.5), (("process", "GPU-a", 7, None), 2.5, None),
                (ProcessKey("GPU-a", 8, 250, "boot-b"), 1.5, 99.5)]
    document = json.loads(json.dumps(state_document(100.0, 4, counters, {"GPU-a": RECORD})))
    assert document["version"] == SCHEMA_VERSION == FORMAT_VERSION
    assert document["saved_at"] == 100.0
    assert document["counters"][2]["key"] == ["process", "GPU-a", 8, 250, "boot-b"]
    parsed = parse_state_document(document)
    assert parsed.counters == {("device", "GPU-a"): 10.0, ("process", "GPU-a", 7, None): 2.5,
                               ("process", "GPU-a", 8, 250, "boot-b"): 1.5}
    assert parsed.updated == {("device", "GPU-a"): 99.5,       # no time: left out, not 0
                              ("process", "GPU-a", 8, 250, "boot-b"): 99.5}
    assert parsed.devices == {"GPU-a": RECORD} and parsed.journal_sequence == 4
    assert parsed.version == SCHEMA_VERSION


def test_an_older_snapshot_says_its_version():
    parsed = parse_state_document({"version": 2, "counters": [
        {"key": ["process", "GPU-a", 7, 250], "joules": 2.5}]})
    assert parsed.version == 2
    assert parsed.counters == {("process", "GPU-a", 7, 250): 2.5}       # of an unknown boot


def test_a_journal_line_parses_back_to_what_built_it():
    line = json.loads(json.dumps(journal_entry(5, 1.0, [(("pod", "uid", "GPU-a"), 0.0)],
                                               {"GPU-a": DeviceRecord(name="H100")})))
    assert line == {"sequence": 5, "at": 1.0, "counters": [[["pod", "uid", "GPU-a"], 0.0]],
                    "devices": {"GPU-a": {"name": "H100"}}}
    assert parse_journal_entry(line) == (5, {("pod", "uid", "GPU-a"): 0.0},
                                         {"GPU-a": DeviceRecord(name="H100")})


@pytest.mark.parametrize("document", [
    [], {"version": 2}, {"version": 0, "counters": []}, {"version": True, "counters": []},
    {"version": "3", "counters": []},
    {"version": 2, "counters": [{"key": ["device", "GPU-a"], "joules": -1}]},
    {"version": 2, "counters": [{"key": [True], "joules": 1}]},
    {"version": 2, "counters": [], "devices": {"GPU-a": {"idle_watts": "60"}}},
    {"version": 2, "counters": [], "journal_sequence": -1},
])
def test_malformed_snapshots_are_value_errors(document):
    with pytest.raises(ValueError):
        parse_state_document(document)


def test_a_newer_schema_is_refused_as_newer():
    with pytest.raises(NewerStateVersion):
        parse_state_document({"version": SCHEMA_VERSION + 1, "counters": []})
