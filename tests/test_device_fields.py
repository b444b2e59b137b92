"""One declaration per device value (``model.device_values``): a row alone puts a value in the
Summary, the OpenAPI document, /metrics, the page and the history; the performance state is
such a row; and every GPU's vendor is its ``make`` and a label of every per-GPU family."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.engine.history import History
from gpustats.export import metric_table
from gpustats.export.gpus import gpu_dict
from gpustats.export.history import history_json
from gpustats.export.page import UNIT_FORMATS, page_view
from gpustats.export.prometheus import render
from gpustats.export.summary import summary_dict
from gpustats.model.device import VENDOR_AMD, DeviceReading
from gpustats.model.device_values import COUNTER, DEVICE_VALUES, GAUGE, KUBELET_KEYS
from gpustats.web.openapi import openapi_document
from tests.support.paths import REPO_ROOT
from tests.support.snapshots import A, B, M, sample_snapshot

PSTATE = "gpustats_node_gpu_performance_state"


def _samples(snapshot, **kwargs):
    text = render(snapshot, None, **kwargs)[0].decode()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


def _history_points(snapshot):
    history = History(60)
    history.record(snapshot)
    return {g["id"]: g["points"][-1] for g in json.loads(history_json(history.window()))["gpus"]}


def _figures(snapshot, uuid):
    return dict(next(g for g in page_view(snapshot).gpus if g.uuid == uuid).figures)


def _schemas():
    schemas = openapi_document(600)["components"]["schemas"]
    device = schemas["Summary"]["properties"]["node"]["properties"]["accelerators"]["items"]
    history = openapi_document(600)["paths"]["/api/v1/history"]["get"]["responses"]["200"]
    gpu = history["content"]["application/json"]["schema"]["properties"]["gpus"]["items"]
    return device, gpu["properties"]["points"]["items"], schemas


# ------------------------------------------------------------------ the table

def test_every_row_is_whole():
    names = [v.name for v in DEVICE_VALUES]
    keys = [v.key for v in DEVICE_VALUES if v.key is not None]
    metrics = [v.metric.name for v in DEVICE_VALUES if v.metric is not None]
    assert len(set(names)) == len(names) and len(set(keys)) == len(keys)
    assert len(set(metrics)) == len(metrics)
    assert set(KUBELET_KEYS) <= set(keys)
    for v in DEVICE_VALUES:
        assert (v.key is None) == (v.schema is None), v.name
        assert not v.history or v.key is not None, v.name
        if v.metric is not None:
            assert v.metric.kind in (GAUGE, COUNTER) and v.metric.group in metric_table.GROUPS
            assert v.metric.name in metric_table.BY_NAME, v.name
        if v.figure is not None:
            assert v.figure.template is not None or v.unit in UNIT_FORMATS, v.name
            assert v.figure.of is None or v.figure.of in names, v.name


def test_each_value_is_read_from_the_device():
    device = sample_snapshot().devices[0]
    read = {v.name: v.value(device) for v in DEVICE_VALUES}
    assert read["power_watts"] == 310.0 and read["memory_total_bytes"] == 85520809984
    assert read["duty_cycle_percent"] == 40 and read["performance_state"] is None


EXTRA_ROW = """
import json, sys
import gpustats.model.device_values as dv
consumers = ("gpustats.model.history", "gpustats.export", "gpustats.engine", "gpustats.web")
assert not [m for m in sys.modules if m.startswith(consumers)], "a view read the table first"
dv.DEVICE_VALUES += (dv.DeviceValue(
    "fan_speed_percent", "percent", "Fan speed.", "fanSpeed", dv.PERCENT,
    metric=dv.Metric("gpustats_node_gpu_fan_speed_ratio", "Fan speed.", "ratio", divisor=100),
    figure=dv.Figure("fan"), history=True, read=lambda device: 55),)

from gpustats.engine.history import History
from gpustats.export.history import history_json
from gpustats.export.page import page_view
from gpustats.export.prometheus import render
from gpustats.export.summary import summary_dict
from gpustats.web.openapi import openapi_document
from tests.support.snapshots import sample_snapshot

