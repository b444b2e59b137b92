import json
import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpustats.engine.counters import EnergyCounters
from gpustats.engine.state_files import (
    CORRUPT_SUFFIX,
    JOURNAL_FILE,
    KEEP_ASIDE,
    STATE_FILE,
    NewerStateVersion,
    StateFiles,
)
from tests.clock import Clock


def persist_to(counters, path):
    counters.attach(StateFiles(str(path)))
    return counters.persist()


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
    assert persist_to(counters, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL_FILE, STATE_FILE]  # no temp
    loaded = EnergyCounters()
    assert loaded.load(StateFiles(str(tmp_path)))
    assert loaded.value(("pod", "u-1", "GPU-a")) == 12.5
    assert loaded.value(("process", "GPU-a", 42, None)) == 3.0


def test_corrupt_and_missing_state_are_logged_not_fatal(tmp_path, caplog):
    counters = EnergyCounters()
    with caplog.at_level(logging.INFO):
        assert not counters.load(StateFiles(str(tmp_path)))
    (tmp_path / STATE_FILE).write_text("{not json")
    with caplog.at_level(logging.ERROR):
        assert not counters.load(StateFiles(str(tmp_path)))
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 1, "counters": [
        {"key": ["pod", "u", "g"], "joules": -5}]}))
    assert not counters.load(StateFiles(str(tmp_path)))
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": "2", "counters": []}))
    assert not counters.load(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 1.0)
    assert persist_to(counters, tmp_path)          # replaced by a good file
    assert EnergyCounters().load(StateFiles(str(tmp_path)))


def test_unwritable_state_dir_keeps_counters(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    counters = EnergyCounters()
    counters.advance(("device", "GPU-a"), 7.0)
    with caplog.at_level(logging.ERROR):
        assert not persist_to(counters, blocker / "state")   # a path below a file
        assert not counters.persist()
    assert len([r for r in caplog.records if "cannot persist" in r.getMessage()]) == 1
    assert counters.value(("device", "GPU-a")) == 7.0


def test_disk_full_is_survived(tmp_path, monkeypatch, caplog):
    counters = EnergyCounters()
    counters.advance(("device", "GPU-a"), 7.0)
    assert persist_to(counters, tmp_path)
    real_fsync = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    counters.advance(("device", "GPU-a"), 1.0)
    with caplog.at_level(logging.ERROR):
        assert not persist_to(counters, tmp_path)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL_FILE, STATE_FILE]
    previous = EnergyCounters()
    previous.load(StateFiles(str(tmp_path)))
    assert previous.value(("device", "GPU-a")) == 7.0            # the old file is intact
    assert counters.value(("device", "GPU-a")) == 8.0


def test_retention_drops_counters_of_owners_gone_only():
    clock = Clock(1000.0)
    counters = EnergyCounters(retention_seconds=60, wall=clock)
    counters.advance(("container", "c", "GPU-a", None), 5.0)
    counters.advance(("container", "live", "GPU-a", None), 3.0)
    counters.advance(("pod", "u", "GPU-a"), 5.0)
    counters.advance(("process", "GPU-a", 42, 1234), 5.0)
    clock.now += 61
    # The pod and one container still exist but used no energy for over the retention.
    counters.mark_alive([("pod", "u"), ("container", "live")])
    assert counters.expire() == 2
    assert counters.value(("container", "c", "GPU-a", None)) is None
    assert counters.value(("process", "GPU-a", 42, 1234)) is None
    assert counters.value(("container", "live", "GPU-a", None)) == 3.0
    assert counters.value(("pod", "u", "GPU-a")) == 5.0


def test_load_never_lowers_a_counter(tmp_path):
    old = EnergyCounters()
    old.advance(("device", "GPU-a"), 5.0)
    persist_to(old, tmp_path)
    current = EnergyCounters()
    current.advance(("device", "GPU-a"), 9.0)
    current.load(StateFiles(str(tmp_path)))
    assert current.value(("device", "GPU-a")) == 9.0


def test_a_corrupt_file_is_kept_aside_and_replaced(tmp_path, caplog):
    (tmp_path / STATE_FILE).write_text("[" * 100_000)       # nesting deeper than any parser
    counters = EnergyCounters()
    with caplog.at_level(logging.ERROR):
        assert not counters.load(StateFiles(str(tmp_path)))
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert len(list(tmp_path.glob(STATE_FILE + CORRUPT_SUFFIX + "*"))) == 1
    counters.advance(("device", "GPU-a"), 2.0)
    assert persist_to(counters, tmp_path)
    assert EnergyCounters().load(StateFiles(str(tmp_path)))


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
    assert not counters.load(StateFiles(str(tmp_path)))
    assert list(counters.items()) == []


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_load_never_raises_on_any_file(tmp_path, blob):
    (tmp_path / STATE_FILE).write_bytes(blob)
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path)))
    assert all(v >= 0 for _, v in counters.items())


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_read_only_state_dir(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o500)
    try:
        counters = EnergyCounters()
        counters.advance(("device", "GPU-a"), 1.0)
        assert not persist_to(counters, state)
        assert counters.value(("device", "GPU-a")) == 1.0
    finally:
        state.chmod(0o700)


