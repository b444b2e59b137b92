"""User names by UID from the host's ``/etc/passwd`` (below ``--host-root``).

Only the file is read, never NSS: a user known only to LDAP or SSSD stays a UID. The file is
re-read when its inode, size or mtime changes (``useradd`` and ``vipw`` replace it), so a
steady host costs one ``stat`` per lookup.
"""

from __future__ import annotations

import logging
import os

from gpustats.hostfs import HostRoots, UnsafeFile, read_regular
from gpustats.sources.errors import LogOnce

log = logging.getLogger(__name__)

MAX_PASSWD_BYTES = 4 * 1024 * 1024
MAX_NAME_CHARS = 256            # glibc's LOGIN_NAME_MAX; useradd allows 32
MAX_UID = 2**32 - 2             # (uid_t) -1 is no user


def parse_passwd(text: str) -> dict[int, str]:
    """``name:password:uid:gid:gecos:home:shell`` lines → UID → name (passwd(5)).

    The first entry of a UID wins, as ``getpwuid`` finds it. Lines that are not entries
    (empty, comments, NIS ``+``/``-`` lines, a field missing, a UID not a number, a name too
    long) are skipped. Lines end at ``\n`` only: a GECOS field is the user's to set
    (``chfn``), and ``str.splitlines`` would also end one at U+2028, U+0085 or ``\r``.
    """
    names: dict[int, str] = {}
    for line in text.split("\n"):
        fields = line.split(":")
        if len(fields) < 7 or not fields[0] or fields[0][0] in "#+-" \
                or len(fields[0]) > MAX_NAME_CHARS:
            continue
        uid_text = fields[2]
        if not (uid_text.isascii() and uid_text.isdigit()) or len(uid_text) > 10:
            continue
        uid = int(uid_text)
        if uid <= MAX_UID:
            names.setdefault(uid, fields[0])
    return names


class UserNames:
    """``name(uid)``: the user's name, or ``None`` (no such entry, or no readable file)."""

    def __init__(self, roots: HostRoots, *, max_bytes: int = MAX_PASSWD_BYTES):
        self._path = roots.host_path("etc", "passwd")
        self._max_bytes = max_bytes
        self._stamp: tuple[int, int, int, int] | None = None
        self._names: dict[int, str] = {}
        self._log = LogOnce(log, every_seconds=3600.0)
        self.reads = 0                       # times the file was read (tests read this)

    def name(self, uid: int) -> str | None:
        self._refresh()
        return self._names.get(uid)

    def _refresh(self) -> None:
        try:
            st = os.stat(self._path)
        except OSError:
            self._stamp, self._names = None, {}
            return
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self.reads += 1
        try:
            data = read_regular(self._path, max_bytes=self._max_bytes)
        except UnsafeFile as exc:
            self._log(("unsafe", exc.reason), logging.WARNING,
                      "user names not read from %s: %s", self._path, exc)
            self._names = {}
            return
        except OSError as exc:
            self._log(("unreadable", exc.errno), logging.WARNING,
                      "user names not read from %s: %s", self._path, exc.strerror or exc)
            self._stamp, self._names = None, {}       # tried again next time
            return
        self._names = parse_passwd(data.decode("utf-8", "replace"))
