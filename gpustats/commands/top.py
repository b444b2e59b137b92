"""``gpustats top``: a live terminal view of a running daemon, read from its ``/metrics``.

The GPUs (power split into the tenants' share, unallocated idle and unattributed; duty cycle,
memory, health) and the tenants sorted by power, redrawn at each new tick; 80 columns suffice;
``q`` quits. ``--once`` prints one frame without curses (for scripts and pipes).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import curses

MAX_METRICS_BYTES = 32 << 20
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_WANTED = ("gpustats_node_gpu_", "gpustats_tenant_gpu_", "gpustats_last_tick_timestamp_seconds")


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", " ").replace("\\\\", "\\")


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition that the view uses (pure)."""
    samples = []
    for line in text.splitlines():
        if not line.startswith(_WANTED):
            continue
        found = _SAMPLE.match(line)
        if found is None:
            continue
        try:
            value = float(found.group(3))
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(found.group(2) or "")}
        samples.append((found.group(1), labels, value))
    return samples


@dataclass
class GpuRow:
    index: str
    uuid: str
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class TenantRow:
    name: str
    kind: str
    gpu: str
    watts: float = 0.0
    idle_watts: float = 0.0

    @property
    def total(self) -> float:
        return self.watts + self.idle_watts


@dataclass
class View:
    tick: float | None                # when the tick shown ended (epoch seconds)
    gpus: list[GpuRow]
    tenants: list[TenantRow]


def build_view(samples: list[tuple[str, dict[str, str], float]]) -> View:
    gpus: dict[str, GpuRow] = {}
    tenants: dict[tuple[str, str, str], TenantRow] = {}
    tick = None
    for name, labels, value in samples:
        if name == "gpustats_last_tick_timestamp_seconds":
            tick = value
        elif name.startswith("gpustats_node_gpu_") and "gpu_uuid" in labels and \
                "gpu_instance_id" not in labels and "condition" not in labels:
            uuid = labels["gpu_uuid"]
            row = gpus.setdefault(uuid, GpuRow(labels.get("gpu", "?"), uuid))
            row.values[name.removeprefix("gpustats_node_gpu_")] = value
        elif name in ("gpustats_tenant_gpu_watts", "gpustats_tenant_gpu_idle_share_watts"):
            key = (labels.get("kind", ""), labels.get("tenant", ""), labels.get("gpu", ""))
            tenant = tenants.setdefault(key, TenantRow(key[1], key[0], key[2]))
            if name == "gpustats_tenant_gpu_watts":
                tenant.watts = value
            else:
                tenant.idle_watts = value
    ordered = sorted(gpus.values(), key=lambda g: (len(g.index), g.index))
    return View(tick, ordered,
                sorted(tenants.values(), key=lambda t: (-t.total, t.name)))


def _w(values: dict[str, float], key: str) -> str:
    value = values.get(key)
    return "-" if value is None else f"{value:.0f}W"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / (1 << 30):.1f}"


def render(view: View, width: int = 80, height: int = 24, source: str = "") -> list[str]:
    """The frame's lines, each cut to ``width`` (pure)."""
    shown = "-" if view.tick is None else time.strftime("%H:%M:%S", time.localtime(view.tick))
    lines = [f"gpustats top  {source}  tick {shown}  (q quits)", ""]
    lines.append(f"{'GPU':<4}{'POWER':>7}{'IDLE':>7}{'TENANTS':>9}{'UNALLOC':>9}{'UNATTR':>8}"
                 f"{'DUTY':>6}  {'MEMORY GiB':<13}{'HEALTH':<7}")
    tenant_watts: dict[str, float] = {}
    for tenant in view.tenants:
        tenant_watts[tenant.gpu] = tenant_watts.get(tenant.gpu, 0.0) + tenant.total
    for gpu in view.gpus:
        v = gpu.values
        duty = v.get("duty_cycle_ratio")
        healthy = v.get("healthy")
        lines.append(
            f"{gpu.index:<4}{_w(v, 'watts'):>7}{_w(v, 'idle_watts'):>7}"
            f"{_w(tenant_watts, gpu.index):>9}{_w(v, 'unallocated_idle_watts'):>9}"
            f"{_w(v, 'unattributed_watts'):>8}"
            f"{'-' if duty is None else f'{duty * 100:.0f}%':>6}  "
            f"{_gib(v.get('memory_used_bytes')) + '/' + _gib(v.get('memory_total_bytes')):<13}"
            f"{'-' if healthy is None else ('ok' if healthy else 'FAIL'):<7}")
    lines += ["", f"{'TENANT':<38}{'KIND':<10}{'GPU':>4}{'WATTS':>8}{'ACTIVE':>8}{'IDLE':>8}"]
    for tenant in view.tenants:
        if len(lines) >= height - 1:
            lines.append(f"... {len(view.tenants)} tenants in all")
            break
        lines.append(f"{tenant.name[:37]:<38}{tenant.kind[:9]:<10}{tenant.gpu:>4}"
                     f"{tenant.total:>7.0f}W{tenant.watts:>7.0f}W{tenant.idle_watts:>7.0f}W")
    return [line[:width] for line in lines[:height]]


def fetch(url: str, timeout: float = 5.0) -> View:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics",             # nosec B310
                                timeout=timeout) as response:
        return build_view(parse_samples(response.read(MAX_METRICS_BYTES).decode(
            errors="replace")))


def _loop(screen: curses.window, url: str, poll: float) -> None:  # pragma: no cover - a tty
    import curses
    curses.curs_set(0)
    screen.timeout(int(poll * 1000))
    view, error, shown = None, None, None
    while True:
        try:
            view, error = fetch(url), None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            error = f"{url}: {exc}"
        if view is not None and (view.tick, error) != shown:
            shown = (view.tick, error)
            height, width = screen.getmaxyx()
            screen.erase()
            lines = render(view, width - 1, height - 1, url)
            if error:
                lines = [error[:width - 1], *lines[1:]]
            for row, line in enumerate(lines):
                screen.addstr(row, 0, line)
            screen.refresh()
        elif view is None and error:
            screen.erase()
            screen.addstr(0, 0, f"waiting for {error}"[:screen.getmaxyx()[1] - 1])
            screen.refresh()
        key = screen.getch()
        if key in (ord("q"), ord("Q")):
            return


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpustats top",
                                     description="Live view of a running gpustats daemon.")
    parser.add_argument("--url", default="http://127.0.0.1:9477",
                        help="the daemon's base URL (default http://127.0.0.1:9477)")
    parser.add_argument("--poll", type=float, default=1.0,
                        help="seconds between looks for a new tick (default 1)")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    args = parser.parse_args(argv)
    if not 0.1 <= args.poll <= 60:
        parser.error("--poll must be from 0.1 to 60 seconds")
    if args.once:
        try:
            view = fetch(args.url)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            print(f"gpustats top: {args.url}: {exc}", file=sys.stderr)
            return 2
        print("\n".join(render(view, 80, 1000, args.url)))
        return 0
    import curses
    try:
        curses.wrapper(_loop, args.url, args.poll)
    except KeyboardInterrupt:
        pass
    return 0


__all__ = ["build_view", "main", "parse_samples", "render"]