snapshot = sample_snapshot()
history = History(60)
history.record(snapshot)
document = openapi_document(600)
schemas = document["components"]["schemas"]
points = document["paths"]["/api/v1/history"]["get"]["responses"]["200"]["content"]
json.dump({
    "summary": summary_dict(snapshot)["node"]["accelerators"][0],
    "strict": summary_dict(snapshot, strict=True),
    "schema": schemas["Summary"]["properties"]["node"]["properties"]["accelerators"]["items"],
    "point_schema": points["application/json"]["schema"]["properties"]["gpus"]["items"],
    "metrics": render(snapshot, None)[0].decode(),
    "figures": page_view(snapshot).gpus[0].figures,
    "history": json.loads(history_json(history.window()))["gpus"][0]["points"][0],
}, sys.stdout)
"""


def test_a_row_alone_puts_a_value_everywhere():
    """A row added to the table (before any view reads it) is in the Summary and its schema,
    /metrics, the page and the history, with no other edit; never in the strict shape."""
    result = subprocess.run([sys.executable, "-c", EXTRA_ROW], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["summary"]["fanSpeed"] == 55
    assert "fanSpeed" not in json.dumps(seen["strict"])
    assert seen["schema"]["properties"]["fanSpeed"] == {
        "type": "integer", "minimum": 0, "maximum": 100, "description": "Fan speed."}
    assert "fanSpeed" in seen["point_schema"]["properties"]["points"]["items"]["properties"]
    assert "# HELP gpustats_node_gpu_fan_speed_ratio Fan speed.\n" in seen["metrics"]
    assert ('gpustats_node_gpu_fan_speed_ratio{gpu="0",gpu_uuid="GPU-aaaa",node_name="node-1",'
            'vendor="nvidia"} 0.55\n') in seen["metrics"]
    assert ["fan", "55 %"] in seen["figures"]
    assert seen["history"]["fanSpeed"] == 55


# ------------------------------------------------------------------ the performance state

def _with_pstate(state):
    snapshot = sample_snapshot()
    a = snapshot.devices[0]
    reading = DeviceReading(a.identity, 1.0, performance_state=state, lowest_performance_state=8)
    return replace(snapshot, devices=(replace(a, reading=reading),) + snapshot.devices[1:])


def test_the_performance_state_everywhere():
    snapshot = _with_pstate(2)
    device = summary_dict(snapshot)["node"]["accelerators"][0]
    assert device["performanceState"] == 2
    # Not a kubelet key: the strict shape (no node accelerators, the kubelet's six keys in a
    # container's) never carries it.
    assert "performanceState" not in json.dumps(summary_dict(snapshot, strict=True))
    samples = [s for s in _samples(snapshot) if s.name == PSTATE]
    assert [(s.labels, s.value) for s in samples] == [
        ({"node_name": "node-1", "gpu": "0", "gpu_uuid": A, "vendor": "nvidia"}, 2.0)]
    assert _figures(snapshot, A)["performance state"] == "P2"
    assert _history_points(snapshot)[A]["performanceState"] == 2
    device_schema, point_schema, _ = _schemas()
    assert device_schema["properties"]["performanceState"]["maximum"] == 15
    assert point_schema["properties"]["performanceState"]["type"] == "integer"
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    jsonschema_rs.validate(_schemas()[2]["Summary"], summary_dict(snapshot))


@pytest.mark.parametrize("state", ["no sweep", None])
def test_an_unknown_performance_state_is_absent(state):
    """No sweep (a GPU kept from before an NVML outage), or one that could not read it."""
    snapshot = sample_snapshot() if state == "no sweep" else _with_pstate(None)
    assert "performanceState" not in summary_dict(snapshot)["node"]["accelerators"][0]
    assert not [s for s in _samples(snapshot) if s.name == PSTATE]
    assert f"# TYPE {PSTATE} " not in render(snapshot, None)[0].decode()
    assert _figures(snapshot, A)["performance state"] == "–"
    assert "performanceState" not in _history_points(snapshot)[A]


def test_p0_is_observed_not_absent():
    snapshot = _with_pstate(0)
    assert summary_dict(snapshot)["node"]["accelerators"][0]["performanceState"] == 0
    assert [s.value for s in _samples(snapshot) if s.name == PSTATE] == [0.0]
    assert _figures(snapshot, A)["performance state"] == "P0"


# ------------------------------------------------------------------ the vendor

def _vendor(vendor):
    """The sample snapshot with every GPU's vendor ``vendor``, and a sweep of the first."""
    snapshot = sample_snapshot()
    devices = tuple(replace(d, identity=replace(d.identity, vendor=vendor))
                    for d in snapshot.devices)
    first = devices[0]
    devices = (replace(first, reading=DeviceReading(first.identity, 1.0, power_watts=310.0)),
               ) + devices[1:]
    return replace(snapshot, devices=devices)


