"""Health conditions as the NVSentinel seed models them: NVMLReady's transition time and latest
XID, the "+" form of --xid-ignore, row remapping and volatile double-bit ECC as conditions,
the aggregated Ready, each condition's source; pure, through the health thread, and end to
end through the real daemon on the simulator."""

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats import config_values
from gpustats.config import Config, ConfigError, build_arg_parser, resolve
from gpustats.engine.health_monitor import HealthMonitor
from gpustats.export.summary import health_dict
from gpustats.health import (
    DEFAULT_IGNORED_XIDS, aggregate, apply_event, apply_remapped_rows, initial_health,
    unknown_health, watch_ecc,
)
from gpustats.model.device import RemappedRowsReading
from gpustats.model.health import Condition, HealthEvent
from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A, GPU_B as B
from tests.support.waiting import wait_until

T0 = 1_700_000_000.0
NO_IGNORED = frozenset()


def xid(code, at, uuid="GPU-a"):
    return HealthEvent(uuid, "xid", at, code)


def types(health):
    return [c.type for c in health.conditions]


# ------------------------------------------------------------------ --xid-ignore


def test_the_default_ignored_xids_are_one_set():
    """config_values may import only documents, so it keeps its own copy: the three agree."""
    assert frozenset(config_values.DEFAULT_IGNORED_XIDS) == DEFAULT_IGNORED_XIDS
    assert Config().xid_ignore == tuple(sorted(DEFAULT_IGNORED_XIDS))


@pytest.mark.parametrize("value", ["+94", " +94 ", "+94,+95", "+94,95", ["+94"], ["+94", 95],
                                   ("+94", "+95")])
def test_a_leading_plus_adds_to_the_defaults(value):
    xids = config_values.xid_list(value)
    assert set(DEFAULT_IGNORED_XIDS) < set(xids) and 94 in xids and 13 in xids
    assert xids == tuple(sorted(xids))


@pytest.mark.parametrize("value, expected", [("94", (94,)), ("94,95", (94, 95)), ([94], (94,)),
                                             (94, (94,)), ("", ())])
def test_a_plain_list_replaces_the_defaults(value, expected):
    assert config_values.xid_list(value) == expected


@pytest.mark.parametrize("value", ["94,+95", "++94", "+", "+x", "-3", ["94", "+95"]])
def test_bad_xid_lists_are_refused(value):
    with pytest.raises(ValueError):
        config_values.xid_list(value)


def _config(argv=(), env=None):
    return resolve(build_arg_parser().parse_args(list(argv)), env or {})


@pytest.mark.parametrize("argv, env, file_text", [
    (["--xid-ignore", "+94"], {}, None),
    ([], {"GPUSTATS_XID_IGNORE": "+94,+95"}, None),
    ([], {}, 'xid_ignore: "+94"\n'),
    ([], {}, 'xid_ignore: ["+94", 95]\n'),
    ([], {}, "xid_ignore: +94,+95\n"),        # a plain YAML scalar with a comma is text
])
def test_xid_ignore_plus_keeps_xid_13_ignored(tmp_path, argv, env, file_text):
    if file_text is not None:
        path = tmp_path / "gpustats.yaml"
        path.write_text(file_text)
        env = {**env, "GPUSTATS_CONFIG": str(path)}
    config = _config(argv, env)
    assert {13, 31, 43, 45, 68, 109, 94} <= set(config.xid_ignore)
    ignored = frozenset(config.xid_ignore)
    h = initial_health(T0)
    for code in (13, 94):
        h = apply_event(h, xid(code, T0 + 1), ignored)
    assert h.healthy and h.xid_error_count == 2 and h.critical_xid_count == 0
    h = apply_event(h, xid(79, T0 + 2), ignored)
    assert not h.healthy


def test_xid_ignore_plain_still_replaces():
    config = _config(["--xid-ignore", "94"])
    assert config.xid_ignore == (94,)
    h = apply_event(initial_health(T0), xid(13, T0 + 1), frozenset(config.xid_ignore))
    assert not h.healthy                                   # 13 is no longer ignored


def test_a_misplaced_plus_names_the_option():
    with pytest.raises(ConfigError, match="--xid-ignore"):
        _config(["--xid-ignore", "94,+95"])


# ------------------------------------------------------------------ NVMLReady


