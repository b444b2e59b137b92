"""Node CPU and memory from a fake /proc: the kubelet's arithmetic, rates between readings."""

from gpustats.hostfs import HostRoots
from gpustats.sources.node import _CLOCK_TICKS as HZ
from gpustats.sources.node import NodeReader
from tests.clock import Clock


def _stat(proc, busy_jiffies):
    (proc / "stat").write_text(f"cpu  {busy_jiffies} 0 0 1000 0 0 0 0 0 0\nbtime 1700000000\n")


def test_cpu_rate_between_readings_and_working_set(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 50 kB\nInactive(file): 10 kB\n"
                                      "AnonPages: 20 kB\n")
    clock = Clock(10.0)
    reader = NodeReader(HostRoots(proc=str(tmp_path)), monotonic=clock, wall=lambda: 5.0)
    _stat(tmp_path, 100)
    first, memory = reader.read()
    assert first.usage_nano_cores is None                # one reading: no rate yet
    assert memory.working_set_bytes == 40 * 1024 and memory.rss_bytes == 20 * 1024
    assert reader.boot_time == 1700000000.0
    clock.now = 12.0
    _stat(tmp_path, 100 + 2 * HZ)                        # two CPU seconds in 2 s: one core
    second, _ = reader.read()
    assert second.usage_nano_cores == 1_000_000_000
    assert second.usage_core_nano_seconds - first.usage_core_nano_seconds == 2_000_000_000
    clock.now = 14.0
    _stat(tmp_path, 50)                                  # went backwards: no rate, not negative
    assert reader.read()[0].usage_nano_cores is None
