"""Scenario files for benchmark scales (written to a temp dir at run time)."""

from __future__ import annotations

import yaml

H100 = "NVIDIA H100 80GB HBM3"
GIB = 1024 ** 3


def gpu_uuid(i: int) -> str:
    return f"GPU-{i:08x}-0000-4000-8000-{i:012x}"


def node_scenario(gpus: int, processes: int = 0, mig_instances: int = 0,
                  first_pid: int = 100000) -> dict:
    devices = []
    for i in range(gpus):
        device = {
            "uuid": gpu_uuid(i), "name": H100, "architecture": "hopper", "minor": i,
            "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", "memory_total_bytes": 80 * GIB,
            "memory_used_bytes": 10 * GIB, "utilization_percent": 50, "power_watts": 300 + i,
            "power_limit_watts": 700, "temperature_celsius": 50,
            "clocks_event_reasons": ["sw_power_cap"],
            "violations": {"power_percent": 10, "thermal_percent": 0, "sync_boost_percent": 0,
                           "board_limit_percent": 0},
            "gpm": {"sm_active_percent": 40, "sm_occupancy_percent": 20,
                    "dram_active_percent": 30, "graphics_active_percent": 45,
                    "pcie_tx_bytes_per_second": 1.0e9, "pcie_rx_bytes_per_second": 2.0e9,
                    "nvlink_tx_bytes_per_second": 0, "nvlink_rx_bytes_per_second": 0},
        }
        if mig_instances:
            device["mig_instances"] = [
                {"gpu_instance_id": 7 + k, "compute_instance_id": 0, "profile": "1g.10gb",
                 "memory_total_bytes": 10 * GIB,
                 "gpm": {"sm_active_percent": 10 + k * 10}}
                for k in range(mig_instances)
            ]
        devices.append(device)
    procs = []
    for p in range(processes):
        gpu = p % gpus
        proc = {"pid": first_pid + p, "device": gpu_uuid(gpu), "memory_used_bytes": GIB}
        if mig_instances:
            proc["gpu_instance_id"] = 7 + (p // gpus) % mig_instances
        else:
            proc["sm_util_percent"] = 10 + (p % 5) * 10
        procs.append(proc)
    return {"devices": devices, "processes": procs}


def write_scenario(path, scenario: dict) -> str:
    with open(path, "w") as f:
        yaml.safe_dump(scenario, f)
    return str(path)