def test_nvml_ready_keeps_its_first_transition_and_names_the_latest_xid():
    h = apply_event(initial_health(T0), xid(13, T0 + 1), NO_IGNORED)
    first = h.condition("NVMLReady")
    assert (first.status, first.reason, first.last_transition_time) == \
        ("False", "XidError", T0 + 1)
    assert "XID 13" in first.message
    h = apply_event(h, xid(79, T0 + 5), NO_IGNORED)
    c = h.condition("NVMLReady")
    assert (c.status, c.reason, c.last_transition_time, c.source) == \
        ("False", "XidError", T0 + 1, "nvml-events")
    assert "XID 79" in c.message and "fallen off the bus" in c.message
    assert "XID 13" not in c.message and "2 critical XIDs" in c.message
    assert h.last_xid == 79 and h.last_critical_xid == 79 and h.critical_xid_count == 2
    # An ignored XID afterwards is counted and leaves the message alone.
    later = apply_event(h, xid(31, T0 + 6))
    assert later.condition("NVMLReady") == c and later.xid_error_count == 3
    # Lost and back: the XID cause stays, and so does the transition time.
    lost = apply_event(later, HealthEvent("GPU-a", "gpu_lost", T0 + 7, source="nvml-sweep"))
    back = apply_event(lost, HealthEvent("GPU-a", "gpu_answers", T0 + 8, source="nvml-sweep"))
    for state in (lost, back):
        assert state.condition("NVMLReady").reason == "XidError"
        assert state.condition("NVMLReady").last_transition_time == T0 + 1
    assert lost.lost and not back.lost


def test_with_the_default_list_xid_13_then_79_is_one_transition_at_79():
    h = apply_event(initial_health(T0), xid(13, T0 + 1))
    assert h.healthy and h.condition("NVMLReady").last_transition_time == T0
    h = apply_event(h, xid(79, T0 + 5))
    c = h.condition("NVMLReady")
    assert c.last_transition_time == T0 + 5 and "XID 79" in c.message
    assert "critical XIDs" not in c.message                  # one critical XID so far


def test_a_lost_gpu_heals_with_a_new_transition_time():
    h = apply_event(initial_health(T0), HealthEvent("GPU-a", "gpu_lost", T0 + 1,
                                                    source="nvml-sweep"))
    again = apply_event(h, HealthEvent("GPU-a", "gpu_lost", T0 + 2, source="nvml-sweep"))
    assert again is h                                       # the same state: no new object
    healed = apply_event(h, HealthEvent("GPU-a", "gpu_answers", T0 + 3, source="nvml-sweep"))
    c = healed.condition("NVMLReady")
    assert (c.status, c.last_transition_time, c.source) == ("True", T0 + 3, "nvml-sweep")
    assert healed.healthy and healed.condition("Ready").last_transition_time == T0 + 3


# ------------------------------------------------------------------ row remapping, ECC


def test_remapped_rows_become_a_condition():
    h = initial_health(T0)
    assert apply_remapped_rows(h, None, T0 + 1) is h                      # absent: none
    assert apply_remapped_rows(h, RemappedRowsReading(correctable=1), T0 + 1) is h
    ok = apply_remapped_rows(h, RemappedRowsReading(0, 0, False, False), T0 + 1)
    c = ok.condition("RowRemapHealth")
    assert (c.status, c.reason, c.last_transition_time, c.source) == \
        ("True", "RowRemapHealth", T0 + 1, "nvml-sweep")
    assert ok.healthy and types(ok) == ["NVMLReady", "RowRemapHealth", "Ready"]
    assert apply_remapped_rows(ok, RemappedRowsReading(0, 0, False, False), T0 + 2) is ok
    pending = apply_remapped_rows(ok, RemappedRowsReading(0, 1, True, False), T0 + 2)
    c = pending.condition("RowRemapHealth")
    assert (c.status, c.reason, c.last_transition_time) == ("False", "RowRemapPending", T0 + 2)
    assert "1 rows remapped after uncorrectable errors" in c.message
    assert not pending.healthy
    failed = apply_remapped_rows(pending, RemappedRowsReading(0, 1, True, True), T0 + 3)
    c = failed.condition("RowRemapHealth")
    assert (c.reason, c.last_transition_time) == ("RowRemapFailure", T0 + 2)   # still False
    gone = apply_remapped_rows(failed, None, T0 + 4)        # the GPU gives none any more
    assert types(gone) == ["NVMLReady", "Ready"] and gone.healthy


