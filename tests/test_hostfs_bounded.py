"""Bounded reads: only regular files, non-blocking, capped in size and time."""

import os
import socket

import pytest

from gpustats.dir_changes import DirectoryChanges, parse_inotify_events
from gpustats.hostfs import (
    DEADLINE, NOT_REGULAR, TOO_LARGE, UnsafeFile, read_int, read_regular, read_text,
)
from gpustats.kept_files import KeptFiles
from tests.support.descriptors import open_descriptors


def test_regular_file_and_kernel_files_read_whole(tmp_path):
    f = tmp_path / "memory.stat"
    f.write_bytes(b"anon 1\n" * 20000)                 # 140 KB: several chunks
    assert read_regular(str(f)) == b"anon 1\n" * 20000
    assert read_text("/proc/self/status").startswith("Name:")
    assert read_int("/proc/sys/kernel/pid_max") > 0


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "memory.current"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFile) as err:
        read_regular(str(fifo))
    assert err.value.reason == NOT_REGULAR
    seen = []
    assert read_text(str(fifo), seen.append) is None and seen[0].reason == NOT_REGULAR
    assert read_int(str(fifo)) is None


def test_socket_and_device_are_refused(tmp_path):
    with pytest.raises(UnsafeFile):
        read_regular("/dev/zero")
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        with pytest.raises(OSError):        # a socket cannot even be opened: ENXIO
            read_regular(str(path))
        assert read_text(str(path)) is None
    finally:
        server.close()


def test_size_cap_whatever_the_sparse_size(tmp_path):
    f = tmp_path / "big"
    with open(f, "wb") as out:
        out.truncate(1 << 30)
    with pytest.raises(UnsafeFile) as err:
        read_regular(str(f), max_bytes=1 << 20)
    assert err.value.reason == TOO_LARGE
    f.write_bytes(b"x" * 100)
    assert read_regular(str(f), max_bytes=100) == b"x" * 100


def test_deadline_between_chunks(tmp_path):
    f = tmp_path / "slow"
    f.write_bytes(b"x" * 200_000)
    ticks = iter(range(0, 1000, 10))                  # each clock read is 10 s later
    with pytest.raises(UnsafeFile) as err:
        read_regular(str(f), deadline_seconds=15, clock=lambda: next(ticks))
    assert err.value.reason == DEADLINE


def test_missing_file_raises_oserror_and_reads_as_none(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "gone"))
    assert read_text(str(tmp_path / "gone")) is None


def test_a_short_read_ends_the_file_without_another_read(tmp_path, monkeypatch):
    small, exact = tmp_path / "cpu.stat", tmp_path / "exact"
    small.write_bytes(b"usage_usec 12\n")
    exact.write_bytes(b"y" * 65536)                    # one whole chunk: EOF needs a read
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    assert read_regular(str(small)) == b"usage_usec 12\n" and len(reads) == 1
    reads.clear()
    assert read_regular(str(exact)) == b"y" * 65536 and len(reads) == 2


def test_a_kept_file_is_opened_once_and_reads_fresh_contents(tmp_path, monkeypatch):
    f = tmp_path / "memory.current"
    f.write_text("100\n")
    opens = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opens.append(a[0]) or real_open(*a, **k))
    kept = KeptFiles(8)
    assert kept.read_int(str(f), "/pod/c1") == 100
    f.write_text("250\n")                              # rewritten in place, as the kernel does
    assert kept.read_int(str(f), "/pod/c1") == 250
    assert kept.read_text(str(f), "/pod/c1") == "250\n"
    assert opens == [str(f)] and len(kept) == 1
    kept.close()
    assert len(kept) == 0


def test_kept_files_past_capacity_are_read_the_plain_way(tmp_path):
    paths = [tmp_path / f"f{i}" for i in range(3)]
    for i, p in enumerate(paths):
        p.write_text(f"{i}\n")
    before = len(open_descriptors())
    kept = KeptFiles(2)
    assert [kept.read_int(str(p), "g") for p in paths] == [0, 1, 2]
    assert [kept.read_int(str(p), "g") for p in paths] == [0, 1, 2]
    assert len(kept) == 2 and len(open_descriptors()) == before + 2
    kept.close()
    assert len(open_descriptors()) == before


def test_keep_only_closes_the_files_of_groups_no_longer_seen(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).write_text("1\n")
    before = len(open_descriptors())
    kept = KeptFiles(8)
    kept.read_int(str(tmp_path / "a"), "/pod/a")
    kept.read_int(str(tmp_path / "b"), "/pod/b")
    kept.keep_only({"/pod/b"})
    assert len(kept) == 1 and len(open_descriptors()) == before + 1
    kept.close()


def test_kept_files_refuse_what_plain_reads_refuse(tmp_path):
    fifo, big = tmp_path / "memory.stat", tmp_path / "cpu.stat"
    os.mkfifo(fifo)
    big.write_bytes(b"x" * 5000)
    seen = []
    kept = KeptFiles(8)
    assert kept.read_text(str(fifo), "g", seen.append) is None
    assert kept.read_int(str(big), "g", seen.append) is None        # over an int file's cap
    assert kept.read_text(str(tmp_path / "gone"), "g") is None
    assert kept.read_text(None, "g") is None
    assert [e.reason for e in seen] == [NOT_REGULAR, TOO_LARGE] and len(kept) == 0
    big.write_bytes(b"y" * 200_000)                  # several chunks, read from offset 0
    assert kept.read_text(str(big), "g") == "y" * 200_000
    assert kept.read_text(str(big), "g") == "y" * 200_000
    kept.close()


