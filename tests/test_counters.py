import errno
import json
import logging
import os
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpustats.engine.counters import DeviceRecord, EnergyCounters
from gpustats.engine.ledger import EnergyLedger
from gpustats.engine.persister import COMPACTION_FAILED, JOURNAL_FAILED, Persister
from gpustats.engine.state_files import (
    CORRUPT_SUFFIX,
    FORMAT_FILE,
    JOURNAL_FILE,
    KEEP_ASIDE,
    REFUSED_SUFFIX,
    STATE_FILE,
    NewerStateVersion,
    StateFiles,
    decode_journal_line,
    encode_journal_line,
)
from gpustats.engine.state_schema import SCHEMA_VERSION
from gpustats.model.energy_keys import ProcessKey
from tests.support.clock import Clock


def persist_to(counters, path):
    counters.load(StateFiles(str(path)))
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
    # No temp file left.
    assert sorted(p.name for p in tmp_path.iterdir()) == [FORMAT_FILE, JOURNAL_FILE, STATE_FILE]
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [FORMAT_FILE, JOURNAL_FILE, STATE_FILE]
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
    assert sorted(p.name for p in tmp_path.iterdir()) == [FORMAT_FILE, JOURNAL_FILE, STATE_FILE]
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


def test_a_process_counter_is_kept_per_boot(tmp_path):
    """The same GPU, PID and start time in another boot is another process: its counter starts
    from zero, and the one of the boot before is kept (until its retention ends), not
    continued. A key of an unknown boot equals neither."""
    counters = EnergyCounters()
    first = EnergyLedger(counters, boot_id="boot-a").process_key("GPU-a", 4100, 2500)
    counters.advance(first, 1793.0)
    assert persist_to(counters, tmp_path)
    loaded = EnergyCounters()
    loaded.load(StateFiles(str(tmp_path)))
    again = EnergyLedger(loaded, boot_id="boot-b").process_key("GPU-a", 4100, 2500)
    assert (first.boot_id, again.boot_id) == ("boot-a", "boot-b")
    assert loaded.value(first) == 1793.0 and loaded.value(again) is None
    unknown = ProcessKey("GPU-a", 4100, 2500)
    assert unknown.boot_id is None and unknown not in (first, again)


def test_an_unencodable_key_is_logged_not_raised(tmp_path, caplog):
    counters = EnergyCounters()
    counters.advance(("device", frozenset({"x"})), 1.0)
    with caplog.at_level(logging.ERROR):
        assert not persist_to(counters, tmp_path)
    assert "cannot encode" in caplog.text


def test_an_unencodable_key_in_a_journal_line_is_logged_and_stays_to_be_written(tmp_path, caplog):
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path)))
    counters.advance(("device", frozenset({"x"})), 1.0)
    with caplog.at_level(logging.ERROR):
        assert not counters.journal()
    assert "cannot encode" in caplog.text
    assert not counters.journal()                 # still changed: offered again, never lost


def test_journal_replay_restores_what_was_served_after_the_last_snapshot(tmp_path):
    """A kill between two compactions loses nothing that was journaled."""
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 10.0)
    counters.set_device("GPU-a", DeviceRecord(idle_watts=61.0, energy_counter_mj=5000))
    assert counters.persist()
    for _ in range(3):
        counters.advance(("device", "GPU-a"), 2.5)
        counters.advance(("pod", "u", "GPU-a"), 1.0)
        assert counters.journal()
    counters.set_device("GPU-a", DeviceRecord(idle_watts=61.0, energy_counter_mj=9000))
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
    counters.load(StateFiles(str(tmp_path)))
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


def test_a_torn_last_journal_line_is_skipped(tmp_path, caplog):
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path)))
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
    counters.load(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 1.0)
    counters.advance(("device", "GPU-b"), 1.0)
    counters.journal()
    counters.advance(("device", "GPU-a"), 0.0)       # no change: nothing to write
    counters.advance(("device", "GPU-b"), 1.0)
    counters.journal()
    lines = (tmp_path / JOURNAL_FILE).read_bytes().splitlines()
    assert len(lines) == 2
    assert decode_journal_line(lines[1])["counters"] == [[["device", "GPU-b"], 2.0]]


