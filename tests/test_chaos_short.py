"""The chaos run in short: its oracle on hand-made traces, and a few seeds through the real
daemon with the events the daemon handles today (``bench/chaos.py`` has them all)."""

from __future__ import annotations

import dataclasses
import json

import pynvml
import pytest

from bench.chaos import run_chaos
from bench.chaos_events import EVENTS
from oracles.energy import expected_energy
from oracles.world import GpuState, Holder, WorldState, gpu_uuid, pod_uid
from gpustats.simulator import SimulatedNvml
from tests.support.fakehost import write_scenario

GPU = gpu_uuid(0)
A, B = pod_uid(1), pod_uid(2)


def state(power=300.0, holders=((1000, A, 75), (1001, B, 25)), lost=False, unsupported=()):
    return WorldState((GpuState(GPU, power, lost, frozenset(unsupported), None, tuple(
        Holder(pid, pod, f"{pid:064x}", None, sm) for pid, pod, sm in holders)),))


def energy(t, mj):
    return {"t": t, "event": "energy", "uuid": GPU, "mj": mj}


def test_the_simulator_traces_its_loads_and_energy_reads(tmp_path):
    trace, path = tmp_path / "trace.jsonl", tmp_path / "s.yaml"
    scenario = {"devices": [{"uuid": GPU, "power_watts": 500}],
                "trace_file": str(trace), "trace_tag": "first"}
    write_scenario(path, scenario)
    sim = SimulatedNvml(str(path))
    sim.install()
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        field = pynvml.nvmlDeviceGetFieldValues(
            handle, [pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION])[0]
        write_scenario(path, dict(scenario, trace_tag="second"))
        assert sim.reload()
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(x["event"], x["tag"]) for x in lines] == \
        [("start", "first"), ("energy", "first"), ("energy", "first"),
         ("scenario", "second"), ("energy", "second"), ("read", "second")]
    assert lines[-1]["uuid"] == GPU and lines[-1]["what"] == "processes"
    assert lines[2]["uuid"] == GPU and lines[2]["mj"] == field.value.ullVal
    assert lines[0]["t"] <= lines[1]["t"] <= lines[2]["t"]


def test_the_oracle_splits_each_ticks_active_energy_by_the_state_at_its_end():
    states = {"v1": state(), "v2": state(holders=((1001, B, 25),))}
    trace = [{"t": 0.0, "event": "start", "tag": "v1"},
             energy(1.0, 0), energy(2.0, 300_000),            # 200 J active: 150 A, 50 B
             {"t": 2.5, "event": "scenario", "tag": "v2"},
             energy(3.0, 600_000)]                            # 200 J active, all B's
    got = expected_energy(trace, states)
    assert dict(got.low) == pytest.approx({A: 150.0, B: 250.0})
    assert dict(got.high) == pytest.approx({A: 150.0, B: 250.0})


def test_the_oracle_lets_a_reload_just_after_a_read_count_for_it():
    """The sweep reads the energy counter and then the process list: a tenant that appears a
    moment after the counter was read is seen by this tick, and may be billed all of it."""
    states = {"v1": state(), "v2": state(holders=((1001, B, 25),))}
    start = [{"t": 0.0, "event": "start", "tag": "v1"}, energy(1.0, 0)]
    read = energy(2.0, 300_000)                               # 200 J: 150 A, 50 B?
    after = [read, {"t": 2.05, "event": "scenario", "tag": "v2"}]
    before = [{"t": 1.95, "event": "scenario", "tag": "v2"}, read]
    for around in (after, before):
        trace = start + around + [energy(3.0, 600_000)]      # 200 J, all B's
        got = expected_energy(trace, states)
        assert dict(got.low) == pytest.approx({A: 0.0, B: 250.0})
        assert dict(got.high) == pytest.approx({A: 150.0, B: 400.0})


