"""DRM fdinfo: the parser on the drivers' own texts, and the client scan's counting rules
(one client per drm-client-id, dips, first-seen, bounded re-reads, refusals)."""

import logging

import pytest

from gpustats.sources.drm.clients import ClientScanner, local_memory
from gpustats.sources.drm.fdinfo import parse_fdinfo, parse_number
from gpustats.sources.drm.reads import FsReads
from tests.support.clock import Clock
from tests.support.drm_tree import (DrmClient, DrmTree, fdinfo_text, listdir_as_unprivileged,
                                    size_text)

AMD = "0000:19:00.0"
INTEL = "0000:03:00.0"

# amdgpu_fdinfo.c as of 6.x (drm_show_fdinfo prints driver, client-id and pdev first).
AMDGPU_TEXT = (
    "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1087\n"
    "drm-driver:\tamdgpu\ndrm-client-id:\t1042\ndrm-pdev:\t0000:19:00.0\npasid:\t32770\n"
    "drm-total-cpu:\t0\ndrm-shared-cpu:\t0\ndrm-active-cpu:\t0\ndrm-resident-cpu:\t0\n"
    "drm-purgeable-cpu:\t0\n"
    "drm-total-gtt:\t2 MiB\ndrm-shared-gtt:\t0\ndrm-active-gtt:\t0\ndrm-resident-gtt:\t2 MiB\n"
    "drm-purgeable-gtt:\t0\n"
    "drm-total-vram:\t1536 MiB\ndrm-shared-vram:\t0\ndrm-active-vram:\t0\n"
    "drm-resident-vram:\t1535 MiB\ndrm-purgeable-vram:\t0\n"
    "amd-evicted-vram:\t0 KiB\namd-requested-vram:\t1572864 KiB\namd-requested-gtt:\t2048 KiB\n"
    "drm-engine-gfx:\t123456789 ns\ndrm-engine-compute:\t5000000000 ns\n")

# i915_drm_client.c: every class printed, capacity only when > 1.
I915_TEXT = (
    "pos:\t0\nflags:\t02100002\nmnt_id:\t15\nino:\t1234\n"
    "drm-driver:\ti915\ndrm-client-id:\t7\ndrm-pdev:\t0000:03:00.0\n"
    "drm-total-system0:\t4 MiB\ndrm-shared-system0:\t0\ndrm-active-system0:\t0\n"
    "drm-resident-system0:\t4 MiB\ndrm-purgeable-system0:\t0\n"
    "drm-total-local0:\t300 KiB\ndrm-resident-local0:\t300 KiB\n"
    "drm-engine-render:\t9288864723 ns\ndrm-engine-copy:\t0 ns\n"
    "drm-engine-video:\t52567609040 ns\ndrm-engine-capacity-video:\t2\n"
    "drm-engine-video-enhance:\t0 ns\n")

# xe_drm_client.c's DOC example.
XE_TEXT = (
    "pos:\t0\nflags:\t0100002\nmnt_id:\t26\nino:\t685\n"
    "drm-driver:\txe\ndrm-client-id:\t3\ndrm-pdev:\t0000:03:00.0\n"
    "drm-total-system:\t0\ndrm-resident-system:\t0\n"
    "drm-total-gtt:\t192 KiB\ndrm-resident-gtt:\t192 KiB\n"
    "drm-total-vram0:\t23992 KiB\ndrm-shared-vram0:\t16 MiB\ndrm-resident-vram0:\t23992 KiB\n"
    "drm-cycles-rcs:\t28257900\ndrm-total-cycles-rcs:\t7655183225\n"
    "drm-cycles-vcs:\t0\ndrm-total-cycles-vcs:\t7655183225\ndrm-engine-capacity-vcs:\t2\n"
    "drm-cycles-ccs:\t0\ndrm-total-cycles-ccs:\t7655183225\ndrm-engine-capacity-ccs:\t4\n")


def test_amdgpu_text_units_and_regions():
    info = parse_fdinfo(AMDGPU_TEXT)
    assert (info.driver, info.pdev, info.client_id) == ("amdgpu", AMD, 1042)
    assert info.engine_ns == {"gfx": 123456789, "compute": 5_000_000_000}
    assert info.resident_bytes("vram") == 1535 << 20
    assert info.memory["total"]["vram"] == 1536 << 20
    assert info.resident_bytes("gtt") == 2 << 20
    assert info.resident_bytes("cpu") == 0
    assert info.engine_capacity("gfx") == 1
    assert local_memory(info) == 1535 << 20          # vram only, not gtt or cpu


