"""Batched field reads: the simulator's nvmlDeviceGetFieldValues through pynvml, the sweep's one
call per GPU, and its per-field fallback to the single calls (remembered)."""

import logging

import pynvml
import pytest
import yaml

from gpustats.model.device import RemappedRowsReading
from gpustats.simulator import SimulatedNvml
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.nvml.query import Querier, _FieldValue
from gpustats.sources.nvml.session import NvmlSession
from gpustats.sources.nvml.sweep import DeviceSweeper
from tests.support.clock import Clock
from tests.support.gpus import GPU_A as A
from tests.support.sweepers import SimulatedSweepers

GIB = 1024 ** 3
RICH = {
    "uuid": A, "power_watts": 250.5, "temperature_celsius": 55, "memory_temperature_celsius": 61,
    "sm_clock_mhz": 1755, "memory_clock_mhz": 2619, "pcie_replay_count": 17,
    "encoder_utilization_percent": 12, "decoder_utilization_percent": 34,
    "memory_utilization_percent": 23, "memory_total_bytes": 80 * GIB,
    "memory_used_bytes": 10 * GIB, "memory_reserved_bytes": GIB // 2,
    "remapped_rows": {"correctable": 3, "uncorrectable": 1, "pending": True, "failure": False},
    "violations": {"power_percent": 50},
    "gpm": {"sm_active_percent": 40, "tensor_active_percent": 25},
}


@pytest.fixture
def simulate(tmp_path):
    sweepers = SimulatedSweepers(tmp_path)
    yield lambda scenario, **sweeper_args: sweepers.start(scenario, **sweeper_args)[1:]
    sweepers.close()


def _tick(sweeper, clock, seconds=1.0):
    clock.now += seconds
    (reading,) = sweeper.sweep()
    return reading


def test_field_values_through_pynvml_each_entry_answers_on_its_own(simulate):
    sim, _, clock = simulate({"devices": [{**RICH, "unsupported": ["fields.pcie_replay"]}]})
    clock.now += 2.0
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ids = [pynvml.NVML_FI_DEV_POWER_AVERAGE, pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
           pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
           pynvml.NVML_FI_DEV_REMAPPED_COR, pynvml.NVML_FI_DEV_REMAPPED_PENDING,
           pynvml.NVML_FI_DEV_PERF_POLICY_POWER, 9999]
    before = sim.calls_by_function["nvmlDeviceGetFieldValues"]
    values = pynvml.nvmlDeviceGetFieldValues(handle, ids)
    assert sim.calls_by_function["nvmlDeviceGetFieldValues"] == before + 1
    ret = [v.nvmlReturn for v in values]
    assert ret == [0, 0, 0, pynvml.NVML_ERROR_NOT_SUPPORTED, 0, 0, 0,
                   pynvml.NVML_ERROR_INVALID_ARGUMENT]
    assert values[0].value.uiVal == 250500                       # mW
    assert values[1].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert values[1].value.ullVal == pytest.approx(250.5 * 2.0 * 1000, rel=0.01)   # mJ
    assert values[2].value.uiVal == 61
    assert (values[4].value.uiVal, values[5].value.uiVal) == (3, 1)
    assert values[6].value.ullVal == pytest.approx(1e9, rel=0.01)   # 50% of 2 s, in ns
    assert values[0].timestamp > 0
    # The single call still answers where only the field is turned off.
    assert pynvml.nvmlDeviceGetPcieReplayCounter(handle) == 17