def test_the_oracle_lets_a_reload_count_until_the_sweeps_last_read_of_the_gpu():
    """Under load the process list may be read long after the energy counter: a reload in
    between may be what the tick saw (the trace's ``read`` lines say how long); one after
    the GPU's last read of the tick may not."""
    states = {"v1": state(), "v2": state(holders=((1001, B, 25),))}
    start = [{"t": 0.0, "event": "start", "tag": "v1"}, energy(1.0, 0), energy(2.0, 300_000)]
    reload = {"t": 2.4, "event": "scenario", "tag": "v2"}
    listed = {"t": 2.6, "event": "read", "uuid": GPU, "what": "processes"}
    end = [energy(3.0, 600_000)]                                # 200 J, all B's
    within = expected_energy(start + [reload, listed] + end, states)
    assert dict(within.low) == pytest.approx({A: 0.0, B: 250.0})
    assert dict(within.high) == pytest.approx({A: 150.0, B: 400.0})
    earlier = dict(listed, t=2.2)
    after = expected_energy(start + [earlier, reload] + end, states)
    assert dict(after.low) == dict(after.high) == pytest.approx({A: 150.0, B: 250.0})


def test_the_oracle_counts_up_to_the_final_scrape_and_no_further():
    """The served totals are the final scrape's snapshot: it may lack the tick read just
    before the scrape began and may hold one read while it ran; what follows is not in it."""
    states = {"v1": state()}
    trace = [{"t": 0.0, "event": "start", "tag": "v1"},
             energy(1.0, 0), energy(2.0, 300_000), energy(3.0, 600_000),   # 200 J each
             {"t": 3.1, "event": "final_scrape", "tag": None, "phase": "begin"},
             energy(3.2, 660_000),                                          # 40 J
             {"t": 3.3, "event": "final_scrape", "tag": None, "phase": "end"},
             energy(4.0, 960_000)]
    got = expected_energy(trace, states)
    assert dict(got.low) == pytest.approx({A: 150.0, B: 50.0})
    assert dict(got.high) == pytest.approx({A: 330.0, B: 110.0})


def mig_state(first=60.0, second=20.0):
    return WorldState((GpuState(GPU, 300.0, False, frozenset(), ((1, first), (2, second)), (
        Holder(1000, A, f"{1000:064x}", 1, 0), Holder(1001, B, f"{1001:064x}", 2, 0))),))


def gpm(t, gi, tag="v1"):
    return {"t": t, "event": "read", "uuid": GPU, "what": "gpm", "gi": gi, "tag": tag}


def test_the_oracle_bills_a_process_at_its_first_read_only_the_part_it_may_have_lived():
    """A tenant created during a stall is listed at the first tick after it, which covers the
    whole stall; the daemon bills it the part it lived (its start time), the rest is
    unattributed: the oracle's low counts none of that tick for it, its high all."""
    states = {"v1": state(holders=((1000, A, 75),)), "v2": state()}
    trace = [{"t": 0.0, "event": "start", "tag": "v1"}, energy(1.0, 0),
             {"t": 1.5, "event": "scenario", "tag": "v2"},
             energy(4.0, 900_000),                       # 3 s stall: 600 J active, 450/150
             energy(5.0, 1_200_000)]                     # 200 J: 150/50
    got = expected_energy(trace, states)
    assert dict(got.low) == pytest.approx({A: 600.0, B: 50.0})
    assert dict(got.high) == pytest.approx({A: 600.0, B: 200.0})


def test_the_oracle_follows_the_mig_metrics_each_sweep_read():
    """A sweep that read no metrics of an instance (a tick too close to its last sample) had
    the daemon carry what it read before, or assume the instance's activity without any: the
    range spans what it had; with every instance's metrics read, only the true split."""
    states = {"v1": mig_state()}
    start = [{"t": 0.0, "event": "start", "tag": "v1"}, energy(1.0, 0), gpm(1.01, 1),
             gpm(1.02, 2), energy(2.0, 300_000), gpm(2.01, 1), gpm(2.02, 2)]   # 200 J: 150/50
    read_both = expected_energy(start, states)
    assert dict(read_both.low) == dict(read_both.high) == pytest.approx({A: 150.0, B: 50.0})
    carried = expected_energy(start + [energy(2.05, 315_000), gpm(2.06, 1)], states)
    assert dict(carried.high) == pytest.approx({A: 157.5, B: 52.5})     # 10 J: as before
    unread = expected_energy(start[:2] + [energy(2.0, 300_000), gpm(2.01, 1)], states)
    assert dict(unread.low) == pytest.approx({A: 100.0, B: 50.0})       # assumed: 60 %, 60 %
    assert dict(unread.high) == pytest.approx({A: 150.0, B: 100.0})


