"""The history ring: what it records, what it forgets, how it is bounded, and its JSON."""

import json
import math
from dataclasses import replace

import pytest

from gpustats.config import ConfigError, build_arg_parser, resolve
from gpustats.engine.history import CONTAINER_WIDTH, GPU_WIDTH, History
from gpustats.export.history import history_json
from gpustats.model.device import DeviceIdentity
from gpustats.model.snapshot import DeviceStats
from tests.support.snapshots import A, B, C1, C2, C3, M, T, sample_snapshot


def at(seconds: float, sequence: int | None = None, **changes):
    """The sample snapshot taken ``seconds`` after the first one."""
    snap = sample_snapshot(sequence=sequence or int(seconds) + 1)
    return replace(snap, monotonic=1.0 + seconds, taken_at=T + seconds, **changes)


def test_records_every_gpu_mig_instance_and_container_accelerator():
    history = History(60)
    history.record(at(0))
    window = history.window()
    assert [g.uuid for g in window.gpus] == [A, B, M]
    assert {(m.device_uuid, m.gpu_instance_id) for m in window.mig_instances} == {(M, 7), (M, 8)}
    assert {(c.container_id, c.device_uuid, c.gpu_instance_id) for c in window.containers} == \
        {(C1, A, None), (C2, M, 7), (C3, A, None)}
    trainer = next(c for c in window.containers if c.container_id == C1)
    assert (trainer.name, trainer.pod_name, trainer.pod_namespace, trainer.pod_uid) == \
        ("trainer", "trainer-0", "ml", "u1")
    loose = next(c for c in window.containers if c.container_id == C3)
    assert loose.pod_name is None and loose.pod_uid is None
    gpu = window.gpus[0]
    # The history values of model.device_values in its order (P-state unknown: NaN), healthy.
    rows = list(gpu.rows)
    assert rows[:4] == [1.0, 310.0, 70.0, 240.0] and math.isnan(rows[4])   # no unallocated
    assert rows[5:8] == [51, 2 << 30, 40]
    assert math.isnan(rows[8]) and rows[9:] == [1.0]
    assert gpu.rows.typecode == "d"          # 8 bytes a value, no object per point


def test_records_each_holders_idle_share_and_the_idle_no_one_held():
    """What the page stacks: from the daemon's bill of that tick, never split again."""
    snap = at(0)
    trainer, sidecar = snap.pods[0].containers
    held = replace(trainer, accelerators=(
        replace(trainer.accelerators[0], idle_share_power_watts=60.0),))
    snap = replace(snap, devices=(replace(snap.devices[0], unallocated_idle_power_watts=10.0),
                                  *snap.devices[1:]),
                   pods=(replace(snap.pods[0], containers=(held, sidecar)),))
    history = History(60)
    history.record(snap)
    body = json.loads(history_json(history.window()))
    gpu = next(g for g in body["gpus"] if g["id"] == A)
    assert gpu["points"][0]["unallocatedIdlePowerWatts"] == 10.0
    point = next(c for c in body["containers"] if c["id"] == C1)["points"][0]
    assert point["idleSharePowerWatts"] == 60.0
    loose = next(c for c in body["containers"] if c["id"] == C3)["points"][0]
    assert "idleSharePowerWatts" not in loose                      # absent, not 0


def test_absent_values_are_nan_inside_and_left_out_of_the_json():
    history = History(60)
    history.record(at(0))
    lost = next(g for g in history.window().gpus if g.uuid == B)
    assert all(math.isnan(v) for v in lost.rows[1:GPU_WIDTH - 1])
    assert lost.rows[GPU_WIDTH - 1] == 0.0                 # observed: unhealthy
    body = json.loads(history_json(history.window()))
    lost_point = body["gpus"][1]["points"][0]
    assert lost_point.keys() == {"time", "healthy"} and lost_point["healthy"] is False
    sidecar = next(c for c in body["containers"] if c["id"] == C2)
    assert sidecar["points"][0].keys() == {"time", "attributedPowerWatts",
                                           "attributedEnergyJoules"}
    assert "name" not in sidecar and sidecar["gpuInstanceId"] == 7


def test_json_shape_and_times():
    history = History(60)
    for s in range(3):
        history.record(at(s * 5.0))
    body = json.loads(history_json(history.window()))
    assert body["seconds"] == 60
    gpu = body["gpus"][0]
    assert {k: gpu[k] for k in ("id", "index", "model", "memoryTotal", "powerLimitWatts")} == \
        {"id": A, "index": 0, "model": "NVIDIA H100 80GB HBM3", "memoryTotal": 85520809984,
         "powerLimitWatts": 700.0}
    assert [p["time"] for p in gpu["points"]] == [
        "2023-11-14T22:13:20.000Z", "2023-11-14T22:13:25.000Z", "2023-11-14T22:13:30.000Z"]
    assert gpu["points"][0] == {"time": "2023-11-14T22:13:20.000Z", "dutyCycle": 40,
                                "memoryUsed": 2 << 30, "powerWatts": 310.0,
                                "idlePowerWatts": 70.0, "activePowerWatts": 240.0,
                                "temperatureCelsius": 51, "healthy": True}
    mig = body["gpus"][2]["migInstances"]
    assert [m["gpuInstanceId"] for m in mig] == [7, 8]
    assert mig[0]["points"][0] == {"time": "2023-11-14T22:13:20.000Z", "memoryUsed": 1 << 30,
                                   "activityRatio": 0.75, "attributedPowerWatts": 100.0}
    trainer = next(c for c in body["containers"] if c["id"] == C1)
    assert {k: trainer[k] for k in ("gpu", "name", "pod", "namespace", "podUid")} == \
        {"gpu": A, "name": "trainer", "pod": "trainer-0", "namespace": "ml", "podUid": "u1"}
    assert trainer["points"][0] == {"time": "2023-11-14T22:13:20.000Z",
                                    "attributedPowerWatts": 180.0,
                                    "attributedEnergyJoules": 600.0,
                                    "processMemoryUsed": 1 << 30, "computeUtilization": 75.0}


