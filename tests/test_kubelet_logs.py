"""Names from the kubelet's log layout: parsers, hostile entries, the listing cache, the order
of trust among name sources, and the real daemon on a fake host with no socket at all."""

import os
from pathlib import Path

import pytest

from gpustats.engine.containers import ContainerTracker
from gpustats.engine.counters import EnergyCounters
from gpustats.model.containers import ContainerIdentity, ContainerNames
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.kubelet_logs import (
    KubeletLogNames, parse_any_link, parse_container_link, parse_link_target, parse_pod_dir,
)
from tests.support.fakehost import build, container_id, pod_uid, write_scenario
from tests.support.gpus import GPU_A as GPU
from tests.support.kubelet_logs import layout

UID = "5c3e2a10-8f1b-4c1e-9a57-0d8c7c2f9e11"
CID = "ab" * 32


def test_parsers():
    pod = parse_pod_dir(f"kube-system_etcd-node.a_{UID}")
    assert (pod.namespace, pod.name, pod.uid) == ("kube-system", "etcd-node.a", UID)
    link = parse_container_link(f"trainer-0_ml_cuda-main-{CID}.log")
    assert (link.pod_name, link.namespace, link.container_name, link.container_id) == (
        "trainer-0", "ml", "cuda-main", CID)
    target, container = parse_link_target(f"/var/log/pods/ml_trainer-0_{UID}/cuda-main/3.log")
    assert (target.uid, container) == (UID, "cuda-main")
    # Rotated logs keep the layout.
    assert parse_link_target(f"pods/ml_p_{UID}/c/0.log.20240101-101010.gz")[1] == "c"


@pytest.mark.parametrize("name", [
    "", "_", "__", f"{UID}",                                 # pre-1.14 pods/<uid>
    f"ML_trainer_{UID}", f"ml_trainer_{UID}_x", f"ml__{UID}", f"ml_tr ainer_{UID}",
    f"ml_trainer_{UID}\n", "ml_trainer_UID", "a" * 300 + f"_p_{UID}", "é_p_x", "../x_y_z",
])
def test_odd_pod_dirs_are_rejected(name):
    with pytest.raises(ValueError):
        parse_pod_dir(name)


@pytest.mark.parametrize("name", [
    "", ".log", f"p_ml_c-{CID}", f"p_ml_c_{CID}.log", f"p_ml_c-{CID[:-1]}.log",
    f"p_ml_c-{CID.upper()}.log", f"p_ml-{CID}.log", f"p_ml_c-{CID}.log.1", "kube-apiserver.log",
    f"p_ml_-c-{CID}.log", f"p_ml_c\x00-{CID}.log", f"p_ML_c-{CID}.log",
])
def test_odd_links_are_rejected(name):
    with pytest.raises(ValueError):
        parse_container_link(name)


@pytest.mark.parametrize("target", [
    "", "/", "0.log", "/var/log/pods/x/0.log", f"/var/log/pods/ml_p_{UID}/c/current",
    f"/var/log/pods/{UID}/c/0.log", f"/var/log/pods/ml_p_{UID}/C/0.log",
])
def test_odd_targets_are_rejected(target):
    with pytest.raises(ValueError):
        parse_link_target(target)


def test_names_by_container_id_and_pod_uid(tmp_path):
    layout(tmp_path, {("ml", "trainer-0", UID): {"main": CID, "sidecar": "cd" * 32}})
    source = KubeletLogNames(str(tmp_path))
    other = "ef" * 32
    names = source.names({CID: ContainerIdentity(CID, pod_uid=UID),
                          other: ContainerIdentity(other, pod_uid=UID),
                          "00" * 32: ContainerIdentity("00" * 32, pod_uid=None)})
    assert names[CID] == ContainerNames("trainer-0", "ml", UID, "main")
    # Same pod, no link: the pod's sandbox (the kubelet links every container it creates).
    assert names[other] == ContainerNames("trainer-0", "ml", UID, None, is_sandbox=True)
    assert "00" * 32 not in names
    # Plain iterables of IDs work too (the runtime client's signature).
    assert source.names(["cd" * 32])["cd" * 32].container_name == "sidecar"


