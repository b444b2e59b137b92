"""Discovery and usage over fake cgroup trees: v1 (different depths per controller), v2, hybrid."""

import os
from pathlib import Path

from gpustats.hostfs import HostRoots
from gpustats.model.host import MemoryStats
from gpustats.sources.cgroups import CgroupReader, detect_layout
from gpustats.sources.procs import ProcReader
from tests.support.descriptors import open_descriptors

UID = "2fc932ce-fdcc-454b-97bd-aadfdeb4c340"
UID_ = UID.replace("-", "_")
C1, C2, C3 = "1" * 64, "2" * 64, "3" * 64


def _write(path, files):
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)


def v1_tree(root):
    # devices, cpuacct and memory, each its own hierarchy.
    pod = f"kubepods/burstable/pod{UID}"
    _write(root / "devices" / pod / C1, {"devices.list": "c 195:0 rw\nc 195:255 rw\n"})
    _write(root / "devices" / pod / C2, {"devices.list": "a *:* rwm\n"})
    _write(root / "cpu,cpuacct" / pod / C1, {"cpuacct.usage": "5000000000\n"})
    _write(root / "cpu,cpuacct" / pod, {"cpuacct.usage": "6000000000\n"})
    os.symlink("cpu,cpuacct", root / "cpuacct")
    mem = root / "memory" / pod
    _write(mem / C1, {"memory.usage_in_bytes": "1000\n",
                      "memory.stat": "total_inactive_file 100\ntotal_rss 800\ntotal_pgfault 5\n"
                                     "total_pgmajfault 0\n",
                      "memory.limit_in_bytes": "9223372036854771712\n"})
    _write(root / "memory" / "system.slice" / "sshd.service", {})
    _write(root / "devices" / "docker" / C3, {"devices.list": "c 195:1 rw\n"})
    return root


def test_detect_layouts(tmp_path):
    v1 = v1_tree(tmp_path / "v1")
    layout = detect_layout(str(v1))
    assert {name for name, _ in layout.hierarchies} == {"devices", "cpuacct", "memory"}
    v2 = tmp_path / "v2"
    _write(v2, {"cgroup.controllers": "cpu memory\n"})
    assert detect_layout(str(v2)).hierarchies == (("", str(v2)),)
    _write(v1 / "unified", {"cgroup.controllers": ""})
    assert "" in dict(detect_layout(str(v1)).hierarchies)


def test_v1_discovery_per_controller_paths(tmp_path):
    reader = CgroupReader(HostRoots(cgroup=str(v1_tree(tmp_path))))
    found = reader.discover()
    assert set(found.containers) == {C1, C2, C3}
    c1 = found.containers[C1]
    assert c1.pod_uid == UID and c1.qos_class == "burstable"
    paths = dict(c1.cgroup.paths)
    assert paths["devices"] == f"/kubepods/burstable/pod{UID}/{C1}"
    assert paths["memory"] == f"/kubepods/burstable/pod{UID}/{C1}"
    assert found.containers[C3].runtime == "docker" and found.containers[C3].pod_uid is None
    assert UID in found.pods
    rules = reader.device_rules(c1.cgroup)
    assert rules.gpu_minors == {0}
    assert reader.device_rules(found.containers[C2].cgroup).all_devices
    usage = reader.usage(C1, c1.cgroup)
    assert usage.cpu.usage_core_nano_seconds == 5_000_000_000
    assert usage.memory.working_set_bytes == 900 and usage.memory.rss_bytes == 800
    assert usage.memory.available_bytes is None          # unlimited
    assert usage.start_time is not None


def _v2_container(tmp_path, cpu_stat: str):
    """A cgroup v2 root holding container C1 of a best-effort pod, with its usage files."""
    root = tmp_path / "cg"
    _write(root, {"cgroup.controllers": "cpu memory\n"})
    scope = (root / "kubepods.slice" / "kubepods-besteffort.slice" /
             f"kubepods-besteffort-pod{UID_}.slice" / f"cri-containerd-{C1}.scope")
    _write(scope, {"cpu.stat": cpu_stat, "memory.current": "4096\n",
                   "memory.stat": "anon 1024\ninactive_file 96\npgfault 3\npgmajfault 0\n",
                   "memory.max": "8192\n"})
    return root, scope


