"""The usage database through the real daemon under SIGKILL and a full disk: killed again and
again while it writes, the file stays whole and, once the daemon is back, no joule is missing
from the rows; a full disk leaves the daemon serving with the usage source failing, and the
energy of the ticks it could not write is in the rows once there is room again."""

from __future__ import annotations

import random
import signal
import sqlite3
import time

import pytest

from tests.support.fakehost import build, write_scenario
from tests.support.gpus import GPU_A as GPU, device
from tests.support.invariants import counters
from tests.support.simulated import start_simulated
from tests.support.small_disk import fill, small_disk

BASE = ("--pod-resources-socket", "", "--runtime-socket", "", "--idle-power-watts", "100",
        "--housekeeping-interval", "0.05", "--persist-interval", "3600")
# The unobserved bucket too: what the GPU gained while the daemon was down (each SIGKILL).
BILLED = ("gpustats_tenant_gpu_joules", "gpustats_tenant_gpu_idle_share_joules",
          "gpustats_node_gpu_unattributed_joules", "gpustats_node_gpu_unallocated_idle_joules",
          "gpustats_node_gpu_unobserved_joules")


def busy(watts: float = 300) -> dict:
    return {"devices": [device(power_watts=watts)], "processes": [{"pid": 101, "device": GPU}]}


def start(start_daemon, tmp_path, *extra):
    written = (tmp_path / "s.yaml").exists()
    return start_simulated(start_daemon, tmp_path, None if written else busy(),
                           build(tmp_path / "host", {101: (1, 1)}), *BASE, *extra)[0]


def billed(daemon) -> float:
    """Every joule the counters served bill: tenants, unattributed, unallocated idle."""
    status, body = daemon.get("/metrics")
    assert status == 200
    return sum(v for (name, _), v in counters(body).items() if name in BILLED)


def rows_total(state) -> float:
    connection = sqlite3.connect(f"file:{state / 'usage.sqlite'}?mode=ro", uri=True)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return connection.execute(
            "SELECT coalesce(sum(attributed + idle), 0) FROM hourly").fetchone()[0] + \
            connection.execute("SELECT coalesce(sum(attributed + idle), 0) FROM daily"
                               ).fetchone()[0]
    finally:
        connection.close()


def settle(daemon, tmp_path) -> float:
    """No more energy (0 W, idle 0): the counters stop, and the rows catch up with them."""
    write_scenario(tmp_path / "s.yaml", busy(0))
    daemon.wait_ticks(10)
    return billed(daemon)


def test_sigkill_while_writing_never_corrupts_or_loses_a_tick(start_daemon, tmp_path):
    state = tmp_path / "state"
    shuffle = random.Random(58)
    daemon = start(start_daemon, tmp_path)
    last = 0.0
    for _ in range(12):
        daemon.wait_ticks(shuffle.randint(2, 12))
        time.sleep(shuffle.random() * 0.05)   # measures: anywhere within a tick's write
        daemon.stop(signal.SIGKILL)
        total = rows_total(state)                        # whole, and never less than before
        assert total >= last
        last = total
        daemon = start(start_daemon, tmp_path)
    served = settle(daemon, tmp_path)
    daemon.stop(signal.SIGTERM)
    assert served > 0
    # The first tick after each restart carried what the killed one had not written.
    assert abs(rows_total(state) - served) <= 1e-3 * served


@pytest.fixture
def small_state_dir(tmp_path):
    """``tmp_path/state`` on a 2 MiB tmpfs: room for the database, then none."""
    with small_disk(tmp_path / "state", "2m") as state:
        yield state


def test_a_full_disk_leaves_the_daemon_serving_and_usage_failing(start_daemon, tmp_path,
                                                                 small_state_dir):
    daemon = start(start_daemon, tmp_path)
    daemon.wait_ticks(10)
    assert _usage_state(daemon) == "ok"
    filler = fill(small_state_dir)
    deadline = time.monotonic() + 30
    while _usage_state(daemon) != "failing" and time.monotonic() < deadline:
        daemon.wait_ticks(1)
    status, body = daemon.get("/api/v1/status")
    usage = {s["name"]: s for s in body["sources"]}["usage"]
    assert usage["state"] == "failing" and usage["lastErrorReason"] in ("disk_full",
                                                                       "write_failed"), usage
    assert daemon.get("/readyz")[0] == 200 and daemon.get("/stats/summary")[0] == 200
    assert daemon.get("/api/v1/usage?by=kind")[0] == 200     # what was written still answers
    daemon.wait_ticks(10)
    filler.unlink()
    deadline = time.monotonic() + 30
    while _usage_state(daemon) != "ok" and time.monotonic() < deadline:
        daemon.wait_ticks(1)
    assert _usage_state(daemon) == "ok"
    served = settle(daemon, tmp_path)
    assert abs(rows_total(small_state_dir) - served) <= 1e-3 * served


def _usage_state(daemon) -> str | None:
    status, body = daemon.get("/api/v1/status")
    assert status == 200
    return {s["name"]: s for s in body["sources"]}.get("usage", {}).get("state")


def test_the_command_line_asks_a_running_daemon(start_daemon, tmp_path, capsys):
    from gpustats.commands.usage import main as usage_main
    daemon = start(start_daemon, tmp_path)
    daemon.wait_ticks(5)
    assert usage_main(["--url", daemon.base, "--by", "kind,gpu"]) == 0
    table = capsys.readouterr().out
    assert "unallocated" in table and "total" in table
    assert usage_main(["--url", daemon.base, "--by", "kind", "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("BillingPeriodStart,")
    assert usage_main(["--url", daemon.base, "--by", "colour"]) == 2
    assert "400" in capsys.readouterr().err
