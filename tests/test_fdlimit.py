"""The open-file limit shared by client connections and kept-open cgroup files."""

import logging
import resource

import pytest

from gpustats import fdlimit


@pytest.fixture
def limits(monkeypatch):
    """A fake RLIMIT_NOFILE: ``state`` holds [soft, hard]; ``refuse`` makes raising fail."""
    state = {"limits": [1024, 1024], "refuse": False}

    def get(which):
        assert which == resource.RLIMIT_NOFILE
        return tuple(state["limits"])

    def set_(which, value):
        if state["refuse"]:
            raise OSError("not permitted")
        state["limits"] = list(value)

    monkeypatch.setattr(resource, "getrlimit", get)
    monkeypatch.setattr(resource, "setrlimit", set_)
    return state


def test_connections_come_first_and_kept_files_get_what_is_left(limits):
    limits["limits"] = [1024, 2048]
    assert fdlimit.kept_file_limit() == 2048 - 1024 - 64 - 256 - 64      # watches too
    assert limits["limits"] == [2048, 2048]
    assert fdlimit.connection_limit() == 1024


def test_a_roomy_hard_limit_is_raised_to_what_both_want(limits):
    limits["limits"] = [1024, 1 << 20]
    assert fdlimit.kept_file_limit() == fdlimit.KEPT_FILES_MAX
    assert limits["limits"][0] == 1024 + 64 + 256 + 64 + fdlimit.KEPT_FILES_MAX
    limits["limits"] = [resource.RLIM_INFINITY, resource.RLIM_INFINITY]
    assert fdlimit.kept_file_limit() == fdlimit.KEPT_FILES_MAX
    assert fdlimit.connection_limit() == fdlimit.MAX_CONNECTIONS


def test_a_tight_limit_keeps_no_files_open(limits, caplog):
    limits["limits"] = [1024, 1024]
    assert fdlimit.kept_file_limit() == 0
    assert fdlimit.connection_limit() == 1024 - 64 - 64
    limits.update(limits=[512, 65536], refuse=True)
    with caplog.at_level(logging.WARNING, logger="gpustats.fdlimit"):
        assert fdlimit.kept_file_limit() == 0
    assert "cannot raise the open-file limit from 512" in caplog.text


def test_process_stat_files_share_the_kept_budget_in_proportion(limits):
    limits["limits"] = [1024, 1 << 20]
    assert fdlimit.kept_file_shares() == (fdlimit.KEPT_FILES_MAX, fdlimit.KEPT_PROC_FILES_MAX)
    wanted = fdlimit.KEPT_FILES_MAX + fdlimit.KEPT_PROC_FILES_MAX
    limits["limits"] = [1024, 1024 + 64 + 256 + 64 + wanted // 2]   # half of what both want
    cgroup, procs = fdlimit.kept_file_shares()
    assert (cgroup, procs) == (fdlimit.KEPT_FILES_MAX // 2, fdlimit.KEPT_PROC_FILES_MAX // 2)
    limits["limits"] = [1024, 1024]
    assert fdlimit.kept_file_shares() == (0, 0)
