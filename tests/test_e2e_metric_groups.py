"""--disable-metrics through the real daemon: the groups named are absent from /metrics, the
rest present; an unknown group stops start-up with one line."""

import subprocess
import sys

from gpustats.export.metric_table import FAMILIES
from tests.support.gpus import GPU_A as GPU
from tests.support.paths import REPO_ROOT
from tests.support.fakehost import build, write_scenario
from tests.support.waiting import poll


def _exposed(family) -> str:
    return family.name + ("_info" if family.kind == "info" else "") + \
        ("_total" if family.kind == "counter" else "")


def _metrics_once_attributed(daemon, timeout: float = 20.0) -> str:
    """/metrics once a tick has attributed power to the container (its second tick)."""
    def scrape() -> str:
        status, text = daemon.get("/metrics")
        assert status == 200
        return text

    return poll(lambda: "gpustats_pod_gpu_watts{" in (text := scrape()) and text,
                timeout=timeout, interval=0.1) or scrape()


def test_disabled_groups_are_absent_and_the_others_present(start_daemon, tmp_path):
    cgroup, proc = build(tmp_path / "host", {101: (1, 1)})
    scenario = tmp_path / "s.yaml"
    write_scenario(scenario, {
        "devices": [{"uuid": GPU, "name": "NVIDIA H100 80GB HBM3", "minor": 0,
                     "power_watts": 300}],
        "processes": [{"pid": 101, "device": GPU}]})
    daemon = start_daemon("--simulate", str(scenario), "--cgroup-root", str(cgroup),
                          "--proc-root", str(proc), "--housekeeping-interval", "0.2",
                          "--pod-resources-socket", "", "--runtime-socket", "",
                          "--idle-power-watts", "100", "--dcgm-compat",
                          env={"GPUSTATS_DISABLE_METRICS": "process, cadvisor,DCGM"})
    daemon.wait_ready()
    text = _metrics_once_attributed(daemon)
    exposed = {f.name for f in FAMILIES if f"# TYPE {_exposed(f)} " in text}
    off = {f.name for f in FAMILIES if f.group in ("process", "cadvisor")}
    assert len(off) == 8 and not exposed & off
    assert "DCGM_FI_" not in text
    for present in ("gpustats_node_gpu_watts", "gpustats_container_gpu_watts",
                    "gpustats_pod_gpu_watts", "gpustats_source_failing", "gpustats_build",
                    "gpustats_node_gpu_healthy"):
        assert present in exposed, present


def test_an_unknown_group_stops_start_up_with_one_line():
    result = subprocess.run([sys.executable, "-m", "gpustats", "--disable-metrics",
                             "process,procesess"],
                            capture_output=True, text=True, cwd=str(REPO_ROOT), timeout=30)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "--disable-metrics" in lines[0] and "'procesess'" in lines[0] \
        and "process, container" in lines[0]