def test_volatile_double_bit_ecc_is_a_condition():
    h = watch_ecc(initial_health(T0), T0 + 1)
    c = h.condition("EccHealth")
    assert (c.status, c.last_transition_time, c.source) == ("True", T0 + 1, "nvml-events")
    assert watch_ecc(h, T0 + 2) is h
    h = apply_event(h, HealthEvent("GPU-a", "single_bit_ecc", T0 + 2))
    assert h.healthy and h.single_bit_ecc_count == 1
    h = apply_event(h, HealthEvent("GPU-a", "double_bit_ecc", T0 + 3))
    h = apply_event(h, HealthEvent("GPU-a", "double_bit_ecc", T0 + 4))
    c = h.condition("EccHealth")
    assert (c.status, c.reason, c.last_transition_time) == \
        ("False", "VolatileDoubleBitEcc", T0 + 3)
    assert c.message.startswith("2 double-bit ECC errors")
    assert h.condition("NVMLReady").reason == "DoubleBitEcc"       # as before: the alert's
    assert types(h) == ["NVMLReady", "EccHealth", "Ready"]
    # A GPU whose events were never registered reports EccHealth once it has a DBE.
    unwatched = apply_event(initial_health(T0), HealthEvent("GPU-a", "double_bit_ecc", T0 + 1))
    assert unwatched.condition("EccHealth").status == "False"


# ------------------------------------------------------------------ Ready


def cond(type_, status, reason="R"):
    return Condition(type_, status, reason, "m", T0, "src")


@pytest.mark.parametrize("statuses, expected", [
    (("True", "True"), "True"),
    (("True", "Unknown"), "Unknown"),
    (("Unknown", "False"), "False"),
    (("False", "True"), "False"),
    ((), "True"),
])
def test_ready_aggregates_every_other_condition(statuses, expected):
    conditions = tuple(cond(f"C{i}", s) for i, s in enumerate(statuses))
    ready = aggregate(conditions, None, T0 + 1)
    assert (ready.type, ready.status, ready.source) == ("Ready", expected, "gpustats")


def test_ready_follows_the_others_and_keeps_its_transition_time():
    h = initial_health(T0)
    assert h.condition("Ready").status == "True" and types(h) == ["NVMLReady", "Ready"]
    h = apply_event(h, xid(79, T0 + 1))
    r = h.condition("Ready")
    assert (r.status, r.reason, r.last_transition_time) == ("False", "XidError", T0 + 1)
    h = apply_remapped_rows(h, RemappedRowsReading(0, 1, True, False), T0 + 2)
    r = h.condition("Ready")
    assert (r.status, r.reason, r.last_transition_time) == ("False", "XidError", T0 + 1)
    assert "NVMLReady is False (XidError)" in r.message
    assert "RowRemapHealth is False (RowRemapPending)" in r.message
    # Unknown when NVML is not loaded: no False, one Unknown.
    u = unknown_health(T0, "NVMLNotLoaded", "library not found")
    assert u.condition("Ready").status == "Unknown" and not u.healthy


def test_each_condition_keeps_its_source_in_the_outputs():
    h = watch_ecc(initial_health(T0), T0)
    h = apply_remapped_rows(h, RemappedRowsReading(0, 0, True, False), T0 + 1)
    h = apply_event(h, HealthEvent("GPU-a", "gpu_lost", T0 + 2, source="nvml-sweep"))
    out = health_dict(h)
    assert out["healthy"] is False
    assert [(c["type"], c["status"], c["source"]) for c in out["conditions"]] == [
        ("NVMLReady", "False", "nvml-sweep"), ("EccHealth", "True", "nvml-events"),
        ("RowRemapHealth", "False", "nvml-sweep"), ("Ready", "False", "gpustats")]
    assert out["conditions"][3]["reason"] == "GpuLost"


# ------------------------------------------------------------------ the health thread


class Source:
    def __init__(self, events=()):
        self.events = list(events)

    def open(self, uuids):
        return {u: u != "GPU-noevents" for u in uuids}

    def wait(self, timeout_ms):
        if self.events:
            return [self.events.pop(0)]
        time.sleep(timeout_ms / 1000)          # measures: a wait that blocks, as NVML's
        return []

    def close(self):
        pass


