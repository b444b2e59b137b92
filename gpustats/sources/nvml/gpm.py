"""GPM (Hopper+) metrics: one sample per device per tick, metrics over the previous interval.

Two samples must be more than 100 ms apart (NVML API reference, nvmlGpmMetricsGet);
ticks are seconds apart, so each tick's sample pairs with the previous tick's. A tick that
comes within 100 ms of the last sample (a late tick followed by one on time, or a sweep held up
between one instance's sample and the next tick's) takes no sample: the last sample stays the
base for the next tick, and this tick carries the metrics read last (the activity of the
interval just before, rather than none, which would have the instance's share assumed).
MIG instances are sampled through the parent handle with ``nvmlGpmMigSampleGet``. Support is
remembered per device and per MIG instance: an instance whose sample answers NOT_SUPPORTED
loses GPM alone, the GPU and its other instances keep theirs; a metric a sample cannot give is
absent from that reading only.
"""

from __future__ import annotations

import ctypes
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
    ("tensor_active_percent", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, 1.0),
)



class _Metric(ctypes.Structure):
    """pynvml's ``c_nvmlGpmMetric_t`` layout without its Python-level attribute hooks (a few
    µs per metric read or written)."""

    _fields_ = pynvml.c_nvmlGpmMetric_t._fields_


class _MetricsGet(ctypes.Structure):
    """``c_nvmlGpmMetricsGet_t``'s layout, its metrics as ``_Metric``."""

    _fields_ = [(name, _Metric * pynvml.NVML_GPM_METRIC_MAX if name == "metrics" else ctype)
                for name, ctype in pynvml.c_nvmlGpmMetricsGet_t._fields_]


class GpmSampler:
    """Two sample buffers per (device, instance), alternated each tick: one SampleGet and one
    MetricsGet per tick after the first, no allocation churn."""

    def __init__(self, querier: Querier, monotonic: Callable[[], float] = time.monotonic):
        self._q = querier
        self._monotonic = monotonic
        self._supported: dict[str, bool] = {}
        # key -> [previous sample, spare sample, previous taken_at or None, last metrics]
        self._buffers: dict[tuple[str, int | None], list[Any]] = {}

    def device(self, uuid: str, handle: Any) -> GpmReading | None:
        if not self._is_supported(uuid, handle):
            return None
        return self._next((uuid, None), lambda s: pynvml.nvmlGpmSampleGet(handle, s))

    def mig_instance(self, uuid: str, parent: Any, gpu_instance_id: int,
                     busy: bool = True) -> GpmReading | None:
        """The instance's metrics since its last sample. An idle instance (``busy`` False) is
        only sampled (1 call, no metrics): when a process starts on it, its first busy tick
        has a sample to pair with, one tick old, rather than none or one from long ago."""
        if not self._is_supported(uuid, parent):
            return None
        return self._next((uuid, gpu_instance_id),
                          lambda s: pynvml.nvmlGpmMigSampleGet(parent, gpu_instance_id, s),
                          busy)

    def forget_instance(self, uuid: str, gpu_instance_id: int) -> None:
        """The instance with this id was destroyed or created: its samples and what its
        support taught belong to the old instance."""
        buffers = self._buffers.pop((uuid, gpu_instance_id), None)
        if buffers is not None:
            _free(buffers[0])
            _free(buffers[1])
        self._q.forget(uuid, (f"gpm_gi{gpu_instance_id}",))

    def close(self) -> None:
        for previous, spare, *_ in self._buffers.values():
            _free(previous)
            _free(spare)
        self._buffers.clear()

    def supported(self, uuid: str) -> bool:
        """Whether GPM answers for this GPU (known after the first ``device`` call)."""
        return bool(self._supported.get(uuid)) and not self._q.is_unsupported(uuid, "gpm")

    def _is_supported(self, uuid: str, handle: Any) -> bool:
        known = self._supported.get(uuid)
        if known is None:
            support = self._q.read(uuid, "gpm_support", pynvml.nvmlGpmQueryDeviceSupport, handle)
            known = bool(support is not None and support.isSupportedDevice)
            self._supported[uuid] = known
        return known      # a device or instance sample that fails is remembered on its own

    def _next(self, key: tuple[str, int | None], take: Callable[[Any], Any],
              metrics: bool = True) -> GpmReading | None:
        uuid, gpu_instance_id = key
        field = "gpm" if gpu_instance_id is None else f"gpm_gi{gpu_instance_id}"
        if self._q.is_unsupported(uuid, field):
            return None
        buffers = self._buffers.get(key)
        if buffers is None:
            first = self._q.read(uuid, field, pynvml.nvmlGpmSampleAlloc)
            second = self._q.read(uuid, field, pynvml.nvmlGpmSampleAlloc) if first else None
            if second is None:
                if first is not None:
                    _free(first)
                return None
            buffers = self._buffers[key] = [first, second, None, None]
        previous, spare, taken_at, last = buffers
        now = self._monotonic()
        if taken_at is not None and now - taken_at <= MIN_INTERVAL_SECONDS:
            return last if metrics else None   # too close: the last sample stays the base
        buffers[3] = None
        if self._q.read(uuid, field, take, spare) is None:
            return None
        buffers[0], buffers[1], buffers[2] = spare, previous, now
        if taken_at is None or not metrics:
            return None
        buffers[3] = self._metrics(uuid, field, previous, spare)
        return buffers[3]

    def _metrics(self, uuid: str, field: str, first: Any, second: Any) -> GpmReading | None:
        request = _MetricsGet()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_METRICS)
        request.sample1 = first
        request.sample2 = second
        metrics = request.metrics
        for i, (_, metric_id, _) in enumerate(_METRICS):
            metrics[i].metricId = metric_id
        if self._q.read(uuid, field, pynvml.nvmlGpmMetricsGet, request) is None:
            return None
        values = {}
        for i, (name, _, scale) in enumerate(_METRICS):
            metric = metrics[i]
            if metric.nvmlReturn == pynvml.NVML_SUCCESS:
                values[name] = float(metric.value) * scale
        return GpmReading(**values) if values else None


def _free(sample: Any) -> None:
    try:
        pynvml.nvmlGpmSampleFree(sample)
    except pynvml.NVMLError as exc:
        log.debug("nvmlGpmSampleFree: %s", exc)
