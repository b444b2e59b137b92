"""AMD and Intel GPUs end to end through the real daemon: fake sysfs and ``/proc`` trees written
in the kernel's documented formats (``tests/support/drm_tree.py``: amdgpu's and i915/xe's sysfs
and hwmon ABI, DRM fdinfo as Documentation/gpu/drm-usage-stats.rst gives it), not by the
simulator, read through ``--sysfs-root`` and ``--proc-root`` by the real backends; the counters
move in the tree while the daemon runs."""

from __future__ import annotations

import time

import pytest

from gpustats import fakehost
from tests.support.daemon import http_get
from tests.support.drm_node import Mover, node, start
from tests.support.drm_tree import DrmClient
from tests.support.fakehost import metric_value, write_scenario
from tests.support.gpus import GPU_A, device

AMD_GPU = "0000:19:00.0"
AMD_UUID = "amd-2b4a1c0e9f8d7e6a"
INTEL_GPU = "0000:03:00.0"
INTEL_UUID = "intel-0000:03:00.0"
ALICE, BOB = fakehost.container_id(0xA11CE), fakehost.container_id(0xB0B)


_node, _start = node, start


def _gpu(daemon, uuid: str) -> dict | None:
    """The GPU's accelerator entry in the summary (None: not served yet)."""
    status, body = daemon.get("/stats/summary")
    if status != 200:
        return None
    return next((a for a in body["node"].get("accelerators", ()) if a["id"] == uuid), None)


def test_an_amd_gpu_is_served_as_its_tree_says(start_daemon, tmp_path):
    tree, cgroup = _node(tmp_path)
    tree.add_amd_gpu(AMD_GPU, card=1, product_name="AMD Instinct MI300X", busy_percent=37,
                     vram_total=192 << 30, vram_used=24 << 30, power_uw=412_000_000,
                     power_cap_uw=750_000_000, temp_mc=51_000)
    daemon = _start(start_daemon, tree, cgroup)
    first = daemon.wait_for(lambda body: _gpu(daemon, AMD_UUID), timeout=20)
    assert first
    gpu = daemon.wait_for(lambda body: (_gpu(daemon, AMD_UUID) or {}).get("energyJoules", 0)
                          > 0, timeout=20) and _gpu(daemon, AMD_UUID)
    assert (gpu["make"], gpu["model"], gpu["pciBusId"]) == ("amd", "AMD Instinct MI300X",
                                                            AMD_GPU)
    assert (gpu["memoryTotal"], gpu["memoryUsed"]) == (192 << 30, 24 << 30)
    assert (gpu["dutyCycle"], gpu["powerWatts"], gpu["powerLimitWatts"],
            gpu["temperatureCelsius"]) == (37, 412.0, 750.0, 51)
    for nvidia_only in ("minorNumber", "performanceState", "migInstances"):
        assert nvidia_only not in gpu, nvidia_only                  # absent, never 0
    assert "xidErrorCount" not in gpu.get("saturation", {})          # XIDs are NVML's
    # No energy counter on amdgpu: the daemon integrates power, 412 W for as long as it ran.
    start, joules_start = time.monotonic(), gpu["energyJoules"]
    time.sleep(3.0)                             # measures: 3 s of integrated power
    joules = _gpu(daemon, AMD_UUID)["energyJoules"]
    assert (joules - joules_start) / (time.monotonic() - start) == pytest.approx(412.0, rel=0.15)
    status, gpus = http_get(daemon.base + "/api/v1/gpus")
    assert status == 200
    listed = {g["uuid"]: g for g in gpus["gpus"]}
    assert listed[AMD_UUID]["vendor"] == "amd"
    text = daemon.get("/metrics")[1]
    assert metric_value(text, "gpustats_node_gpu_memory_used_bytes", gpu_uuid=AMD_UUID,
                        vendor="amd") == 24 << 30


