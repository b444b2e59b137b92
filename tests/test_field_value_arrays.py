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
