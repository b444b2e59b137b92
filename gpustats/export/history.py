"""``GET /api/v1/history``: a history window as JSON, written row by row (no dict per point).

Shape: ``{"seconds", "gpus": [{"id", "index", "model", ..., "points": [{"time", "dutyCycle",
...}], "migInstances": [...]}], "containers": [{"id", "gpu", "name", "pod", "namespace",
"points": [...]}]}``. ``containers`` holds every tenant outside pods too: a service, session,
job or process has its key as ``id`` and is named as the page names it. Times are UTC RFC 3339
with milliseconds; an absent value's key is left out of its point.
"""

from __future__ import annotations

import json
import math
from array import array
from datetime import datetime, UTC
from typing import Any, Callable

from gpustats.export.text import shown_or_none
from gpustats.model.device_values import DeviceValue
from gpustats.model.history import (
    CONTAINER_FIELDS, GPU_VALUES, MIG_FIELDS, ContainerSeries, GpuSeries, HistoryWindow,
    MigSeries,
)

Formatter = Callable[[float], str]


def _integer(value: float) -> str:
    return str(int(value))


def _number(value: float) -> str:
    return repr(value)          # the history keeps figures already rounded


def _boolean(value: float) -> str:
    return "true" if value else "false"


Column = tuple[str, Formatter, str | None]    # JSON key, formatter, printf conversion

_INTEGER = (_integer, "%d")
_NUMBER = (_number, "%r")

# field name in the model -> its column (the conversion prints the all-present row)
_KEYS: dict[str, Column] = {
    "healthy": ("healthy", _boolean, None),
    "memory_used_bytes": ("memoryUsed", *_INTEGER),
    "activity_ratio": ("activityRatio", *_NUMBER),
    "attributed_power_watts": ("attributedPowerWatts", *_NUMBER),
    "attributed_energy_joules": ("attributedEnergyJoules", *_NUMBER),
    "idle_share_power_watts": ("idleSharePowerWatts", *_NUMBER),
    "process_memory_used_bytes": ("processMemoryUsed", *_INTEGER),
    "compute_utilization_percent": ("computeUtilization", *_NUMBER),
}


def _device_column(value: DeviceValue) -> Column:
    """A device value's column: its key, printed as its schema's type."""
    if value.key is None or value.schema is None:
        raise ValueError(f"the history keeps {value.name}, which has no JSON key and schema")
    return (value.key, *(_INTEGER if value.schema["type"] == "integer" else _NUMBER))


class _Layout:
    """How the rows of one kind of series print: key by key, or in one go when all present."""

    def __init__(self, columns: tuple[Column, ...]) -> None:
        self.width = 1 + len(columns)
        self.keys = tuple((f',"{key}":', fmt) for key, fmt, _ in columns)
        conversions = [conv for _, _, conv in columns]
        self.template = None if None in conversions else (
            '{"time":"%s"' + "".join(f',"{key}":{conv}' for key, _, conv in columns) + "}")


_GPU = _Layout(tuple(map(_device_column, GPU_VALUES)) + (_KEYS["healthy"],))
_MIG = _Layout(tuple(_KEYS[name] for name in MIG_FIELDS))
_CONTAINER = _Layout(tuple(_KEYS[name] for name in CONTAINER_FIELDS))


class _Times:
    """RFC 3339 text per row time; every series shares the same tick times, so cache them."""

    def __init__(self, wall_minus_monotonic: float) -> None:
        self._offset = wall_minus_monotonic
        self._texts: dict[float, str] = {}

    def __call__(self, monotonic: float) -> str:
        text = self._texts.get(monotonic)
        if text is None:
            moment = datetime.fromtimestamp(monotonic + self._offset, UTC)
            text = self._texts[monotonic] = (moment.strftime("%Y-%m-%dT%H:%M:%S.")
                                             + f"{moment.microsecond // 1000:03d}Z")
        return text


def _points(rows: array[float], layout: _Layout, times: _Times) -> str:
    width, keys, template = layout.width, layout.keys, layout.template
    isfinite = math.isfinite
    out = []
    flat: list[Any] = rows.tolist()      # each row's time becomes its text
    for start in range(0, len(flat), width):
        row = flat[start:start + width]
        row[0] = times(row[0])
        if template is not None and all(map(isfinite, row[1:])):
            out.append(template % tuple(row))
            continue
        values = row[1:]
        parts = ['{"time":"', row[0], '"']
        for (key, fmt), value in zip(keys, values):
            if isfinite(value):          # NaN is absent; an infinity is never a reading
                parts.append(key)
                parts.append(fmt(value))
        parts.append("}")
        out.append("".join(parts))
    return "[" + ",".join(out) + "]"


def _head(pairs: tuple[tuple[str, object], ...]) -> str:
    """``{"k":v,...`` of the present identity fields (no closing brace)."""
    return "{" + ",".join(f'"{key}":{json.dumps(shown_or_none(value))}' for key, value in pairs
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


def _container_order(series: ContainerSeries) -> tuple[object, ...]:
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
