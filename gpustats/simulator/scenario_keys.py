"""The keys a scenario file may use at each level, and any other refused by its name with the
closest known one (pure), as the config file refuses an unknown option: a misspelt key
(``power_wats``) would otherwise leave its value at the default, silently."""

from __future__ import annotations

import difflib
from typing import Any

TOP_KEYS = frozenset({
    "driver_version", "init_failures", "missing_functions", "driver_reloads",
    "call_delay_seconds", "devices", "processes", "xid_events", "trace_file", "trace_tag"})
DEVICE_KEYS = frozenset({
    "uuid", "vendor", "driver", "name", "architecture", "index", "minor", "pci_bus_id",
    "pci_device_id", "pci_class", "memory_total_bytes", "memory_used_bytes",
    "utilization_percent", "memory_utilization_percent", "power_watts",
    "energy_counter_base_millijoules", "power_limit_watts", "temperature_celsius",
    "memory_temperature_celsius", "sm_clock_mhz", "memory_clock_mhz", "pcie_replay_count",
    "encoder_utilization_percent", "decoder_utilization_percent", "memory_reserved_bytes",
    "remapped_rows", "unsupported", "lost", "clocks_event_reasons", "violations",
    "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second", "gpm", "mig_instances",
    "events_supported", "idle_cycle", "pstate", "supported_pstates", "accounting",
    "accounting_buffer_size"})
MIG_KEYS = frozenset({"gpu_instance_id", "compute_instance_id", "profile", "memory_total_bytes",
                      "uuid", "gpm"})
PROCESS_KEYS = frozenset({"pid", "device", "sm_util_percent", "memory_used_bytes",
                          "gpu_instance_id", "mps", "between_ticks", "engine", "fds",
                          "shares_client_of"})
EVENT_KEYS = frozenset({"device", "xid", "type", "after_seconds"})


def check_keys(data: Any, known: frozenset[str], where: str) -> None:
    """``ValueError`` naming the first key of ``data`` (a mapping; anything else is left to the
    parser) that is not in ``known``, with the closest known key where one is close."""
    if not isinstance(data, dict):
        return
    unknown = sorted(str(k) for k in data if k not in known)
    if not unknown:
        return
    close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    more = f"; also unknown: {', '.join(map(repr, unknown[1:4]))}" if len(unknown) > 1 else ""
    raise ValueError(f"{where}: unknown key {unknown[0]!r}{hint}{more}")


def _items(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    return value if isinstance(value, list) else []


def check_scenario_keys(data: Any) -> None:
    """Every level of a scenario: the top, each device (and its MIG instances), process and
    XID event."""
    check_keys(data, TOP_KEYS, "scenario")
    if not isinstance(data, dict):
        return
    for i, device in enumerate(_items(data, "devices")):
        check_keys(device, DEVICE_KEYS, f"devices[{i}]")
        if isinstance(device, dict):
            for j, mig in enumerate(_items(device, "mig_instances")):
                check_keys(mig, MIG_KEYS, f"devices[{i}].mig_instances[{j}]")
    for i, process in enumerate(_items(data, "processes")):
        check_keys(process, PROCESS_KEYS, f"processes[{i}]")
    for i, event in enumerate(_items(data, "xid_events")):
        check_keys(event, EVENT_KEYS, f"xid_events[{i}]")
