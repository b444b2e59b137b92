import threading

from gpustats.engine.store import SnapshotStore
from gpustats.model.host import NodeStats
from gpustats.model.snapshot import Snapshot


def _snap(seq):
    return Snapshot(sequence=seq, taken_at=0.0, monotonic=0.0, node=NodeStats("n", 0.0))


def test_render_once_per_snapshot_even_when_concurrent():
    store = SnapshotStore()
    store.publish(_snap(1))
    builds = []
    barrier = threading.Barrier(16)

    def build(snapshot):
        builds.append(snapshot.sequence)
        return b"body-%d" % snapshot.sequence

    results = []

    def worker():
        barrier.wait()
        results.append(store.render("k", build))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1]
    assert {r[1] for r in results} == {b"body-1"}
    store.publish(_snap(2))
    assert store.render("k", build)[1] == b"body-2"
    assert builds == [1, 2]


def test_empty_store():
    store = SnapshotStore()
    assert store.latest() is None
    assert store.render("k", lambda s: b"x") is None


def test_render_pairs_body_with_its_snapshot():
    store = SnapshotStore()
    store.publish(_snap(1))
    snapshot, body = store.render("k", lambda s: s.sequence)
    assert snapshot.sequence == body == 1
