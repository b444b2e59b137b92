"""The kernel's own list of a DRM device's open files: debugfs ``dri/<minor>/clients``.

drm_debugfs.c ``drm_clients_info`` prints a header, then one line per ``struct drm_file`` of the
device (whichever of its nodes it was opened through), oldest first::

                 command   tgid dev master a   uid      magic
                  python3   4242 128   n    n  1000          0

``%20s %5d %3d   %c    %c %5d %10u``: the task's command (``comm``: up to 15 bytes the process
chooses, spaces and line breaks included), its thread group ID (``tgid``; ``pid`` in kernels
before 6.4, when the file's PID became the thread group's), the minor it was opened through,
master and authenticated flags, the effective UID, the legacy magic. Kernel 6.14 adds the
client's name (``%*s``, 64 wide, ``<unset>`` until DRM_IOCTL_SET_CLIENT_NAME, which refuses
whitespace) and later kernels the client's ID (``%20llu``, the fdinfo's ``drm-client-id``). The
tgid is the process that last used the file: the DRM core moves it to a process that uses a
file passed to it (drm_file.c ``drm_file_update_pid``).

Root only, and only where debugfs is mounted (``<sysfs>/kernel/debug``). From 6.8 on, ``dri/``
holds one directory per device (named by its PCI address) and a link per minor to it; before,
a directory per minor. Either way ``dri/<card minor>/clients`` lists every file of the device.
"""

from __future__ import annotations

from gpustats.model.record import record

CLIENTS_BYTES = 1 << 20        # ~150 bytes a line: thousands of clients; more is not the list
_FIXED = ("tgid", "dev", "master", "a", "uid", "magic")
_PID_HEADERS = ("tgid", "pid")


@record
class ListedClient:
    """One open DRM file as the kernel lists it."""

    tgid: int
    minor: int
    uid: int | None
    client_id: int | None          # kernels that print it: the fdinfo's drm-client-id


def parse_clients(text: str) -> tuple[ListedClient, ...]:
    """The clients of one ``clients`` file; ``ValueError`` when its header is not the
    kernel's. A line that does not parse (a command holding a line break splits its line in
    two) is skipped: what it names is checked in fdinfo before anything is billed anyway.
    Lines of kernel-internal clients (no task: tgid 0) are left out."""
    lines = text.split("\n")
    header = lines[0].split()
    if len(header) < 7 or header[0] != "command" or header[1] not in _PID_HEADERS \
            or tuple(header[2:7]) != _FIXED[1:]:
        raise ValueError("not a DRM clients list")
    columns = header[1:]
    id_column = next((i for i, name in enumerate(columns) if name in ("id", "client-id")),
                     None)
    out = []
    for line in lines[1:]:
        fields = line.rsplit(None, len(columns))[-len(columns):] if line.strip() else []
        if len(fields) != len(columns):
            continue
        listed = _listed(fields, id_column)
        if listed is not None:
            out.append(listed)
    return tuple(out)


def _listed(fields: list[str], id_column: int | None) -> ListedClient | None:
    tgid, minor, uid = (_number(fields[i]) for i in (0, 1, 4))
    if tgid is None or tgid <= 0 or minor is None or fields[2] not in ("y", "n") \
            or fields[3] not in ("y", "n"):
        return None
    client_id = _number(fields[id_column]) if id_column is not None else None
    return ListedClient(tgid=tgid, minor=minor, uid=uid, client_id=client_id)


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None