def test_i915_capacity_and_local_memory():
    info = parse_fdinfo(I915_TEXT)
    assert info.engine_ns["video"] == 52567609040 and info.engine_ns["copy"] == 0
    assert info.capacity == {"video": 2}
    assert info.engine_capacity("video") == 2 and info.engine_capacity("render") == 1
    assert local_memory(info) == 300 * 1024


def test_xe_cycles_are_not_memory_and_capacity_is_not_an_engine():
    info = parse_fdinfo(XE_TEXT)
    assert info.cycles == {"rcs": 28257900, "vcs": 0, "ccs": 0}
    assert info.total_cycles == {"rcs": 7655183225, "vcs": 7655183225, "ccs": 7655183225}
    assert info.capacity == {"vcs": 2, "ccs": 4}
    assert info.engine_ns == {}
    assert "cycles-rcs" not in info.regions()
    assert info.memory["shared"]["vram0"] == 16 << 20
    assert local_memory(info) == 23992 * 1024


def test_deprecated_memory_key_is_resident_unless_the_new_one_is_there():
    legacy = parse_fdinfo("drm-driver:\tamdgpu\ndrm-memory-vram:\t1024 KiB\n"
                          "drm-memory-gtt:\t0 KiB\n")
    assert legacy.resident_bytes("vram") == 1 << 20
    both = parse_fdinfo("drm-driver:\tamdgpu\ndrm-memory-vram:\t1024 KiB\n"
                        "drm-resident-vram:\t5 MiB\n")
    assert both.resident_bytes("vram") == 5 << 20


def test_resident_falls_back_to_total_and_missing_is_none():
    info = parse_fdinfo("drm-driver:\ti915\ndrm-total-local0:\t8192\n")
    assert info.resident_bytes("local0") == 8192
    assert info.resident_bytes("vram") is None
    assert local_memory(parse_fdinfo("drm-driver:\ti915\ndrm-total-system0:\t8192\n")) is None


def test_not_drm_and_missing_optional_lines():
    assert parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t25\n") is None
    assert parse_fdinfo("") is None
    info = parse_fdinfo("drm-driver:\tamdgpu\n")
    assert (info.pdev, info.client_id, info.engine_ns, info.memory) == (None, None, {}, {})


def test_malformed_lines_are_skipped():
    info = parse_fdinfo("drm-driver:\tamdgpu\ndrm-engine-gfx:\tlots ns\n"
                        "drm-engine-dma:\t12 %\ndrm-engine-compute:\t-5 ns\n"
                        "drm-engine-enc:\t\u00b2 ns\ndrm-total-vram:\t3 PiB\n"
                        "drm-engine-dec:\t99999999999999999999999 ns\n"
                        "drm-client-id:\tx\ngarbage\ndrm-engine-jpeg:\t40 ns\n"
                        "drm-engine-capacity-gfx:\t0\n")
    assert info.engine_ns == {"jpeg": 40}
    assert info.memory == {} and info.client_id is None and info.capacity == {}


def test_numbers_and_units():
    assert parse_number("5") == 5
    assert parse_number("3 KiB") == 3072 and parse_number("2 MiB") == 2 << 20
    assert parse_number("2 MB") is None and parse_number("") is None
    assert parse_number("1 2 3") is None
    assert parse_number(str(2 ** 64)) is None


def test_entries_are_bounded():
    text = "drm-driver:\tamdgpu\n" + "".join(f"drm-engine-e{i}:\t{i} ns\n" for i in range(500))
    assert len(parse_fdinfo(text).engine_ns) == 64


def test_the_tree_writes_what_the_parser_reads():
    assert size_text(0) == "0" and size_text(3 << 20) == "3 MiB" and size_text(1536) == "1536"
    client = DrmClient("amdgpu", AMD, 9, engine_ns={"gfx": 10, "dma": 0},
                       memory={"vram": 5 << 20})
    text = fdinfo_text(client)
    assert "drm-engine-gfx:\t10 ns\n" in text and "drm-engine-dma" not in text
    info = parse_fdinfo(text)
    assert info.engine_ns == {"gfx": 10} and info.resident_bytes("vram") == 5 << 20


# --- the client scan ------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path):
    t = DrmTree(tmp_path)
    t.add_amd_gpu(AMD, card=1)
    return t


def _scanner(tree, clock, fs=None, rescan_every=12, capabilities=0):
    """``capabilities``: the daemon's effective set as it reads it (none by default: a
    refusal is for want of one)."""
    return ClientScanner(str(tree.proc), fs or FsReads(), ("amdgpu",),
                         rescan_every=rescan_every, monotonic=clock,
                         capabilities=lambda: capabilities)