def test_the_oracle_bills_nothing_across_a_lost_gpu_and_marks_what_is_uncertain():
    states = {"v1": state(), "lost": state(lost=True), "v3": state(),
              "unknown": state(unsupported=("processes",))}
    trace = [{"t": 0.0, "event": "start", "tag": "v1"},
             energy(1.0, 0),
             {"t": 1.5, "event": "scenario", "tag": "lost"},
             {"t": 4.0, "event": "scenario", "tag": "v3"},
             energy(5.0, 1_200_000),                          # spans the loss: nobody's
             energy(6.0, 1_500_000),                          # 200 J, just after a reload?
             {"t": 6.95, "event": "scenario", "tag": "unknown"},
             energy(7.0, 1_800_000),                          # near the reload: either
             {"t": 7.5, "event": "scenario", "tag": "v3"},
             energy(8.0, 2_100_000)]                          # still unknown to the daemon
    got = expected_energy(trace, states)
    assert got.unbilled_intervals == 1
    # Certain: 5→6 (150 A / 50 B). Once the process list was NOT_SUPPORTED the daemon never
    # asks again: from 7 on, 0 at least and the share at most.
    assert dict(got.low) == pytest.approx({A: 150.0, B: 50.0})
    assert dict(got.high) == pytest.approx({A: 450.0, B: 150.0})


def test_the_oracle_bills_nothing_while_the_daemon_is_down_and_doubts_its_last_tick():
    trace = [{"t": 0.0, "event": "start", "tag": "v1"},
             energy(1.0, 0), energy(2.0, 300_000),            # killed after this read
             {"t": 3.0, "event": "start", "tag": "v1"},
             energy(4.0, 900_000), energy(5.0, 1_200_000)]    # 4 is the new baseline
    got = expected_energy(trace, {"v1": state()})
    assert dict(got.low) == pytest.approx({A: 150.0, B: 50.0})
    assert dict(got.high) == pytest.approx({A: 300.0, B: 100.0})


def test_the_oracle_times_intervals_on_the_monotonic_stamps_across_a_wall_clock_step():
    """The daemon's wall clock steps back 600 s between two reads: its trace's ``t`` jumps
    with it, its ``mono`` does not, and the interval is the true one."""
    states = {"v1": state()}
    trace = [{"t": 100.0, "mono": 0.0, "event": "start", "tag": "v1"},
             dict(energy(101.0, 0), mono=1.0), dict(energy(102.0, 300_000), mono=2.0),
             dict(energy(-497.0, 600_000), mono=3.0)]             # stepped back 600 s
    got = expected_energy(trace, states)
    assert dict(got.low) == pytest.approx({A: 300.0, B: 100.0})   # 200 J active a second


def test_the_oracle_bills_a_gpu_with_no_idle_in_full_until_it_learns_one():
    """No idle configured: each tick's whole energy is its holders' until three idle ticks
    in a row (no process, 0 % duty) teach the idle, the highest power of the three."""
    busy = state(holders=((1000, A, 75),))
    busy = WorldState((dataclasses.replace(busy.gpus[0], duty_percent=75),))
    empty = WorldState((dataclasses.replace(busy.gpus[0], holders=(), duty_percent=0),))
    at_250 = WorldState((dataclasses.replace(empty.gpus[0], power_watts=250.0),))
    states = {"busy": busy, "empty": empty, "at_250": at_250}
    trace = [{"t": 0.0, "event": "start", "tag": "busy"},
             energy(1.0, 0), energy(2.0, 300_000),                 # 300 J, all A's
             {"t": 2.5, "event": "scenario", "tag": "empty"},
             energy(3.0, 600_000), energy(4.0, 900_000),
             {"t": 4.5, "event": "scenario", "tag": "at_250"},      # the third idle tick
             energy(5.0, 1_150_000),                              # at 250 W: idle 300 W
             energy(6.0, 1_400_000),                              # 250 W held: still 300
             energy(7.0, 1_650_000),                              # three at 250: 250 W
             {"t": 7.5, "event": "scenario", "tag": "busy"},
             energy(8.0, 1_950_000)]                              # 300 W, 50 J active
    got = expected_energy(trace, states, learns_idle=frozenset({GPU}))
    # A's process is back in the last tick: it may have lived part of it only (low: none).
    assert dict(got.low) == pytest.approx({A: 300.0 + 0.0})
    assert dict(got.high) == pytest.approx({A: 300.0 + 50.0})
    configured = expected_energy(trace, states)                   # 100 W configured
    assert dict(configured.high) == pytest.approx({A: 200.0 + 200.0})


