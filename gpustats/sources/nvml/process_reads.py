"""A GPU's running processes and process utilization samples, each in one NVML call per tick.

pynvml's wrappers ask twice every time (a NULL buffer for the count, then the call that fills
a new array) and turn every entry into a Python object through per-attribute hooks. NVML's
contract lets the caller pass its own array with its capacity (``infoCount`` /
``processSamplesCount`` in, the number written out), answering INSUFFICIENT_SIZE with the
count needed when it is too small (nvml.h). So each device keeps one array per call, grown
when NVML asks for more (then asked again at once), and entries are read from plain ctypes
structures of pynvml's layouts. Errors are pynvml's ``NVMLError`` subclasses, as its
wrappers raise them, for ``Querier.read`` to classify.
"""

from __future__ import annotations

import ctypes
import struct
from typing import NamedTuple

import pynvml

from gpustats.sources.nvml.query import handle_address

_INITIAL_CAPACITY = 16
_GROWTH_TRIES = 3          # a list that keeps outgrowing the array is an error this tick


class _ProcessInfo(ctypes.Structure):
    _fields_ = pynvml.c_nvmlProcessInfo_v3_t._fields_


class _UtilizationSample(ctypes.Structure):
    _fields_ = pynvml.c_nvmlProcessUtilizationSample_t._fields_


class RunningProcess(NamedTuple):
    """The fields of ``nvmlProcessInfo_t`` the sweep reads; memory ``None`` where NVML gives
    NVML_VALUE_NOT_AVAILABLE (as pynvml's wrapper does)."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


class UtilizationSample(NamedTuple):
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int


_NOT_AVAILABLE = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
_PROCESS_INFO_BYTES = ctypes.sizeof(_ProcessInfo)
# nvmlProcessUtilizationSample_t's members (pid, timeStamp, sm, mem, enc, dec) in the C
# layout, unpacked all at once from the array's bytes rather than a structure per entry.
_SAMPLE = struct.Struct("@IQIIII")
if _SAMPLE.size != ctypes.sizeof(_UtilizationSample):
    raise ImportError("nvmlProcessUtilizationSample_t is not the layout this module unpacks")


def _function(name: str):
    # pynvml's symbol lookup: cached, and NVMLError_Uninitialized / _FunctionNotFound as its
    # own wrappers raise them.
    return pynvml._nvmlGetFunctionPointer(name)


class ProcessReads:
    """Per device handle: the arrays the two calls fill, kept between ticks, and the last
    process list read (the same tuple is handed out again while the driver's bytes are the
    same, so the sweep need not rebuild what it made of it)."""

    def __init__(self):
        self._arrays: dict[tuple[str, int], ctypes.Array] = {}
        self._processes: dict[int, tuple[bytes, tuple[RunningProcess, ...]]] = {}

    def running_processes(self, handle) -> tuple[RunningProcess, ...]:
        """``nvmlDeviceGetComputeRunningProcesses_v3``."""
        fn = _function("nvmlDeviceGetComputeRunningProcesses_v3")
        address = handle_address(handle)
        count, array = self._call(
            "processes", address, _ProcessInfo,
            lambda array, c_count: fn(handle, ctypes.byref(c_count), array))
        raw = ctypes.string_at(array, count * _PROCESS_INFO_BYTES)
        kept = self._processes.get(address)
        if kept is not None and kept[0] == raw:
            return kept[1]
        out = []
        for i in range(count):
            p = array[i]
            used = p.usedGpuMemory
            out.append(RunningProcess(p.pid, None if used == _NOT_AVAILABLE else used,
                                      p.gpuInstanceId, p.computeInstanceId))
        listed = self._processes[address] = (raw, tuple(out))
        return listed[1]

    def utilization_samples(self, handle, since_us: int) -> list[UtilizationSample]:
        """``nvmlDeviceGetProcessUtilization``: samples newer than ``since_us``
        (NVMLError_NotFound when there are none)."""
        fn = _function("nvmlDeviceGetProcessUtilization")
        stamp = ctypes.c_ulonglong(since_us)
        count, array = self._call(
            "samples", handle_address(handle), _UtilizationSample,
            lambda array, c_count: fn(handle, array, ctypes.byref(c_count), stamp))
        return [UtilizationSample(pid, stamp, sm, memory) for pid, stamp, sm, memory, _, _
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
