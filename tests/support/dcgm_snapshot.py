"""A two-GPU snapshot for the dcgm-exporter vocabulary: GPU A (H100, an XID, GPM) held by a pod's
containers and GPU M in MIG mode with instance 7 held by a second pod; and sample look-ups."""

from prometheus_client.parser import text_string_to_metric_families

from gpustats.model.device import (
    DeviceIdentity, DeviceReading, GpmReading, MigInstanceReading, RemappedRowsReading,
    ViolationReading,
)
from gpustats.model.health import Condition, DeviceHealth
from gpustats.model.host import NodeStats
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DaemonStatus, DeviceStats, PodStats, Snapshot,
)
from tests.support.gpus import H100

GIB, MIB = 1 << 30, 1 << 20
A, M = "GPU-aaaa", "GPU-mmmm"
GPM = GpmReading(sm_active_percent=80.0, sm_occupancy_percent=40.0, dram_active_percent=35.0,
                 graphics_active_percent=91.5, pcie_tx_bytes_per_second=1.5e9,
                 pcie_rx_bytes_per_second=2.5e9, nvlink_tx_bytes_per_second=3e10,
                 nvlink_rx_bytes_per_second=2e10, tensor_active_percent=55.0)


def dcgm_reading(identity, **extra):
    """A busy H100's reading, every field given, with ``extra`` replacing some."""
    values = dict(
        memory_used_bytes=20 * GIB, memory_free_bytes=59 * GIB + 512 * MIB,
        memory_reserved_bytes=512 * MIB, utilization_percent=87, memory_utilization_percent=41,
        encoder_utilization_percent=3, decoder_utilization_percent=9, power_watts=612.457,
        energy_counter_millijoules=5_482_219_904_411, temperature_celsius=64,
        memory_temperature_celsius=71, sm_clock_mhz=1755, memory_clock_mhz=2619,
        pcie_replay_count=4, clocks_event_reasons=0x24,
        remapped_rows=RemappedRowsReading(2, 1, False, True),
        violations=ViolationReading(power_ns=2_000_000_123, thermal_ns=7_000, sync_boost_ns=0,
                                    board_limit_ns=None),
        gpm=GPM)
    values.update(extra)
    return DeviceReading(identity=identity, monotonic_seconds=1.0, **values)


def dcgm_snapshot(*, holders=1, xid=48, driver="580.65.06", gpm=GPM, a_reading=None):
    """The two GPUs; ``holders`` of GPU A's pod (1 or 2), its last XID, the driver, A's GPM."""
    a_id = DeviceIdentity(0, A, H100, 0, "00000000:1A:00.0", 80 * GIB)
    m_id = DeviceIdentity(1, M, H100, 1, "00000000:2B:00.0", 80 * GIB)
    health = DeviceHealth((Condition("NVMLReady", "False", "XidError", "XID 48", 1.0, "nvml"),),
                          xid_error_count=1, last_xid=xid)
    mig = dcgm_reading(m_id, gpm=None, utilization_percent=None, mig_enabled=True, mig_instances=(
        MigInstanceReading(7, 0, "MIG-7", "1g.10gb", 10 * GIB, 3 * GIB,
                           gpm=GpmReading(graphics_active_percent=30.0)),
        MigInstanceReading(8, 0, "MIG-8", "1g.10gb", 10 * GIB, 0, gpm=None)))
    devices = (DeviceStats(identity=a_id, health=health,
                           reading=a_reading or dcgm_reading(a_id, gpm=gpm)),
               DeviceStats(identity=m_id, health=DeviceHealth(()), reading=mig))
    trainer = ContainerStats("1" * 64, "trainer", pod_uid="u1",
                             accelerators=(ContainerAccelerator(A),))
    other = ContainerStats("2" * 64, "sidecar", pod_uid="u1",
                           accelerators=(ContainerAccelerator(A),))
    server = ContainerStats("3" * 64, "server", pod_uid="u2",
                            accelerators=(ContainerAccelerator(M, gpu_instance_id=7),))
    pods = (PodStats("u1", "train-0", "ml", containers=(trainer, other)[:holders]),
            PodStats("u2", "embed-0", "serving", containers=(server,)))
    return Snapshot(sequence=1, taken_at=1.0, monotonic=1.0,
                    node=NodeStats("node-7", 0.0), devices=devices, pods=pods,
                    status=DaemonStatus(driver_version=driver, nvml_loaded=True))


def samples(text, name):
    # prometheus-client's parser names counter samples "<family>_total" whatever the text says.
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
            if f.name == name]


def one_sample(text, name, **labels):
    """(labels, value) of the one sample of family ``name`` with these labels."""
    found = [(lab, v) for lab, v in samples(text, name)
             if all(lab.get(k) == val for k, val in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]