def test_one_field_call_per_gpu_gives_every_scalar(simulate):
    sim, sweeper, clock = simulate({"devices": [RICH]})
    _tick(sweeper, clock)
    _tick(sweeper, clock)
    before = dict(sim.calls_by_function)
    r = _tick(sweeper, clock)
    made = {k: v - before.get(k, 0) for k, v in sim.calls_by_function.items()
            if v != before.get(k, 0)}
    assert made["nvmlDeviceGetFieldValues"] == 1
    for single in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
                   "nvmlDeviceGetViolationStatus", "nvmlDeviceGetPcieReplayCounter",
                   "nvmlDeviceGetRemappedRows"):
        assert single not in made
    assert r.power_watts == 250.5
    assert r.energy_counter_millijoules == pytest.approx(250.5 * 3.0 * 1000, rel=0.01)
    assert r.memory_temperature_celsius == 61
    assert r.temperature_celsius == 55
    assert r.pcie_replay_count == 17
    assert r.remapped_rows == RemappedRowsReading(correctable=3, uncorrectable=1, pending=True,
                                                  failure=False)
    assert r.violations.power_ns == pytest.approx(1.5e9, rel=0.01)
    assert r.violations.thermal_ns == 0
    assert r.violations.reference_time_us > 0
    assert (r.sm_clock_mhz, r.memory_clock_mhz) == (1755, 2619)
    assert (r.encoder_utilization_percent, r.decoder_utilization_percent) == (12, 34)
    assert r.memory_utilization_percent == 23
    # nvmlMemory_v2: used excludes the driver's reservation, free excludes both.
    assert r.memory_used_bytes == 10 * GIB
    assert r.memory_reserved_bytes == GIB // 2
    assert r.memory_free_bytes == 80 * GIB - 10 * GIB - GIB // 2
    assert r.gpm.tensor_active_percent == 25.0 and r.gpm.sm_active_percent == 40.0