def test_v2_discovery_and_usage(tmp_path):
    root, scope = _v2_container(tmp_path, "usage_usec 250\nuser_usec 200\n")
    _write(scope.parent / f"cri-containerd-{C2}.scope" / "container", {})   # crun child
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    found = reader.discover()
    assert set(found.containers) == {C1, C2}
    c1 = found.containers[C1]
    assert c1.runtime == "containerd" and c1.qos_class == "besteffort"
    usage = reader.usage(C1, c1.cgroup)
    assert usage.cpu.usage_core_nano_seconds == 250_000
    assert usage.memory.working_set_bytes == 4000 and usage.memory.available_bytes == 4192
    assert reader.device_rules(c1.cgroup) is None        # no devices.list on v2


def test_memory_figures_follow_every_input_from_read_to_read(tmp_path):
    """Figures worked out once are kept while their inputs stay; each read still carries its
    own time, and a change to any one file (memory.stat alone too) shows at the next read."""
    root, scope = _v2_container(tmp_path, "usage_usec 250\n")
    now = iter(range(100, 200))
    reader = CgroupReader(HostRoots(cgroup=str(root)), kept_files=16, wall=lambda: next(now))
    ref = reader.discover().containers[C1].cgroup

    def memory():
        figures = reader.usage(C1, ref).memory
        reader.end_tick()
        return figures

    first, second = memory(), memory()
    assert second.time > first.time
    assert second == MemoryStats(second.time, 4192, 4096, 4000, 1024, 3, 0)
    (scope / "memory.stat").write_text("anon 2048\ninactive_file 1096\npgfault 9\n"
                                       "pgmajfault 1\n")
    third = memory()
    assert third == MemoryStats(third.time, 5192, 4096, 3000, 2048, 9, 1)
    (scope / "memory.current").write_text("5096\n")
    assert memory().working_set_bytes == 4000
    (scope / "memory.stat").write_text("anon 2048\ninactive_file x\n")
    assert memory() == MemoryStats(third.time + 2, None, 5096, None, 2048, None, None)


def test_vanishing_containers_never_raise(tmp_path, monkeypatch):
    root = v1_tree(tmp_path)
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    found = reader.discover()
    import shutil
    shutil.rmtree(root / "devices" / "kubepods")
    shutil.rmtree(root / "memory")
    c1 = found.containers[C1]
    assert reader.device_rules(c1.cgroup) is None
    usage = reader.usage(C1, c1.cgroup)
    assert usage.memory is None and usage.cpu.usage_core_nano_seconds == 5_000_000_000
    again = reader.discover()
    assert C2 not in again.containers            # its only cgroup went away
    assert C1 in again.containers and C3 in again.containers   # still under cpuacct, docker


def test_kept_files_read_fresh_figures_and_close_with_their_cgroup(tmp_path):
    root = v1_tree(tmp_path)
    outside = len(open_descriptors())
    reader = CgroupReader(HostRoots(cgroup=str(root)), kept_files=16)
    before = len(open_descriptors())          # the reader's own: its inotify
    found = reader.discover()
    c1, c2 = found.containers[C1], found.containers[C2]
    assert reader.device_rules(c2.cgroup).all_devices
    assert reader.usage(C1, c1.cgroup).cpu.usage_core_nano_seconds == 5_000_000_000
    reader.end_tick()
    # devices.list of C2; cpuacct.usage, memory.usage_in_bytes, memory.stat of C1 (the limit
    # is read every 30 s, not kept).
    assert len(open_descriptors()) == before + 4
    pod = f"kubepods/burstable/pod{UID}"
    (root / "cpu,cpuacct" / pod / C1 / "cpuacct.usage").write_text("7000000000\n")
    import shutil
    shutil.rmtree(root / "devices" / pod / C2)
    found = reader.discover()
    assert C2 not in found.containers
    assert reader.usage(C1, found.containers[C1].cgroup).cpu.usage_core_nano_seconds \
        == 7_000_000_000
    reader.end_tick()
    assert len(open_descriptors()) == before + 3     # C2's file closed with it
    reader.close()
    assert len(open_descriptors()) == outside


