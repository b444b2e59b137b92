"""The daemon under chaos: a ``python -m gpustats`` subprocess restarted on the same port and
state dir, a state dir on a small tmpfs that can be filled or made read-only, and fsync made
slow inside the daemon (a ``sitecustomize`` on its path), as on a busy disk. The same
``sitecustomize`` stamps the simulator's trace lines on the monotonic clock too (``mono``),
which a step of the daemon's wall clock leaves alone."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Loaded by the daemon's interpreter (``sitecustomize`` on its PYTHONPATH): fsync made slow,
# and while the flag file exists the state dir behaves as a read-only file system would
# (EROFS from open for writing, write, rename, unlink). A mount cannot be remounted read-only
# while the daemon holds its journal open for writing, hence the syscall wrappers.
FAULTS = '''\
import errno, faulthandler, os, random, signal, threading, time
# Every thread's stack into the log on SIGUSR2: sent by the harness before it SIGKILLs a daemon
# that did not stop on SIGTERM, so the log says where it hung.
faulthandler.register(signal.SIGUSR2, all_threads=True)
_env = os.environ.get
_state = os.path.realpath(_env("CHAOS_STATE_DIR", "/nonexistent")) + os.sep
_flag = _env("CHAOS_READONLY_FLAG", "/nonexistent")
_fsync_seconds = _env("CHAOS_FSYNC_SECONDS")

def _denied(path):
    try:
        return os.path.exists(_flag) and os.path.realpath(path).startswith(_state)
    except (OSError, TypeError, ValueError):
        return False

def _erofs(path):
    return OSError(errno.EROFS, os.strerror(errno.EROFS), path)

_open, _write, _replace, _rename, _unlink, _fsync = (
    os.open, os.write, os.replace, os.rename, os.unlink, os.fsync)

def _chaos_open(path, flags, mode=0o777, *, dir_fd=None):
    if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and dir_fd is None and _denied(path):
        raise _erofs(path)
    return _open(path, flags, mode, dir_fd=dir_fd)

def _chaos_write(fd, data):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        target = None
    if target is not None and _denied(target):
        raise _erofs(target)
    return _write(fd, data)

def _chaos_replace(src, dst, **kw):
    if _denied(dst):
        raise _erofs(dst)
    return _replace(src, dst, **kw)

def _chaos_rename(src, dst, **kw):
    if _denied(dst):
        raise _erofs(dst)
    return _rename(src, dst, **kw)

def _chaos_unlink(path, **kw):
    if _denied(path):
        raise _erofs(path)
    return _unlink(path, **kw)

# Not time.sleep: under libfaketime (clock_step) its clock_nanosleep on the monotonic clock
# fails with EINVAL, which would reach the daemon as a failed fsync.
_pause = threading.Event().wait

def _chaos_fsync(fd):
    if _fsync_seconds:
        low, high = (float(x) for x in _fsync_seconds.split(","))
        _pause(random.uniform(low, high))
    return _fsync(fd)

os.open, os.write, os.replace, os.rename, os.unlink, os.fsync = (
    _chaos_open, _chaos_write, _chaos_replace, _chaos_rename, _chaos_unlink, _chaos_fsync)
'''

# Appended to the same ``sitecustomize``: each trace line of the simulated NVML (which runs
# inside the daemon, on its wall clock) also carries ``mono``, the monotonic time, for the
# oracle's intervals: this release's simulator stamps its lines itself (an energy read with
# the moment its counter was brought up to date); the previous release's, when written. The
# simulator looks ``write_trace`` up in its module at each call, so replacing it there is
# enough; loaded here, before the daemon imports it.
TRACE_ON_MONOTONIC = '''
try:
    from gpustats.simulator import library as _sim
except ImportError:
    _sim = None
if _sim is not None:
    _write_trace = _sim.write_trace

    def _write_trace_mono(path, wall_seconds, event, tag, **fields):
        fields.setdefault("mono", time.monotonic())      # the previous release stamps none
        _write_trace(path, wall_seconds, event, tag, **fields)

    _sim.write_trace = _write_trace_mono
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """Start, signal and restart the daemon; every start appends to one log file."""

    def __init__(self, workdir: Path, args: list[str], state_dir: Path,
                 slow_fsync: tuple[float, float] | None, env: dict[str, str] | None = None):
        self.workdir = workdir
        self.args = args
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / "daemon.log"
        self.started_at = 0.0
        self.starts = 0
        site = workdir / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(FAULTS + TRACE_ON_MONOTONIC)
        self.site = site
        self.readonly_flag = workdir / "state-readonly"
        self.env = dict(os.environ, CHAOS_STATE_DIR=str(state_dir),
                        CHAOS_READONLY_FLAG=str(self.readonly_flag), **(env or {}))
        if slow_fsync is not None:
            self.env["CHAOS_FSYNC_SECONDS"] = f"{slow_fsync[0]},{slow_fsync[1]}"
        self.env["PYTHONPATH"] = self.python_path(REPO)

    def python_path(self, release: Path) -> str:
        return os.pathsep.join(
            p for p in (str(self.site), str(release), os.environ.get("PYTHONPATH")) if p)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "gpustats", "--listen", f"127.0.0.1:{self.port}",
                *self.args]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 20.0, release: Path = REPO) -> None:
        """Start from ``release`` (a source tree; this one by default), ready or raising."""
        with open(self.log_path, "a") as log:
            log.write(f"----- start {self.starts}"
                      + ("" if release == REPO else f" (from {release.name})") + " -----\n")
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT,
                env=dict(self.env, PYTHONPATH=self.python_path(release)),
                cwd=str(self.workdir))
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode} at start")
            if self.get("/readyz")[0] == 200:
                self.started_at = time.monotonic()
                return
            time.sleep(0.05)
        raise RuntimeError(f"daemon not ready in {timeout} s")

    def send(self, sig: int) -> None:
        if self.running:
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGUSR2)       # the stacks, into the log
                try:
                    self.proc.wait(1.0)
                except subprocess.TimeoutExpired:
                    pass
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=timeout) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except (OSError, ValueError):
            return 0, ""

    def get_json(self, path: str) -> dict | None:
        status, body = self.get(path)
        if status != 200:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""


class StateDisk:
    """The state dir on its own small tmpfs, to fill (root and mount(2) needed, else
    ``mounted`` is False), and made read-only through the daemon's flag file."""

    def __init__(self, path: Path, readonly_flag: Path, size: str = "2m"):
        self.path = path
        self.readonly_flag = readonly_flag
        path.mkdir(parents=True, exist_ok=True)
        self.filler = path / ".chaos-filler"
        self.mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True).returncode == 0
        self.full = False
        self.readonly = False
        self.since = 0.0            # monotonic time the trouble began
        self._journal_size: int | None = None
        self._stalled_since = 0.0

    @property
    def troubled(self) -> bool:
        return self.full or self.readonly

    def journal_stalled_for(self, now: float) -> float:
        """How long the journal has not changed while the state dir is in trouble (0 while it
        still changes). A full tmpfs still takes appends into the journal's last page, so a
        write has surely failed only once the journal stops changing: the GPUs' energy counters
        change every tick, so every tick has a line to append."""
        try:
            size = (self.path / "counters.journal").stat().st_size
        except OSError:
            size = None
        if not self.troubled or size != self._journal_size:
            self._journal_size, self._stalled_since = size, now
        # Counted from the trouble's start at the earliest: the scrape before it may be a
        # while earlier.
        return now - max(self._stalled_since, self.since) if self.troubled else 0.0

    def fill(self) -> None:
        """Write until ENOSPC: later writes in the state dir get short writes and ENOSPC."""
        chunk = b"\0" * 4096
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while os.write(fd, chunk) > 0:
                pass
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        self.full, self.since = True, time.monotonic()

    def make_readonly(self) -> None:
        self.readonly_flag.write_text("")
        self.readonly, self.since = True, time.monotonic()

    def restore(self) -> None:
        if self.readonly:
            self.readonly_flag.unlink(missing_ok=True)
            self.readonly = False
        if self.full:
            self.filler.unlink(missing_ok=True)
            self.full = False

    def close(self) -> None:
        if self.mounted:
            self.restore()
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
            self.mounted = False