def test_the_vendor_is_the_make_and_a_label_of_every_per_gpu_family():
    snapshot = _vendor(VENDOR_AMD)
    out = summary_dict(snapshot)
    assert [d["make"] for d in out["node"]["accelerators"]] == ["amd"] * 3
    accelerators = [a for p in out["pods"] for c in p["containers"] for a in c["accelerators"]]
    accelerators += [a for c in out["containers"] for a in c["accelerators"]]
    assert accelerators and all(a["make"] == "amd" for a in accelerators)
    strict = summary_dict(snapshot, strict=True)["pods"][0]["containers"][0]["accelerators"]
    assert strict[0]["make"] == "amd"
    gpu_families = {f.name for f in metric_table.FAMILIES if "gpu_uuid" in f.labels}
    assert {"gpustats_node_gpu", "gpustats_node_gpu_watts", "gpustats_process_gpu_joules",
            "gpustats_container_gpu_joules", "gpustats_pod_gpu_joules",
            "gpustats_tenant_gpu_joules", "gpustats_node_gpu_mig_joules",
            "gpustats_node_gpu_healthy", "gpustats_node_gpu_sm_active_ratio"} <= gpu_families
    samples = _samples(snapshot, dcgm_compat=True)
    labelled = [s for s in samples if "gpu_uuid" in s.labels]
    assert {s.labels["vendor"] for s in labelled} == {"amd"}
    families = {s.name.removesuffix("_total").removesuffix("_info") for s in labelled}
    assert families <= gpu_families and len(families) > 20
    cadvisor = [s for s in samples if s.name == "container_accelerator_duty_cycle"]
    assert cadvisor and all(s.labels["make"] == "amd" for s in cadvisor)
    # dcgm-exporter's vocabulary keeps its own labels exactly: no vendor there.
    dcgm = [s for s in samples if s.name.startswith("DCGM_FI_")]
    assert dcgm and not [s for s in dcgm if "vendor" in s.labels]
    assert gpu_dict(snapshot.devices[0])["vendor"] == "amd"
    assert page_view(snapshot).gpus[0].vendor == "amd"


def test_an_unknown_vendor_is_left_out_or_empty():
    snapshot = _vendor(None)
    out = summary_dict(snapshot)
    assert not [d for d in out["node"]["accelerators"] if "make" in d]
    assert all("make" not in a for c in out["pods"][0]["containers"]
               for a in c["accelerators"])
    labelled = [s for s in _samples(snapshot) if "gpu_uuid" in s.labels]
    assert labelled and {s.labels["vendor"] for s in labelled} == {""}
    assert "vendor" not in gpu_dict(snapshot.devices[0])
    assert page_view(snapshot).gpus[0].vendor == ""


def test_a_gpu_not_listed_has_its_uuid_and_no_vendor():
    """A container holding a GPU the snapshot does not list: the GPU's labels are its UUID."""
    snapshot = sample_snapshot()
    snapshot = replace(snapshot, devices=tuple(d for d in snapshot.devices
                                               if d.identity.uuid != M))
    sidecar = [s for s in _samples(snapshot) if s.name == "gpustats_container_gpu_watts"
               and s.labels["gpu_uuid"] == M]
    assert [(s.labels["gpu"], s.labels["vendor"]) for s in sidecar] == [("", "")]


def test_the_gpus_document_declares_the_vendor():
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    gpus = openapi_document()["paths"]["/api/v1/gpus"]["get"]["responses"]["200"]
    schema = gpus["content"]["application/json"]["schema"]
    body = {"nodeName": "n", "nvmlLoaded": True,
            "gpus": [gpu_dict(d) for d in _vendor(VENDOR_AMD).devices]}
    jsonschema_rs.validate(schema, body)
    assert schema["properties"]["gpus"]["items"]["properties"]["vendor"]["enum"] == [
        "nvidia", "amd", "intel"]
    assert B in {g["uuid"] for g in body["gpus"]}
