"""The simulated driver's energy counters on disk, so they keep counting across daemon restarts.

Real hardware counters count from the driver's load, not the daemon's start; a restarted
daemon reads on where the counter is now. The simulator stands in for the driver, so it keeps
``{uuid: energy_mj}`` with the time they were taken at on the boot clock (which a wall-clock
step does not move) in a small JSON file, written at most once a second. With the
scenario's power constant since then, extrapolating from the saved point gives
exactly the value an uninterrupted counter would have.
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger(__name__)


def load_driver_state(path: str) -> tuple[float, int, dict[str, float]] | None:
    """(saved boot-clock time, driver reloads, energy mJ per UUID), or ``None`` if absent or bad."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        saved_at = float(data["saved_at"])
        reloads = int(data["driver_reloads"])
        energy = {str(k): float(v) for k, v in data["energy_mj"].items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("simulator: driver state %s unusable (%s); counters start afresh", path, exc)
        return None
    return saved_at, reloads, energy


class DriverStateWriter:
    """Saves the state in place, through one file kept open: one ``pwrite`` per save instead
    of a new file and a rename every second. Each body is padded with spaces to the longest
    written so far (JSON allows trailing whitespace), so a shorter one never leaves the tail
    of a longer one behind, and a save is one write. A failure is logged at debug level (the
    simulator goes on) and the file is opened again at the next save."""

    def __init__(self, path: str):
        self._path = path
        self._fd: int | None = None
        self._size = 0

    def save(self, saved_at: float, reloads: int, energy_mj: dict[str, float]) -> None:
        body = json.dumps({"saved_at": saved_at, "driver_reloads": reloads,
                           "energy_mj": energy_mj}).encode()
        try:
            if self._fd is None:
                os.makedirs(os.path.dirname(self._path) or ".", exist_ok=True)
                self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
                                   | os.O_NOFOLLOW, 0o600)
                self._size = os.fstat(self._fd).st_size
            body = body.ljust(self._size)
            os.pwrite(self._fd, body, 0)
            self._size = len(body)
        except OSError as exc:
            log.debug("simulator: cannot save driver state %s: %s", self._path, exc)
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
