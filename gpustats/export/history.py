"""``GET /api/v1/history``: a history window as JSON, written row by row (no dict per point).

Shape: ``{"seconds", "gpus": [{"id", "index", "model", ..., "points": [{"time", "dutyCycle",
...}], "migInstances": [...]}], "containers": [{"id", "gpu", "name", "pod", "namespace",
"points": [...]}]}``. Times are UTC RFC 3339 with milliseconds; an absent value's key is left
out of its point.
"""

from __future__ import annotations

import json
import math
from array import array
from datetime import datetime, timezone
from typing import Callable

from gpustats.model.history import (
    CONTAINER_FIELDS, GPU_FIELDS, MIG_FIELDS, ContainerSeries, GpuSeries, HistoryWindow,
    MigSeries,
)

Formatter = Callable[[float], str]


def _integer(value: float) -> str:
    return str(int(value))


def _number(value: float) -> str:
    return repr(round(value, 3))


def _ratio(value: float) -> str:
    return repr(round(value, 4))


def _boolean(value: float) -> str:
    return "true" if value else "false"


# field name in the model -> (JSON key, formatter)
_KEYS: dict[str, tuple[str, Formatter]] = {
    "duty_cycle_percent": ("dutyCycle", _integer),
    "memory_used_bytes": ("memoryUsed", _integer),
    "power_watts": ("powerWatts", _number),
    "idle_power_watts": ("idlePowerWatts", _number),
    "active_power_watts": ("activePowerWatts", _number),
    "temperature_celsius": ("temperatureCelsius", _integer),
    "healthy": ("healthy", _boolean),
    "activity_ratio": ("activityRatio", _ratio),
    "attributed_power_watts": ("attributedPowerWatts", _number),
    "attributed_energy_joules": ("attributedEnergyJoules", _number),
    "process_memory_used_bytes": ("processMemoryUsed", _integer),
    "compute_utilization_percent": ("computeUtilization", _number),
}


def _layout(fields: tuple[str, ...]) -> tuple[tuple[str, Formatter], ...]:
    return tuple((f',"{_KEYS[name][0]}":', _KEYS[name][1]) for name in fields)


_GPU = _layout(GPU_FIELDS)
_MIG = _layout(MIG_FIELDS)
_CONTAINER = _layout(CONTAINER_FIELDS)


class _Times:
    """RFC 3339 text per row time; every series shares the same tick times, so cache them."""

    def __init__(self, wall_minus_monotonic: float) -> None:
        self._offset = wall_minus_monotonic
        self._texts: dict[float, str] = {}

    def __call__(self, monotonic: float) -> str:
        text = self._texts.get(monotonic)
        if text is None:
            moment = datetime.fromtimestamp(monotonic + self._offset, timezone.utc)
            text = self._texts[monotonic] = (moment.strftime("%Y-%m-%dT%H:%M:%S.")
                                             + f"{moment.microsecond // 1000:03d}Z")
        return text


def _points(rows: array, layout: tuple[tuple[str, Formatter], ...], times: _Times) -> str:
    width = 1 + len(layout)
    isfinite = math.isfinite
    out = []
    for start in range(0, len(rows), width):
        parts = ['{"time":"', times(rows[start]), '"']
        for offset, (key, fmt) in enumerate(layout, 1):
            value = rows[start + offset]
            if isfinite(value):          # NaN is absent; an infinity is never a reading
                parts.append(key)
                parts.append(fmt(value))
        parts.append("}")
        out.append("".join(parts))
    return "[" + ",".join(out) + "]"


def _head(pairs: tuple[tuple[str, object], ...]) -> str:
    """``{"k":v,...`` of the present identity fields (no closing brace)."""
    return "{" + ",".join(f'"{key}":{json.dumps(value)}' for key, value in pairs
                          if value is not None)


def _mig(series: MigSeries, times: _Times) -> str:
    head = _head((("gpuInstanceId", series.gpu_instance_id), ("id", series.uuid),
                  ("profile", series.profile), ("memoryTotal", series.memory_total_bytes)))
    return f'{head},"points":{_points(series.rows, _MIG, times)}}}'


def _gpu(series: GpuSeries, migs: list[MigSeries], times: _Times) -> str:
    head = _head((("id", series.uuid), ("index", series.index), ("model", series.name),
                  ("memoryTotal", series.memory_total_bytes),
                  ("powerLimitWatts", series.power_limit_watts)))
    text = f'{head},"points":{_points(series.rows, _GPU, times)}'
    if migs:
        text += ',"migInstances":[' + ",".join(_mig(m, times) for m in migs) + "]"
    return text + "}"


def _container(series: ContainerSeries, times: _Times) -> str:
    head = _head((("id", series.container_id), ("gpu", series.device_uuid),
                  ("gpuInstanceId", series.gpu_instance_id), ("name", series.name),
                  ("pod", series.pod_name), ("namespace", series.pod_namespace),
                  ("podUid", series.pod_uid)))
    return f'{head},"points":{_points(series.rows, _CONTAINER, times)}}}'


def _container_order(series: ContainerSeries) -> tuple:
    return (series.pod_namespace or "", series.pod_name or "", series.name or "",
            series.container_id, series.device_uuid, series.gpu_instance_id or -1)


def history_json(window: HistoryWindow) -> bytes:
    """The window as the ``/api/v1/history`` body."""
    times = _Times(window.wall_minus_monotonic)
    migs: dict[str, list[MigSeries]] = {}
    for mig in sorted(window.mig_instances, key=lambda m: m.gpu_instance_id):
        migs.setdefault(mig.device_uuid, []).append(mig)
    gpus = ",".join(_gpu(g, migs.get(g.uuid, []), times) for g in window.gpus)
    containers = ",".join(_container(c, times)
                          for c in sorted(window.containers, key=_container_order))
    seconds = json.dumps(window.seconds if window.seconds % 1 else int(window.seconds))
    return f'{{"seconds":{seconds},"gpus":[{gpus}],"containers":[{containers}]}}'.encode()