def test_no_idle_bills_the_whole_energy():
    from oracles.checks import NoIdle, counters
    text = """# TYPE gpustats_node_gpu_joules_total counter
gpustats_node_gpu_joules_total{gpu="0",gpu_uuid="G"} %s
# TYPE gpustats_node_gpu_active_joules_total counter
gpustats_node_gpu_active_joules_total{gpu="0",gpu_uuid="G"} %s
# TYPE gpustats_node_gpu_unallocated_idle_joules_total counter
gpustats_node_gpu_unallocated_idle_joules_total{gpu="0",gpu_uuid="G"} %s
"""
    check = NoIdle()
    assert check.check(1, counters(text % (100, 100, 0)), {"G"}, {"G"}) == []
    assert check.check(1, counters(text % (300, 300, 0)), {"G"}, {"G"}) == []
    found = check.check(1, counters(text % (500, 400, 0)), {"G"}, {"G"})
    assert len(found) == 1 and "energy gained 200.0 J, active 100.0 J" in found[0]
    found = check.check(1, counters(text % (700, 600, 50)), {"G"}, {"G"})
    assert len(found) == 1 and "unallocated 50.0 J" in found[0]
    assert check.check(1, counters(text % (900, 700, 50)), {"G"}, set()) == []  # idle known
    assert check.check(2, counters(text % (950, 700, 50)), {"G"}, {"G"}) == []  # a new run


def test_the_books_close_after_a_restart_with_a_gone_pod_and_the_previous_release():
    from oracles.checks import counters
    from oracles.identity import Identity
    text = """# TYPE gpustats_node_gpu_joules_total counter
gpustats_node_gpu_joules_total{gpu="0",gpu_uuid="G"} %s
# TYPE gpustats_tenant_gpu_joules_total counter
gpustats_tenant_gpu_joules_total{gpu_uuid="G",kind="pod",tenant="p",pod_uid="p"} %s
# TYPE gpustats_node_gpu_unallocated_idle_joules_total counter
gpustats_node_gpu_unallocated_idle_joules_total{gpu="0",gpu_uuid="G"} %s
# TYPE gpustats_node_gpu_unobserved_joules_total counter
gpustats_node_gpu_unobserved_joules_total{gpu="0",gpu_uuid="G"} %s
"""
    books = Identity()
    assert books.check(1, counters(text % (300, 200, 100, 0)), False) == []
    found = books.check(2, counters(text % (900, 200, 100, 0)), False)       # a gap nowhere
    assert len(found) == 1 and "(+600.0 J outside)" in found[0]
    assert books.check(3, counters(text % (900, 200, 100, 600)), False) == []
    # The pod is gone and no longer served: its last total stays in the books.
    gone = text.replace(
        'gpustats_tenant_gpu_joules_total{gpu_uuid="G",kind="pod",tenant="p",pod_uid="p"} %s\n',
        "")
    assert books.check(4, counters(gone % (1000, 200, 600)), False) == []
    # The previous release leaves its gap outside: carried, not reported, from then on.
    assert books.check(5, counters(gone % (1500, 200, 600)), True) == []
    assert books.check(6, counters(gone % (1600, 300, 600)), False) == []


