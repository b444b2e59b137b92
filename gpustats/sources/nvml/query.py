"""One function through which every device query goes: it classifies NVML errors.

NOT_SUPPORTED and FunctionNotFound are remembered per (device, field) and never asked again;
GPU_IS_LOST raises ``DeviceLost`` for the sweep to mark that device; errors meaning the driver
went away raise ``DriverGone`` so the engine shuts NVML down and re-enters the load retry;
anything else makes that one value absent and is counted.
"""

from __future__ import annotations

import ctypes
import logging
import struct
from typing import Any, Callable, Sequence

import pynvml

from gpustats.sources.errors import CollectionErrors, LogOnce

log = logging.getLogger(__name__)

NOT_FOUND = object()   # returned for NVML_ERROR_NOT_FOUND when the caller asks for it

# Errors after which the session is unusable: re-initialise (NVML API reference, nvmlReturn_t).
_DRIVER_GONE_CODES = frozenset({
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
})
_UNSUPPORTED_CODES = frozenset({
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
})


_LIBRARY_MISMATCH = getattr(pynvml, "NVMLLibraryMismatchError", ())


_FIELD_VALUE_MEMBERS = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


class _FieldValue(ctypes.Structure):
    """pynvml's ``c_nvmlFieldValue_t`` layout (its own field list) without the Python-level
    attribute hooks of pynvml's structures: reading a batch costs a few µs instead of ~50."""

    _fields_ = pynvml.c_nvmlFieldValue_t._fields_


def _struct_code(ctype: type) -> str:
    """A ctypes member's ``struct`` code: its own for a scalar, raw bytes for the union."""
    code = getattr(ctype, "_type_", None)
    return code if isinstance(code, str) else f"{ctypes.sizeof(ctype)}s"


# A batch is decoded from the array's bytes in one pass (a ctypes member access costs about a
# tenth of a µs, six of them an entry). Both formats come from the ctypes declarations, in
# native alignment as ctypes lays them out; the value is the union member ``valueType`` names.
_ENTRY = struct.Struct("@" + "".join(_struct_code(t) for _, t in _FieldValue._fields_))
if _ENTRY.size != ctypes.sizeof(_FieldValue):
    raise ImportError("nvmlFieldValue_t is not the layout this module unpacks")
_VALUE_TYPES = dict(pynvml.c_nvmlValue_t._fields_)
_VALUE_READERS = {value_type: struct.Struct("@" + _struct_code(_VALUE_TYPES[member])).unpack_from
                  for value_type, member in _FIELD_VALUE_MEMBERS.items()}


def handle_address(handle: Any) -> int:
    """A device handle (``c_nvmlDevice_t``, a pointer) as a dict key: the address it holds,
    read from the pointer's own bytes (``ctypes.cast`` builds two objects to say the same);
    0 for NULL. Anything that is not a ctypes pointer goes through ``cast``."""
    try:
        return _VOID_P_FROM_BUFFER(handle).value or 0
    except TypeError:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0


_VOID_P_FROM_BUFFER = ctypes.c_void_p.from_buffer


class FieldValueArrays:
    """``nvmlDeviceGetFieldValues`` into arrays kept per device and field list: pynvml's
    wrapper builds a new array through per-attribute hooks on every call. The ids are set
    once; before each call every entry's return code is reset, so an entry the driver left
    untouched reads as a failure, never as last tick's value."""

    def __init__(self) -> None:
        # Per (handle address, field ids): the array, and its bytes as each call starts them.
        self._arrays: dict[tuple[int, tuple[int, ...]], tuple[ctypes.Array[Any], bytes]] = {}

    def get(self, handle: Any, field_ids: tuple[int, ...]) -> ctypes.Array[Any]:
        key = (handle_address(handle), field_ids)
        kept = self._arrays.get(key)
        if kept is None:
            array = (_FieldValue * len(field_ids))()
            for entry, field_id in zip(array, field_ids):
                entry.fieldId = field_id
                entry.nvmlReturn = pynvml.NVML_ERROR_UNKNOWN
            kept = self._arrays[key] = (array, bytes(array))
        array, fresh = kept
        ctypes.memmove(array, fresh, len(fresh))        # ids set, every return code reset
        # pynvml's symbol lookup: cached, with its errors (uninitialised, function not found).
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetFieldValues")
        ret = fn(handle, ctypes.c_int32(len(array)), ctypes.byref(array))
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return array


class DeviceLost(Exception):
    """NVML answered GPU_IS_LOST for this device."""


class DriverGone(Exception):
    """NVML answered an error meaning the library/driver session is no longer usable."""


def error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def error_reason(exc: BaseException) -> str:
    """A stable snake_case reason label from an NVMLError subclass name."""
    name = type(exc).__name__.removeprefix("NVMLError_")
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out) or "unknown"


