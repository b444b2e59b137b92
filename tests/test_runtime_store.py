"""Container names from Docker's config.v2.json and Podman's db.sql below a fake host root:
named once per ID, nothing raised or written, every bad file named nothing and logged once."""

import json
import logging
import os
import sqlite3
import threading
import time

import pytest

from gpustats.hostfs import HostRoots
from gpustats.model.containers import ContainerNames
from gpustats.sources.runtime_store import (
    MAX_CONFIG_BYTES, RuntimeStoreNames, parse_docker_config,
)

DOCKER_ID = "3f1c0a9be25294a1b0c7d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4"
PODMAN_ID = "7d2e5c1f8a9b0c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d"
OTHER_ID = "c" * 64
LOGGER = "gpustats.sources.runtime_store"


def named(name):
    return ContainerNames(pod_name=None, pod_namespace=None, pod_uid=None, container_name=name)


def docker_config(container_id, name="/trainer"):
    """A container's config.v2.json as dockerd writes it (a trimmed but faithful shape)."""
    return {
        "StreamConfig": {},
        "State": {"Running": True, "Paused": False, "Restarting": False, "OOMKilled": False,
                  "Dead": False, "Pid": 4242, "ExitCode": 0, "Error": "",
                  "StartedAt": "2025-03-01T10:00:00.123456789Z",
                  "FinishedAt": "0001-01-01T00:00:00Z", "Health": None},
        "ID": container_id,
        "Created": "2025-03-01T09:59:59.987654321Z",
        "Managed": False,
        "Path": "python3",
        "Args": ["train.py", "--epochs", "10"],
        "Config": {"Hostname": container_id[:12], "Domainname": "", "User": "",
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
                           "NVIDIA_VISIBLE_DEVICES=all"],
                   "Cmd": ["python3", "train.py"], "Image": "pytorch/pytorch:2.3.0",
                   "WorkingDir": "/workspace", "Entrypoint": None,
                   "Labels": {"com.docker.compose.project": "ml",
                              "com.docker.compose.service": "trainer"}},
        "Image": "sha256:" + "ab" * 32,
        "NetworkSettings": {"Bridge": "", "SandboxID": "0" * 64, "Networks": {}},
        "LogPath": f"/var/lib/docker/containers/{container_id}/{container_id}-json.log",
        "Name": name,
        "Driver": "overlay2",
        "OS": "linux",
        "RestartCount": 0,
        "HasBeenStartedBefore": True,
        "MountLabel": "",
        "ProcessLabel": "",
        "AppArmorProfile": "docker-default",
    }


def add_docker(host, container_id, document=None, *, raw=None):
    d = host / "var" / "lib" / "docker" / "containers" / container_id
    d.mkdir(parents=True, exist_ok=True)
    path = d / "config.v2.json"
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text(json.dumps(document or docker_config(container_id)))
    os.chmod(path, 0o600)
    return path


# Podman's SQLite state (libpod sqlite_state_internal.go), the tables a name lookup meets.
PODMAN_SCHEMA = """
CREATE TABLE IF NOT EXISTS DBConfig(
    ID INTEGER PRIMARY KEY NOT NULL, SchemaVersion INTEGER NOT NULL, OS TEXT NOT NULL,
    StaticDir TEXT NOT NULL, TmpDir TEXT NOT NULL, GraphRoot TEXT NOT NULL,
    RunRoot TEXT NOT NULL, GraphDriver TEXT NOT NULL, VolumeDir TEXT NOT NULL,
    CHECK (ID IN (1)));
CREATE TABLE IF NOT EXISTS IDNamespace(ID TEXT PRIMARY KEY NOT NULL);
CREATE TABLE IF NOT EXISTS PodConfig(
    ID TEXT PRIMARY KEY NOT NULL, Name TEXT UNIQUE NOT NULL, JSON TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS ContainerConfig(
    ID TEXT PRIMARY KEY NOT NULL,
    Name TEXT UNIQUE NOT NULL,
    PodID TEXT,
    JSON TEXT NOT NULL,
    FOREIGN KEY (ID) REFERENCES IDNamespace(ID) DEFERRABLE INITIALLY DEFERRED,
    FOREIGN KEY (ID) REFERENCES ContainerState(ID) DEFERRABLE INITIALLY DEFERRED,
    FOREIGN KEY (PodID) REFERENCES PodConfig(ID));
CREATE TABLE IF NOT EXISTS ContainerState(
    ID TEXT PRIMARY KEY NOT NULL, State INTEGER NOT NULL, ExitCode INTEGER,
    JSON TEXT NOT NULL,
    FOREIGN KEY (ID) REFERENCES ContainerConfig(ID) DEFERRABLE INITIALLY DEFERRED,
    CHECK (ExitCode BETWEEN -1 AND 255));
"""


