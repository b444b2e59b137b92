"""MIG configuration change events for the sweep: one event set over the GPUs that offer them.

The MIG manager (or an operator with ``nvidia-smi mig``) destroys and creates GPU instances
while MIG mode stays on; drivers that can say so deliver ``nvmlEventMigConfigChange``. The sweep
drains the set without waiting at the start of each tick (one ``nvmlEventSetWait_v2`` call per
tick and node, one more per event) and re-reads the layout of the GPUs named. A GPU that does
not offer the event is not registered; the sweep reads its layout at a cadence instead. If the
set fails (GPU lost, driver error), it is closed, every GPU it watched is named once so its
layout is checked, and the cadence takes over for the rest of the NVML session.
"""

from __future__ import annotations

import logging
from typing import Iterable

import pynvml

from gpustats.sources.nvml.query import DeviceLost, Querier, error_code, handle_address
from gpustats.sources.nvml.session import DeviceHandle

log = logging.getLogger(__name__)

MIG_CONFIG_CHANGE = pynvml.nvmlEventMigConfigChange
_MAX_EVENTS_PER_TICK = 64


class MigConfigEvents:
    """``open`` once per session; ``changed`` each tick; ``watches`` says who has events."""

    def __init__(self, querier: Querier):
        self._q = querier
        self._set = None
        self._by_address: dict[int, str] = {}
        self._watched: frozenset[str] = frozenset()
        self.opened = False

    def watches(self, uuid: str) -> bool:
        return uuid in self._watched

    def open(self, devices: Iterable[DeviceHandle]) -> None:
        """Register every identified GPU that offers MIG configuration events."""
        self.opened = True
        try:
            self._set = self._q.call(pynvml.nvmlEventSetCreate)
        except (pynvml.NVMLError, DeviceLost) as exc:
            log.info("No NVML event set for MIG configuration changes (%s); MIG layouts are "
                     "re-read at a cadence", exc)
            return
        for device in devices:
            if device.identity is None:
                continue
            uuid = device.identity.uuid
            try:
                offered = self._q.read(uuid, "event_types",
                                       pynvml.nvmlDeviceGetSupportedEventTypes, device.handle)
                if not offered or not offered & MIG_CONFIG_CHANGE:
                    continue
                self._q.call(pynvml.nvmlDeviceRegisterEvents, device.handle, MIG_CONFIG_CHANGE,
                             self._set)
            except (pynvml.NVMLError, DeviceLost) as exc:
                log.info("GPU %s: no MIG configuration events (%s); its MIG layout is re-read "
                         "at a cadence", uuid, exc)
                continue
            self._by_address[handle_address(device.handle)] = uuid
        self._watched = frozenset(self._by_address.values())
        if not self._watched:
            self.close()

    def changed(self) -> frozenset[str]:
        """GPUs whose MIG configuration changed since the last call (never waits)."""
        if self._set is None:
            return frozenset()
        named: set[str] = set()
        for _ in range(_MAX_EVENTS_PER_TICK):
            try:
                data = self._q.call(pynvml.nvmlEventSetWait_v2, self._set, 0)
            except (pynvml.NVMLError, DeviceLost) as exc:
                if isinstance(exc, pynvml.NVMLError) \
                        and error_code(exc) == pynvml.NVML_ERROR_TIMEOUT:
                    break
                watched = self._watched
                log.warning("MIG configuration events failed (%s); MIG layouts are re-read at a "
                            "cadence from now on", exc)
                self.close()
                return watched
            if not data.eventType & MIG_CONFIG_CHANGE:
                continue
            uuid = self._by_address.get(handle_address(data.device))
            named.update((uuid,) if uuid is not None else self._watched)
        return frozenset(named)

    def close(self) -> None:
        if self._set is not None:
            try:
                pynvml.nvmlEventSetFree(self._set)
            except pynvml.NVMLError as exc:
                log.debug("nvmlEventSetFree: %s", exc)
        self._set = None
        self._by_address = {}
        self._watched = frozenset()