def test_two_containers_whose_gfx_time_grows_3_to_1_are_billed_75_25(start_daemon, tmp_path):
    tree, cgroup = _node(tmp_path)
    tree.add_amd_gpu(AMD_GPU, card=0, busy_percent=80, power_uw=400_000_000)
    for pid, container, client_id in ((301, ALICE, 7), (302, BOB, 8)):
        rel = fakehost.docker_cgroup(container)
        fakehost.add_container(cgroup, rel)
        fakehost.add_process_files(tree.proc, pid, fakehost.v2_cgroup_lines(rel), "python3",
                                   1000)
        tree.open_client(pid, 5, DrmClient("amdgpu", AMD_GPU, client_id,
                                           engine_ns={"gfx": 1}, memory={"vram": 2 << 30}))

    def step(seconds: float) -> None:
        ns = int(seconds * 1e9)
        tree.update_client(301, 5, engine_ns={"gfx": 1 + ns * 3 // 5})     # 60 % busy
        tree.update_client(302, 5, engine_ns={"gfx": 1 + ns // 5})         # 20 % busy

    def figures(text):
        """(Alice's joules, Bob's, the GPU's active joules)."""
        return (*(metric_value(text, "gpustats_tenant_gpu_joules_total", gpu_uuid=AMD_UUID,
                               container_id=c) for c in (ALICE, BOB)),
                metric_value(text, "gpustats_node_gpu_active_joules_total", gpu_uuid=AMD_UUID))

    mover = Mover(step)
    mover.start()
    try:
        daemon = _start(start_daemon, tree, cgroup, "--idle-power-watts", "100")

        def billed(text):
            alice, bob, _ = figures(text)
            return text if alice and bob and alice + bob > 1000 else None
        before = figures(daemon.wait_for(billed, path="/metrics", timeout=40))
        time.sleep(4.0)                        # measures: 4 s of moving load
        text = daemon.get("/metrics")[1]
    finally:
        mover.stop()
    alice, bob, active = figures(text)
    assert alice / (alice + bob) == pytest.approx(0.75, rel=0.01), (alice, bob)
    # Over the last 4 s (the power of those ticks): 225 and 75 W of the 300 W active.
    gained = [after - was for after, was in zip((alice, bob, active), before)]
    assert gained[0] / gained[2] == pytest.approx(0.75, rel=0.01), gained
    assert gained[1] / gained[2] == pytest.approx(0.25, rel=0.01), gained
    watts = [metric_value(text, "gpustats_tenant_gpu_watts", gpu_uuid=AMD_UUID,
                          container_id=c) for c in (ALICE, BOB)]
    assert watts[0] + watts[1] == pytest.approx(300.0, rel=0.01), watts     # 400 − 100 idle
    assert watts[0] == pytest.approx(225.0, rel=0.03), watts      # one tick: as it was read
    unattributed = metric_value(text, "gpustats_node_gpu_unattributed_joules_total",
                                gpu_uuid=AMD_UUID)
    assert alice + bob + unattributed == pytest.approx(active, rel=0.01)
    share = metric_value(text, "gpustats_process_gpu_share_method", pid="301",
                         method="engine-time")
    assert share == 1.0


def test_an_intel_gpus_energy_follows_its_energy1_input(start_daemon, tmp_path):
    tree, cgroup = _node(tmp_path)
    base_uj = 9_000_000_000
    tree.add_intel_gpu(INTEL_GPU, driver="xe", card=0, energy_uj=base_uj,
                       power_max_uw=150_000_000, temp_mc=48_000)
    daemon = _start(start_daemon, tree, cgroup)
    daemon.wait_for(lambda body: _gpu(daemon, INTEL_UUID) is not None, timeout=20)
    daemon.wait_ticks(2)                       # a tick or two on the still counter
    written = {"uj": base_uj}

    def step(seconds: float) -> None:           # 90 W
        written["uj"] = base_uj + int(seconds * 90_000_000)
        tree.set_hwmon(INTEL_GPU, energy1_input=written["uj"])

    mover = Mover(step)
    mover.start()
    time.sleep(3.0)                            # measures: 3 s of a moving counter
    mover.stop()
    final = (written["uj"] - base_uj) / 1e6
    gpu = daemon.wait_for(lambda body: abs((_gpu(daemon, INTEL_UUID) or {}).get(
        "energyJoules", 0) - final) < 0.01, timeout=10) and _gpu(daemon, INTEL_UUID)
    assert gpu["make"] == "intel" and gpu["powerLimitWatts"] == 150.0
    assert gpu["temperatureCelsius"] == 48
    assert gpu["energyJoules"] == pytest.approx(final, abs=0.01)


def test_a_node_with_an_nvidia_and_an_amd_gpu_serves_both(start_daemon, tmp_path):
    tree, cgroup = _node(tmp_path)
    tree.add_amd_gpu(AMD_GPU, card=1, power_uw=300_000_000)
    scenario = tmp_path / "nvidia.yaml"
    write_scenario(scenario, {"devices": [device(power_watts=250.0)]})
    daemon = _start(start_daemon, tree, cgroup, "--simulate", str(scenario))

    def by_id(body):
        return {a["id"]: a for a in body["node"].get("accelerators", ())}
    ids = by_id(daemon.wait_for(lambda body: {GPU_A, AMD_UUID} <= set(by_id(body)), timeout=20))
    assert (ids[GPU_A]["make"], ids[AMD_UUID]["make"]) == ("nvidia", "amd")
    assert (ids[GPU_A]["powerWatts"], ids[AMD_UUID]["powerWatts"]) == (250.0, 300.0)
    text = daemon.get("/metrics")[1]
    for uuid, vendor in ((GPU_A, "nvidia"), (AMD_UUID, "amd")):
        assert metric_value(text, "gpustats_node_gpu_watts", gpu_uuid=uuid,
                            vendor=vendor) is not None, (uuid, vendor)



def test_idle_power_is_configured_per_amd_intel_and_nvidia_gpu(start_daemon, tmp_path):
    """``--idle-power-watts`` names any GPU ID the daemon serves: on a mixed node each GPU
    gets its own idle, not NVIDIA's default (the daemon used to exit 2 on an ``amd-`` key)."""
    tree, cgroup = _node(tmp_path)
    tree.add_amd_gpu(AMD_GPU, card=1, power_uw=300_000_000)
    tree.add_intel_gpu(INTEL_GPU, driver="xe", card=2, power_max_uw=150_000_000)
    scenario = tmp_path / "nvidia.yaml"
    write_scenario(scenario, {"devices": [device(power_watts=250.0)]})
    daemon = _start(start_daemon, tree, cgroup, "--simulate", str(scenario),
                    "--idle-power-watts",
                    f"default=60,{AMD_UUID}=90,{INTEL_UUID}=20,{GPU_A}=70")

    def idle(body):
        return {a["id"]: a.get("idlePowerWatts") for a in body["node"].get("accelerators", ())}
    daemon.wait_for(lambda body: None not in idle(body).values() and len(idle(body)) == 3,
                    timeout=20)
    assert idle(daemon.get("/stats/summary")[1]) == {GPU_A: 70.0, AMD_UUID: 90.0,
                                                     INTEL_UUID: 20.0}
