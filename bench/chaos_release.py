"""The previous release of gpustats under chaos: taken from git history at bench time and run
over the same state dir as this release, both ways.

The previous release is the last commit whose ``gpustats/engine/state_files.py`` has
``FORMAT_VERSION`` one below this tree's (found with ``git log -S``); its ``gpustats``
package is extracted with ``git archive`` into the run's work dir and run with ``PYTHONPATH``
pointing there (the same arguments, environment and ``sitecustomize``). Without git, or
without such a commit, the chaos run skips it with a line in its log.

What is exercised (``previous_release`` in the chaos run's events):

- Forward. Some seeds start the run on the previous release over an empty state dir, so the
  state holds the previous format as that release wrote it. After a few seconds it is killed
  (SIGKILL or SIGTERM) and this release starts over that state: ``FORMAT`` must say the
  previous version before and this one once it ticked, and every counter goes on (the
  run's checks: none lowered, none of a live pod vanished, pod totals against the oracle).
- Back. While this release runs it is SIGKILLed and the previous release is started over the
  newer state: it must exit with status 2, name ``--state-reset`` in what it prints, and leave
  every file of the state dir byte for byte. This release then starts again over the same
  state and every counter goes on.

The state is never converted from one format to the other: written down as the previous
format, a state would lose the idle-share counters that format lacks, which no rollback does;
only the previous release itself says what it does over a newer state.

``simulated-driver.json`` in the state dir is the simulated driver's (the stand-in for the
hardware counters), not gpustats's state: the previous release's simulator stamps it on the
wall clock, this one's on the boot clock, so at the forward hand-over it is re-stamped (the
driver's counters then run on as one driver's would), and at the back direction it is kept
as it was.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
from pathlib import Path

STATE_FILES_SOURCE = "gpustats/engine/state_files.py"
DRIVER_FILE = "simulated-driver.json"
NOT_STATE = (DRIVER_FILE, ".chaos-filler")     # files of the harness, not of gpustats
REFUSED_STATUS = 2


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=60)


def previous_release_commit(repo: Path, version: int) -> tuple[str | None, str]:
    """(the last commit whose state format is ``version``, why none when None)."""
    marker = f"FORMAT_VERSION = {version}"
    try:
        found = _git(repo, "log", "--format=%H", "-S", marker, "--", STATE_FILES_SOURCE)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"git not available ({exc})"
    commits = found.stdout.decode().split()
    if found.returncode != 0 or not commits:
        return None, f"no commit with {marker!r} in git history " \
                     f"({found.stderr.decode().strip() or 'none found'})"
    # The newest commit that changed the marker's count either added it (still there) or
    # removed it (its parent is the last with it).
    for candidate in (commits[0], commits[0] + "^"):
        shown = _git(repo, "show", f"{candidate}:{STATE_FILES_SOURCE}")
        if shown.returncode == 0 and marker in shown.stdout.decode():
            rev = _git(repo, "rev-parse", candidate)
            return rev.stdout.decode().strip(), ""
    return None, f"no commit whose {STATE_FILES_SOURCE} has {marker!r}"


def extract_release(repo: Path, commit: str, dest: Path) -> Path:
    """``gpustats/`` of ``commit`` under ``dest`` (a tree to put on ``PYTHONPATH``)."""
    archive = _git(repo, "archive", "--format=tar", commit, "gpustats")
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {commit}: {archive.stderr.decode().strip()}")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def state_bytes(state_dir: Path) -> dict[str, bytes]:
    """Every file of gpustats's in the state dir, by name."""
    return {p.name: p.read_bytes() for p in sorted(state_dir.iterdir())
            if p.is_file() and p.name not in NOT_STATE}


def format_version(state_dir: Path) -> str:
    """What ``FORMAT`` says (stripped), or a word for its absence."""
    try:
        return (state_dir / "FORMAT").read_text().strip()
    except OSError:
        return "absent"


def changed_files(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(name for name in set(before) | set(after)
                  if before.get(name) != after.get(name))


def restamp_driver_to_boot_clock(state_dir: Path) -> float | None:
    """Re-stamp the simulated driver's save from the wall clock (the previous release's
    simulator) to the boot clock (this one's); returns the new stamp (None: no file)."""
    path = state_dir / DRIVER_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    wall_to_boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    data["saved_at"] = float(data["saved_at"]) - wall_to_boot
    path.write_text(json.dumps(data))
    return data["saved_at"]


def run_to_exit(command: list[str], env: dict[str, str], cwd: Path, log_path: Path,
                title: str, timeout: float = 30.0) -> tuple[int | None, str]:
    """Run a daemon that is expected to stop on its own: (exit status, None if it had to be
    killed; what it printed, also appended to ``log_path`` under ``title``)."""
    with open(log_path, "a") as log:
        log.write(f"----- {title} -----\n")
    try:
        done = subprocess.run(command, env=env, cwd=str(cwd), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
        code, output = done.returncode, done.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        code = None
        output = (exc.stdout or b"").decode(errors="replace") + \
            f"\n(still running after {timeout:g} s: killed)"
    with open(log_path, "a") as log:
        log.write(output)
    return code, output