def test_the_monitor_keeps_remapped_rows_and_ecc_health():
    monitor = HealthMonitor(lambda: Source(), wait_ms=50)
    monitor.track(1, ("GPU-a", "GPU-noevents"))
    monitor.note_remapped_rows("GPU-a", RemappedRowsReading(0, 2, True, False), T0)
    monitor.note_remapped_rows("GPU-unknown", RemappedRowsReading(0, 2, True, False), T0)
    monitor.start()
    try:
        assert wait_until(lambda: monitor.health_by_uuid()["GPU-a"].condition("EccHealth"))
        a = monitor.health_by_uuid()["GPU-a"]
        assert a.condition("RowRemapHealth").reason == "RowRemapPending"
        assert a.condition("Ready").status == "False"
        assert monitor.health_by_uuid()["GPU-noevents"].condition("EccHealth") is None
        assert "GPU-unknown" not in monitor.health_by_uuid()
        before = monitor.health_by_uuid()
        monitor.note_remapped_rows("GPU-a", RemappedRowsReading(0, 2, True, False), T0 + 5)
        assert monitor.health_by_uuid() is before           # nothing changed: not replaced
    finally:
        monitor.stop()


# ------------------------------------------------------------------ end to end


def _gpus(body):
    return {g["uuid"]: g for g in body["gpus"]}


def _conditions(gpu):
    return {c["type"]: c for c in gpu["health"]["conditions"]}


def test_conditions_end_to_end(start_daemon, tmp_path):
    """--xid-ignore +94: XIDs 13 and 94 are counted and ignored; A's pending row remapping is
    RowRemapHealth False and Ready False in the JSON and on /metrics; B is Ready."""
    path = tmp_path / "s.yaml"
    write_scenario(path, {
        "devices": [{"uuid": A, "minor": 0,
                     "remapped_rows": {"uncorrectable": 1, "pending": True}},
                    {"uuid": B, "minor": 1}],
        "xid_events": [{"device": A, "xid": 13, "after_seconds": 0.3},
                       {"device": A, "xid": 94, "after_seconds": 0.6}],
    })
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", "0.2",
                          "--xid-ignore", "+94")
    daemon.wait_ready()
    body = daemon.wait_for(lambda b: _gpus(b).get(A, {}).get("saturation", {})
                           .get("xidErrorCount") == 2
                           and "EccHealth" in _conditions(_gpus(b)[A]), path="/api/v1/gpus")
    a, b = _conditions(_gpus(body)[A]), _conditions(_gpus(body)[B])
    assert a["NVMLReady"]["status"] == "True"                  # 13 and 94 both ignored
    assert (a["RowRemapHealth"]["status"], a["RowRemapHealth"]["reason"],
            a["RowRemapHealth"]["source"]) == ("False", "RowRemapPending", "nvml-sweep")
    assert (a["Ready"]["status"], a["Ready"]["reason"], a["Ready"]["source"]) == \
        ("False", "RowRemapPending", "gpustats")
    assert _gpus(body)[A]["health"]["healthy"] is False
    assert {c: b[c]["status"] for c in b} == {
        "NVMLReady": "True", "EccHealth": "True", "RowRemapHealth": "True", "Ready": "True"}
    assert list(a) == ["NVMLReady", "EccHealth", "RowRemapHealth", "Ready"]
    summary = daemon.get("/stats/summary")[1]
    acc = {x["id"]: x for x in summary["node"]["accelerators"]}
    assert acc[A]["health"] == _gpus(daemon.get("/api/v1/gpus")[1])[A]["health"]
    text = daemon.get("/metrics")[1]
    series = {(s.labels["gpu_uuid"], s.labels["type"]): (s.labels["status"], s.labels["reason"])
              for f in text_string_to_metric_families(text)
              if f.name == "gpustats_node_gpu_condition" for s in f.samples}
    assert series[(A, "RowRemapHealth")] == ("False", "RowRemapPending")
    assert series[(A, "Ready")] == ("False", "RowRemapPending")
    assert series[(B, "Ready")] == ("True", "Ready")
    assert series[(A, "NVMLReady")] == ("True", "NVMLReady")
