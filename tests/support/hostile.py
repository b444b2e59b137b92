"""What the hostile-input modules share: one busy GPU's daemon on a fake host, started with
no kubelet or runtime sockets."""

from tests.support.fakehost import build
from tests.support.gpus import GPU_A as GPU, device
from tests.support.simulated import start_simulated

ARGS = ("--housekeeping-interval", "0.2", "--pod-resources-socket", "", "--runtime-socket", "")


def start(start_daemon, tmp_path, scenario=None, placement=None, *extra, ready=True):
    """(daemon, scenario path, cgroup root); by default pid 101 of pod 1 busy on one GPU."""
    cgroup, proc = build(tmp_path / "host", placement or {101: (1, 1)})
    daemon, path = start_simulated(start_daemon, tmp_path,
                                   scenario or {"devices": [device()],
                                                "processes": [{"pid": 101, "device": GPU}]},
                                   (cgroup, proc), *ARGS, *extra, ready=ready)
    return daemon, path, cgroup
