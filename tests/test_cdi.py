"""CDI spec parsing and the spec-dir cache; MIG capability minors from a fake procfs."""

import json
import logging
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustats.hostfs import HostRoots
from gpustats.model.dra import CdiDeviceNodes, MigCapability
from gpustats.sources.cdi import CdiSpecs, load_document, parse_spec, read_spec_file
from gpustats.sources.mig_caps import (
    MigCapabilities,
    parse_access,
    read_mig_capabilities,
)
from tests.support.clock import Clock
from tests.support.documents import alias_bomb
from tests.support.fakehost import make_caps

CLAIM = "4b1c7e1a-5f0e-4d7b-9a52-0c9e2d7f3a11"
GPU = "GPU-7f1c2a4e-0d3b-4c55-9a61-2b8e6f0c1d01"

SPEC_YAML = f"""\
cdiVersion: 0.6.0
kind: k8s.gpu.nvidia.com/claim
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  - path: /dev/nvidia-uvm-tools
  mounts:
  - {{hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.1, containerPath: /usr/lib/libcuda.so.1}}
devices:
- name: {CLAIM}-gpu-3
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia3
- name: {CLAIM}-mig-1-7-0
  containerEdits:
    deviceNodes:
    - {{path: /dev/nvidia1}}
    - {{path: /dev/nvidia-caps/nvidia-cap66, type: c, major: 237, minor: 66}}
    - {{path: /dev/nvidia-caps/nvidia-cap67}}
- name: by-env
  containerEdits:
    env: ["NVIDIA_VISIBLE_DEVICES={GPU},3,all"]
"""


def write(path, text):
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_parse_yaml_merges_spec_and_device_edits():
    devices = parse_spec(load_document(SPEC_YAML, "yaml"))
    assert devices[f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3"] == CdiDeviceNodes(gpu_minors=(3,))
    mig = devices[f"k8s.gpu.nvidia.com/claim={CLAIM}-mig-1-7-0"]
    assert mig.gpu_minors == (1,) and mig.capability_minors == (66, 67)
    # The device-level env overrides the spec-level "void"; only UUIDs count.
    assert devices["k8s.gpu.nvidia.com/claim=by-env"].visible_device_uuids == (GPU,)


def test_parse_json_with_host_path_and_explicit_minor():
    spec = {"cdiVersion": "0.5.0", "kind": "example.com/gpu",
            "devices": [{"name": "g0", "containerEdits": {"deviceNodes": [
                {"path": "/dev/nvidia0", "hostPath": "/dev/nvidia5"},
                {"path": "/dev/gpu-renamed", "major": 195, "minor": 6},
                {"path": "/dev/nvidia7", "major": 195, "minor": 2},
                {"path": "/dev/nvidiactl", "major": 195, "minor": 255}]}}]}
    devices = parse_spec(load_document(json.dumps(spec), "json"))
    assert devices["example.com/gpu=g0"].gpu_minors == (5, 6, 2)


@pytest.mark.parametrize("text, fmt", [
    ("{not json", "json"),
    ("kind: [unclosed", "yaml"),
    ("- a list", "yaml"),
    ("kind: nokind\ndevices: []", "yaml"),
    ("kind: a.com/b\ndevices: {x: 1}", "yaml"),
    ("kind: a.com/b\ndevices: [{name: 'bad name'}]", "yaml"),
    ("kind: a.com/b\ndevices: [{name: ok, containerEdits: {deviceNodes: [{}]}}]", "yaml"),
    ("kind: a.com/b\ndevices: [{name: ok, containerEdits: {env: [3]}}]", "yaml"),
    ("kind: a.com/b\ncontainerEdits: 7\ndevices: []", "yaml"),
])
def test_malformed_specs_raise_value_error(text, fmt):
    with pytest.raises(ValueError):
        parse_spec(load_document(text, fmt))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["json", "yaml"]))
def test_arbitrary_text_parses_or_raises_value_error(text, fmt):
    try:
        devices = parse_spec(load_document(text, fmt))
    except ValueError:
        return
    assert all(isinstance(v, CdiDeviceNodes) for v in devices.values())


def test_alias_bombs_are_bounded():
    nodes = "n: &n [" + ", ".join(["{path: /dev/nvidia0}"] * 257) + "]\n"
    many_nodes = nodes + "kind: a.com/b\ndevices: [{name: d, containerEdits: {deviceNodes: *n}}]\n"
    many_devices = ("d: &d {name: x, containerEdits: {deviceNodes: [{path: /dev/nvidia0}]}}\n"
                    "kind: a.com/b\ndevices: [" + ", ".join(["*d"] * 1025) + "]\n")
    for text in (many_nodes, many_devices):
        with pytest.raises(ValueError, match="more than"):
            parse_spec(load_document(text, "yaml"))


