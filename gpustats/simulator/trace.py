"""The simulator's ground-truth log: one JSON line per scenario (re)load, per energy read, and
per read that decides who the energy goes to (``read``: the process list, utilization samples,
GPM metrics), so a checker knows which scenario versions one tick's reads may have seen.

Off unless the scenario names ``trace_file``. A checker outside the daemon reads it to know
exactly when each scenario version took effect and when the daemon read each energy counter
(its ticks), since the simulator, not the writer of the file, decides when an edit applies.
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


def write_trace(path: str | None, wall_seconds: float, event: str, tag: str | None,
                **fields: object) -> None:
    """Append one line to ``path`` (nothing when ``path`` is None; a failed write is logged)."""
    if path is None:
        return
    line = json.dumps({"t": wall_seconds, "event": event, "tag": tag, **fields})
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as exc:
        log.warning("simulator: cannot write the trace %s: %s", path, exc.strerror or exc)
