"""An AMD or Intel sweeper whose every sweep says how its source (``amd``, ``intel``) fares:
``failing`` while other users' DRM clients are refused for want of a capability (their GPUs'
processes unknown; the reason names the capability), ``ok`` otherwise, naming the processes
no capability lets the daemon read (each leaves only its own GPU use unattributed)."""

from __future__ import annotations

from typing import Any, Callable

from gpustats.model.device import DeviceReading
from gpustats.sources.errors import CollectionErrors
from gpustats.sources.proc_access import NEEDED, missing, read_effective

REFUSED = "fdinfo_refused"
UNREADABLE = "process_unreadable"
NAMED_PIDS = 8                  # the reason names this many unreadable PIDs, then a count


def refused_message(lacking: tuple[str, ...]) -> str:
    return (f"other users' DRM clients (/proc/<pid>/fd and fdinfo) are refused: the daemon "
            f"lacks {' and '.join(lacking)}; their GPU processes are unknown and those GPUs' "
            f"active energy stays unattributed")


def unreadable_message(pids: tuple[int, ...]) -> str:
    shown = ", ".join(str(p) for p in pids[:NAMED_PIDS])
    more = f" and {len(pids) - NAMED_PIDS} more" if len(pids) > NAMED_PIDS else ""
    return (f"PID {shown}{more} cannot be read although the daemon holds CAP_DAC_READ_SEARCH "
            f"and CAP_SYS_PTRACE (a security module, another user namespace or a sandbox "
            f"refuses it): "
            f"its GPU use, if any, stays unattributed; every other process is read")


class ReportedDrmSweeper:
    """Passes the sweeper through; each sweep marks its vendor's source."""

    def __init__(self, sweeper: Any, vendor: str, errors: CollectionErrors, *,
                 capabilities: Callable[[], int | None] = read_effective):
        self._sweeper = sweeper
        self._vendor = vendor
        self._errors = errors
        self._capabilities = capabilities()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sweeper, name)

    def sweep(self) -> tuple[DeviceReading, ...]:
        readings: tuple[DeviceReading, ...] = self._sweeper.sweep()
        if any("processes" in r.unsupported_fields for r in readings):
            self._errors.failed(self._vendor, REFUSED, refused_message(self._lacking()))
        elif readings:
            unreadable = readings[0].unreadable_pids
            if unreadable:
                self._errors.noted(self._vendor, UNREADABLE, unreadable_message(unreadable))
            else:
                self._errors.succeeded(self._vendor)
        return readings

    def _lacking(self) -> tuple[str, ...]:
        """The capabilities missing for the kinds of read refused so far (all that reading
        other users' DRM clients needs, where the sweeper does not say)."""
        refusals = getattr(self._sweeper, "refusals", None) or {}
        kinds = [k for k in NEEDED if refusals.get(k)] or list(NEEDED)
        lacking = {name for k in kinds for name in missing(k, self._capabilities)}
        return tuple(sorted(lacking)) or ("no capability (something else refuses)",)