def test_a_tenant_series_is_one_whatever_names_it_and_bare_metal_tenants_close_the_books():
    """A pod first served by its UID and then by its name, a process moved to another tenant's
    cgroup (its series' owner labels change): one series each, counted once in the books; a
    service's total is in them like a pod's."""
    from oracles.checks import counters, tenant_key
    from oracles.identity import Identity
    text = """# TYPE gpustats_node_gpu_joules_total counter
gpustats_node_gpu_joules_total{gpu="0",gpu_uuid="amd-1"} %s
# TYPE gpustats_tenant_gpu_joules_total counter
gpustats_tenant_gpu_joules_total{gpu_uuid="amd-1",kind="pod",tenant="%s",pod_uid="p"} %s
gpustats_tenant_gpu_joules_total{gpu_uuid="amd-1",kind="service",tenant="a.service",uid="%s"} %s
# TYPE gpustats_process_gpu_joules_total counter
gpustats_process_gpu_joules_total{gpu_uuid="amd-1",pid="7",pod_uid="%s"} %s
"""
    first = counters(text % (300, "p", 100, "1000", 200, "p", 50))
    later = counters(text % (500, "ns/job", 250, "", 250, "", 60))
    assert set(first) == set(later)
    assert {tenant_key(dict(labels)) for name, labels in later
            if name == "gpustats_tenant_gpu_joules"} == {"p", "service:a.service"}
    books = Identity()
    assert books.check(1, first, False) == []
    assert books.check(2, later, False) == []


def test_the_stepped_clock_stays_within_its_bounds(tmp_path):
    from bench.chaos_clock import MAX_OFFSET_SECONDS, SteppedClock
    clock = SteppedClock(tmp_path / "libfaketime.so", tmp_path / "offset")
    assert (tmp_path / "offset").read_text() == "+0\n"
    assert clock.step(-600) == -600 and (tmp_path / "offset").read_text() == "-600\n"
    for _ in range(10):
        clock.step(-900)
        assert abs(clock.offset_seconds) <= MAX_OFFSET_SECONDS
    assert clock.env()["FAKETIME_TIMESTAMP_FILE"] == str(tmp_path / "offset")


def test_the_previous_release_is_the_last_commit_of_the_previous_state_format():
    from bench.chaos_daemon import REPO
    from bench.chaos_release import STATE_FILES_SOURCE, _git, previous_release_commit
    from gpustats.engine.state_files import FORMAT_VERSION
    commit, why = previous_release_commit(REPO, FORMAT_VERSION - 1)
    if commit is None:
        pytest.skip(f"no previous release here: {why}")
    source = _git(REPO, "show", f"{commit}:{STATE_FILES_SOURCE}").stdout.decode()
    assert f"FORMAT_VERSION = {FORMAT_VERSION - 1}\n" in source


@pytest.mark.parametrize("seed", [11, 14, 16])     # cgroup v2, v1, v2
def test_a_short_chaos_run_holds_every_invariant(seed, tmp_path):
    """Every kind of world event, every check on (``python -m bench.chaos`` runs it longer)."""
    result = run_chaos(seed, 20.0, list(EVENTS), tmp_path / "run")
    assert result.ok, result.report(verbose=True)
    assert result.scrapes > 20 and sum(result.counts.values()) >= 4


def test_a_short_chaos_run_steps_the_clock_and_crosses_releases(tmp_path):
    """The wall clock stepped under the daemon, a GPU with no idle busy from the start, and
    the previous release both ways: every check holds, and the daemon saw the step."""
    events = ["clock_step", "busy_from_start", "previous_release", "sigkill", "power"]
    result = run_chaos(3, 20.0, events, tmp_path / "run")
    assert result.ok, result.report(verbose=True)
    assert result.counts["busy_from_start"] == 1
    if "clock_step" not in result.skipped:
        assert result.counts["clock_step"] >= 1
        assert "the wall clock stepped" in (tmp_path / "run" / "daemon.log").read_text()
    if "previous_release" not in result.skipped:
        assert result.counts["previous_release"] >= 2


@pytest.mark.parametrize("argv, said", [
    (["--events", "power,meteor"], "unknown events ['meteor']"),
    (["--ignore", "vibes"], "unknown checks ['vibes']"),
    (["--seconds", "1"], "--seconds must be at least 5")])
def test_the_command_refuses_what_it_does_not_know(argv, said, capsys):
    from bench.chaos import main
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


