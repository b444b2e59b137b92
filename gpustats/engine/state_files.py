"""The state dir's files: a compacted snapshot (``counters.json``) and a per-tick journal.

Counters a user bills by must never be served above what survives a crash: every tick appends
one line with what changed to ``counters.journal`` *before* the tick's snapshot is published
(no fsync: a killed process's writes survive in the page cache), and every persist interval
the whole state is written to ``counters.json`` (temp file, fsync, rename, fsync of the
directory) and the journal is emptied. Loading reads the snapshot, then replays the journal
lines newer than it. A torn last line (power loss mid-write) ends the replay with a log line.

Files are opened only when they are regular files (a FIFO or device in their place would block
or feed garbage), non-blocking, and read up to a stated cap. A file that cannot be parsed is
moved aside as ``counters.json.corrupt-<UTC time>`` (the newest ``KEEP_ASIDE`` are kept); a
file written by a newer gpustats stops start-up (``NewerStateVersion``) unless reset.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
import time
from typing import Callable

from gpustats.hostfs import UnsafeFile, read_regular
from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

STATE_FILE = "counters.json"
JOURNAL_FILE = "counters.journal"
CORRUPT_SUFFIX = ".corrupt-"
RESET_SUFFIX = ".reset-"
KEEP_ASIDE = 5
MAX_STATE_BYTES = 64 * 1024 * 1024
MAX_JOURNAL_BYTES = 64 * 1024 * 1024
READ_DEADLINE_SECONDS = 5.0


class NewerStateVersion(Exception):
    """The state file was written by a newer gpustats; its counters cannot be read safely."""


def read_regular_file(path: str, max_bytes: int) -> bytes | None:
    """Contents of a regular file, ``None`` when absent; never blocks on a FIFO or device.

    ``UnsafeFile`` for anything else in its place, a file over ``max_bytes`` or a read past
    its deadline; ``OSError`` when it cannot be read.
    """
    try:
        return read_regular(path, max_bytes=max_bytes, deadline_seconds=READ_DEADLINE_SECONDS)
    except FileNotFoundError:
        return None


def _utc_stamp(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


class StateFiles:
    """Reads and writes the state dir; every failure is logged and reported, never raised
    (except a newer version at load, which the caller must decide on)."""

    def __init__(self, directory: str, *, wall: Callable[[], float] = time.time):
        self.directory = directory
        self._wall = wall
        self._journal_fd: int | None = None
        self._log_once = LogOnce(log, every_seconds=300.0)

    @property
    def state_path(self) -> str:
        return os.path.join(self.directory, STATE_FILE)

    @property
    def journal_path(self) -> str:
        return os.path.join(self.directory, JOURNAL_FILE)

    # ------------------------------------------------------------ loading

    def load(self, parse: Callable[[object], object]) -> tuple[object | None, list[object]]:
        """The parsed snapshot (``None`` when absent or unusable) and the journal's entries.

        ``parse(document)`` raises ``NewerStateVersion`` to stop, ``ValueError`` to mark the
        file corrupt (it is then kept aside and replaced at the next compaction).
        """
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

    def _read_or_set_aside(self, path: str, cap: int, consequence: str) -> bytes | None:
        try:
            return read_regular_file(path, cap)
        except (OSError, UnsafeFile) as exc:
            log.error("energy counter file %s is unreadable (%s); %s", path, exc, consequence)
            self.keep_aside(path, CORRUPT_SUFFIX)
            return None

    def _parse_document(self, raw: bytes, parse: Callable[[object], object]) -> object | None:
        try:
            return parse(json.loads(raw.decode("utf-8")))
        except NewerStateVersion:
            raise
        except (ValueError, RecursionError) as exc:
            # ValueError covers bad JSON and bad UTF-8; RecursionError absurdly deep nesting.
            log.error("energy counter state %s is corrupt (%s); starting from zero and "
                      "replacing it", self.state_path, exc)
            self.keep_aside(self.state_path, CORRUPT_SUFFIX)
            return None

    def _journal_entries(self, raw: bytes) -> list[object]:
        path = self.journal_path
        if not raw:
            return []
        entries = []
        for number, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                entries.append(json.loads(line.decode("utf-8")))
            except (ValueError, RecursionError):
                log.warning("energy counter journal %s: line %d is torn or corrupt; replay "
                            "stops there", path, number)
                break
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
        """One journal line; no fsync (the page cache outlives a killed process)."""
        try:
            line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
        except (TypeError, ValueError) as exc:   # a key that JSON cannot hold: a bug
            self._log_once("encode", logging.ERROR, "cannot encode energy counters: %s", exc)
            return False
        try:
            fd = self._journal()
            os.write(fd, line)
            return True
        except OSError as exc:
            self._close_journal()
            self._log_once("journal", logging.ERROR,
                           "cannot append to the energy counter journal %s: %s (a crash now "
                           "would restart counters from the last persisted state)",
                           self.journal_path, exc)
            return False

    def write_snapshot(self, document: dict) -> bool:
        """Temp file, fsync, rename, fsync the directory, then empty the journal."""
        path = self.state_path
        tmp_path = None
        try:
            body = json.dumps(document, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            self._log_once("encode", logging.ERROR, "cannot encode energy counters: %s", exc)
            return False
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp_path = tempfile.mkstemp(prefix=".counters-", suffix=".tmp",
                                            dir=self.directory)
            with os.fdopen(fd, "w") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_path, path)
            tmp_path = None
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            self._log_once("persist", logging.ERROR,
                           "cannot persist energy counters to %s: %s (counters in memory are "
                           "intact; retrying)", path, exc)
            return False
        finally:
            if tmp_path is not None:
                try:
                    os.unlink(tmp_path)
                except OSError:
                    pass
        self._log_once.forget("persist")
        try:
            os.ftruncate(self._journal(), 0)
        except OSError as exc:
            # Harmless: replay skips journal lines the snapshot already holds.
            self._close_journal()
            self._log_once("truncate", logging.WARNING, "cannot empty the journal %s: %s",
                           self.journal_path, exc)
        return True

    def reset(self) -> None:
        """Move the state and journal aside (``--state-reset``); counters start from zero."""
        for path in (self.state_path, self.journal_path):
            if os.path.lexists(path):
                self.keep_aside(path, RESET_SUFFIX)

    def close(self) -> None:
        self._close_journal()

    def _journal(self) -> int:
        if self._journal_fd is None:
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                         | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise OSError(f"{self.journal_path} is not a regular file")
            self._journal_fd = fd
        return self._journal_fd

    def _close_journal(self) -> None:
        if self._journal_fd is not None:
            try:
                os.close(self._journal_fd)
            except OSError:
                pass
            self._journal_fd = None
