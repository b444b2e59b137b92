"""Where energy counters are kept: the configured state dir, or for a non-root user running
with the default, the user's own state dir (XDG base directory spec: ``$XDG_STATE_HOME``,
else ``~/.local/state``)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Mapping


class StateDirError(Exception):
    """No usable state dir; the message says which one and how to choose another."""


@dataclass(frozen=True)
class StateDirChoice:
    path: str
    note: str | None = None       # one line to log when the default was not usable


def probe_writable(path: str) -> OSError | None:
    """Create ``path`` if needed and a file in it; the error when that fails, else None."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as exc:
        return exc
    return None


def user_state_dir(environ: Mapping[str, str]) -> str:
    base = environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):         # the spec: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "gpustats")


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def existing_state_dir(configured: str, *, explicit: bool,
                       environ: Mapping[str, str]) -> StateDirChoice:
    """For reading alone (``--once``): the configured dir, or, it being the default and
    absent, the user's where that exists. Nothing is created or probed."""
    if explicit or os.path.isdir(configured):
        return StateDirChoice(configured)
    fallback = user_state_dir(environ)
    return StateDirChoice(fallback if os.path.isdir(fallback) else configured)


def choose_state_dir(configured: str, *, explicit: bool,
                     environ: Mapping[str, str]) -> StateDirChoice:
    """The configured dir when writable; else, only when it is the default, the user's."""
    problem = probe_writable(configured)
    if problem is None:
        return StateDirChoice(configured)
    if explicit:
        raise StateDirError(f"state dir {configured} is not writable ({_why(problem)}); "
                            "pass a writable directory with --state-dir PATH "
                            "(or GPUSTATS_STATE_DIR)")
    fallback = user_state_dir(environ)
    second = probe_writable(fallback)
    if second is not None:
        raise StateDirError(f"neither the default state dir {configured} ({_why(problem)}) "
                            f"nor {fallback} ({_why(second)}) is writable; pass one with "
                            "--state-dir PATH (or GPUSTATS_STATE_DIR)")
    return StateDirChoice(fallback, f"default state dir {configured} is not writable "
                                    f"({_why(problem)}); keeping energy counters in "
                                    f"{fallback} (choose with --state-dir PATH)")