def test_conservation_is_compared_where_the_processes_are_known():
    from oracles.checks import Conservation, counters, known_gpus
    text = """# TYPE gpustats_node_gpu_sharing_mode_info gauge
gpustats_node_gpu_sharing_mode_info{gpu="0",gpu_uuid="G",mode="time-slicing"} 1.0
# TYPE gpustats_node_gpu_active_joules_total counter
gpustats_node_gpu_active_joules_total{gpu="0",gpu_uuid="G"} %s
# TYPE gpustats_pod_gpu_joules_total counter
gpustats_pod_gpu_joules_total{gpu="0",gpu_uuid="G",pod_uid="p"} %s
# TYPE gpustats_container_gpu_joules_total counter
gpustats_container_gpu_joules_total{gpu="0",gpu_uuid="G",container_id="c"} %s
"""
    first, second = text % (100, 100, 100), text % (200, 150, 200)
    assert known_gpus(first) == {"G"}
    check = Conservation()
    assert check.check(1, counters(first), known_gpus(first)) == []
    found = check.check(1, counters(second), known_gpus(second))
    assert len(found) == 1 and "gpustats_pod_gpu_joules gained 50.0 J" in found[0]
    assert check.check(2, counters(second), set()) == []      # a new daemon run: no baseline


def _exposition(active, pods, containers, mig=None):
    """/metrics text of one known GPU "G": active joules and each series' joules by id."""
    lines = ["# TYPE gpustats_node_gpu_sharing_mode_info gauge",
             'gpustats_node_gpu_sharing_mode_info{gpu="0",gpu_uuid="G",mode="mig"} 1.0',
             "# TYPE gpustats_node_gpu_active_joules_total counter",
             f'gpustats_node_gpu_active_joules_total{{gpu="0",gpu_uuid="G"}} {active}']
    for family, label, series in (("gpustats_pod_gpu_joules", "pod_uid", pods),
                                  ("gpustats_container_gpu_joules", "container_id", containers),
                                  ("gpustats_node_gpu_mig_joules", "gpu_instance_id", mig)):
        if series is None:
            continue
        lines.append(f"# TYPE {family}_total counter")
        lines += [f'{family}_total{{gpu="0",gpu_uuid="G",{label}="{k}"}} {v}'
                  for k, v in series.items()]
    return "\n".join(lines) + "\n"


def _conservation(*texts, runs=None):
    from oracles.checks import Conservation, counters, known_gpus
    check = Conservation()
    return [check.check(run, counters(t), known_gpus(t))
            for run, t in zip(runs or [1] * len(texts), texts)]


def test_conservation_takes_a_vanished_series_sum_as_a_lower_bound():
    """A pod deleted between two scrapes: its container's series ends (its last gains unseen)
    while its pod's goes on; the container sum may fall short, never exceed."""
    first = _exposition(100, {"p": 50, "q": 50}, {"c": 50, "d": 50})
    second = _exposition(200, {"p": 100, "q": 100}, {"c": 100})     # d gained 50, unseen
    assert _conservation(first, second) == [[], []]
    too_much = _exposition(200, {"p": 100, "q": 100}, {"c": 160})
    assert "gpustats_container_gpu_joules gained 110.0 J" in _conservation(first, too_much)[1][0]
    pods_short = _exposition(200, {"p": 100, "q": 50}, {"c": 100})  # a pod's series goes on
    assert "gpustats_pod_gpu_joules gained 50.0 J" in _conservation(first, pods_short)[1][0]


def test_a_re_created_mig_instance_counts_only_its_growth():
    """Instance 1 destroyed, later created again with its id: its series comes back with its
    retained total (plus its last gains before it vanished, owed since then)."""
    pods, containers = {"p": 0}, {"c": 0}

    def scrape(active, mig):
        pods["p"] = containers["c"] = active
        return _exposition(active, pods, containers, mig)

    texts = [scrape(600, {"1": 500, "2": 100}),
             scrape(700, {"2": 150}),                 # 1 gained 50 before it was destroyed
             scrape(760, {"1": 560, "2": 200}),       # back: 50 owed + 10 new, 2 gained 50
             scrape(800, {"1": 580, "2": 220})]
    assert _conservation(*texts) == [[], [], [], []]
    texts[2] = scrape(760, {"1": 700, "2": 200})     # more than it was owed
    found = _conservation(*texts)
    assert "gpustats_node_gpu_mig_joules gained 250.0 J" in found[2][0]
    # Destroyed across a restart, its last gains were never measured: not held against it.
    texts[2] = scrape(760, {"1": 560, "2": 200})
    assert _conservation(*texts, runs=[1, 2, 2, 2]) == [[], [], [], []]