def test_a_state_file_from_a_newer_version_stops_loading(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"version": SCHEMA_VERSION + 1,
                                                   "counters": []}))
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
    for _ in range(KEEP_ASIDE + 3):
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
    assert len(list(tmp_path.glob(name + REFUSED_SUFFIX + "*"))) == 1      # moved aside
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal() and counters.persist()


def test_device_records_round_trip_and_reject_bad_types(tmp_path):
    counters = EnergyCounters()
    counters.set_device("GPU-a", DeviceRecord(
        idle_watts=60.5, energy_counter_mj=123, boot_id="b", read_at=10.0, index=1,
        pci_bus_id="00000000:3B:00.0", name="NVIDIA H100", minor_number=1))
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


class Disk:
    """``os.write`` on a disk with ``room`` bytes left (``None``: unlimited): a write that does
    not fit writes what fits and the next one fails with ENOSPC, as a full file system does."""

    def __init__(self, room=None):
        self.room = room

    def write(self, fd, data):
        if self.room is None:
            return os.write(fd, data)
        if self.room == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        written = os.write(fd, bytes(data[:self.room]))
        self.room -= written
        return written


def test_changes_a_failed_write_could_not_keep_go_into_the_next_line(tmp_path):
    disk = Disk(room=0)
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path), write=disk.write))
    counters.advance(("device", "GPU-a"), 5.0)
    assert not counters.journal()
    disk.room = None
    assert counters.journal()                         # the same change, written now
    reloaded = EnergyCounters()
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 5.0


def test_a_short_write_leaves_no_torn_line(tmp_path):
    """A disk that fills mid-line: the half line is cut off again, the changes stay marked, and
    the lines written once there is room again all replay (a torn line used to stay, the next
    lines were appended to it and replay stopped there)."""
    disk = Disk()
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path), write=disk.write))
    journal = tmp_path / JOURNAL_FILE
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal()
    whole = journal.read_bytes()
    disk.room = 20                                    # part of the next line fits
    counters.advance(("device", "GPU-a"), 2.0)
    counters.advance(("pod", "u", "GPU-a"), 4.0)
    assert not counters.journal()
    assert journal.read_bytes() == whole              # nothing of the line kept
    disk.room = None                                  # room again
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal()
    reloaded = EnergyCounters()                       # as after SIGKILL
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 4.0
    assert reloaded.value(("pod", "u", "GPU-a")) == 4.0


def test_a_line_written_in_pieces_is_whole(tmp_path):
    def trickle(fd, data):                            # the kernel may write less than asked
        return os.write(fd, bytes(data[:7]))

    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path), write=trickle))
    counters.advance(("device", "GPU-a"), 3.0)
    assert counters.journal()
    reloaded = EnergyCounters()
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 3.0


def test_replay_skips_a_damaged_line_and_goes_on(tmp_path, caplog):
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path)))
    journal = tmp_path / JOURNAL_FILE
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal()
    with open(journal, "ab") as f:                    # a line damaged on disk: bit flipped
        line = encode_journal_line({"sequence": 50, "counters": [[["device", "GPU-a"], 9e9]]})
        f.write(line.replace(b"9000000000", b"9000000001"))
    counters.advance(("device", "GPU-a"), 1.0)
    counters.advance(("pod", "u", "GPU-a"), 2.0)
    assert counters.journal()
    reloaded = EnergyCounters()
    with caplog.at_level(logging.WARNING):
        reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 2.0           # not 9e9: the bad line skipped
    assert reloaded.value(("pod", "u", "GPU-a")) == 2.0         # the line after it counts
    assert "1 torn or corrupt line(s) skipped" in caplog.text