def test_hostile_entries_are_skipped_and_counted(tmp_path):
    layout(tmp_path, {("ml", "trainer-0", UID): {"main": CID}})
    links, pods = tmp_path / "containers", tmp_path / "pods"
    (links / "kube-proxy.log").write_text("")                                  # foreign file
    os.symlink("/nowhere", links / f"x_ml_c-{'11' * 32}.log")                 # odd target
    os.symlink(f"/var/log/pods/ml_other_{UID}/c/0.log", links / f"y_ml_c-{'22' * 32}.log")
    (links / f"z_ml_c-{'33' * 32}.log").mkdir()                                # a directory
    os.symlink("loop", links / "loop")                                         # self-loop
    (links / "bad\udcffname.log").write_text("")                             # not UTF-8
    (pods / UID).mkdir()                                                       # pre-1.14
    (pods / "not a pod").mkdir()
    errors = CollectionErrors()
    source = KubeletLogNames(str(tmp_path), errors=errors)
    ids = [CID, "11" * 32, "22" * 32, "33" * 32]
    names = source.names(ids)
    assert names[CID].pod_uid == UID
    # A link whose target is not a log path still names its container by its own name.
    assert names["11" * 32] == ContainerNames("x", "ml", None, "c")
    assert "22" * 32 not in names                  # target names another pod: not trusted
    assert names["33" * 32].container_name == "c"  # readlink fails: the name still holds
    totals = {(s, r): n for s, r, n in errors.totals()}
    assert totals[("kubelet_logs", "unparseable_pod_dir")] == 2
    assert totals[("kubelet_logs", "unparseable_container_link")] == 4   # 3 names + mismatch
    source.names(ids)
    assert {(s, r): n for s, r, n in errors.totals()} == totals          # counted once


def test_missing_or_unreadable_layout_gives_no_names(tmp_path):
    assert KubeletLogNames(str(tmp_path / "absent")).names([CID]) == {}
    (tmp_path / "containers").write_text("a file, not a directory")
    assert KubeletLogNames(str(tmp_path)).names([CID]) == {}


OLD_MTIME = 1_000_000_000


def settled_layout(tmp_path: Path) -> tuple[Path, KubeletLogNames]:
    """One pod with one linked container, its directories last changed long ago."""
    layout(tmp_path, {("ml", "p", UID): {"main": CID}})
    links = tmp_path / "containers"
    os.utime(links, (OLD_MTIME, OLD_MTIME))
    os.utime(tmp_path / "pods", (OLD_MTIME, OLD_MTIME))
    return links, KubeletLogNames(str(tmp_path))


def test_listing_is_cached_until_the_directory_changes(tmp_path):
    links, source = settled_layout(tmp_path)
    source.names([CID])
    listings = source._links.listings
    for _ in range(5):
        assert source.names([CID])[CID].container_name == "main"
    assert source._links.listings == listings               # two stats a tick, no listing
    cid2 = "cd" * 32
    os.symlink(f"/var/log/pods/ml_p_{UID}/side/0.log", links / f"p_ml_side-{cid2}.log")
    assert source.names([CID, cid2])[cid2].container_name == "side"
    assert source._links.listings == listings + 1
    (links / f"p_ml_side-{cid2}.log").unlink()
    assert cid2 not in source.names([CID, cid2])


def test_same_containers_same_answer_until_a_listing_or_a_container_changes(tmp_path):
    """A container of a known pod seen before its link is its pod's sandbox; once its link
    appears the same question names it, and a container whose pod changed is asked afresh."""
    links, source = settled_layout(tmp_path)
    cid2 = "cd" * 32
    wanted = {CID: ContainerIdentity(CID, pod_uid=UID), cid2: ContainerIdentity(cid2, pod_uid=UID)}
    first = source.names(wanted)
    assert first[cid2].is_sandbox
    first.clear()                                        # the caller's own copy
    assert source.names(dict(wanted))[cid2].is_sandbox
    os.symlink(f"/var/log/pods/ml_p_{UID}/side/0.log", links / f"p_ml_side-{cid2}.log")
    os.utime(links, (OLD_MTIME + 1, OLD_MTIME + 1))
    assert source.names(dict(wanted))[cid2] == ContainerNames("p", "ml", UID, "side")
    other = "ef" * 32
    wanted[other] = ContainerIdentity(other, pod_uid=None)
    assert other not in source.names(wanted)
    wanted[other] = ContainerIdentity(other, pod_uid=UID)
    assert source.names(wanted)[other].is_sandbox        # same ID, now in a known pod


