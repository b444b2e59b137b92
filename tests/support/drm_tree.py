"""Fake sysfs and /proc trees of AMD (amdgpu) and Intel (i915, xe) GPUs and their DRM clients,
written in the kernel's documented formats, for the DRM backend's tests and for the real
daemon pointed at them (``--sysfs-root <tree>/sys --proc-root <tree>/proc``).

What is written, and from where:

- ``sys/bus/pci/devices/<BDF>/``: ``vendor``, ``device``, ``class`` ("0x1002\\n"), a ``driver``
  link whose last component is the driver, ``drm/card<N>/dev`` and ``drm/renderD<128+N>/dev``
  ("226:<minor>\\n", Documentation/admin-guide/devices.txt).
- amdgpu (amdgpu_pm.c, amdgpu_vram_mgr.c): ``gpu_busy_percent``, ``mem_info_vram_{total,used}``,
  ``unique_id`` (``%016llx``), ``product_name``; ``hwmon/hwmon<M>/`` named ``amdgpu`` with
  ``power1_average`` (or ``power1_input``) and ``power1_cap`` in µW, ``temp1_input`` (or
  ``temp2_input``, as on MI300) in m°C.
- i915/xe (sysfs-driver-intel-{i915,xe}-hwmon): ``hwmon/hwmon<M>/`` named like the driver with
  ``energy1_input`` (µJ) and ``power1_max`` (µW); xe's ``temp2_input`` (m°C). i915's per-GT
  instances (``i915_gt<N>``) are written too, numbered *before* the device's, so a reader
  that takes the first instance rather than the one named ``i915`` reads the wrong one.
- GT idle residency (ms): i915 ``drm/card<N>/gt/gt<M>/rc6_residency_ms``
  (intel_gt_sysfs_pm.c), xe ``tile0/gt<M>/gtidle/idle_residency_ms`` (xe_gt_idle.c).
- debugfs ``sys/kernel/debug/dri/<minor>/clients`` (drm_debugfs.c ``drm_clients_info``):
  ``DrmTree.list_clients`` writes it, with or without the name and id columns of newer
  kernels.
- ``proc/<pid>/fd/<n>``: a link to ``/dev/dri/renderD<N>`` (or any other target), and
  ``proc/<pid>/fdinfo/<n>``: ``pos``/``flags``/``mnt_id``/``ino`` then the driver's ``drm-``
  lines, a tab after the colon, sizes as drm_file.c's print_size writes them
  (amdgpu_fdinfo.c, i915_drm_client.c, xe_drm_client.c; Documentation/gpu/drm-usage-stats.rst).

Counters move with ``DrmTree.update_client`` (engine ns, xe cycles, memory) and
``DrmTree.set_hwmon`` / ``set_attr`` (power, energy, temperature, busy percent).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gpustats.hostfs import HostRoots

AMD_VENDOR = "0x1002"
INTEL_VENDOR = "0x8086"
DISPLAY_VGA = "0x030000"
DISPLAY_OTHER = "0x038000"          # Instinct accelerators
RENDER_BASE = 128


@dataclass
class DrmClient:
    """One open DRM file (a ``struct drm_file``) as its driver prints it in fdinfo.

    ``engine_ns``: busy ns per engine class (amdgpu: gfx, compute, dma, dec, enc…; i915:
    render, copy, video, video-enhance, compute). ``cycles`` and ``total_cycles``: xe's busy
    GPU ticks per class (rcs, bcs, vcs, vecs, ccs) and the GPU timestamp printed for every class.
    ``capacity``: engines per class (printed only when > 1). ``memory``: resident bytes per
    region (amdgpu: vram, gtt, cpu; i915: system0, local0; xe: system, gtt, vram0, stolen).
    ``legacy_memory``: amdgpu's deprecated ``drm-memory-<region>`` KiB lines instead.
    """

    driver: str
    pdev: str
    client_id: int | None
    engine_ns: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: int = 0
    memory: dict[str, int] = field(default_factory=dict)
    legacy_memory: bool = False


def size_text(size: int) -> str:
    """drm_file.c's print_size: the largest of B, KiB, MiB that divides the size evenly."""
    units = ("", " KiB", " MiB")
    unit = 0
    while unit < len(units) - 1 and size and size % 1024 == 0:
        size //= 1024
        unit += 1
    return f"{size}{units[unit]}"