def test_trees_are_walked_again_only_when_a_directory_comes_or_goes(tmp_path, monkeypatch):
    root = v1_tree(tmp_path)
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listed.append(path) or real_scandir(path))
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    first = reader.discover()
    walked = len(listed)
    assert walked > 0 and set(first.containers) == {C1, C2, C3}
    again = reader.discover()
    assert len(listed) == walked                         # nothing changed: no directory listed
    assert again.containers == first.containers and again.pods == first.pods
    again.containers.clear()                             # each caller gets its own copy
    assert set(reader.discover().containers) == {C1, C2, C3}
    c4 = "4" * 64
    (root / "devices" / "docker" / c4).mkdir()           # a container starts
    assert set(reader.discover().containers) == {C1, C2, C3, c4}
    import shutil
    shutil.rmtree(root / "devices" / "docker" / c4)      # and goes
    assert set(reader.discover().containers) == {C1, C2, C3}
    reader.close()


def test_without_inotify_every_discovery_walks(tmp_path, monkeypatch):
    from gpustats import dir_changes

    monkeypatch.setattr(dir_changes.ctypes, "CDLL",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("x")))
    root = v1_tree(tmp_path)
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    assert set(reader.discover().containers) == {C1, C2, C3}
    import shutil
    shutil.rmtree(root / "devices" / "docker" / C3)
    assert set(reader.discover().containers) == {C1, C2}


def test_walk_survives_directories_removed_mid_walk(tmp_path, monkeypatch):
    root = v1_tree(tmp_path)
    vanished = root / "devices" / "kubepods"     # C2's only cgroup; C1 has a memory one too
    real_scandir = os.scandir
    calls = []

    def flaky_scandir(path):
        calls.append(Path(path))
        if Path(path) == vanished:
            raise FileNotFoundError(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", flaky_scandir)
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    found = reader.discover().containers          # no exception
    reader.close()
    # What vanished is simply not there this tick; the walk went on past it.
    assert vanished in calls
    assert set(found) == {C1, C3}
    assert "devices" not in dict(found[C1].cgroup.paths)     # found by its other cgroups


def test_a_directory_that_could_not_be_listed_is_listed_again_at_the_next_discovery(
        tmp_path, monkeypatch):
    """A listing that fails while the directory is still there (out of descriptors, say) hides
    its containers for that discovery only: no inotify event will come for them, so the next
    discovery walks again and finds them."""
    root = v1_tree(tmp_path)
    unlistable = root / "devices" / "kubepods"     # C2's only cgroup is below it
    real_scandir = os.scandir
    failures = [OSError(24, "Too many open files")]

    def scandir_out_of_descriptors_once(path):
        if Path(path) == unlistable and failures:
            raise failures.pop()
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_out_of_descriptors_once)
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    try:
        assert set(reader.discover().containers) == {C1, C3}
        assert not failures
        assert set(reader.discover().containers) == {C1, C2, C3}
    finally:
        reader.close()


def test_proc_reader(tmp_path):
    proc = tmp_path / "proc"
    _write(proc / "4242", {"cgroup": f"0::/kubepods/pod{UID}/{C1}\n"})
    reader = ProcReader(HostRoots(proc=str(proc)))
    assert reader.owner_of(4242).container.info.container_id == C1
    assert reader.owner_of(999999) is None            # gone



