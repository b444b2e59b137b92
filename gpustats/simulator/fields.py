"""The simulator's field values (``nvmlDeviceGetFieldValues``) and the single calls they batch:
clocks, memory temperature, PCIe replays, remapped rows, encoder/decoder utilization.

Each field answers per entry, as the driver does: the call itself returns SUCCESS and every
``c_nvmlFieldValue_t`` carries its own ``nvmlReturn`` (nvml.h). A reading named in the
device's ``unsupported`` list answers NOT_SUPPORTED both as a field and through its own call;
``fields`` / ``fields.<name>`` turn off only the field, so the single call still answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from gpustats.simulator.scenario import SimDevice, SimMigInstance


from ctypes import c_uint

import pynvml

from gpustats.simulator.abi import (
    INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS, plain, set_out, struct_at,
)

_U32, _U64, _S64 = (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG)
_VIOLATION_FIELDS = {
    pynvml.NVML_FI_DEV_PERF_POLICY_POWER: "power_percent",
    pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: "thermal_percent",
    pynvml.NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: "sync_boost_percent",
    pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: "board_limit_percent",
}
_CLOCKS = {pynvml.NVML_CLOCK_SM: ("sm_clock", "sm_clock_mhz"),
           pynvml.NVML_CLOCK_MEM: ("memory_clock", "memory_clock_mhz")}


_FieldValue = plain(pynvml.c_nvmlFieldValue_t)


_REMAPPED = {pynvml.NVML_FI_DEV_REMAPPED_COR: 0, pynvml.NVML_FI_DEV_REMAPPED_UNC: 1,
             pynvml.NVML_FI_DEV_REMAPPED_PENDING: 2, pynvml.NVML_FI_DEV_REMAPPED_FAILURE: 3}


class FieldCalls:
    """Mixin of ``SimulatedNvml``: reads the scenario, the energy and violation accumulators."""

    if TYPE_CHECKING:   # the simulator's state and helpers this mixin uses (library.py)
        _wall: Callable[[], float]
        _energy_mj: dict[str, float]
        _violation_ns: dict[str, dict[str, float]]

        def _advance(self, device: SimDevice | None = None) -> float: ...
        def _trace(self, event: str, **fields: Any) -> None: ...
        def _power_watts(self, device: SimDevice) -> float: ...


    # ------------------------------------------------------------ nvmlDeviceGetFieldValues

    def _field_values(self, device: SimDevice, instance: SimMigInstance | None, count: int,
                      values: int) -> int:
        if count <= 0 or not values:
            return INVALID_ARGUMENT
        array = struct_at(values, _FieldValue * count)
        advanced_to = self._advance(device)
        stamp_us = int(self._wall() * 1e6)
        for i in range(count):
            entry = array[i]
            entry.timestamp = stamp_us
            entry.latencyUsec = 0
            reading, found = self._field(device, entry.fieldId)
            if reading is None:
                entry.nvmlReturn = INVALID_ARGUMENT      # a field id this "driver" does not know
                continue
            if found is None or device.unsupported and (
                    {reading, "fields", f"fields.{reading}"} & device.unsupported):
                entry.nvmlReturn = NOT_SUPPORTED
                continue
            value_type, value = found
            entry.valueType = value_type
            if value_type == _U32:
                entry.value.uiVal = value
            elif value_type == _S64:
                entry.value.sllVal = value
            else:
                entry.value.ullVal = value
            entry.nvmlReturn = SUCCESS
            if reading == "energy":
                self._trace("energy", uuid=device.uuid, mj=value, mono=advanced_to)
        return SUCCESS

    def _field(self, device: SimDevice, field_id: int) -> tuple[str | None, tuple[int, int] | None]:
        """(reading name, (value type, value)) of one field; value None when not supported."""
        if field_id == pynvml.NVML_FI_DEV_POWER_AVERAGE:
            return "power", (_U32, int(round(self._power_watts(device) * 1000)))
        if field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return "energy", (_U64, int(self._energy_mj.get(device.uuid, 0.0)))
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            return "memory_temperature", (_U32, device.memory_temperature_celsius)
        if field_id in _VIOLATION_FIELDS:
            key = _VIOLATION_FIELDS[field_id]
            return "violations", (_U64, int(self._violation_ns.get(device.uuid, {}).get(key, 0.0)))
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return "pcie_replay", (_U64, device.pcie_replay_count)
        if field_id in _REMAPPED:
            if device.mig_instances:
                return "remapped_rows", None      # not supported with MIG on (NVML API reference)
            return "remapped_rows", (_U32, int(device.remapped_rows[_REMAPPED[field_id]]))
        return None, None

    # ------------------------------------------------------------ the single calls

    def _clock_info(self, device: SimDevice, instance: SimMigInstance | None, clock_type: int,
                    out: int) -> int:
        names = _CLOCKS.get(clock_type)
        if names is None:
            return INVALID_ARGUMENT if clock_type > pynvml.NVML_CLOCK_VIDEO else NOT_SUPPORTED
        if names[0] in device.unsupported:
            return NOT_SUPPORTED
        set_out(out, c_uint, getattr(device, names[1]))
        return SUCCESS

    def _codec_utilization(self, device: SimDevice, util: int, period: int, *, name: str,
                           value: int) -> int:
        if name in device.unsupported or device.mig_instances:
            return NOT_SUPPORTED                  # not supported under MIG (NVML API reference)
        set_out(util, c_uint, value)
        set_out(period, c_uint, 167000)           # µs, as an H100 reports it
        return SUCCESS

    def _encoder_utilization(self, device: SimDevice, instance: SimMigInstance | None, util: int,
                             period: int) -> int:
        return self._codec_utilization(device, util, period, name="encoder_utilization",
                                       value=device.encoder_utilization_percent)

    def _decoder_utilization(self, device: SimDevice, instance: SimMigInstance | None, util: int,
                             period: int) -> int:
        return self._codec_utilization(device, util, period, name="decoder_utilization",
                                       value=device.decoder_utilization_percent)

    def _pcie_replay_counter(self, device: SimDevice, instance: SimMigInstance | None,
                             out: int) -> int:
        set_out(out, c_uint, device.pcie_replay_count)
        return SUCCESS

    def _remapped_rows(self, device: SimDevice, instance: SimMigInstance | None, corr: int,
                       unc: int, pending: int, failure: int) -> int:
        if device.mig_instances:
            return NOT_SUPPORTED
        for ptr, value in zip((corr, unc, pending, failure), device.remapped_rows):
            set_out(ptr, c_uint, int(value))
        return SUCCESS