def fdinfo_text(client: DrmClient, fd_flags: str = "02100002") -> str:
    """The whole ``/proc/<pid>/fdinfo/<fd>`` text of a DRM file, in its driver's order."""
    lines = ["pos:\t0", f"flags:\t{fd_flags}", "mnt_id:\t25", "ino:\t1051",
             f"drm-driver:\t{client.driver}"]
    if client.client_id is not None:
        lines.append(f"drm-client-id:\t{client.client_id}")
    lines.append(f"drm-pdev:\t{client.pdev}")
    if client.driver == "amdgpu":
        lines.append("pasid:\t32770")
    if client.legacy_memory:
        lines += [f"drm-memory-{r}:\t{size // 1024} KiB" for r, size in client.memory.items()]
    else:
        for region, size in client.memory.items():
            lines += [f"drm-total-{region}:\t{size_text(size)}", f"drm-shared-{region}:\t0",
                      f"drm-active-{region}:\t0", f"drm-resident-{region}:\t{size_text(size)}",
                      f"drm-purgeable-{region}:\t0"]
    if client.driver == "xe":
        for engine, cycles in client.cycles.items():
            lines += [f"drm-cycles-{engine}:\t{cycles}",
                      f"drm-total-cycles-{engine}:\t{client.total_cycles}"]
            if client.capacity.get(engine, 1) > 1:
                lines.append(f"drm-engine-capacity-{engine}:\t{client.capacity[engine]}")
    else:
        for engine, ns in client.engine_ns.items():
            if client.driver == "amdgpu" and not ns:
                continue                     # amdgpu prints a class once it was used
            lines.append(f"drm-engine-{engine}:\t{ns} ns")
            if client.capacity.get(engine, 1) > 1:
                lines.append(f"drm-engine-capacity-{engine}:\t{client.capacity[engine]}")
    return "\n".join(lines) + "\n"


def listdir_as_unprivileged(path: str) -> list[str]:
    """``os.listdir`` as a caller without ptrace access sees a directory ``DrmTree.refuse``
    closed (mode 000): EACCES. Root's own listdir ignores the mode, so tests running as root
    hand this to ``FsReads(listdir=...)``."""
    if stat.S_IMODE(os.stat(path).st_mode) == 0:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    return os.listdir(path)