def podman_db(host, containers=(), *, wal=True):
    storage = host / "var" / "lib" / "containers" / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    path = storage / "db.sql"
    db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")          # as podman opens it
    db.executescript(PODMAN_SCHEMA)
    db.execute("INSERT INTO DBConfig VALUES (1, 1, 'linux', ?, '/run/libpod', ?, "
               "'/run/containers/storage', 'overlay', ?)",
               (str(storage / "libpod"), str(storage), str(storage / "volumes")))
    for container_id, name in containers:
        config = json.dumps({"id": container_id, "name": name, "rootfsImageName":
                             "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"})
        db.execute("INSERT INTO IDNamespace VALUES (?)", (container_id,))
        db.execute("INSERT INTO ContainerConfig VALUES (?, ?, NULL, ?)",
                   (container_id, name, config))
        db.execute("INSERT INTO ContainerState VALUES (?, 3, 0, '{}')", (container_id,))
    db.commit()
    db.close()                  # the last connection checkpoints the WAL into db.sql
    return path


def store(host, **kw):
    return RuntimeStoreNames(HostRoots(host=str(host)), **kw)


def warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_docker_name_from_config_v2_json(tmp_path):
    add_docker(tmp_path, DOCKER_ID)
    assert store(tmp_path).names([DOCKER_ID]) == {DOCKER_ID: named("trainer")}


def test_podman_name_from_its_sqlite_state(tmp_path):
    path = podman_db(tmp_path, [(PODMAN_ID, "cuda-smoke"), (OTHER_ID, "other")])
    before = _files(path.parent)
    assert store(tmp_path).names([PODMAN_ID]) == {PODMAN_ID: named("cuda-smoke")}
    assert _files(path.parent) == before           # a WAL database: no -wal or -shm made


def test_both_runtimes_and_a_mapping_of_ids(tmp_path):
    add_docker(tmp_path, DOCKER_ID)
    podman_db(tmp_path, [(PODMAN_ID, "cuda-smoke")])
    asked = {DOCKER_ID: object(), PODMAN_ID: object(), OTHER_ID: object()}
    assert store(tmp_path).names(asked) == {DOCKER_ID: named("trainer"),
                                             PODMAN_ID: named("cuda-smoke")}


