"""Waiting for a condition a thread brings about, polled, bounded."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    """Whether ``predicate()`` came true within ``timeout`` seconds (polled every 20 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