def test_failed_rename_leaves_old_state_and_no_temp_file(tmp_path, monkeypatch):
    counters = EnergyCounters()
    counters.advance(("device", "GPU-a"), 1.0)
    assert persist_to(counters, tmp_path)

    def refuse(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", refuse)
    counters.advance(("device", "GPU-a"), 1.0)
    assert not persist_to(counters, tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOURNAL_FILE, STATE_FILE]
    reloaded = EnergyCounters()
    assert reloaded.load(StateFiles(str(tmp_path))) and reloaded.value(("device", "GPU-a")) == 1.0


def test_keys_keep_their_types_through_a_round_trip(tmp_path):
    counters = EnergyCounters()
    key = ("process", "GPU-a", 4242, "c0ffee", None)
    counters.advance(key, 1.5)
    counters.advance(("mig", "GPU-a", 7), 0.5)
    persist_to(counters, tmp_path)
    loaded = EnergyCounters()
    loaded.load(StateFiles(str(tmp_path)))
    assert dict(loaded.items()) == {key: 1.5, ("mig", "GPU-a", 7): 0.5}


def test_an_unencodable_key_is_logged_not_raised(tmp_path, caplog):
    counters = EnergyCounters()
    counters.advance(("device", frozenset({"x"})), 1.0)
    with caplog.at_level(logging.ERROR):
        assert not persist_to(counters, tmp_path)
    assert "cannot encode" in caplog.text


def test_journal_replay_restores_what_was_served_after_the_last_snapshot(tmp_path):
    """A kill between two compactions loses nothing that was journaled."""
    counters = EnergyCounters()
    counters.attach(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 10.0)
    counters.update_device("GPU-a", idle_watts=61.0, energy_counter_mj=5000)
    assert counters.persist()
    for _ in range(3):
        counters.advance(("device", "GPU-a"), 2.5)
        counters.advance(("pod", "u", "GPU-a"), 1.0)
        assert counters.journal()
    counters.update_device("GPU-a", energy_counter_mj=9000)
    assert counters.journal()
    # no persist, no close: as after SIGKILL
    reloaded = EnergyCounters()
    assert reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 17.5
    assert reloaded.value(("pod", "u", "GPU-a")) == 3.0
    assert reloaded.device("GPU-a").energy_counter_mj == 9000
    assert reloaded.device("GPU-a").idle_watts == 61.0


def test_compaction_empties_the_journal_and_replay_skips_lines_already_compacted(tmp_path):
    counters = EnergyCounters()
    counters.attach(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 1.0)
    counters.journal()
    stale_line = (tmp_path / JOURNAL_FILE).read_bytes()
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.persist()
    assert (tmp_path / JOURNAL_FILE).read_bytes() == b""
    # A crash between the rename and the truncate leaves old lines: they must not count.
    (tmp_path / JOURNAL_FILE).write_bytes(stale_line)
    reloaded = EnergyCounters()
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 2.0


def test_a_torn_journal_line_ends_the_replay(tmp_path, caplog):
    counters = EnergyCounters()
    counters.attach(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 1.0)
    counters.journal()
    with open(tmp_path / JOURNAL_FILE, "ab") as f:
        f.write(b'{"sequence": 9, "counters": [[["device", "GPU-a"], 99')
    reloaded = EnergyCounters()
    with caplog.at_level(logging.WARNING):
        reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 1.0
    assert "torn" in caplog.text


def test_only_changes_are_journaled(tmp_path):
    counters = EnergyCounters()
    counters.attach(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 1.0)
    counters.advance(("device", "GPU-b"), 1.0)
    counters.journal()
    counters.advance(("device", "GPU-a"), 0.0)       # no change: nothing to write
    counters.advance(("device", "GPU-b"), 1.0)
    counters.journal()
    lines = (tmp_path / JOURNAL_FILE).read_text().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[1])["counters"] == [[["device", "GPU-b"], 2.0]]


