"""A pod deleted and re-created under the same namespace/name with a new UID (a StatefulSet's
``ml/db-0``), through the real daemon (simulator below pynvml, fake cgroup tree, the kubelet's
log layout): ``/stats/summary``'s ``pods[]`` and the page's pod table list one ``ml/db-0``,
the new one, as the kubelet does; the old pod's counter stays in ``/metrics`` under its
``pod_uid`` while it is retained, never lower. Then the rule that picks the one listed, on
the container tracker with fake sources.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from gpustats.engine.containers import ContainerTracker
from gpustats.engine.counters import EnergyCounters
from gpustats.export.page import page_view
from gpustats.fakehost import (
    add_container, add_log_names, add_process, container_cgroup, container_id, pod_uid,
)
from gpustats.model.attribution import DeviceAttribution, ProcessAttribution
from gpustats.model.containers import CgroupRef, ContainerIdentity, ContainerNames, ContainerUsage
from gpustats.model.device import ProcessReading
from gpustats.model.host import NodeStats
from gpustats.model.snapshot import PodAccelerator, PodStats, Snapshot
from tests.support.billing import scrape, start
from tests.support.fakehost import build, write_scenario
from tests.support.gpus import GPU_A as GPU, device
from tests.support.invariants import assert_never_decreased, counters
from tests.support.tracker_fakes import FakeCgroups, FakeNames, FakeProcs, reading

NAMESPACE, POD, CONTAINER = "ml", "db-0", "db"
OLD, NEW = 1, 2              # pod and container numbers of the two incarnations
OLD_PID, NEW_PID = 101, 102


def name_pod(logs: Path, number: int) -> None:
    """The kubelet's log layout naming pod ``number``'s container ``ml/db-0``/``db``."""
    add_log_names(logs, NAMESPACE, POD, pod_uid(number), CONTAINER, container_id(number))


def start_pod(cgroup: Path, proc: Path, number: int, pid: int) -> None:
    """Pod ``number`` with its one container running ``pid``."""
    rel = container_cgroup(pod_uid(number), container_id(number))
    add_container(cgroup, rel)
    add_process(proc, pid, rel)


def pod_dir(cgroup: Path, number: int) -> Path:
    return (cgroup / container_cgroup(pod_uid(number), container_id(number))).parent


def holding(pid: int) -> dict:
    return {"devices": [device()], "processes": [{"pid": pid, "device": GPU}]}


def db_pods(summary: dict) -> list[dict]:
    """``pods[]`` entries named ``ml/db-0``."""
    return [p for p in summary["pods"]
            if (p["podRef"]["namespace"], p["podRef"]["name"]) == (NAMESPACE, POD)]


def pod_energy(entry: dict) -> float:
    return sum(a.get("attributedEnergyJoules", 0.0) for a in entry.get("accelerators", ()))


def pod_joules(values: dict, uid: str) -> float | None:
    found = [v for (n, ls), v in values.items()
             if n == "gpustats_pod_gpu_joules" and dict(ls).get("pod_uid") == uid]
    assert len(found) <= 1, found
    return found[0] if found else None


def page_pod_keys(daemon) -> list[str]:
    """The ``data-pod`` keys of the page's pod table (after its GPU cards)."""
    status, html = daemon.get("/")
    assert status == 200
    table = html.split('<section class="pods">', 1)[1]
    return [part.split('"', 1)[0] for part in table.split('data-pod="')[1:]]


def billed_old_pod(start_daemon, tmp_path: Path):
    """The daemon (0.2 s ticks, an hour's retention) billing the old ``ml/db-0``: (cgroup
    root, proc root, log root, daemon, scenario path, counters once it has over 50 J)."""
    cgroup, proc = build(tmp_path / "host", {})
    logs = tmp_path / "logs"
    start_pod(cgroup, proc, OLD, OLD_PID)
    name_pod(logs, OLD)
    daemon = start(start_daemon, tmp_path, holding(OLD_PID), cgroup, proc,
                   "--housekeeping-interval", "0.2", "--log-root", str(logs),
                   "--counter-retention", "3600")
    daemon.wait_for(lambda s: any(p["podRef"]["uid"] == pod_uid(OLD) and pod_energy(p) > 50
                                  for p in db_pods(s)))
    return cgroup, proc, logs, daemon, tmp_path / "s.yaml", counters(scrape(daemon))