def test_recent_mtime_is_listed_again(tmp_path):
    """A directory changed within the mtime's granularity is not trusted to be complete."""
    layout(tmp_path, {("ml", "p", UID): {"main": CID}})
    source = KubeletLogNames(str(tmp_path))
    source.names([CID])
    before = source._links.listings
    source.names([CID])
    assert source._links.listings == before + 1


def test_ten_thousand_entries(tmp_path):
    pods = {("ns", f"pod-{i}", pod_uid(i)): {"c": container_id(i)} for i in range(5000)}
    layout(tmp_path, pods)
    for i in range(5000):      # plus foreign entries
        (tmp_path / "containers" / f"junk-{i}").touch()
    old = 1_000_000_000
    os.utime(tmp_path / "containers", (old, old))
    os.utime(tmp_path / "pods", (old, old))
    source = KubeletLogNames(str(tmp_path))
    wanted = [container_id(i) for i in range(0, 5000, 17)]
    names = source.names(wanted)
    assert len(names) == len(wanted) and len(source.skipped_links) == 5000
    assert names[container_id(17)] == ContainerNames("pod-17", "ns", pod_uid(17), "c")


class FakeCgroups:
    def __init__(self, containers):
        self.containers = containers

    def discover(self):
        from types import SimpleNamespace
        return SimpleNamespace(containers=self.containers, pods={})

    def device_rules(self, ref):
        return None

    def usages(self, wanted):
        from gpustats.model.containers import ContainerUsage
        return [ContainerUsage() for _ in wanted]

    def end_tick(self):
        pass


class FakeNames:
    def __init__(self, names):
        self._names, self.asked = names, []

    def names(self, ids):
        ids = list(ids)
        self.asked.append(sorted(ids))
        return {c: n for c, n in self._names.items() if c in ids}


def test_tracker_asks_sources_in_trust_order():
    a, b, c = "aa" * 32, "bb" * 32, "cc" * 32
    containers = {x: ContainerIdentity(x, pod_uid=UID) for x in (a, b, c)}
    logs = FakeNames({a: ContainerNames("p", "ml", UID, "from-logs"),
                      b: ContainerNames("p", "ml", UID, None)})
    cri = FakeNames({a: ContainerNames("p", "ml", UID, "from-cri"),
                     b: ContainerNames("p", "ml", UID, "b-from-cri"),
                     c: ContainerNames("p", "ml", UID, "c-from-cri")})
    tracker = ContainerTracker(FakeCgroups(containers), None, EnergyCounters(),
                               runtime=cri, names=(logs,))
    view = tracker.tick((), {}, ())
    by_id = {x.container_id: x.name for p in view.pods for x in p.containers}
    assert by_id == {a: "from-logs", b: "b-from-cri", c: "c-from-cri"}
    assert cri.asked == [[b, c]]            # the runtime is asked only for what logs left


