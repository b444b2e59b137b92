"""The PCI gate and NVML load-retry state machine, with fake scanner/session (no NVML)."""

import logging

import pytest

from gpustats.engine.gpus import GpuSource, SessionUnavailable
from gpustats.model.device import DeviceIdentity, DeviceReading
from tests.support.clock import Clock


class Scanner:
    def __init__(self, found=()):
        self.found = tuple(found)
        self.scans = 0

    def scan(self):
        self.scans += 1
        return self.found


class DriverGone(Exception):
    pass


class Sweeper:
    def __init__(self):
        self.calls = 0
        self.fail = None
        self.closed = False

    def sweep(self):
        self.calls += 7
        if self.fail:
            raise self.fail
        return (DeviceReading(identity=DeviceIdentity(0, "GPU-a"), monotonic_seconds=0.0),)

    def close(self):
        self.closed = True


def _source(scanner, opener, clock, retry=60.0):
    return GpuSource(scanner, opener, is_driver_gone=lambda e: isinstance(e, DriverGone),
                     retry_interval=retry, rescan_interval=300.0, monotonic=clock)


def test_no_gpu_never_loads_nvml_and_rescans_rarely():
    clock, scanner = Clock(1000.0), Scanner()
    opened = []
    source = _source(scanner, lambda: opened.append(1), clock)
    for _ in range(100):
        assert source.readings() == ()
        clock.now += 5
    assert opened == []
    assert scanner.scans == 2            # 500 s of ticks: the first scan and one rescan
    assert source.status().gpus_on_pci_bus == 0 and not source.status().loaded


def test_hot_plugged_gpu_is_noticed_on_rescan():
    clock, scanner = Clock(1000.0), Scanner()
    sweeper = Sweeper()
    source = _source(scanner, lambda: (sweeper, "580"), clock)
    assert source.readings() == ()
    scanner.found = ("0000:3b:00.0",)
    clock.now += 301
    assert len(source.readings()) == 1
    assert source.status().loaded and source.status().driver_version == "580"


def test_failed_load_retries_at_interval(caplog):
    clock, scanner = Clock(1000.0), Scanner(["0000:3b:00.0"])
    attempts = []
    sweeper = Sweeper()

    def opener():
        attempts.append(clock.now)
        if len(attempts) < 3:
            raise SessionUnavailable("library_not_found: NVML Shared Library Not Found")
        return sweeper, None

    source = _source(scanner, opener, clock, retry=60.0)
    with caplog.at_level(logging.WARNING):
        for _ in range(30):          # 150 s of 5 s ticks
            source.readings()
            clock.now += 5
    assert attempts == [1000.0, 1060.0, 1120.0]
    assert len([r for r in caplog.records if "NVML not available" in r.message]) == 2
    assert source.status().loaded and source.status().error is None
    assert source.status().calls_last_tick == 7


def test_driver_gone_closes_and_reenters_retry(caplog):
    clock, scanner = Clock(1000.0), Scanner(["0000:3b:00.0"])
    sweepers = []

    def opener():
        sweepers.append(Sweeper())
        return sweepers[-1], None

    source = _source(scanner, opener, clock, retry=60.0)
    assert len(source.readings()) == 1
    sweepers[0].fail = DriverGone("Driver Not Loaded")
    assert source.readings() == ()
    assert sweepers[0].closed and not source.status().loaded
    assert "driver_gone" in source.status().error
    clock.now += 30
    assert source.readings() == () and len(sweepers) == 1
    clock.now += 31
    assert len(source.readings()) == 1 and len(sweepers) == 2


def test_other_sweep_errors_propagate():
    clock, scanner = Clock(1000.0), Scanner(["x"])
    sweeper = Sweeper()
    source = _source(scanner, lambda: (sweeper, None), clock)
    source.readings()
    sweeper.fail = RuntimeError("bug")
    with pytest.raises(RuntimeError):
        source.readings()


def test_no_gpu_is_said_once_at_start(caplog):
    clock, scanner = Clock(1000.0), Scanner()
    source = _source(scanner, lambda: None, clock)
    with caplog.at_level("INFO", logger="gpustats.engine.gpus"):
        for _ in range(100):
            source.readings()
            clock.now += 5
    said = [r for r in caplog.records if "no NVIDIA GPU on the PCI bus" in r.getMessage()]
    assert len(said) == 1


def test_every_vendor_read_as_one_and_one_failing_leaves_the_others(caplog):
    """GpuBackends: readings in the sources' order; a vendor whose sweep raises leaves its
    GPUs out of the tick, not the others'; statuses merged, NVML's figures and each vendor's."""
    from gpustats.engine.gpus import GpuBackends
    from gpustats.sources.vendors import AMD
    clock = Clock(1000.0)
    nvidia_sweeper, amd_sweeper = Sweeper(), Sweeper()
    nvidia = _source(Scanner(["0000:3b:00.0"]), lambda: (nvidia_sweeper, "580"), clock)
    amd = GpuSource(Scanner(["0000:19:00.0", "0000:1a:00.0"]), lambda: (amd_sweeper, None),
                    is_driver_gone=lambda e: False, retry_interval=60.0, vendor=AMD,
                    monotonic=clock)
    backends = GpuBackends((nvidia, amd))
    assert len(backends.readings()) == 2
    amd_sweeper.fail = RuntimeError("sysfs exploded")
    with caplog.at_level(logging.ERROR):
        assert len(backends.readings()) == 1          # NVIDIA's GPU still read
    assert "AMD GPU sweep failed" in caplog.text
    status = backends.status()
    assert (status.gpus_on_pci_bus, status.loaded, status.driver_version) == (3, True, "580")
    assert [(v.vendor, v.gpus_on_pci_bus, v.loaded) for v in status.vendors] == [
        ("nvidia", 1, True), ("amd", 2, True)]
    assert status.away == ()
