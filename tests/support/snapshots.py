"""A hand-built snapshot exercising every part of the exposition (for golden tests)."""

from gpustats.model.containers import ContainerUsage
from gpustats.model.device import VENDOR_NVIDIA, DeviceIdentity
from gpustats.model.health import Condition, DeviceHealth, Saturation
from gpustats.model.host import CpuStats, MemoryStats, NodeStats
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DaemonStatus, DeviceStats, MigInstanceStats,
    PodAccelerator, PodStats, ProcessStats, Snapshot, VendorStatus,
)

T = 1_700_000_000.0
A, B, M = "GPU-aaaa", "GPU-bbbb", "GPU-mmmm"
C1, C2, C3 = "1" * 64, "2" * 64, "3" * 64


def sample_snapshot(sequence: int = 7, energy_scale: float = 1.0) -> Snapshot:
    e = energy_scale
    h100 = "NVIDIA H100 80GB HBM3"
    devices = (
        DeviceStats(
            identity=DeviceIdentity(0, A, h100, 0, "00000000:3B:00.0", 85520809984,
                                    vendor=VENDOR_NVIDIA),
            memory_used_bytes=2 << 30, duty_cycle_percent=40, power_watts=310.0,
            energy_joules=1000.0 * e, idle_power_watts=70.0, active_power_watts=240.0,
            active_energy_joules=800.0 * e, idle_energy_joules=200.0 * e,
            unattributed_power_watts=40.0,
            unattributed_energy_joules=100.0 * e, power_limit_watts=700.0, temperature_celsius=51,
            sharing_mode="time-slicing",
            health=DeviceHealth((Condition("NVMLReady", "True", "NVMLReady", "ok", T, "nvml"),),
                                xid_error_count=1, xid_counts=(("79", 1),)),
            saturation=Saturation(window_seconds=60, throttle_violation_ratios=(("power", 0.2),),
                                  throttle_reason_ratios=(("sw_power_cap", 0.5),),
                                  memory_used_ratio_avg=0.4, memory_used_ratio_max=0.6,
                                  memory_pressure_ratio=0.0, xid_error_count=1,
                                  sm_active_avg=0.3, pcie_tx_bytes_avg=1e9)),
        DeviceStats(identity=DeviceIdentity(1, B, h100, 1, "00000000:86:00.0", 85520809984,
                                            vendor=VENDOR_NVIDIA),
                    lost=True,
                    health=DeviceHealth((Condition("NVMLReady", "False", "GpuLost", "lost", T,
                                                   "nvml-sweep"),))),
        DeviceStats(
            identity=DeviceIdentity(2, M, h100, 2, "00000000:C1:00.0", 85520809984,
                                    vendor=VENDOR_NVIDIA),
            power_watts=400.0, energy_joules=500.0 * e, sharing_mode="mig",
            mig_instances=(MigInstanceStats(7, "MIG-m7", "3g.40gb", 42 << 30, 1 << 30, 0.75,
                                            100.0, 50.0 * e),
                           MigInstanceStats(8, "MIG-m8", "3g.40gb", 42 << 30))),
    )
    usage = ContainerUsage(start_time=T - 60, cpu=CpuStats(T, 5_000_000, 100),
                           memory=MemoryStats(T, working_set_bytes=1 << 20))
    trainer = ContainerStats(C1, "trainer", "containerd", "/kubepods/pod-u1/" + C1, "u1", usage,
                             (ContainerAccelerator(A, ("nvml-process",), None, None, 1 << 30,
                                                   75.0, 180.0, 600.0 * e),))
    sidecar = ContainerStats(C2, None, "containerd", "/kubepods/pod-u1/" + C2, "u1", usage,
                             (ContainerAccelerator(M, ("pod-resources",), 7, "3g.40gb", None,
                                                   None, 100.0, 50.0 * e),))
    loose = ContainerStats(C3, None, "docker", "/docker/" + C3, None, usage,
                           (ContainerAccelerator(A, ("devices.list",), process_memory_used_bytes=0,
                                                 attributed_power_watts=60.0,
                                                 attributed_energy_joules=200.0 * e),))
    pod = PodStats("u1", "trainer-0", "ml", usage, (trainer, sidecar),
                   (PodAccelerator(A, 180.0, 600.0 * e), PodAccelerator(M, 100.0, 50.0 * e)))
    processes = (ProcessStats(4242, A, None, C1, 1 << 30, 75.0, "sm-utilization", 180.0, 600.0 * e,
                              start_time_ticks=1234567),
                 ProcessStats(4243, A, None, C3, None, None, "sm-utilization", 60.0, 200.0 * e),
                 ProcessStats(5000, M, 7, C2, 1 << 30, None, "mig-activity", 100.0, 50.0 * e))
    return Snapshot(
        sequence=sequence, taken_at=T, monotonic=1.0,
        node=NodeStats("node-1", T - 3600, CpuStats(T, 1, 2), MemoryStats(T, usage_bytes=3)),
        devices=devices, processes=processes, pods=(pod,), containers=(loose,),
        status=DaemonStatus(gpus_on_pci_bus=3, nvml_loaded=True, driver_version="580",
                            tick_duration_seconds=0.004, nvml_calls_last_tick=40,
                            collection_errors=(("nvml", "not_supported", 2),),
                            vendors=(VendorStatus("nvidia", 3, True),
                                     VendorStatus("amd", 0, False),
                                     VendorStatus("intel", 0, False))))
