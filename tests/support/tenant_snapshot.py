"""A hand-built snapshot with a tenant of every kind on two GPUs (one in MIG mode), two of them
ended, whose counters add up as the ledger keeps them: per GPU, Σ pods and entries outside pods
+ unattributed = active, and Σ idle shares + unallocated idle = energy − active."""

from gpustats.model.containers import ContainerUsage
from gpustats.model.device import VENDOR_NVIDIA, DeviceIdentity
from gpustats.model.host import CpuStats, MemoryStats, NodeStats
from gpustats.model.snapshot import (
    ContainerAccelerator, ContainerStats, DeviceStats, MigInstanceStats, PodAccelerator,
    PodStats, ProcessStats, Snapshot,
)
from gpustats.model.tenants import (
    job_tenant, process_tenant, service_tenant, session_tenant,
)

T = 1_700_000_000.0
A, M = "GPU-aaaa", "GPU-mmmm"             # a whole GPU (index 0); a MIG GPU (index 1)
C0, C1, C2, C3 = "0" * 64, "1" * 64, "2" * 64, "3" * 64
H100 = "NVIDIA H100 80GB HBM3"
USAGE = ContainerUsage(start_time=T - 60, cpu=CpuStats(T, 5_000_000, 100),
                       memory=MemoryStats(T, working_set_bytes=1 << 20))

# (attributed watts, attributed joules, idle share watts, idle share joules) per holder and GPU
FIGURES = {
    ("trainer", A): (100.0, 1000.0, 10.0, 50.0),
    ("old", A): (None, 300.0, None, 30.0),              # an ended pod's container
    ("nameless", M, 7): (2.0, 20.0, 1.0, 5.0),
    ("jupyter", A): (4.0, 40.0, 2.0, 20.0),             # Docker, outside Kubernetes
    ("ollama", M, 7): (3.0, 30.0, 1.0, 5.0),            # one service on two MIG instances
    ("ollama", M, 8): (2.0, 20.0, 1.0, 5.0),
    ("alice", A): (6.0, 60.0, 3.0, 40.0),               # user 1000's sessions
    ("job", M, 8): (7.0, 70.0, 2.0, 10.0),              # Slurm job 4242, step 0
    ("python3", A): (1.5, 15.0, 0.5, 10.0),             # a process in no other tenant
    ("old.service", A): (None, 25.0, None, 5.0),        # ended
}
UNATTRIBUTED = {A: (8.5, 60.0), M: (1.0, 10.0)}
UNALLOCATED_IDLE = {A: (20.0, 345.0), M: (5.0, 25.0)}


def _acc(holder: str, uuid: str, gi: int | None = None) -> ContainerAccelerator:
    watts, joules, idle_watts, idle_joules = FIGURES[(holder, uuid) if gi is None
                                                     else (holder, uuid, gi)]
    return ContainerAccelerator(uuid, gpu_instance_id=gi,
                                mig_profile="3g.40gb" if gi is not None else None,
                                attributed_power_watts=watts, attributed_energy_joules=joules,
                                idle_share_power_watts=idle_watts,
                                idle_share_energy_joules=idle_joules)


def _pod_acc(acc: ContainerAccelerator) -> PodAccelerator:
    return PodAccelerator(acc.device_uuid, acc.attributed_power_watts,
                          acc.attributed_energy_joules,
                          idle_share_power_watts=acc.idle_share_power_watts,
                          idle_share_energy_joules=acc.idle_share_energy_joules)


def _device(uuid: str, index: int, **figures) -> DeviceStats:
    watts, joules = UNATTRIBUTED[uuid]
    idle_watts, idle_joules = UNALLOCATED_IDLE[uuid]
    return DeviceStats(identity=DeviceIdentity(index, uuid, H100, index, None, 85520809984,
                                               vendor=VENDOR_NVIDIA),
                       unattributed_power_watts=watts, unattributed_energy_joules=joules,
                       unallocated_idle_power_watts=idle_watts,
                       unallocated_idle_energy_joules=idle_joules, **figures)


