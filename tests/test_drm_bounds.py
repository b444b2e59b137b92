"""The DRM backend's bounds, pure parts first: the kernel's clients list (drm_debugfs.c
``drm_clients_info``), GT idle residency, engine time within a tick, unseen work, the owner of
a shared client, the read budget; then a scanner under a budget on a fake tree."""

from __future__ import annotations

import pytest

from gpustats.engine_time import weights_by_engine_time
from gpustats.model.attribution import SHARE_ENGINE_TIME, SHARE_EXCLUSIVE
from gpustats.sources.drm.budget import ReadBudget, RoundRobin
from gpustats.sources.drm.clients import ClientScanner, ClientTick, within_tick
from gpustats.sources.drm.debugfs import ListedClient, parse_clients
from gpustats.sources.drm.engine_bounds import clamp_device, seen_utilization, unseen_seconds
from gpustats.sources.drm.fdinfo import DrmFdinfo
from gpustats.sources.drm.gt_idle import busy_fraction
from gpustats.sources.drm.owners import owners_of
from gpustats.sources.drm.reads import FsReads
from tests.support.clock import Clock
from tests.support.drm_tree import DrmClient, DrmTree

AMD = "0000:19:00.0"
# drm_clients_info before 6.14: "%20s %5s %3s master a %5s %10s" then one line per file.
CLIENTS_6_8 = ("             command  tgid dev master a   uid      magic\n"
               "                Xorg  1201   0   y    y     0          0\n"
               "             python3  4242 128   n    n  1000          0\n"
               "           my app x   4243 128   n    n  1000          0\n"
               "           <unknown>     0 128   n    n     0          0\n")
# 6.14+: the client's name (%*s, 64 wide, "<unset>"), then the client's ID (%20llu).
CLIENTS_ID = ("             command  tgid dev master a   uid      magic" + " " * 61 + "name"
              + " " * 19 + "id\n"
              "             python3  4242 128   n    n  1000          0" + " " * 58 + "<unset>"
              + " " * 19 + "17\n")


def test_the_kernels_clients_list_parses_in_each_format():
    assert parse_clients(CLIENTS_6_8) == (
        ListedClient(1201, 0, 0, None), ListedClient(4242, 128, 1000, None),
        ListedClient(4243, 128, 1000, None))          # a command with a space; no kernel task
    assert parse_clients(CLIENTS_ID) == (ListedClient(4242, 128, 1000, 17),)
    with pytest.raises(ValueError):
        parse_clients("not a list\n")


def test_the_pieces_of_a_line_a_command_with_a_line_break_split_are_skipped():
    """A forged whole line would be read: what it names is checked in fdinfo (owners.py)."""
    split = CLIENTS_6_8.splitlines()[0] + "\n" + "  x\n1 2\n" + \
        "             python3  4242 128   n    n  1000          0\n"
    assert parse_clients(split) == (ListedClient(4242, 128, 1000, None),)


def test_gt_busy_is_the_busiest_gts_time_out_of_idle():
    assert busy_fraction((0.0, {"a": 0, "b": 0}), (10.0, {"a": 6000, "b": 9000})) == \
        pytest.approx(0.4)
    assert busy_fraction((0.0, {"a": 500}), (10.0, {"a": 100})) is None      # went back
    assert busy_fraction((0.0, {"a": 0}), (10.0, {"a": 10_050})) == 0.0     # clamped


def test_engine_time_within_a_tick():
    assert within_tick({"gfx": 5.0}, {}, 1.0, 1.0) == {"gfx": 1.0}
    assert within_tick({"video": 5.0}, {"video": 2}, 1.0, 1.0) == {"video": 2.0}
    assert within_tick({"gfx": 1.0}, {}, 1.0, 4.0) == {"gfx": 0.25}     # unread for 4 s
    assert within_tick({"gfx": 3.0}, {}, None, None) == {"gfx": 3.0}    # the first scan


