"""The daemon's wall clock under libfaketime, stepped while it runs.

The daemon (and the simulated NVML inside it, whose utilization samples are stamped with that
process's wall clock) runs with libfaketime preloaded, reading its offset from a file on every
call (``FAKETIME_NO_CACHE``), so a rewrite of the file steps the wall clock at once, as an NTP
step or ``date -s`` would. The monotonic and boot clocks are left alone
(``FAKETIME_DONT_FAKE_MONOTONIC``), as a step leaves them. The harness's own clocks are real.
"""

from __future__ import annotations

from pathlib import Path

# Debian's libfaketime; the multithreaded build, as the daemon runs threads.
LIBRARIES = (Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
             Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"),
             Path("/usr/lib/faketime/libfaketimeMT.so.1"))
# The offset is kept within this many seconds of the true time: beyond the counters'
# retention a step forward while the daemon is down would look like a long absence.
MAX_OFFSET_SECONDS = 1800


def find_libfaketime() -> Path | None:
    return next((p for p in LIBRARIES if p.exists()), None)


class SteppedClock:
    """The offset file the daemon's libfaketime reads; ``step`` moves the wall clock."""

    def __init__(self, library: Path, offset_file: Path):
        self.library = library
        self.path = offset_file
        self.offset_seconds = 0
        self._write()

    def env(self) -> dict[str, str]:
        """What the daemon's environment needs to run on this clock."""
        return {"LD_PRELOAD": str(self.library), "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def step(self, seconds: int) -> int:
        """Step by ``seconds`` (its sign flipped where it would leave the offset beyond
        ``MAX_OFFSET_SECONDS``); returns the step taken."""
        if abs(self.offset_seconds + seconds) > MAX_OFFSET_SECONDS:
            seconds = -seconds
        self.offset_seconds += seconds
        self._write()
        return seconds

    def _write(self) -> None:
        # Replaced, never rewritten in place: a read in the middle of a write would see an
        # empty or half-written offset.
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{self.offset_seconds:+d}\n")
        tmp.replace(self.path)
