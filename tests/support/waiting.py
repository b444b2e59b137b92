"""Waiting for a condition a thread or a process brings about, polled, bounded: the one place a
test sleeps while it waits (the poll interval)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def poll(probe: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T | None:
    """The first truthy value ``probe()`` returns within ``timeout`` seconds, asked every
    ``interval`` seconds; ``None`` if none came. What ``probe`` raises ends the wait."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)        # measures: the poll interval of every wait


def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    """Whether ``predicate()`` came true within ``timeout`` seconds (polled every 20 ms)."""
    return poll(predicate, timeout) is not None
