"""What the billing end-to-end modules share: the daemon started without kubelet or runtime
sockets over a built host, a scrape of /metrics, one series' value, a cgroup v1 host."""

from pathlib import Path

from tests.support.daemon import DaemonProcess
from tests.support.fakehost import container_id, pod_uid
from tests.support.simulated import start_simulated

BASE = ("--pod-resources-socket", "", "--runtime-socket", "", "--idle-power-watts", "100")


def start(start_daemon, tmp_path, scenario, cgroup, proc, *extra, port=None) -> DaemonProcess:
    """The ready daemon on ``scenario`` (None: the file already there) over the roots built."""
    return start_simulated(start_daemon, tmp_path, scenario, (cgroup, proc), *BASE, *extra,
                           port=port)[0]


def scrape(daemon) -> str:
    status, body = daemon.get("/metrics")
    assert status == 200
    return body


def value(values, name, **labels):
    """The one value of ``counters()``'s series named so with these labels."""
    found = [v for (n, ls), v in values.items()
             if n == name and all(dict(ls).get(k) == str(w) for k, w in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def v1_host(root, placement):
    """``placement``: pid -> (pod number, container number, devices.list text)."""
    cgroup, proc = root / "cgroup", root / "proc"
    for controller in ("devices", "cpuacct", "memory"):
        (cgroup / controller).mkdir(parents=True, exist_ok=True)
    for pid, (pod, container, devices) in placement.items():
        rel = f"kubepods/besteffort/pod{pod_uid(pod)}/{container_id(container)}"
        (cgroup / "devices" / rel).mkdir(parents=True, exist_ok=True)
        (cgroup / "devices" / rel / "devices.list").write_text(devices)
        (cgroup / "cpuacct" / rel).mkdir(parents=True, exist_ok=True)
        (cgroup / "cpuacct" / rel / "cpuacct.usage").write_text("1000000\n")
        p = proc / str(pid)
        p.mkdir(parents=True, exist_ok=True)
        (p / "cgroup").write_text(f"4:devices:/{rel}\n3:cpu,cpuacct:/{rel}\n")
    for name in ("stat", "meminfo", "vmstat"):
        (proc / name).write_text(Path("/proc", name).read_text())
    return cgroup, proc
