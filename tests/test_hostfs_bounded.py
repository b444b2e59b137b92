"""Bounded reads: only regular files, non-blocking, capped in size and time."""

import os
import socket

import pytest

from gpustats.hostfs import (
    DEADLINE, NOT_REGULAR, TOO_LARGE, UnsafeFile, read_int, read_regular, read_text,
)


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
