"""The books of each GPU, on the totals served: its energy = Σ tenants' attributed energy (pods
and bare-metal tenants alike, on every vendor) + Σ tenants' idle shares + unallocated idle +
unattributed + unobserved (the energy of a gap no one
observed: the daemon down, the GPU lost). Pure functions of one scrape's counters, and the
check the chaos run makes after every restart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from oracles.checks import (
    CONSERVATION_ABS, CONSERVATION_REL, ENERGY, TENANT, TENANT_IDLE, UNALLOCATED, UNATTRIBUTED,
    UNOBSERVED, Series,
)
PARTS = (TENANT, TENANT_IDLE, UNALLOCATED, UNATTRIBUTED, UNOBSERVED)


def books(values: dict[Series, float]) -> dict[str, tuple[float, dict[str, float]]]:
    """Per GPU with an energy counter: (its energy, each part's total)."""
    energy: dict[str, float] = {}
    parts: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PARTS, 0.0))
    for (name, labels), value in values.items():
        uuid = dict(labels).get("gpu_uuid", "?")
        if name == ENERGY:
            energy[uuid] = value
        elif name in PARTS:
            parts[uuid][name] += value
    return {uuid: (joules, parts[uuid]) for uuid, joules in energy.items()}


def residuals(values: dict[Series, float]) -> dict[str, float]:
    """Per GPU: its energy less the sum of the parts (0 where the books close)."""
    return {uuid: joules - sum(parts.values()) for uuid, (joules, parts) in books(values).items()}


def unbalanced(values: dict[Series, float], offsets: dict[str, float] | None = None,
               rel: float = CONSERVATION_REL, abs_: float = CONSERVATION_ABS) -> list[str]:
    """The GPUs whose books do not close within ``rel`` of their energy (+ ``abs_``), less
    each GPU's ``offsets`` (energy left outside the books by a release that had no unobserved
    bucket)."""
    out = []
    offsets = offsets or {}
    for uuid, (joules, parts) in sorted(books(values).items()):
        left = joules - sum(parts.values()) - offsets.get(uuid, 0.0)
        if abs(left) > rel * joules + abs_:
            shown = ", ".join(f"{name.removeprefix('gpustats_')} {value:.1f}"
                              for name, value in parts.items())
            out.append(f"books of {uuid}: energy {joules:.1f} J, parts {shown} "
                       f"({left:+.1f} J outside)")
    return out


@dataclass
class Identity:
    """The books close at the first scrape of every daemon run (and at every later one), per
    GPU within 1 %. A tenant gone before a restart is no longer served after it: its last value
    seen stays in the books (its counter never grows again). A run of the previous release
    (no unobserved bucket) leaves the gaps it saw outside the books: what it left there, as
    of its last scrape, is carried as an offset from then on."""
    offsets: dict[str, float] = field(default_factory=dict)
    last_seen: dict[Series, float] = field(default_factory=dict)
    checked_runs: set[int] = field(default_factory=set)

    def check(self, run: int, values: dict[Series, float], previous_release: bool) -> list[str]:
        self.last_seen.update((key, value) for key, value in values.items()
                              if key[0] in (TENANT, TENANT_IDLE))
        every = {**self.last_seen, **values}
        if previous_release:
            self.offsets = residuals(every)
            return []
        self.checked_runs.add(run)
        return unbalanced(every, self.offsets)