def test_fields_not_supported_fall_back_to_single_calls_and_are_remembered(simulate, caplog):
    sim, sweeper, clock = simulate({"devices": [{**RICH, "unsupported": ["fields"]}]},
                                   slow_every=1, violation_every=1)
    with caplog.at_level(logging.INFO):
        first = _tick(sweeper, clock)
    before = dict(sim.calls_by_function)
    r = _tick(sweeper, clock)
    made = {k: v - before.get(k, 0) for k, v in sim.calls_by_function.items()}
    assert made.get("nvmlDeviceGetFieldValues", 0) == 0          # not asked again
    assert made["nvmlDeviceGetPowerUsage"] == 1
    assert made["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert made["nvmlDeviceGetViolationStatus"] == 4
    for reading in (first, r):
        assert reading.power_watts == 250.5
        assert reading.pcie_replay_count == 17
        assert reading.remapped_rows == RemappedRowsReading(3, 1, True, False)
        assert reading.violations.power_ns is not None
        assert reading.memory_temperature_celsius is None        # no single call exists
    assert r.energy_counter_millijoules > first.energy_counter_millijoules
    lines = [rec.getMessage() for rec in caplog.records if "NVML field" in rec.getMessage()]
    assert len(lines) == 12 and all("not asking for it again" in line for line in lines)


def test_one_field_off_keeps_the_others_batched(simulate):
    sim, sweeper, clock = simulate({"devices": [{**RICH, "unsupported": ["fields.energy"]}]})
    _tick(sweeper, clock)
    before = dict(sim.calls_by_function)
    r = _tick(sweeper, clock)
    made = {k: v - before.get(k, 0) for k, v in sim.calls_by_function.items()}
    assert made["nvmlDeviceGetFieldValues"] == 1
    assert made["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert made.get("nvmlDeviceGetPowerUsage", 0) == 0
    assert r.energy_counter_millijoules > 0 and r.power_watts == 250.5


def test_a_reading_the_gpu_lacks_is_absent_both_ways(simulate):
    sim, sweeper, clock = simulate({"devices": [{**RICH, "unsupported": [
        "energy", "memory_temperature", "pcie_replay", "remapped_rows", "sm_clock",
        "encoder_utilization", "memory_reserved", "violations"]}]},
        slow_every=1, violation_every=1, detail_every=1)
    for _ in range(3):
        r = _tick(sweeper, clock)
    assert r.energy_counter_millijoules is None and r.memory_temperature_celsius is None
    assert r.pcie_replay_count is None and r.remapped_rows is None and r.violations is None
    assert r.sm_clock_mhz is None and r.memory_clock_mhz == 2619
    assert r.encoder_utilization_percent is None and r.decoder_utilization_percent == 34
    # Without nvmlMemory_v2 the reservation is unknown; v1 counts it as used.
    assert r.memory_reserved_bytes is None
    assert r.memory_used_bytes == 10 * GIB + GIB // 2
    assert r.power_watts == 250.5
    before = dict(sim.calls_by_function)
    _tick(sweeper, clock)
    made = {k: v - before.get(k, 0) for k, v in sim.calls_by_function.items()}
    for gone in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPcieReplayCounter",
                 "nvmlDeviceGetRemappedRows", "nvmlDeviceGetViolationStatus",
                 "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetMemoryInfo_v2"):
        assert made.get(gone, 0) == 0, gone


def test_old_driver_without_field_values(simulate):
    sim, sweeper, clock = simulate({"devices": [RICH],
                                    "missing_functions": ["nvmlDeviceGetFieldValues"]},
                                   slow_every=1)
    r = _tick(sweeper, clock)
    r = _tick(sweeper, clock)
    assert r.power_watts == 250.5 and r.energy_counter_millijoules > 0
    assert r.pcie_replay_count == 17 and r.remapped_rows.correctable == 3
    assert "field_values" in r.unsupported_fields


def test_mig_gpu_has_no_codec_or_remapped_rows(simulate):
    _, sweeper, clock = simulate({"devices": [{**RICH, "mig_instances": [
        {"gpu_instance_id": 7, "profile": "1g.10gb"}]}]}, slow_every=1, detail_every=1)
    r = _tick(sweeper, clock)
    r = _tick(sweeper, clock)
    assert r.mig_enabled is True
    assert r.remapped_rows is None
    assert r.encoder_utilization_percent is None and r.decoder_utilization_percent is None
    assert r.sm_clock_mhz == 1755 and r.pcie_replay_count == 17 and r.power_watts == 250.5


def test_gpu_lost_during_the_field_call(simulate, tmp_path):
    sim, sweeper, clock = simulate({"devices": [RICH]})
    _tick(sweeper, clock)
    path = next(tmp_path.glob("s0.yaml"))
    path.write_text(yaml.safe_dump({"devices": [{**RICH, "lost": True}]}))
    assert sim.reload()
    r = _tick(sweeper, clock)
    assert r.lost is True and r.power_watts is None


def test_slower_readings_are_carried_between_their_reads(simulate):
    sim, sweeper, clock = simulate({"devices": [RICH]}, detail_every=3)
    readings = [_tick(sweeper, clock) for _ in range(4)]
    assert all(r.sm_clock_mhz == 1755 for r in readings)
    assert sim.calls_by_function["nvmlDeviceGetClockInfo"] == 2 * 2   # ticks 0 and 3, SM + MEM


def test_scenario_rejects_bad_new_keys():
    from gpustats.simulator import parse_scenario

    with pytest.raises(ValueError, match="remapped_rows"):
        parse_scenario({"devices": [{"uuid": A, "remapped_rows": {"rows": 1}}]})
    with pytest.raises(ValueError, match="pending"):
        parse_scenario({"devices": [{"uuid": A, "remapped_rows": {"pending": "yes"}}]})
    with pytest.raises(ValueError, match="unsupported"):
        parse_scenario({"devices": [{"uuid": A, "unsupported": ["fields.temperature"]}]})
    with pytest.raises(ValueError, match="encoder_utilization_percent"):
        parse_scenario({"devices": [{"uuid": A, "encoder_utilization_percent": 101}]})


@pytest.mark.parametrize("late, shift", [(0.3, 0.3), (0.0, 0.0), (5.0, 0.0), (-2.0, 0.0)])
def test_reading_stamped_at_the_energy_fields_own_time(tmp_path, late, shift):
    """A field value taken 0.3 s before the call returned dates the reading 0.3 s back; a
    timestamp far off (clock step) is not trusted."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"devices": [RICH]}))
    clock = Clock()
    sim = SimulatedNvml(str(path), monotonic=clock, wall=lambda: 1_700_000_000.0)
    sim.install()
    session = NvmlSession.open(CollectionErrors())
    sweeper = DeviceSweeper(session, monotonic=clock, wall=lambda: 1_700_000_000.0 + late)
    try:
        (reading,) = sweeper.sweep()
    finally:
        sweeper.close()
        session.close()
        sim.uninstall()
    assert reading.monotonic_seconds == pytest.approx(clock.now - shift)


def test_a_stall_after_the_driver_took_the_counter_keeps_its_time(tmp_path):
    """The daemon stopped (SIGSTOP, a descheduled thread) between the driver taking the
    energy field and the sweep going on: the reading keeps the field's own time, so the
    counter delta and its interval stay together. Dated to after the stall, the next tick
    would hold the stall's energy in a tick too short for it: taken for a counter reset and
    dropped."""
    sweepers = SimulatedSweepers(tmp_path)
    try:
        swept = sweepers.start({"devices": [{"uuid": A, "power_watts": 300}]}, wall_epoch=1.7e9)
        querier, clock = swept.sweeper._q, swept.clock
        ask = querier.field_values
        stall = {"seconds": 0.0}

        def stalled(*args, **kwargs):
            values = ask(*args, **kwargs)
            clock.now += stall.pop("seconds", 0.0)
            return values

        querier.field_values = stalled
        clock.now += 1.0
        (first,) = swept.sweeper.sweep()
        clock.now += 1.0
        taken_at = clock.now
        stall["seconds"] = 2.0
        (second,) = swept.sweeper.sweep()
        assert second.monotonic_seconds == pytest.approx(taken_at)
        assert (second.energy_counter_millijoules - first.energy_counter_millijoules) / 1000.0 / (
            second.monotonic_seconds - first.monotonic_seconds) == pytest.approx(300.0)
        clock.now += 0.2
        (third,) = swept.sweeper.sweep()
        assert (third.energy_counter_millijoules - second.energy_counter_millijoules) / 1000.0 / (
            third.monotonic_seconds - second.monotonic_seconds) == pytest.approx(300.0)
    finally:
        sweepers.close()


@pytest.mark.parametrize("key", ["sm_clock_mhz", "memory_clock_mhz", "pcie_replay_count",
                                 "memory_temperature_celsius", "encoder_utilization_percent",
                                 "decoder_utilization_percent", "memory_reserved_bytes",
                                 "utilization_percent"])
def test_scenario_rejects_null_for_a_key_with_a_default(key):
    from gpustats.simulator import parse_scenario

    with pytest.raises(ValueError, match=key):
        parse_scenario({"devices": [{"uuid": A, key: None}]})


def test_the_identity_with_its_memory_total_is_kept_until_the_total_changes(simulate, tmp_path):
    sim, sweeper, clock = simulate({"devices": [RICH]})
    first, second = _tick(sweeper, clock), _tick(sweeper, clock)
    assert first.identity.memory_total_bytes == 80 * GIB
    assert second.identity is first.identity            # not a copy per tick
    next(tmp_path.glob("s0.yaml")).write_text(
        yaml.safe_dump({"devices": [{**RICH, "memory_total_bytes": 40 * GIB}]}))
    assert sim.reload()
    third = _tick(sweeper, clock)
    assert third.identity.memory_total_bytes == 40 * GIB
    assert third.identity.uuid == A


def _answered(entries):
    """A Querier whose field call fills in ``entries``: (value type, union member, value,
    return code) per field, stamped 1000 + position."""
    class Arrays:
        def get(self, handle, field_ids):
            array = (_FieldValue * len(field_ids))()
            for i, (entry, field_id, (value_type, member, value, code)) in enumerate(
                    zip(array, field_ids, entries)):
                entry.fieldId, entry.valueType, entry.nvmlReturn = field_id, value_type, code
                entry.timestamp = 1000 + i
                setattr(entry.value, member, value)
            return array

    querier = Querier(CollectionErrors())
    querier._field_arrays = Arrays()
    return querier


def test_each_value_type_decodes_as_its_union_member():
    ok = pynvml.NVML_SUCCESS
    entries = [
        (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 251.25, ok),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 2**32 - 1, ok),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", 2**63 + 5, ok),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**64 - 1, ok),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -(2**40), ok),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -7, ok),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 65535, ok),
        (99, "ullVal", 12, ok),                                   # a type this code does not know
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 13, pynvml.NVML_ERROR_UNKNOWN),
    ]
    names = [(f"f{i}", 200 + i) for i in range(len(entries))]
    values = _answered(entries).field_values("GPU-x", None, names)
    assert values == {"f0": (251.25, 1000), "f1": (2**32 - 1, 1001), "f2": (2**63 + 5, 1002),
                      "f3": (2**64 - 1, 1003), "f4": (-(2**40), 1004), "f5": (-7, 1005),
                      "f6": (65535, 1006)}
