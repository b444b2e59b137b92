"""The snapshot store: one reference swapped per tick, and bodies rendered once per snapshot."""

from __future__ import annotations

import threading
from typing import Callable, Hashable

from gpustats.model.snapshot import Snapshot


class SnapshotStore:
    """Holds the latest Snapshot together with the bodies already rendered from it.

    ``render(key, build)`` memoizes a serialized body per (snapshot, key): concurrent requests
    for one snapshot build it once (single-flight under a lock), the rest reuse the bytes.
    """

    def __init__(self) -> None:
        self._current: tuple[Snapshot, dict[Hashable, object]] | None = None
        self._render_lock = threading.Lock()

    def publish(self, snapshot: Snapshot) -> None:
        self._current = (snapshot, {})

    def latest(self) -> Snapshot | None:
        current = self._current
        return current[0] if current is not None else None

    def render(self, key: Hashable,
               build: Callable[[Snapshot], object]) -> tuple[Snapshot, object] | None:
        """The body for ``key`` of the latest snapshot, building it at most once per snapshot."""
        current = self._current
        if current is None:
            return None
        snapshot, rendered = current
        return snapshot, self._memo(rendered, key, lambda: build(snapshot))

    def _memo(self, rendered: dict[Hashable, object], key: Hashable,
              build: Callable[[], object]) -> object:
        body = rendered.get(key)
        if body is None:
            with self._render_lock:
                body = rendered.get(key)
                if body is None:
                    body = build()
                    rendered[key] = body
        return body