def watch_one_db_pod(daemon, last: dict, seconds: float) -> dict:
    """For ``seconds``: ``pods[]`` and the page list one ``ml/db-0``, the new one; the old
    pod's counter stays in ``/metrics`` and no counter steps back. Returns the last counters."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        listed = db_pods(daemon.get("/stats/summary")[1])
        assert [p["podRef"]["uid"] for p in listed] == [pod_uid(NEW)], listed
        assert page_pod_keys(daemon).count(f"{NAMESPACE}/{POD}") == 1
        values = counters(scrape(daemon))
        assert pod_joules(values, pod_uid(OLD)) is not None, "the old pod left /metrics"
        assert_never_decreased(last, values)
        last = values
        daemon.wait_ticks(1)            # a check on every snapshot, over the span
    return last


def recreate(cgroup, proc, logs, daemon, path) -> None:
    """The new ``ml/db-0`` started, named and running on the GPU until it is billed."""
    start_pod(cgroup, proc, NEW, NEW_PID)
    name_pod(logs, NEW)
    write_scenario(path, holding(NEW_PID))
    daemon.wait_for(lambda s: any(p["podRef"]["uid"] == pod_uid(NEW) and pod_energy(p) > 20
                                  for p in s["pods"]))


def test_a_recreated_pod_is_listed_once_the_new_one(start_daemon, tmp_path):
    """``ml/db-0`` is deleted (its process and cgroups go) and re-created with a new UID on
    the same GPU: ``pods[]`` lists it once, by the new UID; the old pod's energy stays in
    ``/metrics`` under its own ``pod_uid`` while retained, its total unchanged."""
    cgroup, proc, logs, daemon, path, last = billed_old_pod(start_daemon, tmp_path)
    old_total = pod_joules(last, pod_uid(OLD))
    shutil.rmtree(pod_dir(cgroup, OLD))
    shutil.rmtree(proc / str(OLD_PID))
    recreate(cgroup, proc, logs, daemon, path)
    last = watch_one_db_pod(daemon, last, 2.0)
    assert pod_joules(last, pod_uid(OLD)) >= old_total
    assert pod_joules(last, pod_uid(NEW)) > 20


def test_while_both_pods_exist_the_newer_is_listed(start_daemon, tmp_path):
    """The re-creation overlaps: the old pod's cgroup lingers (its container gone) while the
    new pod runs. Both are live; the one listed under ``ml/db-0`` is the newer."""
    cgroup, proc, logs, daemon, path, last = billed_old_pod(start_daemon, tmp_path)
    shutil.rmtree(cgroup / container_cgroup(pod_uid(OLD), container_id(OLD)))
    shutil.rmtree(proc / str(OLD_PID))
    recreate(cgroup, proc, logs, daemon, path)
    assert pod_dir(cgroup, OLD).is_dir()
    watch_one_db_pod(daemon, last, 1.5)


# ------------------------------------------------------------- the page's view of a snapshot


def test_the_page_lists_the_pod_the_summary_lists():
    """A snapshot holding an old ``ml/db-0`` kept for its counters beside the new one: the
    page's tenant table has one ``ml/db-0`` row, the new pod's figures."""
    old = PodStats("u-old", POD, NAMESPACE, accelerators=(PodAccelerator(GPU, None, 1466.0),),
                   superseded_by="u-new")
    new = PodStats("u-new", POD, NAMESPACE, accelerators=(PodAccelerator(GPU, 180.0, 906.0),))
    snapshot = Snapshot(sequence=1, taken_at=0.0, monotonic=0.0,
                        node=NodeStats(node_name="n", start_time=0.0), pods=(old, new))
    rows = page_view(snapshot).tenants
    assert [(r.pod_key, r.energy) for r in rows] == [(f"{NAMESPACE}/{POD}", "906.0 J")]


# ------------------------------------------------------------- which of two live pods is listed


class CreatedCgroups(FakeCgroups):
    """Fake cgroups whose pod cgroups were created at the times given (UID -> epoch s)."""

    def __init__(self, created: dict[str, float]):
        super().__init__({})
        self.created = created

    def usages(self, wanted):
        return [ContainerUsage(start_time=self.created.get(key[1]) if key[0] == "pod" else 1.0)
                for key, _ in wanted]


def add_db_pod(cgroups: FakeCgroups, names: FakeNames, uid: str, cid: str) -> None:
    """A live ``ml/db-0`` pod ``uid`` (its cgroup and its container ``cid``, named)."""
    cgroups.pods[uid] = CgroupRef((("", f"/kubepods/pod{uid}"),))
    cgroups.containers[cid] = ContainerIdentity(
        container_id=cid, pod_uid=uid, cgroup=CgroupRef((("", f"/kubepods/pod{uid}/{cid}"),)))
    names.table[cid] = ContainerNames(POD, NAMESPACE, uid, CONTAINER)


def listed(tracker: ContainerTracker, pid: int | None = None
           ) -> tuple[list[str], dict[str, str | None]]:
    """One tick, ``pid`` (if given) using the GPU at 50 W above idle: (UIDs listed, each
    pod's ``superseded_by``)."""
    if pid is None:
        view = tracker.tick((reading(GPU, 0),), {}, ())
    else:
        share = ProcessAttribution(pid, GPU, None, 1.0, "exclusive", 50.0, 250.0, 40.0)
        attribution = {GPU: DeviceAttribution(GPU, 100.0, 50.0, 750.0, 250.0, "exclusive",
                                              (share,), dt_seconds=5.0)}
        view = tracker.tick((reading(GPU, 0, [ProcessReading(pid=pid)]),), attribution, ())
    snapshot = Snapshot(sequence=1, taken_at=0.0, monotonic=0.0,
                        node=NodeStats(node_name="n", start_time=0.0), pods=view.pods)
    return ([p.uid for p in snapshot.listed_pods()],
            {p.uid: p.superseded_by for p in view.pods})


def test_of_two_live_pods_the_one_first_seen_last_is_listed():
    """The new ``ml/db-0`` appears while the old one's cgroup lingers: the new one is listed
    (the old one has the higher UID; no creation time is known); the old one, still served,
    names it ``superseded_by``."""
    old, new = "f" * 8 + pod_uid(OLD)[8:], pod_uid(NEW)
    cgroups, names = CreatedCgroups({}), FakeNames({})
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(), runtime=names)
    add_db_pod(cgroups, names, old, container_id(OLD))
    assert listed(tracker) == ([old], {old: None})
    add_db_pod(cgroups, names, new, container_id(NEW))
    assert listed(tracker) == ([new], {old: new, new: None})
    assert listed(tracker) == ([new], {old: new, new: None})        # and stays so
    del cgroups.pods[old], cgroups.containers[container_id(OLD)]
    assert listed(tracker) == ([new], {new: None})


