"""A GPU's running processes and process utilization samples, each in one NVML call per tick.

pynvml's wrappers ask twice every time (a NULL buffer for the count, then the call that fills
a new array) and turn every entry into a Python object through per-attribute hooks. NVML's
contract lets the caller pass its own array with its capacity (``infoCount`` /
``processSamplesCount`` in, the number written out), answering INSUFFICIENT_SIZE with the
count needed when it is too small (nvml.h). So each device keeps one array per call, grown
when NVML asks for more (then asked again at once), and entries are read from plain ctypes
structures of pynvml's layouts into the sweep's ``ProcessReading``s. Errors are pynvml's
``NVMLError`` subclasses, as its wrappers raise them, for ``Querier.read`` to classify.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import replace
from typing import Iterable, NamedTuple

import pynvml

from gpustats.model.device import ProcessReading
from gpustats.sources.nvml.query import handle_address

_INITIAL_CAPACITY = 16
_GROWTH_TRIES = 3          # a list that keeps outgrowing the array is an error this tick


class _ProcessInfo(ctypes.Structure):
    _fields_ = pynvml.c_nvmlProcessInfo_v3_t._fields_


class _UtilizationSample(ctypes.Structure):
    _fields_ = pynvml.c_nvmlProcessUtilizationSample_t._fields_


class UtilizationSample(NamedTuple):
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int


_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
_NO_INSTANCE = 0xFFFFFFFF
_PROCESS_INFO_BYTES = ctypes.sizeof(_ProcessInfo)
# nvmlProcessUtilizationSample_t's members (pid, timeStamp, sm, mem, enc, dec) in the C
# layout, unpacked all at once from the array's bytes rather than a structure per entry.
_SAMPLE = struct.Struct("@IQIIII")
if _SAMPLE.size != ctypes.sizeof(_UtilizationSample):
    raise ImportError("nvmlProcessUtilizationSample_t is not the layout this module unpacks")


def unique_processes(processes) -> tuple[ProcessReading, ...]:
    """One entry per (PID, GPU instance): NVML lists a process once per context, so a PID can
    appear twice; counting it twice would bill it twice. The larger memory figure is kept."""
    merged: dict[tuple[int, int | None], ProcessReading] = {}
    for p in processes:
        key = (p.pid, p.gpu_instance_id)
        seen = merged.get(key)
        if seen is None:
            merged[key] = p
        elif p.memory_used_bytes is not None and (seen.memory_used_bytes is None
                                                   or p.memory_used_bytes > seen.memory_used_bytes):
            merged[key] = replace(seen, memory_used_bytes=p.memory_used_bytes)
    return tuple(merged.values())


def process_readings(listed: Iterable) -> tuple[ProcessReading, ...]:
    """NVML's process entries (this module's, or pynvml's ``_v2`` ones) as readings, one per
    (PID, GPU instance). Memory NVML cannot give (NVML_VALUE_NOT_AVAILABLE, which pynvml's
    wrapper turns into ``None``) is absent; so is the GPU instance of a process outside MIG."""
    return unique_processes(
        ProcessReading(
            pid=int(p.pid),
            memory_used_bytes=_memory(p.usedGpuMemory),
            gpu_instance_id=_instance_id(getattr(p, "gpuInstanceId", None)),
            compute_instance_id=_instance_id(getattr(p, "computeInstanceId", None)),
        )
        for p in listed
    )


def _memory(value: int | None) -> int | None:
    return None if value is None or value == _NOT_AVAILABLE else int(value)


def _instance_id(value: int | None) -> int | None:
    return None if value is None or value == _NO_INSTANCE else int(value)


def _function(name: str):
    # pynvml's symbol lookup: cached, and NVMLError_Uninitialized / _FunctionNotFound as its
    # own wrappers raise them.
    return pynvml._nvmlGetFunctionPointer(name)


class ProcessReads:
    """Per device handle: the arrays the two calls fill, kept between ticks, and the last
    process list read (the same readings are handed out again while the driver's bytes are
    the same, rather than built anew every tick)."""

    def __init__(self):
        self._arrays: dict[tuple[str, int], ctypes.Array] = {}
        self._processes: dict[int, tuple[bytes, tuple[ProcessReading, ...]]] = {}

    def running_processes(self, handle) -> tuple[ProcessReading, ...]:
        """``nvmlDeviceGetComputeRunningProcesses_v3``, as ``process_readings``."""
        fn = _function("nvmlDeviceGetComputeRunningProcesses_v3")
        address = handle_address(handle)
        count, array = self._call(
            "processes", address, _ProcessInfo,
            lambda array, c_count: fn(handle, ctypes.byref(c_count), array))
        raw = ctypes.string_at(array, count * _PROCESS_INFO_BYTES)
        kept = self._processes.get(address)
        if kept is not None and kept[0] == raw:
            return kept[1]
        readings = process_readings(array[i] for i in range(count))
        self._processes[address] = (raw, readings)
        return readings

    def utilization_samples(self, handle, since_us: int) -> list[UtilizationSample]:
        """``nvmlDeviceGetProcessUtilization``: samples newer than ``since_us``
        (NVMLError_NotFound when there are none)."""
        fn = _function("nvmlDeviceGetProcessUtilization")
        stamp = ctypes.c_ulonglong(since_us)
        count, array = self._call(
            "samples", handle_address(handle), _UtilizationSample,
            lambda array, c_count: fn(handle, array, ctypes.byref(c_count), stamp))
        return [UtilizationSample(pid, taken, sm, memory) for pid, taken, sm, memory, _, _
                in _SAMPLE.iter_unpack(ctypes.string_at(array, count * _SAMPLE.size))]

    def _call(self, what: str, address: int, entry: type, call) -> tuple[int, ctypes.Array]:
        key = (what, address)
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = (entry * _INITIAL_CAPACITY)()
        for _ in range(_GROWTH_TRIES):
            c_count = ctypes.c_uint(len(array))
            ret = call(array, c_count)
            if ret == pynvml.NVML_SUCCESS:
                return min(c_count.value, len(array)), array
            if ret != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
                raise pynvml.NVMLError(ret)
            # Room for the count asked and some more, as pynvml's wrapper leaves.
            array = self._arrays[key] = (entry * (c_count.value * 2 + 5))()
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