def test_usages_read_many_cgroups_in_order_and_one_that_vanished_reads_as_gone(tmp_path):
    """The batch read of a tick: each cgroup's figures in the order asked; a cgroup removed
    between discovery and the read has none, and the others keep theirs."""
    root = v1_tree(tmp_path)
    # Files opened for each read: a kept descriptor of a regular file still reads it after
    # it is removed, where a removed kernel cgroup's file answers ENODEV.
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    found = reader.discover()
    wanted = [(C3, found.containers[C3].cgroup), (C1, found.containers[C1].cgroup),
              (("pod", UID), found.pods[UID])]

    def figures(usages):
        return [(u.cpu and u.cpu.usage_core_nano_seconds,
                 u.memory and u.memory.working_set_bytes) for u in usages]

    assert figures(reader.usages(wanted)) == \
        [(None, None), (5_000_000_000, 900), (6_000_000_000, None)]
    reader.end_tick()
    import shutil
    pod = f"kubepods/burstable/pod{UID}"
    shutil.rmtree(root / "cpu,cpuacct" / pod / C1)
    shutil.rmtree(root / "memory" / pod / C1)
    assert figures(reader.usages(wanted)) == [(None, None), (None, None), (6_000_000_000, None)]


# ------------------------------------------------------------------ churn

def churn_tree(root, pods=20, containers=3):
    """A v2 tree (systemd driver) of ``pods`` besteffort pods, plus a system slice."""
    _write(root, {"cgroup.controllers": "cpu memory\n"})
    slice_ = root / "kubepods.slice" / "kubepods-besteffort.slice"
    for p in range(pods):
        pod = slice_ / f"kubepods-besteffort-pod{p:08x}_aaaa_4bbb_8ccc_{p:012x}.slice"
        for c in range(containers):
            (pod / f"cri-containerd-{p * 100 + c:064x}.scope").mkdir(parents=True)
    for unit in range(30):
        (root / "system.slice" / f"unit{unit}.service").mkdir(parents=True)
    return root


class Lister:
    """Remembers every directory listed (``os.scandir``, which the walk lists with)."""

    def __init__(self, monkeypatch):
        self.listed, real = [], os.scandir
        monkeypatch.setattr(os, "scandir", lambda path: self.listed.append(str(path))
                            or real(path))

    def discover(self, reader):
        """What ``reader.discover()`` finds, and the directories it listed."""
        self.listed = []
        found = reader.discover()
        return found, self.listed


def churning_reader(root, monkeypatch):
    lister = Lister(monkeypatch)
    reader = CgroupReader(HostRoots(cgroup=str(root)))
    if reader._changes.unavailable:
        import pytest
        pytest.skip(reader._changes.unavailable)
    return reader, lister


def test_churn_in_one_subtree_lists_only_that_subtree(tmp_path, monkeypatch):
    """A cgroup made and removed under one pod is found and gone at the next discovery, and
    only the directories below the one made are listed, never the rest of the tree."""
    import shutil

    root = churn_tree(tmp_path / "cg")
    reader, lister = churning_reader(root, monkeypatch)
    first, listed = lister.discover(reader)
    assert len(first.containers) == 60 and len(first.pods) == 20
    # Root, 2 slices, pods, system.slice; not its units: a service's subtree is its own,
    # and holds no node container whatever it names its cgroups.
    assert len(listed) == 1 + 2 + 20 + 1
    pod = next(root.glob("kubepods.slice/*/*pod00000004*"))
    for round_ in range(3):
        cid = f"{0xc0ffee00 + round_:064x}"
        (pod / f"cri-containerd-{cid}.scope").mkdir()    # a container starts
        (pod / "churn" / "a" / "b").mkdir(parents=True)  # and a plain subtree comes
        found, listed = lister.discover(reader)
        assert cid in found.containers and found.containers[cid].pod_uid.startswith("00000004")
        assert sorted(listed) == [str(pod / "churn"), str(pod / "churn" / "a"),
                                  str(pod / "churn" / "a" / "b")]
        (pod / f"cri-containerd-{cid}.scope").rmdir()    # and both go
        shutil.rmtree(pod / "churn")
        found, listed = lister.discover(reader)
        assert cid not in found.containers and len(found.containers) == 60
        assert listed == []                              # a removal lists nothing
    found, listed = lister.discover(reader)
    assert found.containers.keys() == first.containers.keys() and listed == []
    reader.close()


