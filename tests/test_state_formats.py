"""The state dir's formats, pinned: what this release writes is byte for byte the sample of its
format version in ``tests/golden/state_v<N>/``, every older sample is still read (and migrated),
and a state of a newer format is refused before anything else is read, and never written.

A change of any state format (``FORMAT``, the snapshot document, the journal line, a key's
shape) makes ``test_this_release_writes_its_format_sample`` fail. Bump
``state_files.FORMAT_VERSION``, then ``UPDATE_GOLDEN=1`` writes the new version's sample. A
sample already checked in is never rewritten: it is what that version wrote, and later
releases must go on reading it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from gpustats.engine.counters import DeviceRecord, EnergyCounters
from gpustats.engine.ledger import EnergyLedger
from gpustats.engine.state_files import (
    CORRUPT_SUFFIX,
    FORMAT_FILE,
    FORMAT_VERSION,
    JOURNAL_FILE,
    READABLE_VERSIONS,
    RESET_SUFFIX,
    STATE_FILE,
    NewerStateVersion,
    StateFiles,
    decode_format,
    decode_journal_line,
)
from gpustats.engine.state_schema import SCHEMA_VERSION
from gpustats.model.energy_keys import (
    ActiveKey, ContainerIdleKey, ContainerKey, DeviceKey, MigKey, PodIdleKey, PodKey, ProcessKey,
    UnallocatedIdleKey, UnattributedKey, UnobservedKey,
)
from tests.support.clock import Clock

GOLDEN = Path(__file__).parent / "golden"
FIRST_WITH_BOOT = 3                       # the first format whose process keys carry the boot
STATE_FILES = (FORMAT_FILE, STATE_FILE, JOURNAL_FILE)
GPU = "GPU-5f0c3b9e-7a2d-4c61-9e8b-0d1f2a3b4c5d"
BOOT = "0b6e2f8a-3c1d-4e5f-8a7b-9c0d1e2f3a4b"
POD = "8d0e6c1a-2b3c-4d5e-8f6a-7b8c9d0e1f2a"
CONTAINER = "4f" * 32
RECORD = DeviceRecord(idle_watts=61.5, energy_counter_mj=123_456_789, boot_id=BOOT,
                      read_at=1_700_000_030.0, index=0, pci_bus_id="00000000:3B:00.0",
                      name="NVIDIA H100 80GB HBM3", minor_number=0,
                      read_at_boot_seconds=86_400.25)
# What the sample's snapshot holds: one counter of every kind.
SNAPSHOT = ((DeviceKey(GPU), 2436.25), (ActiveKey(GPU), 1793.5), (UnattributedKey(GPU), 12.0),
            (ProcessKey(GPU, 4100, 2500, BOOT), 1781.5), (MigKey(GPU, 1), 0.0),
            (ContainerKey(CONTAINER, GPU, None), 1781.5), (ContainerKey(CONTAINER, GPU, 1), 0.0),
            (PodKey(POD, GPU), 1781.5), (ContainerIdleKey(CONTAINER, GPU, None), 420.0),
            (PodIdleKey(POD, GPU), 420.0), (UnallocatedIdleKey(GPU), 210.5),
            (UnobservedKey(GPU), 12.25))


def sample_dirs() -> dict[int, Path]:
    """Every checked-in sample by its version."""
    found = {}
    for path in GOLDEN.glob("state_v*"):
        match = re.fullmatch(r"state_v(\d+)", path.name)
        if match and path.is_dir():
            found[int(match.group(1))] = path
    return found


def write_sample_state(directory: Path) -> None:
    """The state this release writes in one scripted run: a snapshot with a counter of every
    kind and a GPU record, then two journal lines (one changed counter each, the second with
    the GPU's record)."""
    clock = Clock(1_700_000_000.0)
    counters = EnergyCounters(wall=clock)
    counters.load(StateFiles(str(directory), wall=clock))
    for key, joules in SNAPSHOT:
        counters.advance(key, joules)
    counters.set_device(GPU, RECORD)
    clock.now += 30.0
    assert counters.persist()
    clock.now += 5.0
    counters.advance(ProcessKey(GPU, 4100, 2500, BOOT), 12.5)
    assert counters.journal()
    clock.now += 5.0
    counters.advance(PodKey(POD, GPU), 12.5)
    counters.set_device(GPU, dataclasses.replace(RECORD, energy_counter_mj=123_481_789,
                                                 read_at=1_700_000_040.0))
    assert counters.journal()
    counters.close()


def written(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


# ------------------------------------------------------------ the pins

def test_this_release_writes_its_format_sample(tmp_path):
    write_sample_state(tmp_path)
    got = written(tmp_path)
    assert sorted(got) == sorted(STATE_FILES)
    sample = GOLDEN / f"state_v{FORMAT_VERSION}"
    if os.environ.get("UPDATE_GOLDEN") and not sample.exists():
        sample.mkdir()
        for name, data in got.items():
            (sample / name).write_bytes(data)
    assert sample.is_dir(), f"no sample of state format {FORMAT_VERSION}: UPDATE_GOLDEN=1 " \
                            f"writes {sample.relative_to(GOLDEN.parent.parent)}"
    for name in STATE_FILES:
        assert got[name] == (sample / name).read_bytes(), (
            f"{name} is no longer written as state format {FORMAT_VERSION} wrote it: a format "
            f"change needs FORMAT_VERSION bumped (gpustats/engine/state_files.py) and a new "
            f"sample (UPDATE_GOLDEN=1); the sample of {FORMAT_VERSION} stays as it is")


def test_the_sample_says_its_version_everywhere_it_is_carried():
    sample = GOLDEN / f"state_v{FORMAT_VERSION}"
    assert decode_format((sample / FORMAT_FILE).read_bytes()) == FORMAT_VERSION
    assert json.loads((sample / STATE_FILE).read_text())["version"] == FORMAT_VERSION
    assert SCHEMA_VERSION == FORMAT_VERSION
    assert max(sample_dirs()) == FORMAT_VERSION          # no version without its sample
    assert set(sample_dirs()) <= set(READABLE_VERSIONS)


def test_the_journal_line_format_is_a_checksum_and_the_json():
    lines = (GOLDEN / f"state_v{FORMAT_VERSION}" / JOURNAL_FILE).read_bytes().splitlines()
    assert len(lines) == 2
    assert all(re.fullmatch(rb"[0-9a-f]{8} \{.*\}", line) for line in lines)
    assert decode_journal_line(lines[0])["counters"] == \
        [[["process", GPU, 4100, 2500, BOOT], 1794.0]]


# ------------------------------------------------------------ older formats: read, migrated

def stored_process_key(sample: Path) -> tuple:
    """The process key a sample's snapshot stores, in that version's shape."""
    document = json.loads((sample / STATE_FILE).read_text())
    return next(tuple(c["key"]) for c in document["counters"] if c["key"][0] == "process")


@pytest.mark.parametrize("version", sorted(v for v in sample_dirs() if v < FORMAT_VERSION))
def test_an_older_sample_is_read_and_migrated_at_load(version, tmp_path):
    """Every counter of the older state is read (a process key without a boot as it is: of an
    unknown boot), and the state dir is written again at once in this format, so no journal
    line of this format ever follows an older snapshot."""
    state = tmp_path / "state"
    shutil.copytree(sample_dirs()[version], state)
    stored = stored_process_key(state)
    counters = EnergyCounters(wall=Clock(1_700_000_100.0))
    assert counters.load(StateFiles(str(state)))
    assert counters.value(stored) == 1794.0
    assert counters.value(PodKey(POD, GPU)) == 1794.0
    assert counters.value(DeviceKey(GPU)) == 2436.25
    assert counters.device(GPU).energy_counter_mj == 123_481_789
    if version < FIRST_WITH_BOOT:                  # of an unknown boot: never continued
        assert counters.value(ProcessKey(GPU, 4100, 2500, BOOT)) is None
    assert decode_format((state / FORMAT_FILE).read_bytes()) == FORMAT_VERSION
    document = json.loads((state / STATE_FILE).read_text())
    assert document["version"] == FORMAT_VERSION
    assert list(stored) in [c["key"] for c in document["counters"]]
    assert (state / JOURNAL_FILE).read_bytes() == b""


def test_a_process_of_an_unknown_boot_is_never_continued_and_expires(tmp_path):
    """Migrated process counters (no boot) are kept for the retention like any other owner's,
    and a live process with the same PID and start time counts from zero."""
    state = tmp_path / "state"
    shutil.copytree(sample_dirs()[FIRST_WITH_BOOT - 1], state)
    clock = Clock(1_700_000_100.0)
    counters = EnergyCounters(retention_seconds=600.0, wall=clock)
    counters.load(StateFiles(str(state)))
    ledger = EnergyLedger(counters, boot_id=BOOT)
    live = ledger.process_key(GPU, 4100, 2500)
    assert live == ("process", GPU, 4100, 2500, BOOT) and live.boot_id == BOOT
    assert counters.value(live) is None
    counters.advance(live, 3.0)
    counters.advance(PodKey(POD, GPU), 3.0)
    assert counters.value(live) == 3.0 and counters.value(PodKey(POD, GPU)) == 1797.0
    clock.now += 601.0
    counters.mark_alive([live, ("pod", POD)])
    counters.expire()
    assert counters.value(("process", GPU, 4100, 2500)) is None      # gone with retention
    assert counters.value(live) == 3.0


# ------------------------------------------------------------ a newer format: refused

def newer_state(directory: Path) -> dict[str, bytes]:
    """A state a newer gpustats left: its ``FORMAT``, a snapshot this release would read and
    journal lines it could not (as a release that changed only the journal line would)."""
    write_sample_state(directory)
    (directory / FORMAT_FILE).write_bytes(b"%d\n" % (FORMAT_VERSION + 1))
    lines = (directory / JOURNAL_FILE).read_bytes().splitlines()
    (directory / JOURNAL_FILE).write_bytes(b"".join(base64.b64encode(line) + b"\n"
                                                    for line in lines))
    return written(directory)


def test_a_newer_format_is_refused_before_anything_else_is_read(tmp_path):
    state = tmp_path / "state"
    before = newer_state(state)
    (state / STATE_FILE).write_bytes(b"{what a newer release may write")
    before[STATE_FILE] = (state / STATE_FILE).read_bytes()
    counters = EnergyCounters()
    with pytest.raises(NewerStateVersion, match=f"format {FORMAT_VERSION + 1}"):
        counters.load(StateFiles(str(state)))
    assert written(state) == before             # nothing moved aside, rewritten or emptied
    assert counters.items() == []


def test_nothing_is_written_over_a_newer_state(tmp_path):
    state = tmp_path / "state"
    before = newer_state(state)
    counters = EnergyCounters()
    with pytest.raises(NewerStateVersion):
        counters.load(StateFiles(str(state)))
    counters.advance(DeviceKey(GPU), 1.0)
    assert not counters.journal() and not counters.persist()
    assert written(state) == before


def test_a_reset_moves_a_newer_state_aside_whole(tmp_path):
    """``--state-reset``: the newer files are kept (renamed), counters start from zero in a
    state of this format."""
    state = tmp_path / "state"
    before = newer_state(state)
    files = StateFiles(str(state))
    files.reset()
    kept = {name.split(RESET_SUFFIX)[0]: data for name, data in written(state).items()}
    assert kept == before
    counters = EnergyCounters()
    assert not counters.load(StateFiles(str(state)))
    assert decode_format((state / FORMAT_FILE).read_bytes()) == FORMAT_VERSION


# ------------------------------------------------------------ FORMAT itself

def test_format_is_on_disk_before_any_journal_line(tmp_path):
    """A FORMAT that cannot be written stops the line too: no file of this format is ever
    under a FORMAT that does not say it."""
    def no_fsync(fd):
        raise OSError(28, "No space left on device")

    files = StateFiles(str(tmp_path), fsync=no_fsync)
    assert not files.append({"sequence": 1, "at": 1.0, "counters": [], "devices": {}})
    assert list(tmp_path.iterdir()) == []
    files = StateFiles(str(tmp_path))
    assert files.append({"sequence": 1, "at": 1.0, "counters": [], "devices": {}})
    assert sorted(p.name for p in tmp_path.iterdir()) == [FORMAT_FILE, JOURNAL_FILE]


@pytest.mark.parametrize("raw", [b"", b"three\n", b"0\n", b"-4\n", b"3 \n", b"\xff\n",
                                 b"4" * 20])
def test_a_corrupt_format_is_kept_aside_and_the_documents_versions_decide(tmp_path, raw):
    write_sample_state(tmp_path)
    (tmp_path / FORMAT_FILE).write_bytes(raw)
    counters = EnergyCounters()
    assert counters.load(StateFiles(str(tmp_path)))
    assert counters.value(PodKey(POD, GPU)) == 1794.0
    assert decode_format((tmp_path / FORMAT_FILE).read_bytes()) == FORMAT_VERSION
    aside = [p.name for p in tmp_path.iterdir() if p.name != FORMAT_FILE
             and p.name.startswith(FORMAT_FILE)]
    assert len(aside) == 1 and (CORRUPT_SUFFIX in aside[0] or ".refused-" in aside[0])


def test_the_format_file_is_a_decimal_version():
    assert decode_format(b"3\n") == 3 and decode_format(b"12") == 12
    for raw in (b"", b"03\n", b"3\n\n", b" 3", b"+3", b"\xd9\xa3"):
        with pytest.raises(ValueError):
            decode_format(raw)
