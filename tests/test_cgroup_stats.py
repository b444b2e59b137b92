import pytest

from gpustats.sources.cgroup_stats import (
    CpuRateTracker, cpu_stat_usage_usec, memory_stats, parse_devices_list, parse_flat_keyed,
    parse_limit,
)
from gpustats.sources.procs import container_from_paths, parse_proc_cgroup

CID = "a" * 64
UID = "2fc932ce-fdcc-454b-97bd-aadfdeb4c340"


@pytest.mark.parametrize("text, minors, all_devices, all_nvidia, malformed", [
    ("c 195:0 rw\n", {0}, False, False, 0),
    ("c 195:0 rw\nc 195:3 rwm\nc 195:255 rw\nc 195:254 rw\n", {0, 3}, False, False, 0),
    ("a *:* rwm\n", set(), True, False, 0),
    ("c 195:* rwm\n", set(), False, True, 0),
    ("c 1:3 rwm\nc 136:* rwm\nb 7:* rw\nc 195:1 rw\n", {1}, False, False, 0),
    ("c 195:0 rw\ngarbage line\nc 195 rw\nc 195:x rw\n", {0}, False, False, 3),
    ("", set(), False, False, 0),
    ("c 195:127 rw\nc 195:128 rw\n", {127}, False, False, 0),
])
def test_devices_list(text, minors, all_devices, all_nvidia, malformed):
    rules = parse_devices_list(text)
    assert rules.gpu_minors == frozenset(minors)
    assert (rules.all_devices, rules.all_nvidia, rules.malformed_lines) == \
        (all_devices, all_nvidia, malformed)


def test_flat_keyed_skips_malformed():
    assert parse_flat_keyed("usage_usec 10\nuser_usec x\nbad\nsystem_usec 5 6\nnr 3\n") == \
        {"usage_usec": 10, "nr": 3}


@pytest.mark.parametrize("text, usec", [
    ("usage_usec 10\nuser_usec 7\nsystem_usec 3\n", 10),
    ("usage_usec 10", 10),                               # no newline at the end
    ("nr_periods 0\nusage_usec 42\n", 42),                # not first: still found
    ("usage_usec x\nusage_usec 5\n", 5),                 # a malformed first line
    ("user_usec 7\n", None),
    ("", None),
])
def test_cpu_stat_usage(text, usec):
    assert cpu_stat_usage_usec(text) == usec
    assert cpu_stat_usage_usec(text.encode()) == usec       # bytes as read: the same


def test_bytes_that_int_takes_only_as_text_are_read_as_text():
    """``int`` of text takes non-ASCII digits and spaces, ``int`` of bytes does not: bytes
    read give what their text gives."""
    assert cpu_stat_usage_usec("usage_usec \u0661\u0662\n".encode()) == 12
    assert parse_flat_keyed("anon \u00a07\u00a0\n".encode(), frozenset({"anon"})) == {"anon": 7}


def test_limits():
    assert parse_limit("max\n", v2=True) is None
    assert parse_limit("1048576\n", v2=True) == 1048576
    assert parse_limit("9223372036854771712\n", v2=False) is None   # v1 "unlimited"
    assert parse_limit("536870912", v2=False) == 536870912
    assert parse_limit(None, v2=False) is None
    assert parse_limit("junk", v2=True) is None


def test_memory_working_set_v1_and_v2():
    v1 = memory_stats(1.0, 1000, {"total_inactive_file": 300, "total_rss": 500,
                                  "total_pgfault": 7, "total_pgmajfault": 1}, 4000, v2=False)
    assert (v1.usage_bytes, v1.working_set_bytes, v1.rss_bytes) == (1000, 700, 500)
    assert v1.available_bytes == 3300 and v1.page_faults == 7 and v1.major_page_faults == 1
    v2 = memory_stats(1.0, 1000, {"inactive_file": 1200, "anon": 10}, None, v2=True)
    assert v2.working_set_bytes == 0            # clamped
    assert v2.available_bytes is None           # no limit: left out
    missing = memory_stats(1.0, 1000, {}, None, v2=True)
    assert missing.working_set_bytes is None and missing.rss_bytes is None   # absent, not 0


def test_cpu_rate_from_two_samples_of_each_key():
    tracker = CpuRateTracker()
    first = tracker.stats("c", 100.0, 10.0, 1_000_000_000)
    assert first.usage_core_nano_seconds == 1_000_000_000 and first.usage_nano_cores is None
    second = tracker.stats("c", 102.0, 12.0, 2_000_000_000)
    assert second.usage_nano_cores == 500_000_000
    assert tracker.stats("d", 102.0, 12.0, 5).usage_nano_cores is None     # its first sample
    assert tracker.stats("c", 104.0, 14.0, 1_000).usage_nano_cores is None  # went backwards
    assert tracker.stats("d", 1.0, 1.0, None) is None


def test_proc_cgroup_v1_v2_and_garbage():
    text = (f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n"
            f"11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}\n"
            "10:name=systemd:/system.slice/containerd.service\n"
            f"0::/kubepods/burstable/pod{UID}/{CID}\n"
            "not a line\n")
    paths = parse_proc_cgroup(text)
    assert paths["memory"] == paths["cpuacct"] == paths["cpu"] == paths[""]
    assert paths["name=systemd"] == "/system.slice/containerd.service"
    found = container_from_paths(paths)
    assert found.info.container_id == CID and found.info.pod_uid == UID
    assert dict(found.cgroup.paths)["cpuacct"] == f"/kubepods/burstable/pod{UID}/{CID}"


def test_proc_cgroup_not_in_container():
    assert container_from_paths(parse_proc_cgroup("0::/user.slice/user-0.slice\n")) is None
    assert container_from_paths(parse_proc_cgroup("")) is None


def test_drm_render_and_card_nodes_are_gpu_assignments():
    from gpustats.sources.cgroup_stats import parse_devices_list
    rules = parse_devices_list("c 195:255 rw\nc 226:1 rw\nc 226:129 rw\nc 238:0 rw\n")
    assert rules.drm_minors == {1, 129} and rules.gpu_minors == frozenset()
    assert rules.gpu_nodes == {(226, 1), (226, 129)}          # 238:0, /dev/kfd: no GPU alone
    every = parse_devices_list("c 226:* rwm\nc 195:0 rw\n")
    assert every.all_drm and every.gpu_nodes == {(195, 0)}