def _client(pid, seconds, capacity=1):
    return ClientTick(pid=pid, driver="amdgpu", pdev=AMD, node_minor=128,
                      engine_seconds={"gfx": seconds}, capacity={"gfx": capacity},
                      local_memory_bytes=None)


def test_a_devices_clients_together_fit_in_the_tick():
    clamped = clamp_device([_client(1, 1.0), _client(2, 0.5)], 1.0)
    assert [c.busy_seconds for c in clamped] == [pytest.approx(2 / 3), pytest.approx(1 / 3)]
    assert seen_utilization(clamped, 1.0) == pytest.approx(1.0)


def test_work_the_device_did_beyond_its_clients_is_unseen():
    seen = [_client(1, 0.5)]
    assert unseen_seconds(seen, 1.0, 100) == pytest.approx(0.5)          # half of the work
    assert unseen_seconds(seen, 1.0, 70) == 0.0                           # within the margin
    assert unseen_seconds(seen, 1.0, None) == 0.0
    assert unseen_seconds([_client(1, 0.0)], 1.0, 100) == pytest.approx(1.0)
    weights, method = weights_by_engine_time({1: 0.5}, 0.5)
    assert weights == {1: 0.5} and method == SHARE_ENGINE_TIME
    assert weights_by_engine_time({1: 0.5}) == ({1: 1.0}, SHARE_EXCLUSIVE)


def test_a_shared_clients_owner():
    info = DrmFdinfo(driver="amdgpu", pdev=AMD, client_id=9)
    held = {(AMD, 9): [(200, 128, info), (500, 128, info)]}
    cgroups = {200: "0::/b\n", 500: "0::/a\n"}
    assert owners_of(held, None, cgroups.get) == {}                          # ambiguous
    assert owners_of(held, {500: ((128, 9),)}, cgroups.get) == {(AMD, 9): 500}
    assert owners_of(held, None, {200: "0::/a\n", 500: "0::/a\n"}.get) == {(AMD, 9): 200}


def test_round_robin_reads_known_holders_then_what_was_left_then_the_rest():
    turns = RoundRobin()
    turns.carry([9, 7])
    assert turns.order([1, 3, 5, 7, 9], cheap={5}) == [5, 9, 7, 1, 3]


def test_a_budget_cut_walk_goes_on_where_it_stopped(tmp_path):
    tree = DrmTree(tmp_path)
    tree.add_amd_gpu(AMD, card=0)
    tree.add_process(300, {**{fd: "/dev/null" for fd in range(2000)},
                           2000: DrmClient("amdgpu", AMD, 4, engine_ns={"gfx": 1})})
    tree.add_process(100, {3: DrmClient("amdgpu", AMD, 5, engine_ns={"gfx": 1})})
    fs, clock = FsReads(), Clock(0.0)
    scanner = ClientScanner(str(tree.proc), fs, ("amdgpu",), monotonic=clock,
                            budget=ReadBudget(lambda: fs.calls, clock, reads=600))
    first = scanner.scan()
    assert [c.pid for c in first.clients] == [100] and first.deferred == (300,)
    clock.now += 1
    scan = scanner.scan()
    while scan.deferred:
        clock.now += 1
        scan = scanner.scan()
    assert sorted(c.pid for c in scan.clients) == [100, 300]


def test_the_kernels_list_makes_a_dup_attack_cost_a_few_reads(tmp_path):
    tree = DrmTree(tmp_path)
    tree.add_amd_gpu(AMD, card=0)
    client = DrmClient("amdgpu", AMD, 4, engine_ns={"gfx": 1})
    tree.add_process(300, {fd: client for fd in range(3, 4000)})
    fs = FsReads()
    scanner = ClientScanner(str(tree.proc), fs, ("amdgpu",), monotonic=Clock(0.0))
    scan = scanner.scan({300: ((128, 4),)})
    assert [c.pid for c in scan.clients] == [300]
    assert fs.calls < 10                    # the fd list, one link, one fdinfo
