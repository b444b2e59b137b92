"""``gpustats --demo mixed`` (an H100, an MI300X, a Flex 170), ``amd`` and ``intel``: the bare-metal
tenants billed on every vendor's GPUs, through ``/stats/summary``; and the demo's node figures
follow the real host's as it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustats.demo import vendors
from gpustats.demo.node import DemoNode
from gpustats.simulator import parse_scenario
from gpustats.simulator.drm import SimulatedDrm, fake_host_proc
from tests.support.demo import start_demo


@pytest.mark.parametrize("kind", sorted(vendors.HOSTS))
def test_each_vendor_host_is_a_valid_scenario_with_its_tenants_on_its_gpus(kind):
    host = vendors.HOSTS[kind]
    for t in (0.0, 7.5, 31.0):
        scenario = parse_scenario(vendors.scenario_at(host, t))
        assert [d.vendor for d in scenario.devices] == [g.vendor for g in host.gpus]
        assert {p.pid: p.device for p in scenario.processes} == {
            x.pid: host.gpus[x.gpu].uuid for x in host.tenants}
    assert {g.vendor for g in vendors.HOSTS["mixed"].gpus} == {"nvidia", "amd", "intel"}


def test_the_simulator_writes_drm_clients_into_a_fake_hosts_proc(tmp_path):
    """Given a fake host's /proc, the DRM fd and fdinfo go beside the files that place the
    process in its cgroup; a real procfs is never written to."""
    proc = tmp_path / "host-proc"
    (proc / "5103").mkdir(parents=True)
    (proc / "5103" / "cgroup").write_text("0::/system.slice/vllm.service\n")
    scenario = parse_scenario(vendors.scenario_at(vendors.HOSTS["amd"], 0.0))
    sim = SimulatedDrm(scenario, str(tmp_path / "drm"), proc_root=fake_host_proc(str(proc)))
    assert sim.proc_root == str(proc)
    assert (proc / "5103" / "fd" / "3").readlink() == Path("/dev/dri/renderD129")
    assert "drm-driver:\tamdgpu" in (proc / "5103" / "fdinfo" / "3").read_text()
    assert (proc / "5103" / "cgroup").exists() and not (tmp_path / "drm" / "proc").exists()
    assert fake_host_proc("/proc") is None and fake_host_proc(str(tmp_path / "none")) is None


def test_the_demos_node_files_follow_the_real_hosts(tmp_path):
    real = tmp_path / "real"
    (real / "sys" / "kernel" / "random").mkdir(parents=True)
    for name in ("stat", "meminfo", "vmstat"):
        (real / name).write_text(f"{name} at start\n")
    node = DemoNode(tmp_path / "node", kind="mixed", real_proc=real)
    (real / "stat").write_text("cpu  100 0 50 900 0 0 0 0 0 0\n")
    node.move()
    assert (node.tree.proc / "stat").read_text() == "cpu  100 0 50 900 0 0 0 0 0 0\n"
    assert (node.tree.proc / "meminfo").read_text() == "meminfo at start\n"


def _billed_on(summary: dict, make: str) -> dict[str, float]:
    """Energy billed per tenant (tenants[] and containers) on GPUs of ``make``."""
    out = {}
    for t in (*summary.get("tenants", ()), *summary.get("containers", ())):
        joules = sum(a.get("attributedEnergyJoules", 0.0) for a in t.get("accelerators", ())
                     if a["make"] == make)
        if joules > 0:
            out[t["name"]] = joules
    return out


def test_the_mixed_demo_bills_tenants_on_amd_and_intel_gpus(start_daemon, tmp_path):
    daemon = start_demo(start_daemon, tmp_path, "mixed")
    summary = daemon.wait_for(
        lambda s: len(_billed_on(s, "amd")) == 2 and _billed_on(s, "intel")
        and _billed_on(s, "nvidia"), timeout=30)
    assert set(_billed_on(summary, "amd")) == {"vllm.service", "grace"}
    assert set(_billed_on(summary, "intel")) == {"embeddings"}
    assert set(_billed_on(summary, "nvidia")) == {"job 81427"}
    assert {a["make"] for a in summary["node"]["accelerators"]} == {"nvidia", "amd", "intel"}
    status = daemon.get("/api/v1/status")[1]
    assert {s["name"]: s["state"] for s in status["sources"]
            if s["name"] in ("amd", "intel")} == {"amd": "ok", "intel": "ok"}


@pytest.mark.parametrize("kind", ["amd", "intel"])
def test_the_single_vendor_demos_bill_every_tenant(start_daemon, tmp_path, kind):
    daemon = start_demo(start_daemon, tmp_path, kind)
    summary = daemon.wait_for(lambda s: len(_billed_on(s, kind)) == 4, timeout=30)
    assert len({a["id"] for a in summary["node"]["accelerators"]}) == 2
