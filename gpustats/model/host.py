"""Node and cgroup CPU/memory figures in the kubelet's terms."""

from __future__ import annotations

from gpustats.model.record import record


@record
class CpuStats:
    """kubelet CPUStats: cumulative core-ns and the rate between two samples."""

    time: float                                # epoch seconds of the reading
    usage_core_nano_seconds: int | None = None
    usage_nano_cores: int | None = None


@record
class MemoryStats:
    """kubelet MemoryStats. ``available_bytes`` only when a limit exists."""

    time: float
    available_bytes: int | None = None
    usage_bytes: int | None = None
    working_set_bytes: int | None = None
    rss_bytes: int | None = None
    page_faults: int | None = None
    major_page_faults: int | None = None


@record
class NodeStats:
    node_name: str
    start_time: float                          # boot time, epoch seconds
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