def test_no_runtime_on_the_host_names_nothing_quietly(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert store(tmp_path).names([DOCKER_ID, PODMAN_ID]) == {}
    assert warnings(caplog) == []


def test_ids_that_are_not_container_ids_are_never_opened(tmp_path):
    add_docker(tmp_path, DOCKER_ID)
    names = store(tmp_path)
    assert names.names(["../../../etc", DOCKER_ID[:12], DOCKER_ID.upper(), "", 42]) == {}
    assert names.lookups == 0


def test_a_name_is_read_once_and_forgotten_when_not_asked_for(tmp_path):
    path = add_docker(tmp_path, DOCKER_ID)
    names = store(tmp_path)
    assert names.names([DOCKER_ID]) == {DOCKER_ID: named("trainer")}
    path.unlink()                                  # a container's name does not change
    assert names.names([DOCKER_ID]) == {DOCKER_ID: named("trainer")}
    assert names.lookups == 1
    assert names.names([]) == {}
    assert names.names([DOCKER_ID]) == {}          # forgotten, then looked for again
    assert names.lookups == 2


def test_a_miss_is_asked_again_only_after_the_retry_interval(tmp_path):
    now = [100.0]
    names = store(tmp_path, retry_seconds=60.0, monotonic=lambda: now[0])
    assert names.names([PODMAN_ID]) == {}
    podman_db(tmp_path, [(PODMAN_ID, "late")])     # created after the first look
    now[0] += 30.0
    assert names.names([PODMAN_ID]) == {}
    assert names.lookups == 1
    now[0] += 30.0
    assert names.names([PODMAN_ID]) == {PODMAN_ID: named("late")}
    assert names.lookups == 2


def test_parse_docker_config():
    text = json.dumps(docker_config(DOCKER_ID, "/web"))
    assert parse_docker_config(text, DOCKER_ID) == "web"
    with pytest.raises(ValueError, match="ID"):
        parse_docker_config(text, OTHER_ID)


@pytest.mark.parametrize("raw, why", [
    (b"{not json", "not valid JSON"),
    (b"[]", "not a JSON object"),
    (json.dumps({**docker_config(DOCKER_ID), "ID": OTHER_ID}).encode(), "ID"),
    (json.dumps({**docker_config(DOCKER_ID), "Name": 7}).encode(), "not a string"),
    (json.dumps({**docker_config(DOCKER_ID), "Name": "/"}).encode(), "empty or too long"),
    (json.dumps({**docker_config(DOCKER_ID), "Name": "/" + "x" * 256}).encode(),
     "empty or too long"),
    (json.dumps({k: v for k, v in docker_config(DOCKER_ID).items() if k != "Name"}).encode(),
     "not a string"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[" * 100 + b"]" * 100, "nested deeper"),
    (b" " * (MAX_CONFIG_BYTES + 1), "larger than"),
])
def test_a_bad_config_names_nothing_and_is_logged_once(tmp_path, caplog, raw, why):
    add_docker(tmp_path, DOCKER_ID, raw=raw)
    now = [0.0]
    names = store(tmp_path, retry_seconds=1.0, monotonic=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(3):
            assert names.names([DOCKER_ID]) == {}
            now[0] += 2.0
    assert names.lookups == 3
    said = warnings(caplog)
    assert len(said) == 1 and why in said[0] and "config.v2.json" in said[0]


def test_a_fifo_config_is_refused_without_waiting(tmp_path, caplog):
    d = tmp_path / "var" / "lib" / "docker" / "containers" / DOCKER_ID
    d.mkdir(parents=True)
    os.mkfifo(d / "config.v2.json")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert store(tmp_path).names([DOCKER_ID]) == {}
    assert any("not a regular file" in m for m in warnings(caplog))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 file")
def test_an_unreadable_config_is_logged(tmp_path, caplog):
    path = add_docker(tmp_path, DOCKER_ID)
    os.chmod(path, 0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert store(tmp_path).names([DOCKER_ID]) == {}
    assert any("Permission denied" in m for m in warnings(caplog))


def test_a_config_that_cannot_be_opened_is_logged(tmp_path, caplog):
    d = tmp_path / "var" / "lib" / "docker" / "containers" / DOCKER_ID
    d.mkdir(parents=True)
    (d / "config.v2.json").symlink_to("config.v2.json")      # ELOOP, whoever reads it
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert store(tmp_path).names([DOCKER_ID]) == {}
    assert any("symbolic links" in m for m in warnings(caplog))


def _files(directory):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}


def test_the_podman_state_is_never_written_or_locked(tmp_path):
    path = podman_db(tmp_path, [(PODMAN_ID, "cuda-smoke")], wal=False)
    before = _files(path.parent)
    content = path.read_bytes()
    # A writer holds the database's exclusive lock: a locking reader would fail ("database is
    # locked") or wait; this one neither waits nor takes a lock.
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        assert store(tmp_path).names([PODMAN_ID]) == {PODMAN_ID: named("cuda-smoke")}
        assert time.monotonic() - started < 1.0
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert _files(path.parent) == before           # no -journal, -wal or -shm left behind
    assert path.read_bytes() == content
    # And it holds no lock afterwards: podman can write at once.
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    other.execute("ROLLBACK")
    other.close()


def test_a_query_past_its_deadline_is_interrupted(tmp_path, caplog):
    ids = [f"{n:064x}" for n in range(1, 300)]
    podman_db(tmp_path, [(cid, f"c{n}") for n, cid in enumerate(ids)])
    ticks = iter(range(10**6))
    names = store(tmp_path, deadline_seconds=0.5, monotonic=lambda: float(next(ticks)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert names.names(ids) == {}
    assert any("interrupted" in m for m in warnings(caplog))
    # The same database read with a clock that stands still names them all.
    assert len(store(tmp_path, monotonic=lambda: 0.0).names(ids)) == len(ids)


@pytest.mark.parametrize("make, why", [
    (lambda p: p.write_bytes(b"SQLite format 2\x00" + b"\x00" * 4000), "not a database"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE t(x)").connection.commit(),
     "no such table"),
    (lambda p: os.mkfifo(p), "not a regular file"),
])
def test_a_bad_podman_state_names_nothing_and_is_logged_once(tmp_path, caplog, make, why):
    storage = tmp_path / "var" / "lib" / "containers" / "storage"
    storage.mkdir(parents=True)
    make(storage / "db.sql")
    now = [0.0]
    names = store(tmp_path, retry_seconds=1.0, monotonic=lambda: now[0])
    done = threading.Event()

    def look():
        for _ in range(2):
            assert names.names([PODMAN_ID]) == {}
            now[0] += 2.0
        done.set()

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        worker = threading.Thread(target=look, daemon=True)
        worker.start()
        worker.join(10)
    assert done.is_set(), "the lookup hung"
    said = warnings(caplog)
    assert len(said) == 1 and why in said[0] and "db.sql" in said[0]


def test_bad_rows_are_skipped(tmp_path, caplog):
    path = podman_db(tmp_path, [(PODMAN_ID, "ok")])
    db = sqlite3.connect(path)
    db.execute("INSERT INTO ContainerConfig VALUES (?, ?, NULL, '{}')", (OTHER_ID, ""))
    db.execute("INSERT INTO ContainerConfig VALUES (?, ?, NULL, '{}')",
               ("d" * 64, b"bin\xffary"))
    db.commit()
    db.close()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        got = store(tmp_path).names([PODMAN_ID, OTHER_ID, "d" * 64])
    assert got == {PODMAN_ID: named("ok")}
    assert len(warnings(caplog)) == 1               # one line for the kind, not per row


def test_a_legacy_boltdb_state_is_said_once_not_read(tmp_path, caplog):
    libpod = tmp_path / "var" / "lib" / "containers" / "storage" / "libpod"
    libpod.mkdir(parents=True)
    (libpod / "bolt_state.db").write_bytes(b"\x00" * 4096)
    now = [0.0]
    names = store(tmp_path, retry_seconds=1.0, monotonic=lambda: now[0])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(3):
            assert names.names([PODMAN_ID]) == {}
            now[0] += 2.0
    said = warnings(caplog)
    assert len(said) == 1 and "BoltDB" in said[0]