def test_a_pod_made_whole_between_ticks_and_a_renamed_slice_are_seen(tmp_path, monkeypatch):
    import shutil

    root = churn_tree(tmp_path / "cg", pods=2)
    reader, lister = churning_reader(root, monkeypatch)
    reader.discover()
    slice_ = root / "kubepods.slice" / "kubepods-besteffort.slice"
    new_pod = slice_ / f"kubepods-besteffort-pod{UID_}.slice"
    (new_pod / f"cri-containerd-{C1}.scope").mkdir(parents=True)   # pod and container at once
    found, listed = lister.discover(reader)
    assert found.containers[C1].pod_uid == UID and UID in found.pods
    assert listed == [str(new_pod)]
    (root / "system.slice").rename(root / "moved.slice")             # renamed: old path goes
    (root / "moved.slice" / "unit0.service" / "docker").mkdir()      # a service's own
    (root / "moved.slice" / "unit0.service" / "docker" / C1).mkdir()
    (root / "docker" / C2).mkdir(parents=True)                       # Docker's cgroupfs driver
    found, listed = lister.discover(reader)
    assert found.containers[C2].runtime == "docker"
    assert listed == [str(root / "docker")]
    shutil.rmtree(slice_)                                            # a whole QoS slice goes
    found, listed = lister.discover(reader)
    assert set(found.containers) == {C2} and found.pods == {} and listed == []
    reader.close()


def test_an_overflowed_event_queue_falls_back_to_a_full_walk(tmp_path, monkeypatch):
    """When the kernel's queue overflowed (``events()`` is None: IN_Q_OVERFLOW, see the
    hostfs tests) the tree is walked in full, and what changed meanwhile is all found."""
    root = churn_tree(tmp_path / "cg", pods=2)
    reader, lister = churning_reader(root, monkeypatch)
    reader.discover()
    (root / "kubepods.slice" / "docker").mkdir()
    (root / "kubepods.slice" / "docker" / C3).mkdir()
    real_events = reader._changes.events
    monkeypatch.setattr(reader._changes, "events", lambda: real_events() and None)
    found, listed = lister.discover(reader)
    assert C3 in found.containers
    assert len(listed) == 1 + 2 + 2 + 1 + 1    # all but containers and units, from the root
    assert listed[0] == str(root)
    monkeypatch.setattr(reader._changes, "events", real_events)
    again, listed = lister.discover(reader)
    assert again.containers.keys() == found.containers.keys() and listed == []
    reader.close()


def test_container_cgroups_past_the_cap_are_left_out_and_said(tmp_path):
    """At most ``MAX_FOUND`` container and pod cgroups per hierarchy are kept; past that the
    source fails with ``too_many_cgroups``, and what was left out is found once room is made."""
    import shutil

    from gpustats.sources.errors import CollectionErrors

    root = tmp_path / "cg"
    _write(root, {"cgroup.controllers": "cpu memory\n"})
    for n in range(6):
        (root / "docker" / f"{n:064x}").mkdir(parents=True)
    errors = CollectionErrors()
    reader = CgroupReader(HostRoots(cgroup=str(root)), errors=errors)
    reader._tree.max_found = 4
    assert len(reader.discover().containers) == 4
    reader.end_tick()
    assert [(s.source, s.state, s.last_error_reason) for s in errors.states()] == \
        [("cgroups", "failing", "too_many_cgroups")]
    for n in range(3):
        shutil.rmtree(root / "docker" / f"{n:064x}")
    assert len(reader.discover().containers) == 3
    reader.end_tick()
    assert [(s.source, s.state) for s in errors.states()] == [("cgroups", "ok")]
    reader.close()