def test_window_keeps_the_duration_and_drops_what_is_older():
    history = History(10)
    for s in range(0, 30):
        history.record(at(float(s)))
    gpu = history.window().gpus[0]
    times = list(gpu.rows[::GPU_WIDTH])
    assert times == [1.0 + s for s in range(19, 30)]        # 10 s back from the last, inclusive
    assert [t - 1.0 for t in history.window(3).gpus[0].rows[::GPU_WIDTH]] == [26, 27, 28, 29]
    assert len(history.window(1000).gpus[0].rows) == len(gpu.rows)   # capped at the duration


def test_series_of_a_gone_container_and_gpu_are_forgotten():
    history = History(10)
    history.record(at(0))
    without = at(1, pods=(), containers=(), devices=sample_snapshot().devices[:1])
    for s in range(1, 20):
        history.record(replace(without, monotonic=1.0 + s, taken_at=T + s, sequence=s + 1))
    window = history.window()
    assert window.containers == () and window.mig_instances == ()
    assert [g.uuid for g in window.gpus] == [A]
    assert history._containers == {} and len(history._gpus) == 1


def test_memory_is_bounded_by_the_duration():
    history = History(10)
    for s in range(1000):
        history.record(at(s * 0.5))
    for table, width in ((history._gpus, GPU_WIDTH), (history._containers, CONTAINER_WIDTH)):
        for series in table.values():
            assert len(series.rows) == 21 * width               # 10 s at 0.5 s, inclusive


def test_same_or_older_snapshot_is_not_recorded_twice():
    history = History(60)
    history.record(at(5))
    history.record(at(5))
    history.record(at(2))
    assert len(history.window().gpus[0].rows) == GPU_WIDTH
    assert history.sequence == 6


def test_names_that_appear_later_replace_the_old_ones():
    history = History(60)
    first = at(0)
    unnamed = replace(first.pods[0], name=None, namespace=None)
    history.record(replace(first, pods=(unnamed,)))
    history.record(at(1))
    trainer = next(c for c in history.window().containers if c.container_id == C1)
    assert trainer.pod_name == "trainer-0" and len(trainer.rows) == 2 * CONTAINER_WIDTH


def test_infinite_and_odd_names_stay_valid_json():
    history = History(60)
    snap = at(0)
    odd = replace(snap.devices[0], power_watts=math.inf,
                  identity=DeviceIdentity(0, A, 'H100 "quoted" \\ </script>'))
    history.record(replace(snap, devices=(odd,)))
    body = json.loads(history_json(history.window()))
    assert body["gpus"][0]["model"] == 'H100 "quoted" \\ </script>'
    assert "powerWatts" not in body["gpus"][0]["points"][0]


def test_empty_window_before_the_first_record_and_bad_duration():
    assert History(5).window() is None and History(5).sequence is None
    for bad in (0, -1):
        with pytest.raises(ValueError):
            History(bad)


def test_device_without_health_has_no_healthy_key():
    history = History(60)
    snap = at(0)
    history.record(replace(snap, devices=(DeviceStats(DeviceIdentity(0, A)),)))
    point = json.loads(history_json(history.window()))["gpus"][0]["points"][0]
    assert point.keys() == {"time"}


def _resolve(argv=(), env=None):
    return resolve(build_arg_parser().parse_args(list(argv)), env or {})


def test_history_duration_option(tmp_path):
    assert _resolve().history_duration == 600
    assert _resolve(["--history-duration", "0"]).history_duration == 0
    assert _resolve([], {"GPUSTATS_HISTORY_DURATION": "120"}).history_duration == 120
    cfg = tmp_path / "c.yaml"
    cfg.write_text("history_duration: 90\n")
    assert _resolve(["--config", str(cfg)]).history_duration == 90


@pytest.mark.parametrize("argv, env, fragment", [
    (["--history-duration", "-1"], {}, "--history-duration"),
    (["--history-duration", "ten"], {}, "whole number"),
    (["--history-duration", "1.5"], {}, "whole number"),
    (["--history-duration", "86401"], {}, "at most 86400"),
    ([], {"GPUSTATS_HISTORY_DURATION": "²"}, "GPUSTATS_HISTORY_DURATION"),
])
def test_bad_history_duration(argv, env, fragment):
    with pytest.raises(ConfigError) as err:
        _resolve(argv, env)
    assert fragment in str(err.value)


def test_bad_history_duration_in_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("history_duration: true\n")
    with pytest.raises(ConfigError, match="history_duration in"):
        _resolve(["--config", str(cfg)])


def test_tenants_that_are_no_container_are_named_as_shown():
    """A service, a user's sessions, a job, a process: their series are named by the unit,
    the user, ``job <id>``, the command (their IDs are their keys); a container by its name."""
    from tests.support.tenant_snapshot import tenant_snapshot

    history = History(60)
    history.record(tenant_snapshot())
    body = json.loads(history_json(history.window()))
    names = {(c["id"], c.get("gpuInstanceId")): c.get("name") for c in body["containers"]}
    assert names[("service:ollama.service", 7)] == names[("service:ollama.service", 8)] \
        == "ollama.service"
    assert names[("session:1000", None)] == "alice"
    assert names[("job:4242:0", 8)] == "job 4242"
    assert names[("process:1002:python3", None)] == "python3"
    assert names[("3" * 64, None)] == "jupyter"
    assert names[("2" * 64, 7)] is None              # a pod's container nothing names