def test_a_torn_tail_is_ended_before_the_next_line(tmp_path):
    """A journal left ending mid-line (a crash mid-write, a cut that failed): the next line
    starts on a line of its own."""
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path)))
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal()
    counters.close()
    with open(tmp_path / JOURNAL_FILE, "ab") as f:
        f.write(b'0badc0de {"sequence":9,"counters":[[["device","GP')
    restarted = EnergyCounters()
    restarted.load(StateFiles(str(tmp_path)))
    restarted.advance(("device", "GPU-a"), 5.0)
    assert restarted.journal()
    reloaded = EnergyCounters()
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 6.0


def test_lines_written_before_checksums_are_still_replayed(tmp_path):
    (tmp_path / JOURNAL_FILE).write_text(
        json.dumps({"sequence": 1, "counters": [[["device", "GPU-a"], 3.0]]}) + "\n")
    reloaded = EnergyCounters()
    assert reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 3.0


def test_a_compaction_and_a_tick_never_write_at_once(tmp_path):
    """SIGHUP's compaction on its own thread with a slow fsync; a tick journals meanwhile. The
    tick's line used to land between the snapshot and the journal's truncation and be erased
    with its changes already marked written: after a crash the counter came back lower."""
    key = ("pod", "u", "GPU-a")
    ticks = []

    def slow_fsync(fd):
        if not ticks:                                 # the tick runs during the first fsync
            ticks.append(threading.Thread(target=tick))
            ticks[0].start()
            time.sleep(0.3)                           # measures: a slow fsync
        os.fsync(fd)

    served = {}

    def tick():
        counters.advance(key, 5.0)
        counters.journal()
        served.update(counters.items())               # published after its line

    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path), fsync=slow_fsync))
    counters.advance(key, 1.0)
    assert counters.persist()
    ticks[0].join()
    assert served[key] == 6.0
    reloaded = EnergyCounters()                       # SIGKILL now
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(key) == 6.0


def test_the_persister_reports_what_is_failing_until_it_works_again(tmp_path):
    disk = Disk()
    reports = []
    fsync_fails = []

    def fsync(fd):
        if fsync_fails:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.fsync(fd)

    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path), write=disk.write, fsync=fsync))
    persister = Persister(counters, 3600.0, report=reports.append)
    counters.advance(("device", "GPU-a"), 1.0)
    assert persister.journal() and reports[-1] is None
    disk.room = 0
    counters.advance(("device", "GPU-a"), 1.0)
    assert not persister.journal() and reports[-1][0] == JOURNAL_FAILED
    assert not persister.journal() and reports[-1][0] == JOURNAL_FAILED   # still pending
    disk.room = None
    assert persister.journal() and reports[-1] is None
    fsync_fails.append(True)
    assert not persister.persist_now() and reports[-1][0] == COMPACTION_FAILED
    counters.advance(("device", "GPU-a"), 1.0)
    assert persister.journal() and reports[-1][0] == COMPACTION_FAILED   # until one works
    fsync_fails.clear()
    assert persister.close() and reports[-1] is None
    reloaded = EnergyCounters()
    reloaded.load(StateFiles(str(tmp_path)))
    assert reloaded.value(("device", "GPU-a")) == 3.0


@pytest.mark.parametrize("place", [STATE_FILE, JOURNAL_FILE])
@pytest.mark.parametrize("how", ["hard_linked", "symlink", "foreign_owner"])
def test_a_state_file_that_is_not_the_daemons_own_is_refused(tmp_path, place, how, caplog):
    """A hard link or symlink to another file, or a file another user owns, in a state file's
    place: never read, appended to or truncated; moved aside, logged and counted."""
    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    body = b"precious data, not gpustats's\n"
    victim.write_bytes(body)
    target = state / place
    if how == "hard_linked":
        os.link(victim, target)
    elif how == "symlink":
        os.symlink(victim, target)
    else:
        target.write_bytes(body)
        os.chown(target, 12345, 12345)
    refused = []
    counters = EnergyCounters()
    with caplog.at_level(logging.ERROR):
        counters.load(StateFiles(str(state), refused=refused.append))
    assert refused == [how]
    assert "refused" in caplog.text
    aside = list(state.glob(place + REFUSED_SUFFIX + "*"))
    assert len(aside) == 1
    if how == "foreign_owner":
        victim = aside[0]
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal() and counters.persist() and counters.journal()
    assert victim.read_bytes() == body
    assert not (state / place).is_symlink() and os.stat(state / place).st_nlink == 1


