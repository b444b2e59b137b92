import json
import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gpustats.engine.counters import CORRUPT_SUFFIX, STATE_FILE, EnergyCounters


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none())))
def test_counters_never_decrease(amounts):
    counters = EnergyCounters()
    last = 0.0
    for amount in amounts:
        value = counters.advance(("device", "GPU-a"), amount)
        assert value >= last
        last = value


def test_persist_and_load_round_trip(tmp_path):
    counters = EnergyCounters()
    counters.advance(("pod", "u-1", "GPU-a"), 12.5)
    counters.advance(("process", "GPU-a", 42, None), 3.0)
    assert counters.persist(str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]    # no temp file left behind
    loaded = EnergyCounters()
    assert loaded.load(str(tmp_path))
    assert loaded.value(("pod", "u-1", "GPU-a")) == 12.5
    assert loaded.value(("process", "GPU-a", 42, None)) == 3.0


def test_corrupt_and_missing_state_are_logged_not_fatal(tmp_path, caplog):
    counters = EnergyCounters()
    with caplog.at_level(logging.INFO):
        assert not counters.load(str(tmp_path))
    (tmp_path / STATE_FILE).write_text("{not json")
    with caplog.at_level(logging.ERROR):
        assert not counters.load(str(tmp_path))
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 1, "counters": [
        {"key": ["pod", "u", "g"], "joules": -5}]}))
    assert not counters.load(str(tmp_path))
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 99, "counters": []}))
    assert not counters.load(str(tmp_path))
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.persist(str(tmp_path))          # replaced by a good file
    assert EnergyCounters().load(str(tmp_path))


def test_unwritable_state_dir_keeps_counters(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    counters = EnergyCounters()
    counters.advance(("device", "GPU-a"), 7.0)
    with caplog.at_level(logging.ERROR):
        assert not counters.persist(str(blocker / "state"))   # a path below a file
        assert not counters.persist(str(blocker / "state"))
    assert len([r for r in caplog.records if "cannot persist" in r.getMessage()]) == 1
    assert counters.value(("device", "GPU-a")) == 7.0


def test_disk_full_is_survived(tmp_path, monkeypatch, caplog):
    counters = EnergyCounters()
    counters.advance(("device", "GPU-a"), 7.0)
    assert counters.persist(str(tmp_path))
    real_fsync = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    counters.advance(("device", "GPU-a"), 1.0)
    with caplog.at_level(logging.ERROR):
        assert not counters.persist(str(tmp_path))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]   # temp file cleaned up
    previous = EnergyCounters()
    previous.load(str(tmp_path))
    assert previous.value(("device", "GPU-a")) == 7.0            # the old file is intact
    assert counters.value(("device", "GPU-a")) == 8.0


def test_retention_drops_stale_series_only():
    clock = Clock()
    counters = EnergyCounters(retention_seconds=60, wall=clock)
    counters.advance(("container", "c", "GPU-a", None), 5.0)
    counters.advance(("pod", "u", "GPU-a"), 5.0)
    clock.now += 61
    counters.advance(("pod", "u", "GPU-a"), 1.0)
    assert counters.expire() == 1
    assert counters.value(("container", "c", "GPU-a", None)) is None
    assert counters.value(("pod", "u", "GPU-a")) == 6.0


def test_load_never_lowers_a_counter(tmp_path):
    old = EnergyCounters()
    old.advance(("device", "GPU-a"), 5.0)
    old.persist(str(tmp_path))
    current = EnergyCounters()
    current.advance(("device", "GPU-a"), 9.0)
    current.load(str(tmp_path))
    assert current.value(("device", "GPU-a")) == 9.0


def test_a_corrupt_file_is_kept_aside_and_replaced(tmp_path, caplog):
    (tmp_path / STATE_FILE).write_text("[" * 100_000)       # nesting deeper than any parser
    counters = EnergyCounters()
    with caplog.at_level(logging.ERROR):
        assert not counters.load(str(tmp_path))
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert (tmp_path / (STATE_FILE + CORRUPT_SUFFIX)).exists()
    counters.advance(("device", "GPU-a"), 2.0)
    assert counters.persist(str(tmp_path))
    assert EnergyCounters().load(str(tmp_path))


@pytest.mark.parametrize("document", [
    [], {"version": 1}, {"version": 1, "counters": {}}, {"version": 1, "counters": [1]},
    {"version": 1, "counters": [{"key": [], "joules": 1}]},
    {"version": 1, "counters": [{"key": [["nested"]], "joules": 1}]},
    {"version": 1, "counters": [{"key": ["pod", "u"], "joules": "12"}]},
    {"version": 1, "counters": [{"key": ["pod", "u"], "joules": True}]},
    {"version": 1, "counters": [{"key": ["pod", "u"], "joules": 10**400}]},
])
def test_malformed_documents_are_rejected_whole(tmp_path, document):
    (tmp_path / STATE_FILE).write_text(json.dumps(document))
    counters = EnergyCounters()
    assert not counters.load(str(tmp_path))
    assert list(counters.items()) == []


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_load_never_raises_on_any_file(tmp_path, blob):
    (tmp_path / STATE_FILE).write_bytes(blob)
    counters = EnergyCounters()
    counters.load(str(tmp_path))
    assert all(v >= 0 for _, v in counters.items())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_read_only_state_dir(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o500)
    try:
        counters = EnergyCounters()
        counters.advance(("device", "GPU-a"), 1.0)
        assert not counters.persist(str(state))
        assert counters.value(("device", "GPU-a")) == 1.0
    finally:
        state.chmod(0o700)


def test_failed_rename_leaves_old_state_and_no_temp_file(tmp_path, monkeypatch):
    counters = EnergyCounters()
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.persist(str(tmp_path))

    def refuse(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", refuse)
    counters.advance(("device", "GPU-a"), 1.0)
    assert not counters.persist(str(tmp_path))
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == [STATE_FILE]
    reloaded = EnergyCounters()
    assert reloaded.load(str(tmp_path)) and reloaded.value(("device", "GPU-a")) == 1.0


def test_keys_keep_their_types_through_a_round_trip(tmp_path):
    counters = EnergyCounters()
    key = ("process", "GPU-a", 4242, "c0ffee", None)
    counters.advance(key, 1.5)
    counters.advance(("mig", "GPU-a", 7), 0.5)
    counters.persist(str(tmp_path))
    loaded = EnergyCounters()
    loaded.load(str(tmp_path))
    assert dict(loaded.items()) == {key: 1.5, ("mig", "GPU-a", 7): 0.5}


def test_an_unencodable_key_is_logged_not_raised(tmp_path, caplog):
    counters = EnergyCounters()
    counters.advance(("device", frozenset({"x"})), 1.0)
    with caplog.at_level(logging.ERROR):
        assert not counters.persist(str(tmp_path))
    assert "cannot encode" in caplog.text