def test_specs_parsed_once_per_change(tmp_path):
    static, run = tmp_path / "etc", tmp_path / "run"
    static.mkdir()
    run.mkdir()
    write(run / f"k8s.gpu.nvidia.com-claim_{CLAIM}.yaml", SPEC_YAML)
    (run / "notes.txt").write_text("not a spec")
    clock = Clock(0.0)
    specs = CdiSpecs([str(static), str(run)], recheck_seconds=10, monotonic=clock)
    for _ in range(50):
        specs.refresh()
        clock.now += 0.1
    assert specs.parses == 1
    assert specs.lookup(f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3").gpu_minors == (3,)
    # A new file in a directory: seen at the next refresh (the directory's mtime moved).
    write(static / "static.json", json.dumps({"kind": "nvidia.com/gpu", "devices": [
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}))
    specs.refresh()
    assert specs.lookup("nvidia.com/gpu=all").gpu_minors == (0,) and specs.parses == 2
    # Rewritten in place (directory unchanged): seen at the periodic re-check.
    path = run / f"k8s.gpu.nvidia.com-claim_{CLAIM}.yaml"
    with open(path, "w") as f:
        f.write(SPEC_YAML.replace("/dev/nvidia3", "/dev/nvidia4"))
    os.utime(path, ns=(1, 10**18))
    clock.now += 11
    specs.refresh()
    assert specs.lookup(f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3").gpu_minors == (4,)
    assert specs.parses == 3
    # Removed (claim unprepared): its devices are gone.
    path.unlink()
    specs.refresh()
    assert specs.lookup(f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3") is None


def test_later_directory_wins(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for d, minor in ((first, 1), (second, 2)):
        d.mkdir()
        write(d / "x.yaml", f"kind: v.com/c\ndevices: [{{name: d, containerEdits: "
                            f"{{deviceNodes: [{{path: /dev/nvidia{minor}}}]}}}}]\n")
    specs = CdiSpecs([str(first), str(second)])
    specs.refresh()
    assert specs.lookup("v.com/c=d").gpu_minors == (2,)


def test_file_vanishing_between_listing_and_reading(tmp_path, caplog):
    d = tmp_path / "run"
    d.mkdir()
    path = d / "claim.yaml"
    write(path, SPEC_YAML)

    def racing_read(p):
        os.unlink(p)                      # the claim is unprepared right now
        return read_spec_file(p)

    specs = CdiSpecs([str(d)], read=racing_read)
    with caplog.at_level(logging.INFO):
        specs.refresh()
    assert specs.lookup(f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3") is None
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    assert specs.malformed() == ()


def refreshed_past_rechecks(directory) -> CdiSpecs:
    """Specs of ``directory`` refreshed five times, each past the 1 s re-check."""
    clock = Clock(0.0)
    specs = CdiSpecs([str(directory)], recheck_seconds=1, monotonic=clock)
    for _ in range(5):
        specs.refresh()
        clock.now += 2
    return specs


def test_malformed_file_logged_once_and_recovers(tmp_path, caplog):
    d = tmp_path / "run"
    d.mkdir()
    write(d / "broken.yaml", "kind: [unclosed")
    write(d / "good.yaml", SPEC_YAML)
    with caplog.at_level(logging.WARNING):
        specs = refreshed_past_rechecks(d)
    lines = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(lines) == 1 and "broken.yaml" in lines[0].getMessage()
    assert specs.malformed() == (str(d / "broken.yaml"),)
    assert specs.lookup(f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3") is not None
    write(d / "broken.yaml", "kind: v.com/c\ndevices: [{name: fixed}]\n")
    specs.refresh()
    assert specs.malformed() == () and specs.lookup("v.com/c=fixed") == CdiDeviceNodes()


@pytest.mark.parametrize("name, text, reason, parses", [
    ("bomb.yaml", f"kind: {alias_bomb()}\ndevices: []\n", "aliases would expand it", 2),
    ("bomb.yaml", f"kind: a.com/b\ndevices: [{{name: {alias_bomb()}}}]\n", "aliases", 2),
    ("deep.json", '{"kind": ' + "[" * 5000 + "]" * 5000 + ', "devices": []}', "nested deeper",
     2),
    ("latin.yaml", "kind: a.com/b\ndevices: [{name: caf\udce9}]\n", "not UTF-8", 1),
])
def test_hostile_spec_is_refused_once_until_it_changes(tmp_path, caplog, name, text, reason,
                                                       parses):
    """Refused for what it is, logged once, and never parsed again (``parses`` counts the
    good spec beside it and, unless refused before parsing, the hostile one once)."""
    d = tmp_path / "run"
    d.mkdir()
    (d / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    write(d / "good.yaml", SPEC_YAML)
    with caplog.at_level(logging.WARNING):
        specs = refreshed_past_rechecks(d)
    assert specs.malformed() == (str(d / name),) and specs.parses == parses
    [line] = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert reason in line and len(line) < 400
    assert specs.lookup(f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-3") is not None


def test_spec_that_runs_out_of_memory_is_not_parsed_again_until_it_changes(tmp_path,
                                                                          monkeypatch):
    # The 2.4 GB alias bomb ended in MemoryError, which is no ValueError: the file was left
    # unrecorded and parsed again at every re-check.
    d = tmp_path / "run"
    d.mkdir()
    write(d / "spec.yaml", SPEC_YAML)

    def out_of_memory(data):
        raise MemoryError

    monkeypatch.setattr("gpustats.sources.cdi.parse_spec", out_of_memory)
    specs = refreshed_past_rechecks(d)
    assert specs.parses == 1 and specs.malformed() == (str(d / "spec.yaml"),)


def test_fifo_put_in_a_specs_place_is_refused_without_blocking(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    write(d / "spec.yaml", SPEC_YAML)

    def swapped_read(path):
        os.unlink(path)
        os.mkfifo(path)                   # replaced between the listing and the read
        return read_spec_file(path)

    specs = CdiSpecs([str(d)], read=swapped_read)
    specs.refresh()
    assert specs.malformed() == (str(d / "spec.yaml"),) and specs.parses == 0


def test_missing_directories_are_empty(tmp_path):
    specs = CdiSpecs([str(tmp_path / "none"), str(tmp_path / "either")])
    specs.refresh()
    assert specs.lookup("a.com/b=c") is None and specs.parses == 0


def test_oversized_file_is_malformed(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    write(d / "big.yaml", "#" * ((1 << 20) + 1))
    specs = CdiSpecs([str(d)])
    specs.refresh()
    assert specs.malformed() and specs.parses == 0


def test_mig_capability_table(tmp_path):
    proc = tmp_path / "proc"
    make_caps(proc, {(1, 7, None): 66, (1, 7, 0): 67, (2, 3, None): 12, (2, 3, 1): 14})
    (proc / "driver" / "nvidia" / "capabilities" / "mig").mkdir()      # config/monitor: skipped
    table = read_mig_capabilities(HostRoots(proc=str(proc)))
    assert table == {66: MigCapability(1, 7), 67: MigCapability(1, 7, 0),
                     12: MigCapability(2, 3), 14: MigCapability(2, 3, 1)}
    assert parse_access("DeviceFileMinor: 9\n") == 9
    with pytest.raises(ValueError):
        parse_access("garbage")


def test_mig_capabilities_reread_on_miss_rate_limited(tmp_path):
    proc = tmp_path / "proc"
    clock = Clock(0.0)
    caps = MigCapabilities(HostRoots(proc=str(proc)), reread_seconds=10, monotonic=clock)
    assert caps.lookup(66) is None and caps.reads == 1
    make_caps(proc, {(1, 7, None): 66})
    assert caps.lookup(66) is None and caps.reads == 1     # not again within 10 s
    clock.now = 11
    assert caps.lookup(66) == MigCapability(1, 7) and caps.reads == 2
    for _ in range(10):
        caps.lookup(66)
    assert caps.reads == 2


def test_mig_capabilities_follow_a_reconfiguration(tmp_path):
    """An instance created moments after another minor missed is found at its first lookup;
    a destroyed instance's minor keeps meaning the same (GPU, GI, CI), as the driver numbers."""
    proc = tmp_path / "proc"
    clock = Clock(0.0)
    make_caps(proc, {(1, 7, None): 66})
    caps = MigCapabilities(HostRoots(proc=str(proc)), reread_seconds=10, monotonic=clock)
    assert caps.lookup(66) == MigCapability(1, 7)
    assert caps.lookup(99) is None and caps.reads == 2      # a minor nothing has
    clock.now = 3
    shutil.rmtree(proc / "driver" / "nvidia" / "capabilities" / "gpu1" / "mig" / "gi7")
    make_caps(proc, {(1, 5, None): 30})                     # gi7 destroyed, gi5 created
    assert caps.lookup(30) == MigCapability(1, 5) and caps.reads == 3
    assert caps.lookup(99) is None and caps.reads == 3      # the same miss waits its 10 s