def test_a_journal_hard_linked_while_running_is_refused_when_reopened(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me\n")
    refused = []
    counters = EnergyCounters()
    counters.load(StateFiles(str(tmp_path / "state"), refused=refused.append))
    counters.close()                      # the journal the load's compaction opened
    os.unlink(tmp_path / "state" / JOURNAL_FILE)
    os.link(victim, tmp_path / "state" / JOURNAL_FILE)
    counters.advance(("device", "GPU-a"), 1.0)
    assert counters.journal() and counters.persist()
    assert victim.read_bytes() == b"keep me\n" and refused == ["hard_linked"]


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["advance", "journal", "persist", "crash", "fill",
                                           "free"]),
                          st.sampled_from([("device", "GPU-a"), ("pod", "u", "GPU-a")]),
                          st.integers(0, 200)), max_size=40))
def test_a_disk_filling_and_freeing_never_costs_what_was_written(tmp_path_factory, steps):
    """Disk full at any byte, freed again, crashes anywhere: after a restart every counter is
    at least what the last write that succeeded held."""
    state = tmp_path_factory.mktemp("state")
    disk = Disk()
    counters = EnergyCounters()
    counters.load(StateFiles(str(state), write=disk.write))
    written: dict = {}
    for action, key, amount in steps:
        if action == "advance":
            counters.advance(key, float(amount))
        elif action == "journal":
            if counters.journal():
                written = dict(counters.items())
        elif action == "persist":
            if counters.persist():
                written = dict(counters.items())
        elif action == "fill":
            disk.room = amount
        elif action == "free":
            disk.room = None
        else:
            counters = EnergyCounters()
            counters.load(StateFiles(str(state), write=disk.write))
            for k, v in written.items():
                assert counters.value(k) is not None and counters.value(k) >= v


def test_owners_without_counters_are_not_remembered():
    """Churned containers that never used a GPU leave nothing behind (a soak found RSS
    growing with every container created)."""
    counters = EnergyCounters()
    counters.mark_alive([("container", f"c{i}") for i in range(1000)])
    counters.advance(("container", "gpu-user", "GPU-a", None), 1.0)
    counters.mark_alive([("container", "gpu-user")])
    assert counters._seen == {("container", "gpu-user"): counters._seen[("container", "gpu-user")]}


def test_a_wall_clock_step_neither_expires_nor_keeps_owners(monkeypatch):
    """Retention counts on the wall time of the start advanced by the monotonic clock: a
    step of the wall clock forward past the retention does not drop a live pod's totals."""
    import gpustats.engine.counters as module

    class Clocks:
        wall, mono = 1_700_000_000.0, 100.0

    monkeypatch.setattr(module.time, "time", lambda: Clocks.wall)
    monkeypatch.setattr(module.time, "monotonic", lambda: Clocks.mono)
    counters = module.EnergyCounters(retention_seconds=60.0)
    counters.advance(("pod", "u1", "GPU-a"), 5.0)
    Clocks.mono += 10.0
    Clocks.wall += 10.0 + 3600.0               # an NTP step forward of an hour
    assert counters.expire() == 0
    assert counters.value(("pod", "u1", "GPU-a")) == 5.0
    Clocks.mono += 61.0                          # really gone for longer than the retention
    assert counters.expire() == 1
