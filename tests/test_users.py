"""User names from the host's /etc/passwd below --host-root; and the --host-root option."""

import logging
import os

import pytest

from gpustats.config import ConfigError, build_arg_parser, resolve
from gpustats.hostfs import HostRoots
from gpustats.sources.users import UserNames, parse_passwd

PASSWD = """\
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
alice:x:1000:1000:Alice Liddell,,,:/home/alice:/bin/bash
slurm:x:64030:64030::/nonexistent:/usr/sbin/nologin
"""


def write_passwd(host, text):
    (host / "etc").mkdir(parents=True, exist_ok=True)
    path = host / "etc" / "passwd"
    path.write_text(text)
    return path


def test_parse_passwd():
    names = parse_passwd(PASSWD)
    assert names == {0: "root", 1: "daemon", 65534: "nobody", 1000: "alice", 64030: "slurm"}


def test_garbage_lines_are_skipped_and_the_first_entry_wins():
    names = parse_passwd(
        "# a comment\n\n+@netgroup::::::\n-bob:x:1003:1003:::\nshort:x:1001\n"
        "nouid:x::1:::\nneg:x:-5:1:::\nbig:x:4294967295:1:::\nhuge:x:99999999999:1:::\n"
        ":x:1004:1:::\n" + "n" * 300 + ":x:1005:1:::\n"
        "alice:x:1000:1000::/home/alice:/bin/sh\nalias:x:1000:1000::/home/alias:/bin/sh\n"
        "carol:x:1002:1002::/home/carol:/bin/bash:extra\n")
    assert names == {1000: "alice", 1002: "carol"}


def test_names_by_uid_from_the_host_root(tmp_path):
    write_passwd(tmp_path, PASSWD)
    users = UserNames(HostRoots(host=str(tmp_path)))
    assert users.name(1000) == "alice"
    assert users.name(0) == "root"
    assert users.name(4242) is None


def test_read_again_only_when_the_file_changes(tmp_path):
    path = write_passwd(tmp_path, PASSWD)
    users = UserNames(HostRoots(host=str(tmp_path)))
    for _ in range(3):
        assert users.name(1000) == "alice"
    assert users.reads == 1
    # useradd writes a new file and renames it over the old one.
    new = tmp_path / "etc" / "passwd+"
    new.write_text(PASSWD + "bob:x:1001:1001::/home/bob:/bin/bash\n")
    os.replace(new, path)
    assert users.name(1001) == "bob"
    assert users.reads == 2
    path.unlink()
    assert users.name(1000) is None


def test_unsafe_files_name_nobody_and_are_logged_once(tmp_path, caplog):
    (tmp_path / "etc").mkdir()
    os.mkfifo(tmp_path / "etc" / "passwd")
    users = UserNames(HostRoots(host=str(tmp_path)))
    with caplog.at_level(logging.WARNING, logger="gpustats.sources.users"):
        assert users.name(0) is None                      # a FIFO is not waited on
        assert users.name(0) is None
    assert len([r for r in caplog.records if "not a regular file" in r.getMessage()]) == 1
    big = tmp_path / "big"
    write_passwd(big, PASSWD + "x" * 2048)
    assert UserNames(HostRoots(host=str(big)), max_bytes=1024).name(0) is None


def test_host_path_joins_below_the_root():
    assert HostRoots(host="/host").host_path("etc", "passwd") == "/host/etc/passwd"
    assert HostRoots(host="/host").host_path("/etc/passwd") == "/host/etc/passwd"
    assert HostRoots().host_path("etc", "passwd") == "/etc/passwd"


# ------------------------------------------------------------------ --host-root


def _resolve(argv=(), env=None):
    return resolve(build_arg_parser().parse_args(list(argv)), env or {})


def test_host_root_option(tmp_path):
    assert _resolve().host_root == "/"
    assert _resolve(["--host-root", "/host/"]).host_root == "/host"
    assert _resolve([], {"GPUSTATS_HOST_ROOT": "/rootfs"}).host_root == "/rootfs"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("host_root: /from-file\n")
    assert _resolve(["--config", str(cfg)]).host_root == "/from-file"


@pytest.mark.parametrize("argv, env, fragment", [
    (["--host-root", "host"], {}, "--host-root"),
    (["--host-root", ""], {}, "must not be empty"),
    ([], {"GPUSTATS_HOST_ROOT": "relative/root"}, "GPUSTATS_HOST_ROOT"),
    ([], {"GPUSTATS_HOST_ROOT": "/a\0b"}, "absolute directory"),
    (["--demo", "--host-root", "/host"], {}, "cannot be combined with --host-root"),
])
def test_bad_host_roots_name_the_option(argv, env, fragment):
    with pytest.raises(ConfigError) as err:
        _resolve(argv, env)
    assert fragment in str(err.value)
