"""MIG capability minors: which GPU and MIG instance a ``/dev/nvidia-caps/nvidia-cap<N>`` opens.

The driver lists one ``access`` file per existing GPU instance and compute instance under
``<proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``; its
``DeviceFileMinor: N`` line is the capability node's minor. The numbering is fixed by the driver
for each (GPU, GI, CI), so a table once read stays right when instances are destroyed; it is
re-read when a minor is asked for that it lacks, at most once per ``reread_seconds`` for the same
minor, so an instance a MIG reconfiguration creates is found at the first lookup of its minor.
"""

from __future__ import annotations

import re
import time
from typing import Callable

from gpustats.hostfs import HostRoots, list_dir, read_text
from gpustats.model.dra import MigCapability

_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)
_GPU_DIR = re.compile(r"^gpu(\d+)$")
_GI_DIR = re.compile(r"^gi(\d+)$")
_CI_DIR = re.compile(r"^ci(\d+)$")
_MAX_MISSED = 256          # minors remembered as missed (a bound on what CDI specs can name)


def parse_access(text: str) -> int:
    """An ``access`` file → its device file minor; ValueError when it has none."""
    found = _MINOR.search(text)
    if found is None:
        raise ValueError("no DeviceFileMinor line")
    return int(found.group(1))


def read_mig_capabilities(roots: HostRoots) -> dict[int, MigCapability]:
    """{capability minor: the instance it opens}, from every access file present now."""
    base = roots.proc_path("driver", "nvidia", "capabilities")
    table: dict[int, MigCapability] = {}

    def add(path: str, cap: MigCapability) -> None:
        text = read_text(path)
        if text is None:
            return
        try:
            table[parse_access(text)] = cap
        except ValueError:
            return

    for gpu_name in list_dir(base):
        gpu = _GPU_DIR.match(gpu_name)
        if gpu is None:
            continue
        mig = f"{base}/{gpu_name}/mig"
        for gi_name in list_dir(mig):
            gi = _GI_DIR.match(gi_name)
            if gi is None:
                continue
            gpu_minor, gi_id = int(gpu.group(1)), int(gi.group(1))
            add(f"{mig}/{gi_name}/access", MigCapability(gpu_minor, gi_id))
            for ci_name in list_dir(f"{mig}/{gi_name}"):
                ci = _CI_DIR.match(ci_name)
                if ci is not None:
                    add(f"{mig}/{gi_name}/{ci_name}/access",
                        MigCapability(gpu_minor, gi_id, int(ci.group(1))))
    return table


class MigCapabilities:
    """Capability minor → MIG instance, read lazily and re-read on a miss (rate-limited)."""

    def __init__(self, roots: HostRoots, *, reread_seconds: float = 10.0,
                 monotonic: Callable[[], float] = time.monotonic):
        self._roots = roots
        self._reread = reread_seconds
        self._monotonic = monotonic
        self._table: dict[int, MigCapability] = {}
        self._missed: dict[int, float] = {}        # minor -> when a re-read last looked for it
        self.reads = 0

    def lookup(self, minor: int) -> MigCapability | None:
        found = self._table.get(minor)
        if found is not None:
            return found
        now = self._monotonic()
        missed = self._missed.get(minor)
        if missed is None or now - missed >= self._reread:
            if len(self._missed) >= _MAX_MISSED:
                self._missed.clear()
            self._missed[minor] = now
            self.reads += 1
            self._table = read_mig_capabilities(self._roots)
        return self._table.get(minor)