def test_daemon_names_pods_from_the_log_layout_alone(start_daemon, tmp_path):
    """Fake cgroups, /proc and log layout; no CRI socket, no pod-resources."""
    cgroup, proc = build(tmp_path / "host", {101: (1, 1), 102: (2, 2)})
    logs = tmp_path / "host" / "log"
    layout(logs, {("ml", "trainer-0", pod_uid(1)): {"cuda": container_id(1)},
                  ("batch", "job-x", pod_uid(2)): {"worker": container_id(2)}})
    for i in range(10_000):                                    # hostile neighbours
        kind = i % 5
        if kind == 0:
            (logs / "pods" / f"junk_{i}\u00e9").mkdir()
        elif kind == 1:    # a well-formed name with a bogus target; i = 1 claims container 1
            os.symlink(f"/dangling/{i}", logs / "containers" / f"a_b_c-{i:064x}.log")
        elif kind == 2:
            os.symlink(f"/dangling/{i}", logs / "containers" / f"..{i}")
        elif kind == 3:
            (logs / "containers" / f"p_ns_c-{i:064d}.log").touch()
        else:
            (logs / "pods" / f"ns_pod-{i}_{pod_uid(i)}").mkdir()
    scenario = tmp_path / "s.yaml"
    write_scenario(scenario, {
        "devices": [{"uuid": GPU, "name": "NVIDIA H100 80GB HBM3", "minor": 0,
                     "power_watts": 300}],
        "processes": [{"pid": 101, "device": GPU}, {"pid": 102, "device": GPU}]})
    daemon = start_daemon("--simulate", str(scenario), "--cgroup-root", str(cgroup),
                          "--proc-root", str(proc), "--housekeeping-interval", "0.2",
                          "--pod-resources-socket", "", "--log-root", str(logs))
    daemon.wait_ready()
    summary = daemon.wait_for(lambda s: len(s["pods"]) == 2 and all(p["podRef"].get("name")
                                                                     for p in s["pods"]))
    pods = {p["podRef"]["uid"]: p for p in summary["pods"]}
    assert pods[pod_uid(1)]["podRef"] == {"name": "trainer-0", "namespace": "ml",
                                          "uid": pod_uid(1)}
    assert pods[pod_uid(2)]["podRef"]["namespace"] == "batch"
    assert [c["name"] for c in pods[pod_uid(1)]["containers"]] == ["cuda"]
    assert [c["name"] for c in pods[pod_uid(2)]["containers"]] == ["worker"]
    status, metrics = daemon.get("/metrics")
    assert status == 200
    assert 'reason="unparseable_pod_dir",source="kubelet_logs"} 2000.0' in metrics
    assert 'reason="unparseable_container_link",source="kubelet_logs"} 2000.0' in metrics
    assert daemon.proc.poll() is None


# ------------------------------------------------------------------ links the kubelet cut


def cut_link(root: Path, namespace: str, pod: str, uid: str, container: str, cid: str,
             target: bool = True) -> str:
    """A link as the kubelet makes it for a long name: ``<pod>_<ns>_<container>-<id>`` cut
    to 251 characters, then ``.log`` (kuberuntime logSymlink)."""
    pod_dir = root / "pods" / f"{namespace}_{pod}_{uid}" / container
    pod_dir.mkdir(parents=True, exist_ok=True)
    (root / "containers").mkdir(parents=True, exist_ok=True)
    name = f"{pod}_{namespace}_{container}-{cid}"[:251] + ".log"
    if target:
        os.symlink(f"/var/log/pods/{namespace}_{pod}_{uid}/{container}/0.log",
                   root / "containers" / name)
    else:
        (root / "containers" / name).write_text("")     # readlink fails: the name alone
    return name


def long_pod(keep: int, container: str = "main", namespace: str = "ml") -> str:
    """A pod name that leaves ``keep`` digits of the container ID in its cut link."""
    return "p" * (251 - len(f"_{namespace}_{container}-") - keep)


def test_cut_link_parsers():
    name = f"{long_pod(27)}_ml_main-{CID}"[:251] + ".log"
    assert len(name) == 255
    with pytest.raises(ValueError):
        parse_container_link(name)
    cut = parse_any_link(name)
    assert (cut.pod_name, cut.namespace, cut.rest) == (long_pod(27), "ml", "main-" + CID[:27])
    assert cut.split("main") == CID[:27]
    assert cut.split("mai") is None and cut.split("other") is None
    assert parse_any_link(f"p_ml_main-{CID}.log").container_id == CID   # whole: as before
    for bad in (name[:-5] + ".log", name[:-4] + ".txt", "P" + name[1:],
                name.replace("_ml_", "_m_l_")):
        with pytest.raises(ValueError):
            parse_any_link(bad)


