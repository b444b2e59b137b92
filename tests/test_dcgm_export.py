"""dcgm-exporter's vocabulary on /metrics (``--dcgm-compat``): names, types, units, labels,
absence, and the gpustats families left exactly as they are."""

from dataclasses import fields, replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpustats.export.dcgm import render_dcgm
from gpustats.export.dcgm_table import DEVICE_FIELDS, PROF_FIELDS
from gpustats.export.prometheus import render
from gpustats.model.device import (
    DeviceReading, GpmReading, RemappedRowsReading, ViolationReading,
)
from gpustats.model.snapshot import ContainerAccelerator, ContainerStats, PodStats
from tests.support.dcgm_snapshot import A, M, dcgm_snapshot, one_sample, samples
from tests.support.gpus import H100

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def _families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_table_path_names_a_reading_field():
    device = {f.name for f in fields(DeviceReading)}
    nested = {"remapped_rows": {f.name for f in fields(RemappedRowsReading)},
              "violations": {f.name for f in fields(ViolationReading)}}
    for field in DEVICE_FIELDS:
        head, _, tail = field.path.partition(".")
        assert head in device, field.path
        assert not tail or tail in nested[head], field.path
    gpm = {f.name for f in fields(GpmReading)}
    assert all(f.path in gpm for f in PROF_FIELDS)


