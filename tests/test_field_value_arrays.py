"""Field values read into arrays kept between calls: an entry the driver leaves untouched is
a failure of that field this tick, never the value the array held from the last call."""

import ctypes

import pynvml

from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.query import Querier

POWER = pynvml.NVML_FI_DEV_POWER_AVERAGE
TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP


class _Driver:
    """nvmlDeviceGetFieldValues that answers every entry once, then only the first."""

    def __init__(self):
        self.calls = 0

    def __call__(self, handle, count, values):
        self.calls += 1
        array = ctypes.cast(values, ctypes.POINTER(pynvml.c_nvmlFieldValue_t * count.value))[0]
        for i, entry in enumerate(array):
            if i and self.calls > 1:
                continue
            entry.nvmlReturn = pynvml.NVML_SUCCESS
            entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            entry.value.uiVal = 100 * self.calls + i
            entry.timestamp = 5
        return pynvml.NVML_SUCCESS


def test_an_entry_left_untouched_is_absent_not_last_calls_value(monkeypatch):
    driver = _Driver()
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer",
                        lambda name: driver if name == "nvmlDeviceGetFieldValues" else None)
    errors = CollectionErrors()
    q = Querier(errors)
    handle = ctypes.c_void_p(0x1000)
    wanted = (("power", POWER), ("memory_temperature", TEMP))
    assert q.field_values("GPU-a", handle, wanted) == {"power": (100, 5),
                                                        "memory_temperature": (101, 5)}
    assert q.field_values("GPU-a", handle, wanted) == {"power": (200, 5)}
    assert errors.totals() == (("nvml", "unknown", 1),)      # counted as a failed read


class _Unsupporting:
    """nvmlDeviceGetFieldValues that answers NOT_SUPPORTED for memory temperature until told
    otherwise, and records the field ids of each call."""

    def __init__(self):
        self.asked = []
        self.temperature_supported = False

    def __call__(self, handle, count, values):
        array = ctypes.cast(values, ctypes.POINTER(pynvml.c_nvmlFieldValue_t * count.value))[0]
        self.asked.append(tuple(entry.fieldId for entry in array))
        for entry in array:
            if entry.fieldId == TEMP and not self.temperature_supported:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            entry.nvmlReturn = pynvml.NVML_SUCCESS
            entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            entry.value.uiVal = 7
        return pynvml.NVML_SUCCESS


def test_a_field_not_supported_leaves_the_calls_until_forgotten(monkeypatch):
    """The fields asked are kept between calls: one found unsupported is left out of the
    next call, and one forgotten (a mode change, e.g. MIG) is asked for again."""
    driver = _Unsupporting()
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer",
                        lambda name: driver if name == "nvmlDeviceGetFieldValues" else None)
    q = Querier(CollectionErrors())
    handle = ctypes.c_void_p(0x1000)
    wanted = (("power", POWER), ("memory_temperature", TEMP))
    assert q.field_values("GPU-a", handle, wanted) == {"power": (7, 0)}
    assert q.field_values("GPU-a", handle, wanted) == {"power": (7, 0)}
    assert q.field_values("GPU-b", handle, wanted) == {"power": (7, 0)}
    assert driver.asked == [(POWER, TEMP), (POWER,), (POWER, TEMP)]
    driver.temperature_supported = True
    q.forget("GPU-a", ("field:memory_temperature",))
    assert q.field_values("GPU-a", handle, wanted) == {"power": (7, 0),
                                                        "memory_temperature": (7, 0)}
    assert driver.asked[-1] == (POWER, TEMP)
