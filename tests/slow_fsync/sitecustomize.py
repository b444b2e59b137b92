"""Imported at start-up by a daemon a test runs with this directory first on ``PYTHONPATH``:
every ``os.fsync`` then takes ``GPUSTATS_TEST_FSYNC_SECONDS`` longer, as on a busy disk."""

import os
import time

_DELAY = float(os.environ.get("GPUSTATS_TEST_FSYNC_SECONDS") or 0)

if _DELAY > 0:
    _real_fsync = os.fsync

    def _slow_fsync(fd):
        time.sleep(_DELAY)                 # measures: a slow disk's fsync
        _real_fsync(fd)

    os.fsync = _slow_fsync
