"""Simulated GPUs for scenario files: the UUIDs tests share and a device entry to build on."""

from __future__ import annotations

GPU_A = "GPU-aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa"
GPU_B = "GPU-bbbbbbbb-2222-4222-8222-bbbbbbbbbbbb"
GPU_C = "GPU-cccccccc-3333-4333-8333-cccccccccccc"
H100 = "NVIDIA H100 80GB HBM3"
# The node the dcgm-exporter vocabulary is checked on through Prometheus: a whole GPU, and a
# GPU in MIG mode whose instance 7 is held by a pod.
DCGM_WHOLE_GPU = "GPU-3f2a9c1e-5b7d-4e21-9a0c-7d1e2f3a4b5c"
DCGM_MIG_GPU = "GPU-8c0d1e2f-3a4b-4c5d-8e9f-0a1b2c3d4e5f"
DCGM_MIG_INSTANCE_7 = "MIG-8c0d1e2f-3a4b-4c5d-8e9f-000000000007"


def device(uuid: str = GPU_A, name: str | None = H100, **fields) -> dict:
    """A scenario's device: minor 0 drawing 300 W, with ``fields`` added or replaced; a device
    with ``name=None`` has no name key (the simulator's default name)."""
    entry = {"uuid": uuid, "name": name, "minor": 0, "power_watts": 300, **fields}
    if name is None:
        del entry["name"]
    return entry
