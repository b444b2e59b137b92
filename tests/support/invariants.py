"""Billing invariants checked on scraped expositions, tick after tick.

Per GPU: Σ process = Σ container = Σ pod = Σ MIG instance = active joules (the energy above
idle that the GPU used while its processes held it); and no counter ever decreases, within a
run or across a restart.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

# One parser of the billed counters: counters is re-exported for the tests.
from oracles.checks import Series, counters
from tests.support.fakehost import metric_value
from tests.support.waiting import poll

LEVELS = ("gpustats_process_gpu_joules", "gpustats_container_gpu_joules",
          "gpustats_pod_gpu_joules", "gpustats_node_gpu_mig_joules")
ACTIVE = "gpustats_node_gpu_active_joules"


def sums_by_gpu(values: dict[Series, float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (name, labels), value in values.items():
        if name in LEVELS or name == ACTIVE:
            out[dict(labels)["gpu_uuid"]][name] += value
    return out


def assert_conservation(text: str, rel: float = 0.02, mig: bool = False) -> None:
    """Σ at each level equals the GPU's active joules (within ``rel``)."""
    for uuid, levels in sums_by_gpu(counters(text)).items():
        active = levels.get(ACTIVE)
        if not active:
            continue
        for level in LEVELS:
            if level == "gpustats_node_gpu_mig_joules" and not mig:
                continue
            assert levels.get(level, 0.0) == pytest.approx(active, rel=rel, abs=1e-3), \
                (uuid, level, dict(levels))


def assert_never_decreased(before: dict[Series, float], after: dict[Series, float]) -> None:
    """Every counter present in both is at least what it was (a small float slack)."""
    lowered = {k: (before[k], after[k]) for k in before.keys() & after.keys()
               if after[k] < before[k] - 1e-6}
    assert not lowered, lowered


def scrape(daemon) -> tuple[int, str]:
    """(snapshot sequence, text) of one ``/metrics`` scrape."""
    status, text = daemon.get("/metrics")
    assert status == 200, text
    return int(metric_value(text, "gpustats_snapshot_sequence_total")), text


def consecutive_scrapes(daemon, timeout: float = 20.0) -> tuple[str, str]:
    """Scrapes of two consecutive ticks (snapshot sequence n, then n + 1)."""
    last = [scrape(daemon)]

    def consecutive() -> tuple[str, str] | None:
        now = scrape(daemon)
        if now[0] == last[0][0] + 1:
            return last[0][1], now[1]
        if now[0] != last[0][0]:
            last[0] = now
        return None

    found = poll(consecutive, timeout=timeout)
    if found is None:
        raise AssertionError(f"no two consecutive ticks scraped in {timeout}s")
    return found


def assert_attributed_watts(daemon, expected: float, gpu_uuid: str, container_id: str,
                            ticks: int = 10, timeout: float = 30.0) -> None:
    """The container's attributed power is ``expected`` (within 1 %), checked on figures that
    the ticks' timing cannot move.

    One tick's watts is its joules over its wall-clock length, and that length jitters under
    load (a late read makes one tick short and the next long), so it is not compared with
    ``expected`` directly. Instead: over ``ticks`` ticks, the container's share of the GPU's
    joules times the GPU's (steady) power is ``expected``; and on two consecutive ticks, the
    watts shown is the tick's joules over the tick's length, that length being the GPU's idle
    joules of the tick over its idle watts (exact, however long the tick was).
    """
    gpu, mine = {"gpu_uuid": gpu_uuid}, {"gpu_uuid": gpu_uuid, "container_id": container_id}
    first_sequence, first = scrape(daemon)
    later = poll(lambda: (now := scrape(daemon))[0] >= first_sequence + ticks and now,
                 timeout=timeout, interval=0.1)
    assert later, f"fewer than {ticks} ticks in {timeout}s"
    last = later[1]

    def grew(name: str, labels: dict[str, str]) -> float:
        return metric_value(last, name, **labels) - metric_value(first, name, **labels)

    share_of_gpu = grew("gpustats_container_gpu_joules_total", mine) / \
        grew("gpustats_node_gpu_joules_total", gpu)
    power = metric_value(last, "gpustats_node_gpu_watts", **gpu)
    assert power * share_of_gpu == pytest.approx(expected, rel=0.01), (power, share_of_gpu)

    first, last = consecutive_scrapes(daemon)
    idle_joules = grew("gpustats_node_gpu_joules_total", gpu) - \
        grew("gpustats_node_gpu_active_joules_total", gpu)
    idle_watts = metric_value(last, "gpustats_node_gpu_idle_watts", **gpu)
    watts = metric_value(last, "gpustats_container_gpu_watts", **mine)
    joules = grew("gpustats_container_gpu_joules_total", mine)
    # watts == joules / (idle_joules / idle_watts), multiplied out (idle_joules may be 0).
    assert watts * idle_joules == pytest.approx(joules * idle_watts, rel=1e-3), \
        (watts, joules, idle_joules, idle_watts)


def assert_billed_or_unattributed(text: str, rel: float = 0.02,
                                  level: str = "gpustats_container_gpu_joules") -> None:
    """Per GPU: Σ ``level`` joules + unattributed joules = active joules (within ``rel``):
    energy nobody is billed for is counted as unattributed, never dropped. (Pods keep the
    energy of their containers gone; a container gone leaves the container level.)"""
    unattributed = "gpustats_node_gpu_unattributed_joules"
    by_gpu: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (name, labels), value in counters(text).items():
        if name in (ACTIVE, level, unattributed):
            by_gpu[dict(labels)["gpu_uuid"]][name] += value
    for uuid, levels in by_gpu.items():
        active = levels.get(ACTIVE)
        if not active:
            continue
        billed = levels[level] + levels[unattributed]
        assert billed == pytest.approx(active, rel=rel, abs=1e-3), (uuid, dict(levels))