def _busy(scan):
    return {c.pid: c.busy_seconds for c in scan.clients}


def test_a_client_shared_by_dup_and_fork_counts_once_for_the_lowest_pid(tree):
    clock = Clock(100.0)
    shared = DrmClient("amdgpu", AMD, 5, engine_ns={"gfx": 0})
    tree.add_process(300, {3: shared, 4: shared})           # dup'ed in one process
    tree.add_process(200, {7: shared, 1: "/dev/null"})     # inherited by another
    for pid in (200, 300):                                 # a fork: one cgroup
        (tree.proc / str(pid) / "cgroup").write_text("0::/system.slice/app.service\n")
    scanner = _scanner(tree, clock)
    scanner.scan()
    tree.update_client(300, 3, engine_ns={"gfx": 2_000_000_000})
    clock.now += 5
    scan = scanner.scan()
    assert _busy(scan) == {200: pytest.approx(2.0)}


def test_a_client_held_across_cgroups_has_no_owner_unless_the_kernel_names_it(tree):
    """Passed over a unix socket to another tenant's process: billed to neither holder by
    PID order; the kernel's clients list (with IDs) names the process that uses it."""
    clock = Clock(100.0)
    shared = DrmClient("amdgpu", AMD, 5, engine_ns={"gfx": 0})
    tree.add_process(500, {3: shared})
    tree.add_process(200, {9: shared})
    (tree.proc / "500" / "cgroup").write_text("0::/system.slice/docker-a.scope\n")
    (tree.proc / "200" / "cgroup").write_text("0::/system.slice/docker-b.scope\n")
    scanner = _scanner(tree, clock)
    scanner.scan()
    tree.update_client(500, 3, engine_ns={"gfx": 2_000_000_000})
    clock.now += 5
    assert _busy(scanner.scan()) == {None: pytest.approx(2.0)}
    listed = {500: ((129, 5),), 200: ((129, 7),)}     # renderD129: card1's
    tree.update_client(500, 3, engine_ns={"gfx": 3_000_000_000})
    clock.now += 5
    assert _busy(scanner.scan(listed)) == {500: pytest.approx(1.0)}


def test_first_scan_is_a_baseline_and_a_later_client_counts_whole(tree):
    clock = Clock(100.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1, engine_ns={"gfx": 7_000_000_000})})
    scanner = _scanner(tree, clock)
    first = scanner.scan()
    assert _busy(first) == {10: 0.0} and first.interval_seconds is None
    tree.add_process(11, {3: DrmClient("amdgpu", AMD, 2, engine_ns={"gfx": 1_500_000_000})})
    clock.now += 5
    scan = scanner.scan()
    assert _busy(scan) == {10: 0.0, 11: pytest.approx(1.5)}
    assert scan.interval_seconds == 5


def test_a_dip_counts_nothing_until_the_counter_catches_up(tree):
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1, engine_ns={"gfx": 10_000_000_000})})
    scanner = _scanner(tree, clock)
    scanner.scan()
    steps = [(9_000_000_000, 0.0), (9_500_000_000, 0.0), (11_000_000_000, 1.0),
             (12_000_000_000, 1.0)]
    for ns, expected in steps:
        tree.update_client(10, 3, engine_ns={"gfx": ns})
        clock.now += 5
        assert _busy(scanner.scan())[10] == pytest.approx(expected), ns


def test_a_class_printed_later_counts_from_zero(tree):
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1, engine_ns={"gfx": 1})})
    scanner = _scanner(tree, clock)
    scanner.scan()
    tree.update_client(10, 3, engine_ns={"compute": 2_000_000_000})
    clock.now += 5
    assert scanner.scan().clients[0].engine_seconds == {"gfx": 0.0, "compute": 2.0}


def test_known_holders_every_scan_new_pids_once_all_pids_every_rescan(tree):
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1)})
    tree.add_process(20, {1: "/dev/null"})
    scanner = _scanner(tree, clock, rescan_every=3)
    scanner.scan()                                     # scan 0: everyone
    tree.open_client(20, 4, DrmClient("amdgpu", AMD, 2, engine_ns={"gfx": 10**9}))
    tree.add_process(30, {3: DrmClient("amdgpu", AMD, 3, engine_ns={"gfx": 10**9})})
    clock.now += 5
    assert sorted(_busy(scanner.scan())) == [10, 30]    # 20 not re-read; 30 is new
    clock.now += 5
    assert sorted(_busy(scanner.scan())) == [10, 30]
    clock.now += 5
    rescan = scanner.scan()                            # scan 3: everyone again
    assert _busy(rescan) == {10: 0.0, 20: pytest.approx(1.0), 30: 0.0}