class Querier:
    """Runs NVML calls for one session, counting them and classifying their errors."""

    def __init__(self, errors: CollectionErrors):
        self._errors = errors
        self._unsupported: set[tuple[str, str]] = set()
        self._log_once = LogOnce(log, every_seconds=300.0)
        self._field_arrays = FieldValueArrays()
        # Field requests filtered by _unsupported, kept while it is unchanged (counted below).
        self._wanted: dict[tuple[str, tuple], tuple[int, tuple, tuple[int, ...]]] = {}
        self._unsupported_by_device: dict[str, tuple[int, frozenset[str]]] = {}
        self._unsupported_changes = 0
        self.calls = 0

    def is_unsupported(self, device: str, field: str) -> bool:
        return (device, field) in self._unsupported

    def unsupported_fields(self, device: str) -> frozenset[str]:
        kept = self._unsupported_by_device.get(device)
        if kept is not None and kept[0] == self._unsupported_changes:
            return kept[1]       # the same set, tick after tick, while nothing was marked
        found = frozenset(f for d, f in self._unsupported if d == device)
        self._unsupported_by_device[device] = (self._unsupported_changes, found)
        return found

    def forget(self, device: str, fields: tuple[str, ...]) -> None:
        """Ask these fields again (their support depends on a mode that changed, e.g. MIG)."""
        self._unsupported.difference_update((device, f) for f in fields)
        self._unsupported_changes += 1

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A call whose failure is not per-field (handle lookup, counts): errors propagate
        classified as DeviceLost/DriverGone, others re-raised as they are."""
        self.calls += 1
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            raise self._classify_fatal(exc) from exc

    def read(self, device: str, field: str, fn: Callable[..., Any], *args: Any,
             not_found: Any = None) -> Any:
        """One field of one device; ``None`` when absent. Raises DeviceLost / DriverGone."""
        if (device, field) in self._unsupported:
            return None
        self.calls += 1
        try:
            return fn(*args)
        except _LIBRARY_MISMATCH as exc:
            # pynvml's unversioned wrapper met an older library without the versioned symbol.
            self._mark_unsupported(device, field)
            self._errors.record("nvml", "function_not_found")
            log.info("GPU %s: %s is not available in this NVML library (%s)", device, field, exc)
            return None
        except pynvml.NVMLError as exc:
            code = error_code(exc)
            if code == pynvml.NVML_ERROR_NOT_FOUND and not_found is not None:
                return not_found
            if code in _UNSUPPORTED_CODES:
                self._mark_unsupported(device, field)
                self._errors.record("nvml", "not_supported"
                                    if code == pynvml.NVML_ERROR_NOT_SUPPORTED
                                    else "function_not_found")
                log.info("GPU %s: %s is not available (%s); not asking again", device, field, exc)
                return None
            self._failed(device, field, exc)
            return None

    def field_values(self, device: str, handle: Any,
                     requests: Sequence[tuple[str, int]]) -> dict[str, tuple[int | float, int]]:
        """Many fields in one ``nvmlDeviceGetFieldValues`` call: ``{name: (value, CPU µs)}``.

        Each entry answers on its own (nvml.h, c_nvmlFieldValue_t's nvmlReturn). A field that
        answers NOT_SUPPORTED (or
        INVALID_ARGUMENT: an id this driver does not know) is remembered as ``field:<name>``
        and not asked again, so the caller reads it through its single call from then on. A
        field missing from the result for any other reason is absent for this tick only.
        """
        wanted, ids = self._wanted_fields(device, requests)
        if not wanted:
            return {}
        entries = self.read(device, "field_values", self._field_arrays.get, handle, ids)
        if entries is None:
            return {}
        out: dict[str, tuple[int | float, int]] = {}
        for (name, fid), (_, _, stamp, _, value_type, code, raw) in zip(
                wanted, _ENTRY.iter_unpack(entries)):
            if code == pynvml.NVML_SUCCESS:
                read = _VALUE_READERS.get(value_type)     # a type this code does not know: absent
                if read is not None:
                    out[name] = (read(raw)[0], stamp)
                continue
            exc = pynvml.NVMLError(code)
            if code in _UNSUPPORTED_CODES or code == pynvml.NVML_ERROR_INVALID_ARGUMENT:
                self._mark_unsupported(device, f"field:{name}")
                self._errors.record("nvml", "not_supported")
                log.info("GPU %s: NVML field %d (%s) answers %s; not asking for it again (its "
                         "own call is used where one exists)", device, fid, name, exc)
                continue
            self._failed(device, f"field:{name}", exc)
        return out

    def _mark_unsupported(self, device: str, field: str) -> None:
        self._unsupported.add((device, field))
        self._unsupported_changes += 1

    def _wanted_fields(self, device: str, requests: Sequence[tuple[str, int]]
                       ) -> tuple[tuple[tuple[str, int], ...], tuple[int, ...]]:
        """The requests not known to be unsupported, and their ids: worked out again only
        when the unsupported set has changed since."""
        key = (device, tuple(requests))
        kept = self._wanted.get(key)
        if kept is not None and kept[0] == self._unsupported_changes:
            return kept[1], kept[2]
        wanted = tuple((name, fid) for name, fid in requests
                       if (device, f"field:{name}") not in self._unsupported)
        ids = tuple(fid for _, fid in wanted)
        self._wanted[key] = (self._unsupported_changes, wanted, ids)
        return wanted, ids

    def _failed(self, device: str, field: str, exc: pynvml.NVMLError) -> None:
        """A failure that is neither 'not supported' nor fatal: counted, logged rate-limited."""
        fatal = self._classify_fatal(exc)
        if not isinstance(fatal, pynvml.NVMLError):
            raise fatal from exc
        reason = error_reason(exc)
        self._errors.record("nvml", reason)
        self._log_once((device, field, reason), logging.WARNING,
                       "GPU %s: reading %s failed: %s", device, field, exc)

    def _classify_fatal(self, exc: pynvml.NVMLError) -> BaseException:
        code = error_code(exc)
        if code == pynvml.NVML_ERROR_GPU_IS_LOST:
            return DeviceLost(str(exc))
        if code in _DRIVER_GONE_CODES:
            return DriverGone(str(exc))
        error: BaseException = exc
        return error
