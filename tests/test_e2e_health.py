"""Health and saturation end to end through the real daemon and the simulator."""

import calendar
import time

import pytest

from tests.support.fakehost import write_scenario
from tests.support.gpus import GPU_A as A, GPU_B as B


def gpus(summary):
    return {g["uuid"]: g for g in summary["gpus"]}


def scenario(**b):
    dev_b = {"uuid": B, "minor": 1, "events_supported": False,
             "unsupported": ["gpm"], "memory_total_bytes": 1000, "memory_used_bytes": 950}
    dev_b.update(b)
    return {
        "devices": [
            {"uuid": A, "minor": 0, "memory_total_bytes": 1000, "memory_used_bytes": 500,
             "violations": {"power_percent": 20}, "clocks_event_reasons": ["sw_power_cap"],
             "gpm": {"sm_active_percent": 40, "dram_active_percent": 25,
                     "pcie_tx_bytes_per_second": 1e9}},
            dev_b,
        ],
        "xid_events": [{"device": A, "xid": 13, "after_seconds": 0.5},
                       {"device": A, "xid": 79, "after_seconds": 2.0}],
    }


def test_xids_lost_gpu_and_saturation(start_daemon, tmp_path):
    path = tmp_path / "s.yaml"
    write_scenario(path, scenario())
    started = time.time()
    daemon = start_daemon("--simulate", str(path), "--housekeeping-interval", "0.2",
                          "--saturation-window", "3")
    daemon.wait_ready()
    body = daemon.wait_for(lambda s: gpus(s).get(A, {}).get("saturation", {})
                           .get("xidErrorCount") == 1, path="/api/v1/gpus")
    assert gpus(body)[A]["health"]["healthy"] is True          # XID 13 is ignored, counted
    body = daemon.wait_for(lambda s: not gpus(s)[A]["health"]["healthy"], path="/api/v1/gpus")
    cond = gpus(body)[A]["health"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("NVMLReady", "False", "XidError")
    assert "79" in cond["message"]
    transition = calendar.timegm(time.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))
    assert int(started) + 1 <= transition <= time.time()   # XID 79 came 2 s after start
    # GPU B has no event support and is still reported, healthy.
    b = gpus(body)[B]
    assert b["health"]["healthy"] is True
    # Saturation of A over the window: the scripted fractions.
    time.sleep(3.5)                              # measures: most of the saturation window
    sat = gpus(daemon.get("/api/v1/gpus")[1])[A]["saturation"]
    assert sat["throttleViolationRatios"]["power"] == pytest.approx(0.2, abs=0.01)
    assert sat["throttleReasonRatios"]["sw_power_cap"] == 1.0
    assert sat["throttleReasonRatios"]["hw_slowdown"] == 0.0
    assert sat["memoryUsedRatioAvg"] == pytest.approx(0.5)
    assert sat["smActiveAvg"] == pytest.approx(0.4) and sat["dramActiveAvg"] == pytest.approx(0.25)
    assert sat["pcieTxBytesAvg"] == pytest.approx(1e9, rel=0.01)
    # GPU B marks GPM unsupported: no GPM keys at all (absent, not 0).
    sat_b = gpus(daemon.get("/api/v1/gpus")[1])[B]["saturation"]
    for key in ("smActiveAvg", "smOccupancyAvg", "dramActiveAvg", "nvlinkTxBytesAvg"):
        assert key not in sat_b
    assert sat_b["memoryPressureRatio"] == 1.0
    # The summary carries the same health and saturation.
    summary = daemon.get("/stats/summary")[1]
    acc = {a["id"]: a for a in summary["node"]["accelerators"]}
    assert acc[A]["health"]["healthy"] is False and "saturation" in acc[A]
    # B falls off the bus: GpuLost from the sweep (no events on B).
    write_scenario(path, scenario(lost=True))
    body = daemon.wait_for(lambda s: not gpus(s)[B]["health"]["healthy"], path="/api/v1/gpus")
    assert gpus(body)[B]["health"]["conditions"][0]["reason"] == "GpuLost"
    assert gpus(body)[B]["lost"] is True