def test_a_kept_file_of_a_removed_cgroup_reads_as_gone():
    root = "/sys/fs/cgroup/memory"
    if os.geteuid() != 0 or not os.path.exists(os.path.join(root, "memory.usage_in_bytes")):
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    group = os.path.join(root, f"gpustats-kept-{os.getpid()}")
    try:
        os.mkdir(group)
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup here: {exc}")
    kept = KeptFiles(8)
    try:
        path = os.path.join(group, "memory.usage_in_bytes")
        assert kept.read_int(path, group) == 0 and len(kept) == 1
    finally:
        os.rmdir(group)
    assert kept.read_int(path, group) is None       # the kept descriptor answers ENODEV
    assert len(kept) == 0


def _names(events):
    return sorted((e.watch, e.name) for e in events)


def test_directory_changes_say_which_directory_was_made_or_removed_where(tmp_path):
    changes = DirectoryChanges()
    if changes.unavailable:
        pytest.skip(changes.unavailable)
    try:
        (tmp_path / "unwatched").mkdir()
        top = changes.watch(str(tmp_path))
        assert changes.watch(str(tmp_path)) == top             # the same watch again
        assert changes.watch(str(tmp_path / "never-there")) is None   # vanished: ignored
        assert changes.unavailable is None and changes.events() == []
        (tmp_path / "pod").mkdir()
        (tmp_path / "a-file").write_text("")                   # files are not cgroups
        assert _names(changes.events()) == [(top, "pod")]
        assert changes.events() == []                           # drained
        (tmp_path / "unwatched" / "deeper").mkdir()             # not a watched directory
        assert changes.events() == []
        (tmp_path / "pod").rename(tmp_path / "pod2")
        assert _names(changes.events()) == [(top, "pod"), (top, "pod2")]
        pod2 = changes.watch(str(tmp_path / "pod2"))
        (tmp_path / "pod2" / "c").mkdir()
        (tmp_path / "pod2" / "c").rmdir()
        assert _names(changes.events()) == [(pod2, "c"), (pod2, "c")]
        changes.unwatch(pod2)
        (tmp_path / "pod2" / "d").mkdir()
        assert changes.events() == []                           # no longer watched
        changes.unwatch(pod2)                                   # twice: no error
    finally:
        changes.close()
    assert changes.events() is None            # closed: callers look at everything


def test_inotify_events_parse_and_an_overflow_means_look_at_everything():
    import struct

    def event(wd, mask, name=b""):
        padded = name + b"\0" * (16 - len(name) % 16) if name else b""   # NUL-padded
        return struct.pack("iIII", wd, mask, 0, len(padded)) + padded

    isdir, create, delete, ignored = 0x40000000, 0x100, 0x200, 0x8000
    data = (event(3, create | isdir, b"pod1") + event(3, create, b"file")
            + event(4, delete | isdir, "\xff".encode("latin-1")) + event(5, ignored))
    assert [(e.watch, e.name) for e in parse_inotify_events(data)] == \
        [(3, "pod1"), (4, os.fsdecode(b"\xff"))]
    assert parse_inotify_events(data + event(-1, 0x4000)) is None       # IN_Q_OVERFLOW
    assert parse_inotify_events(event(3, 0x2000)) is None               # IN_UNMOUNT
    with pytest.raises(ValueError):
        parse_inotify_events(data[:-3])


def test_a_directory_made_in_a_real_cgroup_tree_is_reported():
    root = "/sys/fs/cgroup/memory"
    if os.geteuid() != 0 or not os.path.isdir(root):
        pytest.skip("needs root and a cgroup v1 memory hierarchy")
    changes = DirectoryChanges()
    if changes.unavailable:
        pytest.skip(changes.unavailable)
    name = f"gpustats-changes-{os.getpid()}"
    group = os.path.join(root, name)
    try:
        wd = changes.watch(root)
        changes.events()
        os.mkdir(group)
        assert _names(changes.events()) == [(wd, name)]
        os.rmdir(group)
        assert _names(changes.events()) == [(wd, name)]
    finally:
        if os.path.isdir(group):
            os.rmdir(group)
        changes.close()


def test_past_the_watch_limit_every_call_says_look_at_everything(tmp_path):
    import ctypes
    import errno

    changes = DirectoryChanges()
    if changes.unavailable:
        pytest.skip(changes.unavailable)

    def limit_reached(fd, path, mask):
        ctypes.set_errno(errno.ENOSPC)
        return -1

    changes._add_watch = limit_reached           # as fs.inotify.max_user_watches would
    assert changes.watch(str(tmp_path)) is None
    assert "No space left on device" in changes.unavailable
    assert changes.events() is None and changes.events() is None


def test_kept_files_and_watches_never_closed_are_closed_when_collected(tmp_path):
    import gc

    (tmp_path / "a").write_text("1\n")
    gc.collect()  # earlier tests' garbage closes its own files now, not within the count
    before = len(open_descriptors())
    kept, changes = KeptFiles(4), DirectoryChanges()
    kept.read_int(str(tmp_path / "a"), "g")
    changes.watch(str(tmp_path))
    assert len(open_descriptors()) > before
    del kept, changes
    gc.collect()
    assert len(open_descriptors()) == before


def test_absent_roots_are_each_named():
    from gpustats.hostfs import HostRoots
    assert HostRoots().absent() == ()
    lines = HostRoots(sysfs="/no/sys", proc="/no/proc", cgroup="/no/cg", host="/no/host").absent()
    assert [x.split(" is not")[0] for x in lines] == [
        "--sysfs-root /no/sys", "--proc-root /no/proc", "--cgroup-root /no/cg",
        "--host-root /no/host"]
