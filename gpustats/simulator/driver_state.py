"""The simulated driver's energy counters on disk, so they keep counting across daemon restarts.

Real hardware counters count from the driver's load, not the daemon's start; a restarted
daemon reads on where the counter is now. The simulator stands in for the driver, so it keeps
``{uuid: energy_mj}`` with the wall time they were taken at in a small JSON file, written at
most once a second. With the scenario's power constant since then, extrapolating from the
saved point gives exactly the value an uninterrupted counter would have.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile

log = logging.getLogger(__name__)


def load_driver_state(path: str) -> tuple[float, int, dict[str, float]] | None:
    """(saved wall time, driver reloads, energy mJ per UUID), or ``None`` when absent or bad."""
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


def save_driver_state(path: str, saved_at: float, reloads: int,
                      energy_mj: dict[str, float]) -> None:
    """Atomic replace; a failure is logged at debug level (the simulator goes on)."""
    body = json.dumps({"saved_at": saved_at, "driver_reloads": reloads, "energy_mj": energy_mj})
    try:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".simulated-driver-", dir=directory)
        with os.fdopen(fd, "w") as f:
            f.write(body)
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("simulator: cannot save driver state %s: %s", path, exc)
