"""The simulator's GPM calls: support query, samples per device or MIG instance, metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpustats.simulator.scenario import Scenario, SimDevice, SimMigInstance


from ctypes import c_void_p, cast

import pynvml

from gpustats.simulator.abi import (
    ARGUMENT_VERSION_MISMATCH, GPM_METRIC_KEYS, INVALID_ARGUMENT, MIB, NOT_FOUND, NOT_SUPPORTED,
    SUCCESS, plain, set_out, struct_at,
)

_Metric = plain(pynvml.c_nvmlGpmMetric_t)
_MetricsGet = plain(pynvml.c_nvmlGpmMetricsGet_t,
                    metrics=_Metric * pynvml.NVML_GPM_METRIC_MAX)


class GpmCalls:
    """Mixin of ``SimulatedNvml``: samples live on the simulator (``_gpm_samples``)."""

    if TYPE_CHECKING:   # the simulator's state and helpers this mixin uses (library.py)
        _gpm_samples: dict[int, tuple[str, int | None, float] | None]
        _monotonic: Callable[[], float]
        _scenario: Scenario

        def _new_id(self) -> int: ...
        def _trace(self, event: str, **fields) -> None: ...


    def _gpm_config(self, device: SimDevice, instance: SimMigInstance | None):
        return device.gpm if instance is None else instance.gpm

    def _gpm_support(self, device: SimDevice, instance: SimMigInstance | None, out: int) -> int:
        support = struct_at(out, pynvml.c_nvmlGpmSupport_t)
        if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return ARGUMENT_VERSION_MISMATCH
        supported = "gpm" not in device.unsupported and (device.gpm is not None or any(
            m.gpm is not None for m in device.mig_instances))
        support.isSupportedDevice = 1 if supported else 0
        return SUCCESS

    def _gpm_alloc(self, out: int) -> int:
        sample_id = self._new_id()
        self._gpm_samples[sample_id] = None
        set_out(out, c_void_p, sample_id)
        return SUCCESS

    def _gpm_free(self, sample: int) -> int:
        return SUCCESS if self._gpm_samples.pop(sample, 0) != 0 else INVALID_ARGUMENT

    def _take_sample(self, device: SimDevice, gi: int | None, sample: int) -> int:
        if sample not in self._gpm_samples:
            return INVALID_ARGUMENT
        self._gpm_samples[sample] = (device.uuid, gi, self._monotonic())
        return SUCCESS

    def _gpm_sample(self, device: SimDevice, instance: SimMigInstance | None, sample: int) -> int:
        if self._gpm_config(device, instance) is None:
            return NOT_SUPPORTED
        return self._take_sample(device, instance.gpu_instance_id if instance else None, sample)

    def _gpm_mig_sample(self, device: SimDevice, instance: SimMigInstance | None,
                        gpu_instance_id: int, sample: int) -> int:
        for mig in device.mig_instances:
            if mig.gpu_instance_id == gpu_instance_id:
                if mig.gpm is None:
                    return NOT_SUPPORTED
                return self._take_sample(device, gpu_instance_id, sample)
        return NOT_FOUND

    def _taken(self, handle: int) -> tuple[str, int | None, float] | None:
        """A sample handle's (device, GPU instance, time); None for a NULL or unknown handle
        or a sample not taken."""
        address = cast(handle, c_void_p).value
        return self._gpm_samples.get(address) if address is not None else None

    def _gpm_metrics(self, request_ptr: int) -> int:
        request = struct_at(request_ptr, _MetricsGet)
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return ARGUMENT_VERSION_MISMATCH
        first, second = self._taken(request.sample1), self._taken(request.sample2)
        if first is None or second is None or first[:2] != second[:2]:
            return INVALID_ARGUMENT
        device = self._scenario.device(first[0])
        if device is None:
            return INVALID_ARGUMENT
        self._trace("read", uuid=device.uuid, what="gpm", gi=first[1])
        config = device.gpm
        if first[1] is not None:
            config = next((m.gpm for m in device.mig_instances
                           if m.gpu_instance_id == first[1]), None)
        values = dict(config or ())
        too_close = abs(second[2] - first[2]) <= 0.1
        for i in range(min(request.numMetrics, len(request.metrics))):
            metric = request.metrics[i]
            key = GPM_METRIC_KEYS.get(metric.metricId)
            if too_close:
                metric.nvmlReturn = INVALID_ARGUMENT
            elif key is None or key not in values:
                metric.nvmlReturn = NOT_SUPPORTED
            else:
                value = values[key]
                metric.value = value / MIB if key.endswith("bytes_per_second") else value
                metric.nvmlReturn = SUCCESS
        return SUCCESS
