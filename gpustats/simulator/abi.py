"""NVML's C ABI as the simulator speaks it: return codes, event bits, handle ranges, marshalling."""

from __future__ import annotations

import ctypes
from typing import Any, cast

SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
GPU_IS_LOST = 15
ARGUMENT_VERSION_MISMATCH = 25

EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
EVENT_MIG_CONFIG_CHANGE = 0x100
NO_INSTANCE = 0xFFFFFFFF

PHYSICAL_BASE = 0x1000
MIG_BASE = 0x100000
MIB = 1024.0 * 1024.0
GPM_METRIC_KEYS = {1: "graphics_active_percent", 2: "sm_active_percent",
                    3: "sm_occupancy_percent", 5: "tensor_active_percent",
                   10: "dram_active_percent",
                    20: "pcie_tx_bytes_per_second", 21: "pcie_rx_bytes_per_second",
                    60: "nvlink_rx_bytes_per_second", 61: "nvlink_tx_bytes_per_second"}
VIOLATION_POLICY_KEYS = {0: "power_percent", 1: "thermal_percent", 2: "sync_boost_percent",
                          3: "board_limit_percent"}


def plain(struct: type[ctypes.Structure], **overrides: type) -> type[ctypes.Structure]:
    """``struct``'s layout (pynvml's own field list) as a plain ``ctypes.Structure``: pynvml's
    structures run a Python-level hook on every attribute read and write (bytes/str
    conversion), which costs more than the rest of filling in a small answer. ``overrides``
    replace the type of named fields (an array of another plain structure)."""
    fields = [(name, overrides.get(name, ctype)) for name, ctype, *_ in struct._fields_]
    # type() of a Structure subclass: mypy only knows it is some type.
    return cast("type[ctypes.Structure]",
                type(f"Plain{struct.__name__}", (ctypes.Structure,), {"_fields_": fields}))


def set_out(ptr: int, ctype: type[Any], value: object) -> None:
    """Writes ``value`` at the address the caller passed (``from_address``: one C call, where
    a cast to a pointer type and an index are several)."""
    _at(ptr, ctype).value = value


def struct_at(ptr: int, ctype: type[Any]) -> Any:
    return _at(ptr, ctype)


def _at(ptr: int | None, ctype: type[Any]) -> Any:
    if not ptr:
        raise ValueError("NULL pointer access")     # as indexing a NULL ctypes pointer says
    return ctype.from_address(ptr)


def write_string(buf: int, length: int, text: str) -> int:
    data = text.encode()
    if len(data) + 1 > length:
        return INSUFFICIENT_SIZE
    ctypes.memmove(buf, data + b"\0", len(data) + 1)
    return SUCCESS
