"""What the kernel asks before it shows one process's open files to another, and which of it
the daemon lacks (pure, but for ``read_effective``).

Linux 6.x (fs/proc/fd.c, fs/proc/base.c), for a reader of another user's process:

- listing ``/proc/<pid>/fd``: the directory is mode 0500 and owned by the process's user, and
  the file-permission check comes first: ``CAP_DAC_READ_SEARCH`` (search and read of any
  directory).
- reading a link ``fd/<n>``: search of that directory (the same capability), then ptrace read
  access (``PTRACE_MODE_READ_FSCREDS``): the same UIDs and the target's capabilities a subset
  of the reader's, else ``CAP_SYS_PTRACE``.
- listing ``fdinfo/`` and reading ``fdinfo/<n>``: ptrace read access alone (the directory is
  0555; its permission hook asks ptrace).

A root reader without capabilities lists a root process's ``fd`` (it owns it) but reads no
link of one that holds capabilities. With both capabilities every process of the host is
readable, except where something no capability overrides refuses: a security module (an
AppArmor or SELinux policy), a reader inside a user namespace of its own, or a sandbox (a
sandboxed host's init, whose links the kernel refuses even to root holding both).
"""

from __future__ import annotations

CAP_DAC_READ_SEARCH = 2
CAP_SYS_PTRACE = 19
NAMES = {CAP_DAC_READ_SEARCH: "CAP_DAC_READ_SEARCH", CAP_SYS_PTRACE: "CAP_SYS_PTRACE"}

READ_FD = "fd"              # listing <pid>/fd or reading one of its links
READ_FDINFO = "fdinfo"
NEEDED = {READ_FD: (CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE), READ_FDINFO: (CAP_SYS_PTRACE,)}
STATUS_PATH = "/proc/self/status"       # the daemon's own procfs, not the host's mount


def parse_effective(status: str) -> int | None:
    """The ``CapEff:`` mask of a ``/proc/<pid>/status`` text; ``None`` where it has none."""
    for line in status.splitlines():
        key, sep, value = line.partition(":")
        if sep and key == "CapEff":
            try:
                return int(value.strip(), 16)
            except ValueError:
                return None
    return None


def read_effective(path: str = STATUS_PATH) -> int | None:
    """The daemon's effective capabilities; ``None`` when they cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return parse_effective(f.read(65536))
    except OSError:
        return None


def missing(read: str, effective: int | None) -> tuple[str, ...]:
    """The capabilities a refused ``read`` (``READ_FD``, ``READ_FDINFO``) needs that the
    daemon lacks, by name; all it needs where the daemon's own are unknown. Empty: the daemon
    holds them, and what refused is something no capability overrides."""
    return tuple(NAMES[c] for c in NEEDED[read]
                 if effective is None or not effective >> c & 1)


def refusal_words(read: str, lacking: tuple[str, ...]) -> str:
    """One line on why a read was refused and what to do about it."""
    what = "open files (/proc/<pid>/fd)" if read == READ_FD else "DRM fdinfo"
    if lacking:
        return (f"reading other users' processes' {what} was refused: the daemon lacks "
                f"{' and '.join(lacking)} (docs/security.md, \"Reading other users' GPU "
                f"processes\")")
    return (f"reading a process's {what} was refused although the daemon holds "
            f"CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE: a security module (AppArmor, SELinux), "
            f"another user namespace or a sandbox keeps it from the daemon")
