"""Where each data source stands: working, failing, or not there."""

from __future__ import annotations

from gpustats.model.record import record

STATE_OK = "ok"
STATE_FAILING = "failing"
STATE_ABSENT = "absent"       # configured, but its socket or endpoint does not exist (yet)


@record
class SourceState:
    """One source at the end of a tick. Times are epoch seconds; ``None`` when never."""

    source: str
    state: str
    since: float                                 # when it entered ``state``
    last_success_time: float | None = None
    last_error_reason: str | None = None
    last_error: str | None = None
    last_error_time: float | None = None