def test_of_two_live_pods_seen_at_once_the_later_created_cgroup_is_listed():
    """Both ``ml/db-0`` pods are there at the daemon's first tick (a restart during the
    overlap): the one whose pod cgroup was created last is listed."""
    old, new = pod_uid(NEW), pod_uid(OLD)          # the newer pod has the lower UID
    cgroups, names = CreatedCgroups({old: 100.0, new: 200.0}), FakeNames({})
    tracker = ContainerTracker(cgroups, FakeProcs({}), EnergyCounters(), runtime=names)
    add_db_pod(cgroups, names, old, container_id(OLD))
    add_db_pod(cgroups, names, new, container_id(NEW))
    assert listed(tracker) == ([new], {old: new, new: None})


def test_a_live_pod_is_listed_before_one_that_ended_though_seen_later():
    """The new ``ml/db-0`` ran on the GPU and ended (its counters retained) while the old one
    still exists: the live one is listed, the ended one still served for its counters."""
    old, new = pod_uid(OLD), pod_uid(NEW)
    cgroups, names = CreatedCgroups({}), FakeNames({})
    procs = FakeProcs({NEW_PID: f"/kubepods/pod{new}/{container_id(NEW)}"})
    tracker = ContainerTracker(cgroups, procs, EnergyCounters(), runtime=names)
    add_db_pod(cgroups, names, old, container_id(OLD))
    assert listed(tracker) == ([old], {old: None})
    add_db_pod(cgroups, names, new, container_id(NEW))
    assert listed(tracker, NEW_PID) == ([new], {old: new, new: None})
    del cgroups.pods[new], cgroups.containers[container_id(NEW)], procs.by_pid[NEW_PID]
    assert listed(tracker) == ([old], {old: None, new: old})