class DrmTree:
    """A sysfs and /proc tree under ``root`` (``root/sys``, ``root/proc``)."""

    def __init__(self, root: Path):
        self.sysfs = root / "sys"
        self.proc = root / "proc"
        (self.sysfs / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        self.proc.mkdir(parents=True, exist_ok=True)
        self._hwmon: dict[str, Path] = {}            # address -> the device-level instance
        self._hwmon_count = 0
        self._files: dict[tuple[int, int], DrmClient] = {}

    @property
    def roots(self) -> HostRoots:
        return HostRoots(sysfs=str(self.sysfs), proc=str(self.proc))

    # --- GPUs ---------------------------------------------------------------------------

    def device_dir(self, address: str) -> Path:
        return self.sysfs / "bus" / "pci" / "devices" / address

    def add_pci_device(self, address: str, *, vendor: str, driver: str | None, card: int,
                       device_id: str = "0x0000", pci_class: str = DISPLAY_VGA) -> Path:
        """A PCI function with its DRM card and render nodes (none when ``driver`` is None:
        an unbound function has no DRM nodes)."""
        d = self.device_dir(address)
        d.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", vendor), ("device", device_id), ("class", pci_class)):
            (d / name).write_text(value + "\n")
        if driver is not None:
            (d / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
            for node, minor in ((f"card{card}", card),
                                (f"renderD{RENDER_BASE + card}", RENDER_BASE + card)):
                (d / "drm" / node).mkdir(parents=True, exist_ok=True)
                (d / "drm" / node / "dev").write_text(f"226:{minor}\n")
        return d

    def add_amd_gpu(self, address: str, *, card: int = 0, device_id: str = "0x74a1",
                    unique_id: str | None = "2b4a1c0e9f8d7e6a", product_name: str | None = None,
                    vram_total: int | None = 192 << 30, vram_used: int | None = 1 << 30,
                    busy_percent: int | None = 0, power_uw: int | None = 150_000_000,
                    power_file: str = "power1_average", power_cap_uw: int | None = 750_000_000,
                    temp_mc: int | None = 45_000, temp_file: str = "temp1_input",
                    pci_class: str = DISPLAY_OTHER) -> Path:
        """An amdgpu device; a ``None`` value leaves its file out."""
        d = self.add_pci_device(address, vendor=AMD_VENDOR, driver="amdgpu", card=card,
                                device_id=device_id, pci_class=pci_class)
        for name, value in (("unique_id", unique_id), ("product_name", product_name),
                            ("mem_info_vram_total", vram_total),
                            ("mem_info_vram_used", vram_used),
                            ("gpu_busy_percent", busy_percent)):
            self.set_attr(address, name, value)
        labels = {"temp1_label": "edge"} if temp_file == "temp1_input" else {}
        self.add_hwmon(address, "amdgpu", device_level=True, **labels,
                       **{power_file: power_uw, "power1_cap": power_cap_uw, temp_file: temp_mc})
        return d

    def add_intel_gpu(self, address: str, *, driver: str = "i915", card: int = 0,
                      device_id: str = "0x56c0", energy_uj: int = 0,
                      power_max_uw: int | None = 120_000_000, temp_mc: int | None = None,
                      gts: int = 1) -> Path:
        """An i915 or xe device; i915 gets ``gts`` per-GT hwmon instances as well."""
        d = self.add_pci_device(address, vendor=INTEL_VENDOR, driver=driver, card=card,
                                device_id=device_id)
        if driver == "i915":
            for gt in range(gts):
                self.add_hwmon(address, f"i915_gt{gt}", energy1_input=7_000_000_000 + gt)
        for gt in range(gts):
            self.set_idle_residency(address, 0, gt)
        self.add_hwmon(address, driver, device_level=True, energy1_input=energy_uj,
                       power1_max=power_max_uw, power1_rated_max=power_max_uw,
                       temp2_input=temp_mc)
        return d

    def idle_residency_file(self, address: str, gt: int = 0) -> Path:
        d = self.device_dir(address)
        if os.readlink(d / "driver").endswith("/i915"):
            card = next(n for n in sorted(os.listdir(d / "drm")) if n.startswith("card"))
            return d / "drm" / card / "gt" / f"gt{gt}" / "rc6_residency_ms"
        return d / "tile0" / f"gt{gt}" / "gtidle" / "idle_residency_ms"

    def set_idle_residency(self, address: str, milliseconds: int | None, gt: int = 0) -> None:
        """A GT's idle residency counter (None removes it: an older kernel)."""
        path = self.idle_residency_file(address, gt)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_value(path, milliseconds)

    def list_clients(self, minor: int, clients: list[tuple[str, int, int, int | None]], *,
                     names: bool = False, ids: bool = False) -> Path:
        """``sys/kernel/debug/dri/<minor>/clients``: one line per (command, tgid, minor the
        file was opened through, client ID) in drm_clients_info's format; ``names``: the
        client name column (6.14), ``ids``: and the client ID column after it."""
        header = f"{'command':>20} {'tgid':>5} {'dev':>3} master a {'uid':>5} {'magic':>10}"
        if names:
            header += f" {'name':>64}"
        if ids:
            header += f" {'id':>20}"
        lines = [header]
        for command, tgid, dev, client_id in clients:
            line = f"{command:>20} {tgid:5d} {dev:3d}   n    n {0:5d} {0:10d}"
            if names:
                line += f" {'<unset>':>64}"
            if ids:
                line += f" {client_id or 0:20d}"
            lines.append(line)
        path = self.sysfs / "kernel" / "debug" / "dri" / str(minor) / "clients"
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(path, "\n".join(lines) + "\n")
        return path

    def add_hwmon(self, address: str, name: str, *, device_level: bool = False,
                  **files: int | str | None) -> Path:
        """A ``hwmon/hwmon<M>/`` instance named ``name`` with ``files`` (None: left out)."""
        path = self.device_dir(address) / "hwmon" / f"hwmon{self._hwmon_count}"
        self._hwmon_count += 1
        path.mkdir(parents=True)
        (path / "name").write_text(name + "\n")
        if device_level:
            self._hwmon[address] = path
        for file, value in files.items():
            _write_value(path / file, value)
        return path

    def set_hwmon(self, address: str, **files: int | str | None) -> None:
        """Rewrite the device-level hwmon's files (None removes one: the kernel hid it)."""
        for file, value in files.items():
            _write_value(self._hwmon[address] / file, value)

    def set_attr(self, address: str, name: str, value: int | str | None) -> None:
        """Rewrite one attribute of the PCI device dir (None removes it)."""
        _write_value(self.device_dir(address) / name, value)

    # --- processes ----------------------------------------------------------------------

    def add_process(self, pid: int, fds: dict[int, DrmClient | str]) -> Path:
        """``<proc>/<pid>/fd`` and ``fdinfo``: a client's fd links to its render node (the
        card's minor is read from its ``drm-pdev`` device); a ``str`` is another target."""
        base = self.proc / str(pid)
        (base / "fd").mkdir(parents=True, exist_ok=True)
        (base / "fdinfo").mkdir(parents=True, exist_ok=True)
        for fd, what in fds.items():
            if isinstance(what, DrmClient):
                self.open_client(pid, fd, what)
            else:
                (base / "fd" / str(fd)).symlink_to(what)
                (base / "fdinfo" / str(fd)).write_text("pos:\t0\nflags:\t02\nmnt_id:\t25\n"
                                                       "ino:\t17\n")
        return base

    def open_client(self, pid: int, fd: int, client: DrmClient, node: str | None = None) -> None:
        """``client`` at ``fd`` of ``pid`` (the same object at two places is one client: a
        dup'ed or inherited fd). ``node``: the /dev/dri name, else its GPU's render node."""
        base = self.proc / str(pid)
        (base / "fd").mkdir(parents=True, exist_ok=True)
        (base / "fdinfo").mkdir(parents=True, exist_ok=True)
        node = node or self._render_node(client.pdev)
        (base / "fd" / str(fd)).symlink_to(f"/dev/dri/{node}")
        self._files[(pid, fd)] = client
        _write_atomically(base / "fdinfo" / str(fd), fdinfo_text(client))

    def update_client(self, pid: int, fd: int, *, engine_ns: dict[str, int] | None = None,
                      cycles: dict[str, int] | None = None, total_cycles: int | None = None,
                      memory: dict[str, int] | None = None) -> DrmClient:
        """Set some of a client's counters (merged per class/region) and rewrite every fdinfo
        that shows it."""
        client = self._files[(pid, fd)]
        client.engine_ns.update(engine_ns or {})
        client.cycles.update(cycles or {})
        client.memory.update(memory or {})
        if total_cycles is not None:
            client.total_cycles = total_cycles
        for (p, f), shown in self._files.items():
            if shown is client:
                _write_atomically(self.proc / str(p) / "fdinfo" / str(f), fdinfo_text(client))
        return client

    def close_fd(self, pid: int, fd: int) -> None:
        base = self.proc / str(pid)
        (base / "fd" / str(fd)).unlink()
        (base / "fdinfo" / str(fd)).unlink()
        self._files.pop((pid, fd), None)

    def remove_process(self, pid: int) -> None:
        for fd in [f for p, f in self._files if p == pid]:
            self.close_fd(pid, fd)
        base = self.proc / str(pid)
        for sub in ("fd", "fdinfo"):
            d = base / sub
            if d.exists():
                d.chmod(0o755)
                for entry in d.iterdir():
                    entry.unlink()
                d.rmdir()
        if base.exists() and not any(base.iterdir()):
            base.rmdir()

    def refuse(self, pid: int) -> None:
        """Close ``pid``'s ``fd`` directory to readers without ptrace access (mode 000; see
        ``listdir_as_unprivileged`` for tests running as root)."""
        (self.proc / str(pid) / "fd").chmod(0)

    def _render_node(self, address: str) -> str:
        for name in sorted(os.listdir(self.device_dir(address) / "drm")):
            if name.startswith("renderD"):
                return name
        raise ValueError(f"{address} has no render node")


def _write_value(path: Path, value: int | str | None) -> None:
    if value is None:
        path.unlink(missing_ok=True)
    else:
        _write_atomically(path, f"{value}\n")


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path``'s contents in one step: a daemon reading while a test moves counters
    sees the old text or the new, never a half-written one (as the kernel's files behave)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