def tenant_snapshot() -> Snapshot:
    devices = (
        _device(A, 0, power_watts=155.5, energy_joules=2000.0, idle_power_watts=35.5,
                active_power_watts=120.0, active_energy_joules=1500.0),
        _device(M, 1, power_watts=25.0, energy_joules=200.0, idle_power_watts=10.0,
                active_power_watts=15.0, active_energy_joules=150.0, sharing_mode="mig",
                mig_instances=(MigInstanceStats(7, "MIG-m7", "3g.40gb"),
                               MigInstanceStats(8, "MIG-m8", "3g.40gb"))),
    )
    trainer = ContainerStats(C1, "trainer", "containerd", "/kubepods/pod-u1/" + C1, "u1", USAGE,
                             (_acc("trainer", A),))
    pod = PodStats("u1", "trainer-0", "ml", USAGE, (trainer,), (_pod_acc(trainer.accelerators[0]),))
    old = ContainerStats(C0, "old", "containerd", None, "u0", accelerators=(_acc("old", A),),
                         ended=True)
    ended_pod = PodStats("u0", "old-0", "ml", containers=(old,),
                         accelerators=(_pod_acc(old.accelerators[0]),), ended=True)
    unnamed = ContainerStats(C2, None, "containerd", "/kubepods/pod-u2/" + C2, "u2", USAGE,
                             (_acc("nameless", M, 7),))
    nameless_pod = PodStats("u2", containers=(unnamed,),
                            accelerators=(_pod_acc(unnamed.accelerators[0]),))
    jupyter = ContainerStats(C3, "jupyter", "docker", "/system.slice/docker-" + C3 + ".scope",
                             None, USAGE, (_acc("jupyter", A),))
    service = service_tenant("ollama.service", "/system.slice/ollama.service")
    ollama = ContainerStats(service.key, None, None, "/system.slice/ollama.service", None, USAGE,
                            (_acc("ollama", M, 7), _acc("ollama", M, 8)), tenant=service)
    session = session_tenant(1000, "/user.slice/user-1000.slice")
    alice = ContainerStats(session.key, None, None, None, None, USAGE, (_acc("alice", A),),
                           tenant=session, user="alice")
    step = job_tenant("4242", "0", 1001, "/system.slice/slurmstepd.scope/job_4242/step_0")
    job = ContainerStats(step.key, None, None, step.cgroup_path, None, USAGE,
                         (_acc("job", M, 8),), tenant=step, user="bob")
    loose = process_tenant(1002, "python3")
    python = ContainerStats(loose.key, accelerators=(_acc("python3", A),), tenant=loose)
    gone = service_tenant("old.service")
    gone_service = ContainerStats(gone.key, accelerators=(_acc("old.service", A),), tenant=gone,
                                  ended=True)
    processes = (
        ProcessStats(4242, A, None, C1, 1 << 30, 75.0, "sm-utilization", 100.0, 1000.0,
                     start_time_ticks=1234567, comm="train.py", uid=0, user="root"),
        ProcessStats(5000, M, 8, step.key, None, None, "mig-activity", 7.0, 70.0,
                     start_time_ticks=7654321, comm="srun", uid=1001, user="bob"),
        ProcessStats(5001, A, None, loose.key, None, None, "sm-utilization", 1.5, 15.0,
                     comm="python3", uid=1002),
    )
    return Snapshot(sequence=3, taken_at=T, monotonic=1.0,
                    node=NodeStats("node-1", T - 3600, CpuStats(T, 1, 2),
                                   MemoryStats(T, usage_bytes=3)),
                    devices=devices, processes=processes,
                    pods=(pod, ended_pod, nameless_pod),
                    containers=(jupyter, ollama, alice, job, python, gone_service))