def test_a_state_file_from_a_newer_version_stops_loading(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 3, "counters": []}))
    with pytest.raises(NewerStateVersion):
        EnergyCounters().load(StateFiles(str(tmp_path)))
    assert (tmp_path / STATE_FILE).exists()          # left untouched for the newer version
    files = StateFiles(str(tmp_path))
    files.reset()                                     # --state-reset moves it aside
    assert not (tmp_path / STATE_FILE).exists()
    assert len(list(tmp_path.glob(STATE_FILE + ".reset-*"))) == 1
    assert not EnergyCounters().load(StateFiles(str(tmp_path)))


def test_version_1_files_are_still_read(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": 1, "counters": [
        {"key": ["pod", "u", "GPU-a"], "joules": 5.0, "updated": 1.0}]}))
    counters = EnergyCounters()
    assert counters.load(StateFiles(str(tmp_path)))
    assert counters.value(("pod", "u", "GPU-a")) == 5.0


def test_corrupt_copies_are_timestamped_and_bounded(tmp_path):
    clock = Clock(1000.0)
    for i in range(KEEP_ASIDE + 3):
        clock.now += 1
        (tmp_path / STATE_FILE).write_text("{broken")
        EnergyCounters().load(StateFiles(str(tmp_path), wall=clock))
    kept = sorted(tmp_path.glob(STATE_FILE + CORRUPT_SUFFIX + "*"))
    assert len(kept) == KEEP_ASIDE
    assert kept[-1].name.endswith("Z")


@pytest.mark.parametrize("name", [STATE_FILE, JOURNAL_FILE])
def test_a_fifo_in_place_of_a_state_file_does_not_block(tmp_path, name, caplog):
    os.mkfifo(tmp_path / name)
    counters = EnergyCounters()
    with caplog.at_level(logging.ERROR):
        counters.load(StateFiles(str(tmp_path)))      # returns at once: no writer needed
    assert "not a regular file" in caplog.text
    assert len(list(tmp_path.glob(name + CORRUPT_SUFFIX + "*"))) == 1      # moved aside
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal() and counters.persist()


def test_device_records_round_trip_and_reject_bad_types(tmp_path):
    counters = EnergyCounters()
    counters.update_device("GPU-a", idle_watts=60.5, energy_counter_mj=123, boot_id="b",
                           read_at=10.0, index=1, pci_bus_id="00000000:3B:00.0",
                           name="NVIDIA H100", minor_number=1)
    assert persist_to(counters, tmp_path)
    loaded = EnergyCounters()
    loaded.load(StateFiles(str(tmp_path)))
    assert loaded.device("GPU-a") == counters.device("GPU-a")
    document = json.loads((tmp_path / STATE_FILE).read_text())
    document["devices"]["GPU-a"]["idle_watts"] = "60"
    (tmp_path / STATE_FILE).write_text(json.dumps(document))
    assert not EnergyCounters().load(StateFiles(str(tmp_path)))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["advance", "journal", "persist", "crash"]),
                          st.sampled_from([("device", "GPU-a"), ("pod", "u", "GPU-a"),
                                           ("process", "GPU-a", 7, 99)]),
                          st.floats(0, 1e4)), max_size=40))
def test_no_served_counter_is_ever_lower_after_a_crash(tmp_path_factory, steps):
    """Whatever the order of ticks, compactions and kills: after a restart every counter is
    at least what the last journaled (i.e. published) tick served."""
    state = tmp_path_factory.mktemp("state")
    counters = EnergyCounters()
    counters.load(StateFiles(str(state)))
    served: dict = {}
    for action, key, joules in steps:
        if action == "advance":
            counters.advance(key, joules)
        elif action == "journal":            # the tick is published after this
            counters.journal()
            served = dict(counters.items())
        elif action == "persist":
            counters.persist()
            served = dict(counters.items())
        else:                                # SIGKILL: nothing more is written
            counters = EnergyCounters()
            counters.load(StateFiles(str(state)))
            for k, v in served.items():
                assert counters.value(k) is not None and counters.value(k) >= v - 1e-9


def test_changes_a_failed_write_could_not_keep_go_into_the_next_line(tmp_path, monkeypatch):
    counters = EnergyCounters()
    counters.attach(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 5.0)
    real_write = os.write

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    assert not counters.journal()
    monkeypatch.setattr(os, "write", real_write)
    assert counters.journal()                         # the same change, written now
    reloaded = EnergyCounters()
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 5.0


def test_owners_without_counters_are_not_remembered():
    """Churned containers that never used a GPU leave nothing behind (a soak found RSS
    growing with every container created)."""
    counters = EnergyCounters()
    counters.mark_alive([("container", f"c{i}") for i in range(1000)])
    counters.advance(("container", "gpu-user", "GPU-a", None), 1.0)
    counters.mark_alive([("container", "gpu-user")])
    assert counters._seen == {("container", "gpu-user"): counters._seen[("container", "gpu-user")]}
