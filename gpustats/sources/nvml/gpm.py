"""GPM (Hopper+) metrics: one sample per device per tick, metrics over the previous interval.

Two samples must be more than 100 ms apart (nvml.md §2.13); ticks are seconds apart, so each
tick's sample pairs with the previous tick's. MIG instances are sampled through the parent
handle with ``nvmlGpmMigSampleGet``.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pynvml

from gpustats.model.device import GpmReading
from gpustats.sources.nvml.query import Querier

log = logging.getLogger(__name__)

MIN_INTERVAL_SECONDS = 0.1
_MIB = 1024.0 * 1024.0
# (GpmReading field, metric id, scale to the field's unit)
_METRICS = (
    ("graphics_active_percent", pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, 1.0),
    ("sm_active_percent", pynvml.NVML_GPM_METRIC_SM_UTIL, 1.0),
    ("sm_occupancy_percent", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, 1.0),
    ("dram_active_percent", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, 1.0),
    ("pcie_tx_bytes_per_second", pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, _MIB),
    ("pcie_rx_bytes_per_second", pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, _MIB),
    ("nvlink_tx_bytes_per_second", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, _MIB),
    ("nvlink_rx_bytes_per_second", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, _MIB),
)


class GpmSampler:
    """Keeps the previous GPM sample per (device, instance) and turns sample pairs into readings."""

    def __init__(self, querier: Querier, monotonic: Callable[[], float] = time.monotonic):
        self._q = querier
        self._monotonic = monotonic
        self._supported: dict[str, bool] = {}
        # key -> (sample, taken_at); key is (uuid, gpu_instance_id or None)
        self._previous: dict[tuple[str, int | None], tuple[Any, float]] = {}

    def device(self, uuid: str, handle: Any) -> GpmReading | None:
        if not self._is_supported(uuid, handle):
            return None
        return self._next((uuid, None), lambda s: pynvml.nvmlGpmSampleGet(handle, s))

    def mig_instance(self, uuid: str, parent: Any, gpu_instance_id: int) -> GpmReading | None:
        if not self._is_supported(uuid, parent):
            return None
        return self._next((uuid, gpu_instance_id),
                          lambda s: pynvml.nvmlGpmMigSampleGet(parent, gpu_instance_id, s))

    def close(self) -> None:
        for sample, _ in self._previous.values():
            _free(sample)
        self._previous.clear()

    def _is_supported(self, uuid: str, handle: Any) -> bool:
        known = self._supported.get(uuid)
        if known is None:
            support = self._q.read(uuid, "gpm", pynvml.nvmlGpmQueryDeviceSupport, handle)
            known = bool(support is not None and support.isSupportedDevice)
            self._supported[uuid] = known
        return known and not self._q.is_unsupported(uuid, "gpm")

    def _next(self, key: tuple[str, int | None], take: Callable[[Any], Any]) -> GpmReading | None:
        uuid = key[0]
        sample = self._q.read(uuid, "gpm", pynvml.nvmlGpmSampleAlloc)
        if sample is None:
            return None
        if self._q.read(uuid, "gpm", take, sample) is None:
            _free(sample)
            return None
        now = self._monotonic()
        previous = self._previous.get(key)
        if previous is not None and now - previous[1] <= MIN_INTERVAL_SECONDS:
            _free(sample)  # too close: keep the older sample as the base
            return None
        self._previous[key] = (sample, now)
        if previous is None:
            return None
        try:
            return self._metrics(uuid, previous[0], sample)
        finally:
            _free(previous[0])

    def _metrics(self, uuid: str, first: Any, second: Any) -> GpmReading | None:
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_METRICS)
        request.sample1 = first
        request.sample2 = second
        for i, (_, metric_id, _) in enumerate(_METRICS):
            request.metrics[i].metricId = metric_id
        if self._q.read(uuid, "gpm", pynvml.nvmlGpmMetricsGet, request) is None:
            return None
        values = {}
        for i, (name, _, scale) in enumerate(_METRICS):
            metric = request.metrics[i]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                values[name] = float(metric.value) * scale
        return GpmReading(**values) if values else None


def _free(sample: Any) -> None:
    try:
        pynvml.nvmlGpmSampleFree(sample)
    except pynvml.NVMLError as exc:
        log.debug("nvmlGpmSampleFree: %s", exc)