def test_the_oracle_allows_the_assumed_split_of_a_mig_instance_first_busy_tick():
    """Instance 7 is created with its tenant: the daemon has no GPM sample of it at the start
    of its first busy tick (its sweep reads instance 1's metrics only), so for that tick it
    assumes the mean of the known instances. A sweep that leaves no trace of its GPM reads
    (the previous release) may have assumed any busy instance, at any tick."""
    def mig_state(*holders):
        return WorldState((GpuState(GPU, 300.0, False, frozenset(), ((1, 90.0), (7, 10.0)),
                                    tuple(Holder(pid, pod, f"{pid:064x}", gi, 50)
                                          for pid, pod, gi in holders)),))
    states = {"v1": mig_state((1000, A, 1)), "v2": mig_state((1000, A, 1), (1001, B, 7))}
    trace = [{"t": 0.0, "event": "start", "tag": "v1"},
             energy(1.0, 0), energy(2.0, 300_000), gpm(2.01, 1),   # 200 J active, all A's
             {"t": 2.5, "event": "scenario", "tag": "v2"},
             energy(3.0, 600_000), gpm(3.01, 1, "v2"),           # 7's first busy tick:
             energy(4.0, 900_000), gpm(4.01, 1, "v2"), gpm(4.02, 7, "v2")]   # 50/50; 90/10
    got = expected_energy(trace, states)
    # B's process appeared within the first tick: it may have lived a part of it only.
    assert dict(got.low) == pytest.approx({A: 200.0 + 100.0 + 180.0, B: 0.0 + 20.0})
    assert dict(got.high) == pytest.approx({A: 200.0 + 180.0 + 180.0, B: 100.0 + 20.0})
    untraced = expected_energy([x for x in trace if x["event"] != "read"], states)
    assert untraced.low[A] == pytest.approx(200.0 + 100.0 + 100.0)
    assert untraced.high[B] == pytest.approx(100.0 + 100.0)

def test_the_rate_check_allows_a_stall_billed_by_the_first_tick_after_it():
    """A pod billed a 2.4 s stall by the first tick after SIGCONT is not lost time billed;
    the same gain without a stall is."""
    from oracles.checks import POD, Rate
    series = (POD, (("pod_uid", "u"),))
    for stalled, violations in ((True, 0), (False, 1)):
        rate = Rate(max_active_watts=600.0, tick_seconds=0.3)
        rate.check(100.0, {series: 0.0})
        if stalled:
            rate.stalled(100.2, 2.4)
        assert len(rate.check(101.04, {series: 600.0 * 2.9})) == violations, stalled


def test_the_oracle_bills_a_shared_client_once_to_its_cgroup_or_to_no_one():
    """A client forked within a service's cgroup stays the service's; one passed to another
    tenant's process is no one's (unattributed), never the receiver's."""
    from oracles.energy import shares
    owner = Holder(10, "service:a.service", "c10", None, 60)
    other = Holder(11, "job:job 2", "c11", None, 30)
    forked = Holder(12, "service:a.service", "c12", None, 0, shares=10)
    passed = Holder(13, "session:1000", "c13", None, 0, shares=10)
    gpu = GpuState("amd-1", 300.0, False, frozenset(), None, (owner, other, forked))
    assert shares(gpu, False) == pytest.approx(
        {"service:a.service": 60 / 90, "job:job 2": 30 / 90})
    gpu = dataclasses.replace(gpu, holders=(owner, other, passed))
    got = shares(gpu, False)
    assert got["service:a.service"] == 0 and got["session:1000"] == 0
    assert got["job:job 2"] == pytest.approx(30 / 90)
