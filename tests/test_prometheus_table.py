"""The table-driven exposition: every family from its getter, byte for byte, and the
--disable-metrics groups that leave families out unbuilt."""

import dataclasses
import os
from pathlib import Path

import pytest

from gpustats.config import METRIC_GROUPS
from gpustats.export import kepler_table, metric_table, prometheus
from gpustats.export.metric_table import FAMILIES, GROUPS
from gpustats.export.prometheus import render
from gpustats.model.device import DeviceReading
from gpustats.model.dra import ClaimDevice, UnresolvedClaim
from gpustats.model.health import SaturationCounters
from gpustats.model.snapshot import ContainerAccelerator, ContainerStats, ProcessStats
from gpustats.model.sources import SourceState
from gpustats.model.tenants import service_tenant
from tests.support.snapshots import M, T, sample_snapshot

GOLDEN = Path(__file__).parent / "golden" / "metrics_every_family.txt"


def every_family_snapshot():
    """The sample snapshot with what it lacks for a sample in every family: the GPM and NVLink
    window figures, idle shares and unallocated idle, a container holding an unresolved claim,
    the sources' states, a process's command and user, a tenant that is no container (a
    systemd service), and a sweep with the GPU's performance state."""
    s = sample_snapshot()
    a = s.devices[0]
    sat = dataclasses.replace(a.saturation, sm_occupancy_avg=0.25, dram_active_avg=0.5,
                              nvlink_tx_bytes_avg=1e9, nvlink_rx_bytes_avg=2e9,
                              dram_active_max=0.75, counters=SaturationCounters(
                                  samples=13, sampled_seconds=60.0,
                                  throttle_violation_seconds=(("power", 12.0),),
                                  throttle_reason_seconds=(("sw_power_cap", 30.0),),
                                  memory_pressure_seconds=0.0))
    devices = (dataclasses.replace(a, saturation=sat, unallocated_idle_power_watts=0.0,
                                   unallocated_idle_energy_joules=20.0,
                                   unobserved_energy_joules=7.5,
                                   reading=DeviceReading(a.identity, 1.0, performance_state=0)),
               ) + s.devices[1:]
    claim = ClaimDevice("gpu-claim", "ml", "gpu.nvidia.com", "node-1", "gpu-7")
    pod = s.pods[0]
    trainer = pod.containers[0]
    idle = {"idle_share_power_watts": 35.0, "idle_share_energy_joules": 120.0}
    held = dataclasses.replace(
        trainer, unresolved_claims=(UnresolvedClaim(claim, "no CDI spec"),),
        accelerators=(dataclasses.replace(trainer.accelerators[0], **idle),))
    pod = dataclasses.replace(pod, containers=(held,) + pod.containers[1:], accelerators=(
        dataclasses.replace(pod.accelerators[0], **idle),) + pod.accelerators[1:])
    sources = (SourceState("nvml", "ok", T - 60, last_success_time=T),
               SourceState("pod_resources", "failing", T - 5, last_success_time=T - 30,
                           last_error_reason="timeout"))
    service = service_tenant("ollama.service", "/system.slice/ollama.service")
    ollama = ContainerStats(service.key, cgroup_path=service.cgroup_path, tenant=service,
                            accelerators=(ContainerAccelerator(
                                M, gpu_instance_id=8, mig_profile="3g.40gb",
                                attributed_power_watts=0.0, attributed_energy_joules=5.0),))
    processes = (dataclasses.replace(s.processes[0], comm="train.py", uid=1000, user="alice"),
                 *s.processes[1:],
                 ProcessStats(6000, M, 8, service.key, 1 << 20, None, "mig-activity", 0.0, 5.0,
                              start_time_ticks=99, comm="ollama", uid=998))
    return dataclasses.replace(s, devices=devices, pods=(pod,) + s.pods[1:],
                               containers=s.containers + (ollama,), processes=processes,
                               status=dataclasses.replace(s.status, sources=sources))


def _text(snapshot, disabled=()):
    return render(snapshot, None, dcgm_compat=True, disabled_groups=disabled,
                  kepler_compat=True)[0].decode()


def _exposed(family):
    return family.name + ("_info" if family.kind == "info" else "") + \
        ("_total" if family.kind == "counter" else "")


def test_golden_every_family():
    """Written by the hand-coded exposition before the table drove it: the same bytes."""
    text = _text(every_family_snapshot())
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    for family in FAMILIES + kepler_table.FAMILIES:
        assert f"# TYPE {_exposed(family)} " in text, family.name


def test_every_family_has_a_group_a_scope_and_one_getter():
    for family in FAMILIES + kepler_table.FAMILIES:
        assert family.group in GROUPS, family.name
        assert family.scope in prometheus.ROWS, family.name
        assert (family.value is None) != (family.samples is None), family.name
    assert {f.group for f in FAMILIES} | {metric_table.DCGM, metric_table.KEPLER} == set(GROUPS)


def test_config_names_the_table_groups():
    assert METRIC_GROUPS == GROUPS


@pytest.mark.parametrize("group", GROUPS)
def test_a_disabled_group_leaves_out_its_families_only(group):
    snapshot = every_family_snapshot()
    text = _text(snapshot, (group,))
    for family in FAMILIES:
        present = f"# TYPE {_exposed(family)} " in text
        assert present == (family.group != group), family.name
    assert ("DCGM_FI_" in text) == (group != metric_table.DCGM)
    assert ("# TYPE kepler_" in text) == (group != metric_table.KEPLER)


def test_a_disabled_group_is_not_built(monkeypatch):
    """Not filtered after the fact: the scope rows only the group reads are never walked."""
    walked = []
    real = prometheus.ROWS[metric_table.GPU_PROCESS]
    monkeypatch.setitem(prometheus.ROWS, metric_table.GPU_PROCESS,
                        lambda *args: walked.append(1) or real(*args))
    snapshot = every_family_snapshot()
    _text(snapshot, ("process",))
    assert walked == []
    _text(snapshot)
    assert walked == [1]


def test_series_per_process():
    """What ``process`` costs: a process with every figure known gives 5 series (pid 4242 in
    the sample), one with some unknown fewer; without the group, none and nothing else less."""
    s = every_family_snapshot()
    full, without = _text(s).splitlines(), _text(s, ("process",)).splitlines()
    per_pid = [sum(1 for line in full if line.startswith("gpustats_process_")
                   and f'pid="{p.pid}"' in line) for p in s.processes]
    assert per_pid == [5, 3, 4, 4]
    assert [line for line in full if not line.startswith(("gpustats_process_", "# HELP "
                                                          "gpustats_process_", "# TYPE "
                                                          "gpustats_process_"))] == without
