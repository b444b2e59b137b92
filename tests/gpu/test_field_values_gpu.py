"""Real NVML: the batched field values agree with the single calls they replace."""

from __future__ import annotations

import pytest


@pytest.fixture
def nvml():
    import pynvml

    pynvml.nvmlInit()
    try:
        yield pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    finally:
        pynvml.nvmlShutdown()


def _fields(pynvml, handle, ids):
    values = pynvml.nvmlDeviceGetFieldValues(handle, [(i, 0) for i in ids])
    out = {}
    for fid, v in zip(ids, values):
        if v.nvmlReturn == pynvml.NVML_SUCCESS:
            out[fid] = {pynvml.NVML_VALUE_TYPE_DOUBLE: v.value.dVal,
                        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: v.value.uiVal,
                        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: v.value.ulVal,
                        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: v.value.ullVal,
                        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: v.value.sllVal,
                        pynvml.NVML_VALUE_TYPE_SIGNED_INT: v.value.siVal}.get(v.valueType)
    return out


def test_fields_agree_with_single_calls(nvml):
    pynvml, h = nvml
    energy_id, power_id = (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
                           pynvml.NVML_FI_DEV_POWER_AVERAGE)
    before = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    got = _fields(pynvml, h, [energy_id, power_id, pynvml.NVML_FI_DEV_PERF_POLICY_POWER,
                              pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER])
    after = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    print("fields answered:", got)
    if energy_id in got:
        assert before <= got[energy_id] <= after
    if power_id in got:
        single = pynvml.nvmlDeviceGetPowerUsage(h)
        assert got[power_id] == pytest.approx(single, rel=0.15, abs=5000)    # mW
    if pynvml.NVML_FI_DEV_PERF_POLICY_POWER in got:
        status = pynvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER)
        assert got[pynvml.NVML_FI_DEV_PERF_POLICY_POWER] <= status.violationTime
    if pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER in got:
        assert got[pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER] <= \
            pynvml.nvmlDeviceGetPcieReplayCounter(h)


def test_the_sweep_batches_on_this_driver(real_daemon):
    """The driver answers nvmlDeviceGetFieldValues, and power and energy come through it."""
    import pynvml

    real_daemon.housekeeper.tick()
    real_daemon.housekeeper.tick()
    sweeper = real_daemon.gpus._sweeper
    querier = sweeper._q
    for device in real_daemon.store.latest().devices:
        uuid = device.identity.uuid
        print(uuid, "not supported here:", sorted(querier.unsupported_fields(uuid)))
        assert not querier.is_unsupported(uuid, "field_values")
        assert not querier.is_unsupported(uuid, "field:power")
        assert device.power_watts is not None and device.power_watts > 0
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByUUID(uuid))
        except pynvml.NVMLError_NotSupported:
            continue
        assert not querier.is_unsupported(uuid, "field:energy")