def test_cut_link_names_its_container_by_the_id_prefix_left(tmp_path):
    pod, sandbox = long_pod(27), "ef" * 32
    cut_link(tmp_path, "ml", pod, UID, "main", CID)
    source = KubeletLogNames(str(tmp_path))
    names = source.names({CID: ContainerIdentity(CID, pod_uid=UID),
                          sandbox: ContainerIdentity(sandbox, pod_uid=UID),
                          "cd" * 32: ContainerIdentity("cd" * 32, pod_uid=None)})
    assert names[CID] == ContainerNames(pod, "ml", UID, "main")
    assert names[sandbox].is_sandbox                # every link of the pod is accounted for
    assert "cd" * 32 not in names
    # Another pod's container with the same ID prefix is not this link's.
    twin = CID[:27] + "0" * 37
    assert twin not in source.names({twin: ContainerIdentity(twin, pod_uid=pod_uid(9))})


def test_cut_link_without_a_target_splits_its_name(tmp_path):
    pod = long_pod(30, container="cuda-main")
    cut_link(tmp_path, "ml", pod, UID, "cuda-main", CID, target=False)
    names = KubeletLogNames(str(tmp_path)).names({CID: ContainerIdentity(CID, pod_uid=UID)})
    assert names[CID] == ContainerNames(pod, "ml", UID, "cuda-main")


def test_cut_link_with_too_little_id_left_names_the_pod_only(tmp_path):
    """A long container name leaves 4 digits: the pod's containers are named by their pod,
    and none is taken for its sandbox."""
    container = "c" * 40
    pod = long_pod(4, container=container)
    cut_link(tmp_path, "ml", pod, UID, container, CID)
    other = "ef" * 32
    names = KubeletLogNames(str(tmp_path)).names({CID: ContainerIdentity(CID, pod_uid=UID),
                                                  other: ContainerIdentity(other, pod_uid=UID)})
    for cid in (CID, other):
        assert names[cid] == ContainerNames(pod, "ml", UID, None, is_sandbox=False)


def test_cut_link_whose_target_names_another_container_is_skipped(tmp_path):
    pod = long_pod(27)
    name = cut_link(tmp_path, "ml", pod, UID, "main", CID)
    os.unlink(tmp_path / "containers" / name)
    os.symlink(f"/var/log/pods/ml_{pod}_{UID}/side/0.log", tmp_path / "containers" / name)
    errors = CollectionErrors()
    names = KubeletLogNames(str(tmp_path), errors=errors).names(
        {CID: ContainerIdentity(CID, pod_uid=UID)})
    assert names[CID] == ContainerNames(pod, "ml", UID, None, is_sandbox=False)
    assert ("kubelet_logs", "unparseable_container_link", 1) in errors.totals()


def test_a_container_called_a_sandbox_is_shown_while_it_holds_a_gpu():
    from types import SimpleNamespace

    from gpustats.model.device import DeviceIdentity, DeviceReading, ProcessReading

    a, b = "aa" * 32, "bb" * 32
    containers = {x: ContainerIdentity(x, pod_uid=UID) for x in (a, b)}
    logs = FakeNames({x: ContainerNames("p", "ml", UID, None, is_sandbox=True) for x in (a, b)})

    class Procs:
        def cgroup_bytes(self, pid):
            return b"0::/a\n"

        def owner_of(self, pid):
            return SimpleNamespace(
                container=SimpleNamespace(info=SimpleNamespace(
                    container_id=a, runtime=None, pod_uid=UID, qos_class=None), cgroup=None),
                tenant=None, cgroup=None, identity=SimpleNamespace(comm="python3", uid=0))

    reading = DeviceReading(identity=DeviceIdentity(index=0, uuid=GPU, minor_number=0),
                            monotonic_seconds=0.0, processes=(ProcessReading(pid=7),))
    tracker = ContainerTracker(FakeCgroups(containers), Procs(), EnergyCounters(),
                               names=(logs,))
    view = tracker.tick((reading,), {}, ())
    assert [c.container_id for p in view.pods for c in p.containers] == [a]
