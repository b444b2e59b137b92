"""The state dir's files: its format version (``FORMAT``), a compacted snapshot
(``counters.json``) and a per-tick journal.

Counters a user bills by must never be served above what survives a crash: every tick appends
one line with what changed to ``counters.journal`` *before* the tick's snapshot is published
(no fsync: a killed process's writes survive in the page cache), and every persist interval
the whole state is written to ``counters.json`` (temp file, fsync, rename, fsync of the
directory) and the journal is emptied. Loading reads the snapshot, then replays the journal
lines newer than it.

A journal line carries the CRC-32 of its JSON (``<crc32 hex> <json>``), so a torn or damaged
line is recognised and skipped, and replay goes on with the lines after it. An append is
all-or-nothing: a write that stops short (a full disk) is cut back to the journal's length
before it, so the next line never follows half a line.

State files are opened without following links, non-blocking, and used only when they are
regular files owned by the daemon's user with a single link (a FIFO would block, a device feed
garbage, and a hard link or symlink to another file would have it appended to and truncated).
Anything else in their place is refused: logged, counted, and moved aside as
``<name>.refused-<UTC time>``. A file that cannot be parsed is moved aside as
``counters.json.corrupt-<UTC time>``; of each kind the newest ``KEEP_ASIDE`` are kept.

``FORMAT`` holds the version of the whole state dir's format (the snapshot document, the
journal line, the keys in them) and is read before anything else: a state of a newer format
than this gpustats knows stops start-up (``NewerStateVersion``) before any other file is read,
moved aside or written, and nothing is written there afterwards (``--state-reset`` moves it all
aside). An older format is read (the documents' parser migrates it). ``FORMAT`` is written
(atomically, fsynced) before any other file of this version, so it is never below what the
state holds. Every change of any of these formats bumps ``FORMAT_VERSION``; the samples in
``tests/golden/state_v<N>/`` pin each version as it was written.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import tempfile
import time
import zlib
from typing import Callable, NoReturn, TypeVar

from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

T = TypeVar("T")

# The state dir's format. 1: counters.json alone. 2: counters.json and a journal of bare JSON
# lines (later releases wrote checksummed lines under the same number, which 2's first releases
# read as torn: a rollback stepped counters back). 3: FORMAT, checksummed journal lines, and
# process keys with the boot they ran in. 4: counters of the holders' idle shares
# (``container_idle``, ``pod_idle``), of each GPU's unallocated idle, a GPU record's
# ``read_at_boot_seconds``. 5: each GPU's ``unobserved`` energy (a gap no one observed).
FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)

FORMAT_FILE = "FORMAT"
STATE_FILE = "counters.json"
JOURNAL_FILE = "counters.journal"
CORRUPT_SUFFIX = ".corrupt-"
REFUSED_SUFFIX = ".refused-"
RESET_SUFFIX = ".reset-"
KEEP_ASIDE = 5
MAX_STATE_BYTES = 64 * 1024 * 1024
MAX_JOURNAL_BYTES = 64 * 1024 * 1024
MAX_FORMAT_BYTES = 64
_READ_CHUNK = 1024 * 1024
_OPEN_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY

# Why a state file was refused (the ``reason`` counted under the ``persistence`` source).
SYMLINK = "symlink"
NOT_REGULAR = "not_regular_file"
FOREIGN_OWNER = "foreign_owner"
HARD_LINKED = "hard_linked"
TOO_LARGE = "too_large"


class NewerStateVersion(Exception):
    """The state was written by a newer gpustats; its counters cannot be read safely."""


class RefusedStateFile(OSError):
    """Something other than the daemon's own single-linked regular file is in a state file's
    place; ``reason`` is one of the module's refusal reasons. An ``OSError``: to a writer it
    is one more reason the file cannot be written."""

    def __init__(self, path: str, reason: str, detail: str):
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.reason = reason


def check_state_file(path: str, st: os.stat_result, uid: int) -> None:
    """``RefusedStateFile`` unless ``st`` is a regular file owned by ``uid`` with one link."""
    if not stat.S_ISREG(st.st_mode):
        raise RefusedStateFile(path, NOT_REGULAR, "not a regular file")
    if st.st_uid != uid:
        raise RefusedStateFile(path, FOREIGN_OWNER,
                               f"owned by uid {st.st_uid}, not the daemon's uid {uid}")
    if st.st_nlink != 1:
        raise RefusedStateFile(path, HARD_LINKED,
                               f"has {st.st_nlink} hard links (another file shares it)")


def open_state_file(path: str, flags: int, uid: int) -> int:
    """A descriptor of the state file at ``path``, never through a link (``OSError`` when it
    cannot be opened, ``FileNotFoundError`` when absent and not created)."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:          # O_NOFOLLOW met a symlink
            raise RefusedStateFile(path, SYMLINK, "a symbolic link") from exc
        if exc.errno in (errno.EISDIR, errno.ENXIO):   # a directory; a FIFO nobody reads
            raise RefusedStateFile(path, NOT_REGULAR, "not a regular file") from exc
        raise
    try:
        check_state_file(path, os.fstat(fd), uid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state_file(path: str, max_bytes: int, uid: int) -> bytes | None:
    """Contents of a state file, ``None`` when absent; ``RefusedStateFile`` for anything but
    the daemon's own regular file or one over ``max_bytes``; ``OSError`` when unreadable."""
    try:
        fd = open_state_file(path, os.O_RDONLY, uid)
    except FileNotFoundError:
        return None
    try:
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise RefusedStateFile(path, TOO_LARGE, f"larger than {max_bytes} bytes")
    finally:
        os.close(fd)


def encode_format(version: int) -> bytes:
    """What ``FORMAT`` holds: the version in decimal and a newline."""
    return b"%d\n" % version


def decode_format(raw: bytes) -> int:
    """The version ``FORMAT`` holds; ``ValueError`` unless it is a positive decimal number
    (with or without its newline)."""
    text = raw[:-1] if raw.endswith(b"\n") else raw
    if not text.isdigit() or text.startswith(b"0") or len(text) > 9:
        raise ValueError(f"not a format version: {raw[:20]!r}")
    return int(text)


def encode_journal_line(entry: dict) -> bytes:
    """``<crc32 of the JSON, 8 hex digits> <JSON>\\n`` (``TypeError``/``ValueError`` if the
    entry is not JSON)."""
    body = json.dumps(entry, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_journal_line(line: bytes) -> object:
    """The JSON value of one journal line (without its newline); ``ValueError`` when torn or
    damaged. A bare JSON line (written before lines were checksummed) is read as it is."""
    if line.startswith(b"{"):
        return json.loads(line.decode("utf-8"))
    checksum, sep, body = line.partition(b" ")
    if not sep or len(checksum) != 8:
        raise ValueError("no checksum")
    try:
        expected = int(checksum, 16)
    except ValueError:
        raise ValueError("no checksum") from None
    if zlib.crc32(body) != expected:
        raise ValueError("checksum mismatch")
    return json.loads(body.decode("utf-8"))


def _utc_stamp(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


class StateFiles:
    """Reads and writes the state dir; every failure is logged and reported, never raised
    (except a newer version at load, which the caller must decide on; after it nothing is
    written until ``reset``).

    ``write`` and ``fsync`` stand in for ``os.write`` and ``os.fsync`` (tests give a short
    writer or a slow disk); ``uid`` is the owner state files must have (the daemon's);
    ``refused(reason)`` is told of every state file refused.
    """

    def __init__(self, directory: str, *, wall: Callable[[], float] = time.time,
                 write: Callable[[int, memoryview], int] | None = None,
                 fsync: Callable[[int], None] | None = None, uid: int | None = None,
                 refused: Callable[[str], None] | None = None):
        self.directory = directory
        self._wall = wall
        self._write = write or os.write
        self._fsync = fsync or os.fsync
        self._uid = os.geteuid() if uid is None else uid
        self._refused = refused
        self._journal_fd: int | None = None
        self._log_once = LogOnce(log, every_seconds=300.0)
        self._format_current = False          # FORMAT on disk says FORMAT_VERSION
        self._newer: str | None = None         # why the state is refused as newer

    @property
    def format_path(self) -> str:
        return os.path.join(self.directory, FORMAT_FILE)

    @property
    def format_current(self) -> bool:
        """``FORMAT`` on disk says this version (found at load, or written since)."""
        return self._format_current

    @property
    def state_path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    @property
    def journal_path(self) -> str:
        return os.path.join(self.directory, JOURNAL_FILE)

    # ------------------------------------------------------------ loading

    def load(self, parse: Callable[[object], T]) -> tuple[T | None, list[object]]:
        """The parsed snapshot (``None`` when absent or unusable) and the journal's entries.

        ``FORMAT`` is checked first: a newer one raises ``NewerStateVersion`` before any other
        file is read. ``parse(document)`` raises ``NewerStateVersion`` to stop, ``ValueError``
        to mark the file corrupt (it is then kept aside and replaced at the next compaction).
        """
        self._check_format()
        raw = self._read_or_set_aside(self.state_path, MAX_STATE_BYTES,
                                      "starting from zero and replacing it")
        if raw is None:
            log.info("no persisted energy counters at %s; starting from zero", self.state_path)
            parsed = None
        else:
            parsed = self._parse_document(raw, parse)
        raw_journal = self._read_or_set_aside(self.journal_path, MAX_JOURNAL_BYTES,
                                              "the last persisted state is used")
        return parsed, self._journal_entries(raw_journal or b"")

    def _check_format(self) -> None:
        """Read ``FORMAT``: absent (a state of format 1 or 2, or none yet), of a version this
        gpustats reads, or newer (``NewerStateVersion``: nothing is read or written there). An
        unreadable one is kept aside like any other, and the documents' own versions decide."""
        self._format_current = False
        raw = self._read_or_set_aside(self.format_path, MAX_FORMAT_BYTES,
                                      "the state files' own versions are checked")
        if raw is None:
            return
        try:
            version = decode_format(raw)
        except ValueError as exc:
            log.error("energy counter state format %s is corrupt (%s); the state files' own "
                      "versions are checked", self.format_path, exc)
            self.keep_aside(self.format_path, CORRUPT_SUFFIX)
            return
        if version > FORMAT_VERSION:
            self._refuse_newer(f"{self.format_path} says format {version}; this gpustats "
                               f"reads formats {', '.join(map(str, READABLE_VERSIONS))}")
        self._format_current = version == FORMAT_VERSION

    def _refuse_newer(self, reason: str) -> NoReturn:
        """Leave a newer state as it is, write nothing more, and raise ``NewerStateVersion``."""
        self._newer = reason
        log.error("energy counter state in %s was written by a newer gpustats (%s): its "
                  "counters are not read and its files are left as they are", self.directory,
                  self._newer)
        raise NewerStateVersion(self._newer)

    def _read_or_set_aside(self, path: str, cap: int, consequence: str) -> bytes | None:
        try:
            return read_state_file(path, cap, self._uid)
        except RefusedStateFile as exc:
            self._refuse(exc, consequence)
        except OSError as exc:
            log.error("energy counter file %s is unreadable (%s); %s", path, exc, consequence)
            self.keep_aside(path, CORRUPT_SUFFIX)
        return None

    def _refuse(self, exc: RefusedStateFile, consequence: str) -> None:
        self._log_once(("refused", exc.path, exc.reason), logging.ERROR,
                       "energy counter file refused: %s (moved aside); %s", exc, consequence)
        if self._refused is not None:
            self._refused(exc.reason)
        self.keep_aside(exc.path, REFUSED_SUFFIX)

    def _parse_document(self, raw: bytes, parse: Callable[[object], T]) -> T | None:
        try:
            return parse(json.loads(raw.decode("utf-8")))
        except NewerStateVersion as exc:
            self._refuse_newer(f"{self.state_path}: {exc}")
        except (ValueError, RecursionError) as exc:
            # ValueError covers bad JSON and bad UTF-8; RecursionError absurdly deep nesting.
            log.error("energy counter state %s is corrupt (%s); starting from zero and "
                      "replacing it", self.state_path, exc)
            self.keep_aside(self.state_path, CORRUPT_SUFFIX)
            return None

    def _journal_entries(self, raw: bytes) -> list[object]:
        """Every line that decodes; a torn or damaged one is skipped, the rest still count."""
        entries, bad = [], []
        for number, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                entries.append(decode_journal_line(line))
            except (ValueError, RecursionError):
                bad.append(number)
        if bad:
            log.warning("energy counter journal %s: %d torn or corrupt line(s) skipped (line "
                        "%s); replay goes on with the others", self.journal_path, len(bad),
                        ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else ""))
        return entries

    def keep_aside(self, path: str, suffix: str) -> None:
        """Move a file out of the way under a timestamped name; keep the newest few."""
        target = f"{path}{suffix}{_utc_stamp(self._wall())}"
        try:
            os.replace(path, target)
        except OSError as exc:
            log.warning("cannot move %s aside: %s", path, exc)
            return
        log.info("kept %s as %s", os.path.basename(path), os.path.basename(target))
        prefix = os.path.basename(path) + suffix
        try:
            kept = sorted(n for n in os.listdir(self.directory) if n.startswith(prefix))
        except OSError:
            return
        for name in kept[:-KEEP_ASIDE]:
            try:
                os.unlink(os.path.join(self.directory, name))
            except OSError:
                pass

    # ------------------------------------------------------------ writing

    def append(self, entry: dict) -> bool:
        """One whole journal line, or nothing; no fsync (the page cache outlives a killed
        process)."""
        if self._refused_as_newer():
            return False
        try:
            line = encode_journal_line(entry)
        except (TypeError, ValueError) as exc:   # a key that JSON cannot hold: a bug
            self._log_once("encode", logging.ERROR, "cannot encode energy counters: %s", exc)
            return False
        try:
            self._stamp_format()
            fd = self._journal()
            length = os.fstat(fd).st_size
        except OSError as exc:
            self._close_journal()
            self._journal_failed(exc)
            return False
        try:
            self._write_whole(fd, line)
        except OSError as exc:
            self._cut_back(fd, length)
            self._journal_failed(exc)
            return False
        self._log_once.forget("journal")
        return True

    def _write_whole(self, fd: int, data: bytes) -> None:
        """Every byte of ``data``, writing on after a short write; ``OSError`` if it stops."""
        view = memoryview(data)
        while view:
            written = self._write(fd, view)
            if written <= 0:
                raise OSError(errno.EIO, "the write made no progress")
            view = view[written:]

    def _cut_back(self, fd: int, length: int) -> None:
        """Undo a partly written line: the journal back to ``length`` bytes."""
        try:
            os.ftruncate(fd, length)
        except OSError as exc:
            # The torn bytes stay; reopening ends them with a newline before the next line,
            # and replay skips them.
            self._close_journal()
            self._log_once("cut", logging.WARNING, "cannot cut a torn line off the journal "
                           "%s: %s (replay will skip it)", self.journal_path, exc)

    def _journal_failed(self, exc: OSError) -> None:
        self._log_once("journal", logging.ERROR,
                       "cannot append to the energy counter journal %s: %s (the changes are "
                       "kept for the next line; a crash now would restart counters from the "
                       "last line written)", self.journal_path, exc)

    def write_snapshot(self, document: dict) -> bool:
        """``FORMAT`` first if needed; then temp file, fsync, rename, fsync the directory;
        then empty the journal."""
        if self._refused_as_newer():
            return False
        path = self.state_path
        try:
            body = json.dumps(document, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            self._log_once("encode", logging.ERROR, "cannot encode energy counters: %s", exc)
            return False
        try:
            self._stamp_format()
            self._replace(path, body.encode())
        except OSError as exc:
            self._log_once("persist", logging.ERROR,
                           "cannot persist energy counters to %s: %s (counters in memory are "
                           "intact; retrying)", path, exc)
            return False
        self._log_once.forget("persist")
        try:
            os.ftruncate(self._journal(), 0)
        except OSError as exc:
            # Harmless: replay skips journal lines the snapshot already holds.
            self._close_journal()
            self._log_once("truncate", logging.WARNING, "cannot empty the journal %s: %s",
                           self.journal_path, exc)
        return True

    def _replace(self, path: str, data: bytes) -> None:
        """``path`` holds ``data`` or is as it was: temp file, fsync, rename, fsync the
        directory (``OSError`` when that fails; no temp file is left)."""
        os.makedirs(self.directory, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(prefix=".counters-", suffix=".tmp", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                self._fsync(f.fileno())
            os.replace(tmp_path, path)
        except BaseException:
            try:
                os.unlink(tmp_path)
            except OSError:
                pass
            raise
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            self._fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _stamp_format(self) -> None:
        """``FORMAT`` says this version before any other file of it is written (``OSError``
        when it cannot be written: then nothing else is)."""
        if not self._format_current:
            self._replace(self.format_path, encode_format(FORMAT_VERSION))
            self._format_current = True
            log.info("energy counter state in %s is of format %d", self.directory,
                     FORMAT_VERSION)

    def _refused_as_newer(self) -> bool:
        """A newer state was found at load: it is never written over."""
        if self._newer is None:
            return False
        self._log_once("newer", logging.ERROR, "not writing energy counters to %s: it holds "
                       "a newer gpustats' state (%s)", self.directory, self._newer)
        return True

    def reset(self) -> None:
        """Move the state, its journal and its format aside (``--state-reset``); counters
        start from zero, and a newer state refused at load is no longer in the way."""
        for path in (self.state_path, self.journal_path, self.format_path):
            if os.path.lexists(path):
                self.keep_aside(path, RESET_SUFFIX)
        self._close_journal()
        self._format_current = False
        self._newer = None

    def close(self) -> None:
        self._close_journal()

    def _journal(self) -> int:
        """The open journal, opened (and created) when needed; a refused file in its place is
        moved aside and a new journal created."""
        if self._journal_fd is None:
            os.makedirs(self.directory, exist_ok=True)
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
            try:
                fd = open_state_file(self.journal_path, flags, self._uid)
            except RefusedStateFile as exc:
                self._refuse(exc, "a new journal is started")
                fd = open_state_file(self.journal_path, flags | os.O_EXCL, self._uid)
            try:
                self._end_torn_line(fd)
            except OSError:
                os.close(fd)
                raise
            self._journal_fd = fd
        return self._journal_fd

    def _end_torn_line(self, fd: int) -> None:
        """A journal whose last line is unfinished (a cut that failed, a crash mid-write) gets
        a newline, so the torn bytes stand alone and the next line is whole."""
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            self._write_whole(fd, b"\n")

    def _close_journal(self) -> None:
        if self._journal_fd is not None:
            try:
                os.close(self._journal_fd)
            except OSError:
                pass
            self._journal_fd = None