def test_values_in_dcgm_units_with_dcgm_types():
    text = render_dcgm(dcgm_snapshot()).decode()
    families = _families(text)
    expected = {
        "DCGM_FI_DEV_SM_CLOCK": 1755, "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": 71, "DCGM_FI_DEV_GPU_TEMP": 64,
        "DCGM_FI_DEV_POWER_USAGE": 612.457,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 5_482_219_904_411,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 4, "DCGM_FI_DEV_GPU_UTIL": 87,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 41, "DCGM_FI_DEV_ENC_UTIL": 3, "DCGM_FI_DEV_DEC_UTIL": 9,
        "DCGM_FI_DEV_FB_FREE": 59 * 1024 + 512, "DCGM_FI_DEV_FB_USED": 20 * 1024,
        "DCGM_FI_DEV_FB_RESERVED": 512, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1, "DCGM_FI_DEV_POWER_VIOLATION": 2_000_000_123,
        "DCGM_FI_DEV_THERMAL_VIOLATION": 7_000, "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": 0,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x24, "DCGM_FI_DEV_XID_ERRORS": 48,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.915, "DCGM_FI_PROF_SM_ACTIVE": 0.8,
        "DCGM_FI_PROF_SM_OCCUPANCY": 0.4, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.55,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.35, "DCGM_FI_PROF_PCIE_TX_BYTES": 1.5e9,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 2.5e9, "DCGM_FI_PROF_NVLINK_TX_BYTES": 3e10,
        "DCGM_FI_PROF_NVLINK_RX_BYTES": 2e10,
    }
    for name, value in expected.items():
        assert one_sample(text, name, gpu="0")[1] == pytest.approx(value), name
    counters = {f.name for f in (*DEVICE_FIELDS,) if f.kind == "counter"}
    assert counters == {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
                        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_POWER_VIOLATION",
                        "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
                        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"}
    # The counters keep dcgm-exporter's names: no "_total" in the TYPE line or the samples.
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text and "_total" not in text
    assert families["DCGM_FI_DEV_POWER_USAGE"].type == "gauge"
    assert "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION" not in text      # None inside: absent outside


def test_labels_as_dcgm_exporter_names_them():
    text = render_dcgm(dcgm_snapshot()).decode()
    labels, _ = one_sample(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert labels == {"gpu": "0", "UUID": A, "pci_bus_id": "00000000:1A:00.0",
                      "device": "nvidia0", "modelName": H100, "Hostname": "node-7",
                      "DCGM_FI_DRIVER_VERSION": "580.65.06", "container": "trainer",
                      "namespace": "ml", "pod": "train-0", "pod_uid": "u1"}
    # dcgm-exporter's order: identity, MIG instance, Hostname, then sorted attributes.
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert [kv.split("=")[0] for kv in line[line.index("{") + 1:line.index("}")].split(",")] \
        == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
            "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod", "pod_uid"]
    xid, _ = one_sample(text, "DCGM_FI_DEV_XID_ERRORS", gpu="0")
    assert xid["err_code"] == "48" and xid["err_msg"] == "double-bit ECC error"


def test_mig_instances_carry_gpu_instance_labels_and_their_pod():
    text = render_dcgm(dcgm_snapshot()).decode()
    labels, value = one_sample(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="1", GPU_I_ID="7")
    assert value == pytest.approx(0.30)
    assert labels["GPU_I_PROFILE"] == "1g.10gb" and labels["pod"] == "embed-0"
    assert labels["container"] == "server" and labels["namespace"] == "serving"
    assert one_sample(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="7")[1] == 3 * 1024
    assert one_sample(text, "DCGM_FI_DEV_FB_FREE", gpu="1", GPU_I_ID="7")[1] == 7 * 1024
    free_instance, _ = one_sample(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="8")
    assert "pod" not in free_instance
    # No GPM on instance 8, none at the MIG GPU's device level: no profiling series there.
    assert [lab for lab, _ in samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
            if lab["gpu"] == "1"] == [labels]
    device_level, _ = one_sample(text, "DCGM_FI_DEV_GPU_TEMP", gpu="1")
    assert "pod" not in device_level and "GPU_I_ID" not in device_level
    assert not [lab for lab, _ in samples(text, "DCGM_FI_DEV_GPU_UTIL") if lab["gpu"] == "1"]


def test_profiling_fields_absent_without_gpm_never_from_duty_cycle():
    text = render_dcgm(dcgm_snapshot(gpm=None)).decode()
    assert not [lab for lab, _ in samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
                if lab["gpu"] == "0"]
    assert not [n for n in _families(text) if n.startswith("DCGM_FI_PROF_SM")]
    assert one_sample(text, "DCGM_FI_DEV_GPU_UTIL", gpu="0")[1] == 87


def test_unknown_labels_are_left_out():
    text = render_dcgm(dcgm_snapshot(driver=None)).decode()
    labels, _ = one_sample(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert "DCGM_FI_DRIVER_VERSION" not in labels
    assert '=""' not in text


GIB = 1 << 30


def _shared(snap):
    """GPU A time-sliced by a second pod, MIG instance 7 by a third (two replicas each), each
    holder with its own processes' SM utilization and memory."""
    web = ContainerStats("5" * 64, "web", pod_uid="u3", accelerators=(ContainerAccelerator(
        A, compute_utilization_percent=30.0, process_memory_used_bytes=4 * GIB),))
    embed = ContainerStats("6" * 64, "server", pod_uid="u4", accelerators=(ContainerAccelerator(
        M, gpu_instance_id=7, process_memory_used_bytes=1 * GIB),))
    train, serve = snap.pods
    trainer = replace(train.containers[0], accelerators=(ContainerAccelerator(
        A, compute_utilization_percent=50.0, process_memory_used_bytes=8 * GIB),))
    server = replace(serve.containers[0], accelerators=(ContainerAccelerator(
        M, gpu_instance_id=7, process_memory_used_bytes=2 * GIB),))
    return replace(snap, pods=(replace(train, containers=(trainer,)),
                               replace(serve, containers=(server,)),
                               PodStats("u3", "web-0", "shop", containers=(web,)),
                               PodStats("u4", "embed-1", "serving", containers=(embed,))))


def test_shared_gpu_gives_each_holder_a_copy_of_its_series():
    text = render_dcgm(_shared(dcgm_snapshot())).decode()
    for name, value in (("DCGM_FI_DEV_POWER_USAGE", 612.457),
                        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.915)):
        found = {(lab["namespace"], lab["pod"], lab["container"], lab["pod_uid"]): v
                 for lab, v in samples(text, name) if lab["gpu"] == "0"}
        # One copy per holder, none without pod labels: sum by (pod) keeps the shared GPU.
        assert found == {("ml", "train-0", "trainer", "u1"): pytest.approx(value),
                         ("shop", "web-0", "web", "u3"): pytest.approx(value)}, name
    # GPU_UTIL and FB_USED: each holder its own processes' figure (dcgm-exporter's per-process
    # metrics), beside the device's series without pod labels.
    for name, device, trainer, web in (("DCGM_FI_DEV_GPU_UTIL", 87, 50, 30),
                                       ("DCGM_FI_DEV_FB_USED", 20 * 1024, 8 * 1024, 4 * 1024)):
        found = {lab.get("pod"): v for lab, v in samples(text, name) if lab["gpu"] == "0"}
        assert found == {None: device, "train-0": trainer, "web-0": web}, name
    xids = [lab for lab, _ in samples(text, "DCGM_FI_DEV_XID_ERRORS") if lab["gpu"] == "0"]
    assert sorted(lab["pod"] for lab in xids) == ["train-0", "web-0"]
    assert all(lab["err_code"] == "48" for lab in xids)
    instance = {lab["pod"]: v for lab, v in samples(text, "DCGM_FI_DEV_FB_USED")
                if lab.get("GPU_I_ID") == "7" and "pod" in lab}
    assert instance == {"embed-0": 2 * 1024, "embed-1": 1024}
    (device,) = [v for lab, v in samples(text, "DCGM_FI_DEV_FB_USED")
                 if lab.get("GPU_I_ID") == "7" and "pod" not in lab]
    assert device == 3 * 1024
    assert {lab["pod"] for lab, _ in samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
            if lab.get("GPU_I_ID") == "7"} == {"embed-0", "embed-1"}
    # The idle instance nobody holds keeps its one series, memory included.
    assert one_sample(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="8")[1] == 0
    assert one_sample(text, "DCGM_FI_DEV_FB_FREE", gpu="1", GPU_I_ID="8")[1] == 10 * 1024


def test_device_plugin_replicas_carry_vgpu():
    snap = _shared(dcgm_snapshot())
    first, web = snap.pods[0], snap.pods[2]
    trainer = replace(first.containers[0], accelerators=(
        ContainerAccelerator(A, replicas=(0,)),))
    # A container given two replicas of the same GPU has a copy for each, as dcgm-exporter does.
    webc = replace(web.containers[0], accelerators=(ContainerAccelerator(A, replicas=(1, 2)),))
    snap = replace(snap, pods=(replace(first, containers=(trainer,)), snap.pods[1],
                               replace(web, containers=(webc,)), snap.pods[3]))
    text = render_dcgm(snap).decode()
    found = sorted((lab["pod"], lab["vgpu"]) for lab, _ in samples(text, "DCGM_FI_DEV_GPU_TEMP")
                   if lab["gpu"] == "0")
    assert found == [("train-0", "0"), ("web-0", "1"), ("web-0", "2")]
    line = next(ln for ln in text.splitlines()
                if ln.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'vgpu="0"' in ln)
    assert line.endswith(',pod="train-0",pod_uid="u1",vgpu="0"} 64')
    # No replica known (a MIG instance here): no vgpu label.
    assert all("vgpu" not in lab for lab, _ in samples(text, "DCGM_FI_DEV_FB_USED")
               if lab.get("GPU_I_ID") == "7")


def test_two_containers_of_one_pod_each_get_a_copy():
    text = render_dcgm(dcgm_snapshot(holders=2)).decode()
    assert sorted(lab["container"] for lab, _ in samples(text, "DCGM_FI_DEV_GPU_TEMP")
                  if lab["gpu"] == "0") == ["sidecar", "trainer"]


def test_unnamed_pod_and_bare_container_hold_without_labels():
    snap = dcgm_snapshot()
    unnamed = replace(snap.pods[1], name=None, namespace=None)
    text = render_dcgm(replace(snap, pods=(snap.pods[0], unnamed))).decode()
    labels, _ = one_sample(text, "DCGM_FI_DEV_FB_USED", gpu="1", GPU_I_ID="7")
    assert "pod" not in labels and "pod_uid" not in labels and "container" not in labels
    # Beside a named holder, a bare container adds no copy: the named holder's is the one.
    bare = ContainerStats("4" * 64, "x", accelerators=(ContainerAccelerator(A),))
    text = render_dcgm(replace(snap, containers=(bare,))).decode()
    assert one_sample(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0]["pod"] == "train-0"
    alone = replace(snap, pods=(unnamed,), containers=(bare,))
    assert "pod" not in one_sample(render_dcgm(alone).decode(), "DCGM_FI_DEV_GPU_TEMP", gpu="0")[0]


def test_hostname_label_as_a_release_or_the_main_branch_names_it():
    assert one_sample(render_dcgm(dcgm_snapshot()).decode(), "DCGM_FI_DEV_GPU_TEMP",
                gpu="0")[0]["Hostname"] == "node-7"
    text = render_dcgm(dcgm_snapshot(), hostname_label="hostname").decode()
    labels, _ = one_sample(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    assert labels["hostname"] == "node-7" and "Hostname" not in labels
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_TEMP{"))
    assert ',modelName="' + H100 + '",hostname="node-7",DCGM_FI_DRIVER_VERSION=' in line
    compat, _ = render(dcgm_snapshot(), None, dcgm_compat=True, dcgm_hostname_label="hostname")
    assert b'hostname="node-7"' in compat and b"Hostname=" not in compat
    with pytest.raises(ValueError):
        render_dcgm(dcgm_snapshot(), hostname_label="HOSTNAME")


def test_no_xid_yet_reads_zero_no_error():
    text = render_dcgm(dcgm_snapshot(xid=None)).decode()
    labels, value = one_sample(text, "DCGM_FI_DEV_XID_ERRORS", gpu="0")
    assert value == 0 and labels["err_code"] == "0" and labels["err_msg"] == "No Error"


def test_lost_gpu_and_gpu_without_reading_give_no_readings():
    snap = dcgm_snapshot()
    lost = replace(snap.devices[0], reading=replace(snap.devices[0].reading, lost=True))
    gone = replace(snap.devices[1], reading=None)
    text = render_dcgm(replace(snap, devices=(lost, gone))).decode()
    assert "DCGM_FI_DEV_GPU_TEMP" not in text
    assert one_sample(text, "DCGM_FI_DEV_XID_ERRORS", gpu="0")[1] == 48


def test_label_values_are_escaped():
    snap = dcgm_snapshot()
    weird = replace(snap.devices[0], identity=replace(snap.devices[0].identity,
                                                      name='GPU "quoted"\\ and\nnewline'))
    text = render_dcgm(replace(snap, devices=(weird,))).decode()
    labels, _ = one_sample(text, "DCGM_FI_DEV_GPU_TEMP", gpu="0")
    # The newline is a control character: shown as \x0a, as in every output (export.text).
    assert labels["modelName"] == 'GPU "quoted"\\ and\\x0anewline'


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
def test_flag_adds_dcgm_families_and_leaves_ours_unchanged(accept):
    snap = dcgm_snapshot()
    plain, content_type = render(snap, accept)
    compat, compat_type = render(snap, accept, dcgm_compat=True)
    assert content_type == compat_type
    assert b"DCGM_" not in plain
    ours = b"".join(ln for ln in compat.splitlines(keepends=True) if b"DCGM_" not in ln)
    assert ours == plain
    if accept == OPENMETRICS:
        assert compat.endswith(b"# EOF\n") and compat.count(b"# EOF") == 1
    assert b"DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in compat