def test_a_closed_client_disappears(tree):
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1), 4: DrmClient("amdgpu", AMD, 2)})
    scanner = _scanner(tree, clock)
    scanner.scan()
    tree.close_fd(10, 4)
    tree.remove_process(10)
    clock.now += 5
    assert scanner.scan().clients == ()


def test_other_drivers_clients_are_left_out(tree):
    tree.add_intel_gpu(INTEL, card=0)
    tree.add_process(10, {3: DrmClient("i915", INTEL, 1, engine_ns={"render": 5})})
    assert _scanner(tree, Clock(0.0)).scan().clients == ()


def test_refused_processes_make_the_scan_incomplete_logged_once(tree, caplog):
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1)})
    tree.add_process(20, {3: DrmClient("amdgpu", AMD, 2)})
    tree.add_process(30, {3: DrmClient("amdgpu", AMD, 3)})
    tree.refuse(20)
    tree.refuse(30)
    scanner = _scanner(tree, clock, FsReads(listdir=listdir_as_unprivileged), rescan_every=2)
    with caplog.at_level(logging.WARNING):
        scan = scanner.scan()
        clock.now += 5
        again = scanner.scan()
        clock.now += 5
        rescan = scanner.scan()
    assert [c.pid for c in scan.clients] == [10] and not scan.complete
    assert not again.complete and not rescan.complete
    assert scanner.refusals["fd"] == 4                  # both, at scans 0 and 2
    logged = [r.getMessage() for r in caplog.records if "CAP_SYS_PTRACE" in r.getMessage()]
    assert len(logged) == 1 and "lacks CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE" in logged[0]
    tree.remove_process(20)
    tree.remove_process(30)
    clock.now += 5
    assert scanner.scan().complete                      # the refused ones ended


def test_xe_gpu_timestamp_going_back_is_taken_afresh(tree):
    tree.add_intel_gpu(INTEL, driver="xe", card=0)
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("xe", INTEL, 1, cycles={"rcs": 0}, total_cycles=10**9)})
    scanner = ClientScanner(str(tree.proc), FsReads(), ("xe",), monotonic=clock)
    scanner.scan()
    steps = [(10**9 + 10**8, 5 * 10**7, 2.5),      # half the GPU time busy over 5 s
             (10**7, 6 * 10**7, 0.0),              # reset: the timestamp restarts
             (10**7 + 10**8, 11 * 10**7, 2.5)]     # and counts again from there
    for total, cycles, expected in steps:
        tree.update_client(10, 3, cycles={"rcs": cycles}, total_cycles=total)
        clock.now += 5
        assert _busy(scanner.scan())[10] == pytest.approx(expected), total


def test_a_process_refused_whatever_the_capabilities_is_named_and_the_rest_complete(tree,
                                                                                      caplog):
    """With CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE held, a refusal is a security module's or
    another user namespace's: that PID alone is unknown, the scan of the others complete."""
    clock = Clock(0.0)
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1)})
    tree.add_process(20, {3: DrmClient("amdgpu", AMD, 2)})
    tree.refuse(20)
    both = 1 << 2 | 1 << 19
    scanner = _scanner(tree, clock, FsReads(listdir=listdir_as_unprivileged),
                       capabilities=both)
    with caplog.at_level(logging.WARNING):
        scan = scanner.scan()
        clock.now += 5
        again = scanner.scan()
    assert [c.pid for c in scan.clients] == [10]
    assert scan.complete and scan.unreadable == (20,) and again.unreadable == (20,)
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and logged[0].startswith("PID 20: ")
    assert "although the daemon holds CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE" in logged[0]
    tree.remove_process(20)
    clock.now += 5
    assert scanner.scan().unreadable == ()


def test_a_refusal_names_only_the_capability_the_daemon_lacks(tree, caplog):
    tree.add_process(10, {3: DrmClient("amdgpu", AMD, 1)})
    tree.refuse(10)
    ptrace_only = 1 << 19
    scanner = _scanner(tree, Clock(0.0), FsReads(listdir=listdir_as_unprivileged),
                       capabilities=ptrace_only)
    with caplog.at_level(logging.WARNING):
        assert not scanner.scan().complete
    assert "the daemon lacks CAP_DAC_READ_SEARCH (" in caplog.records[0].getMessage()
