"""The page at ``/``, its assets and ``/api/v1/history`` through the Flask app (no browser)."""

import gzip
import re
from dataclasses import replace

import pytest
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from gpustats.engine.history import History
from gpustats.engine.store import SnapshotStore
from gpustats.web.app import WebSettings, create_app
from gpustats.web.history import history_blueprint
from gpustats.web.ui import ui_blueprint
from tests.support.paths import REPO_ROOT
from tests.support.snapshots import A, C1, M, T, sample_snapshot

DURATION = 120


def app_for(store, history, duration=DURATION):
    settings = WebSettings(5.0, history_seconds=duration if history is not None else 0)
    return create_app(store, settings, extra_blueprints=(
        history_blueprint(history),
        ui_blueprint(store, housekeeping_interval=5.0, history_seconds=duration)))


def tick(store, history, seconds, snapshot=None):
    snap = replace(snapshot or sample_snapshot(), sequence=int(seconds) + 1,
                   monotonic=1.0 + seconds, taken_at=T + seconds)
    store.publish(snap)
    if history is not None:
        history.record(snap)
    return snap


@pytest.fixture
def node():
    store, history = SnapshotStore(), History(DURATION)
    return store, history, app_for(store, history).test_client()


# ------------------------------------------------------------------ /api/v1/history

def test_history_not_ready_then_shape(node):
    store, history, client = node
    resp = client.get("/api/v1/history")
    assert resp.status_code == 503 and resp.get_json()["error"] == "not_ready"
    for s in range(0, 50, 5):
        tick(store, history, s)
    body = client.get("/api/v1/history").get_json()
    assert body["seconds"] == DURATION
    assert [g["id"] for g in body["gpus"]] == [A, "GPU-bbbb", "GPU-mmmm"]
    assert all(len(g["points"]) == 10 for g in body["gpus"])
    trainer = next(c for c in body["containers"] if c["id"] == C1)
    assert trainer["pod"] == "trainer-0" and len(trainer["points"]) == 10


@pytest.mark.parametrize("seconds, points", [(1, 1), (5, 2), (12, 3), (DURATION, 10)])
def test_history_seconds_bounds_the_points(node, seconds, points):
    store, history, client = node
    for s in range(0, 50, 5):
        tick(store, history, s)
    body = client.get(f"/api/v1/history?seconds={seconds}").get_json()
    assert body["seconds"] == seconds
    assert len(body["gpus"][0]["points"]) == points


@pytest.mark.parametrize("query", ["seconds=0", "seconds=-1", "seconds=abc", "seconds=1.5",
                                   f"seconds={DURATION + 1}", "seconds=", "seconds=1&seconds=2",
                                   "seconds=%201", "seconds=99999999999", "seconds=\u0661"])
def test_history_bad_queries_are_400_json(node, query):
    store, history, client = node
    tick(store, history, 0)
    resp = client.get("/api/v1/history?" + query)
    assert resp.status_code == 400
    body = resp.get_json()
    assert body["error"] == "bad_request" and "seconds" in body["message"]
    assert str(DURATION) in body["message"]


def test_history_off_is_404_and_not_in_the_document():
    store = SnapshotStore()
    client = app_for(store, None, duration=0).test_client()
    tick(store, None, 0)
    resp = client.get("/api/v1/history")
    assert resp.status_code == 404 and "history is off" in resp.get_json()["message"]
    assert "/api/v1/history" not in client.get("/openapi.json").get_json()["paths"]
    assert client.get("/").status_code == 200


def test_history_in_the_openapi_document_with_its_bound(node):
    _store, _history, client = node
    doc = client.get("/openapi.json").get_json()
    param = doc["paths"]["/api/v1/history"]["get"]["parameters"][0]
    assert param["name"] == "seconds" and param["schema"]["maximum"] == DURATION
    assert {"/", "/assets/{name}"} <= set(doc["paths"])


def test_history_rendered_once_per_tick_and_revalidated(node, monkeypatch):
    store, history, client = node
    tick(store, history, 0)
    calls = []
    real = history.window
    monkeypatch.setattr(history, "window", lambda s=None: calls.append(s) or real(s))
    first = client.get("/api/v1/history?seconds=10")
    again = client.get("/api/v1/history?seconds=10")
    assert first.data == again.data and calls == [10]
    etag = first.headers["ETag"]
    assert client.get("/api/v1/history?seconds=10",
                      headers={"If-None-Match": etag}).status_code == 304
    tick(store, history, 5)
    fresh = client.get("/api/v1/history?seconds=10", headers={"If-None-Match": etag})
    assert fresh.status_code == 200 and fresh.headers["ETag"] != etag and calls == [10, 10]


def test_history_gzip_when_accepted(node):
    store, history, client = node
    for s in range(0, 50, 5):
        tick(store, history, s)
    plain = client.get("/api/v1/history")
    zipped = client.get("/api/v1/history", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.data) == plain.data
    assert len(zipped.data) < len(plain.data) / 4
    assert zipped.headers["ETag"] != plain.headers["ETag"]
    assert "Accept-Encoding" in zipped.headers["Vary"]


# ------------------------------------------------------------------ the page

def test_page_before_the_first_tick_is_503_html(node):
    _store, _history, client = node
    resp = client.get("/")
    assert resp.status_code == 503 and resp.mimetype == "text/html"
    assert resp.headers["Retry-After"] == "2"


def test_page_shows_every_gpu_and_pod_without_javascript(node):
    store, history, client = node
    tick(store, history, 0)
    resp = client.get("/")
    assert resp.status_code == 200 and resp.mimetype == "text/html"
    html = resp.get_data(as_text=True)
    assert html.count('class="model"><bdi>NVIDIA H100 80GB HBM3</bdi><') == 3
    assert "trainer-0" in html and ">ml<" in html and ">trainer<" in html
    assert "GPU lost" in html                                   # the lost GPU says so
    assert "2.0 / 79.6 GiB" in html and "310 W / 700 W" in html
    assert "GI 7 · 3g.40gb" in html                             # the MIG sidecar's instance
    assert C1[:12] not in html                                  # named: no ID shown
    assert "333333333333" in html                               # unnamed: its short ID
    assert 'data-history-seconds="120"' in html and 'data-interval="5"' in html


def test_page_urls_are_relative_and_nothing_is_fetched_elsewhere(node):
    store, history, client = node
    tick(store, history, 0)
    html = client.get("/").get_data(as_text=True)
    urls = re.findall(r'(?:href|src)="([^"]*)"', html)
    assert urls and all(not u.startswith(("/", "http:", "https:")) for u in urls
                        if not u.startswith("data:"))
    script = client.get("/assets/gpustats.js").get_data(as_text=True)
    assert re.findall(r'fetch\("([^"]+)"', script) == ["./"]
    assert '"api/v1/history"' in script and "http" not in script.replace(
        "http://www.w3.org/2000/svg", "")
    policy = client.get("/").headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy


def test_page_works_behind_a_path_prefix(node):
    store, history, client = node
    tick(store, history, 0)
    app = client.application
    prefixed = Client(DispatcherMiddleware(lambda e, s: s("404 Not Found", []) or [b""],
                                           {"/gpu": app}))
    page = prefixed.get("/gpu/")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    urls = re.findall(r'(?:href|src)="((?:assets|api|stats|openapi)[^"]*)"', html)
    assert len(urls) == 6
    for url in urls:
        assert prefixed.get("/gpu/" + url).status_code == 200, url


def test_page_escapes_names(node):
    store, history, client = node
    snap = sample_snapshot()
    evil = replace(snap.pods[0], name='<script>alert("x")</script>', namespace="<b>ns</b>")
    tick(store, history, 0, replace(snap, pods=(evil,)))
    html = client.get("/").get_data(as_text=True)
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<b>ns</b>" not in html


def test_page_memoized_per_snapshot_with_etag(node):
    store, history, client = node
    tick(store, history, 0)
    first = client.get("/")
    etag = first.headers["ETag"]
    assert client.get("/", headers={"If-None-Match": etag}).status_code == 304
    assert first.headers["Cache-Control"] == "no-cache"
    tick(store, history, 5)
    assert client.get("/", headers={"If-None-Match": etag}).status_code == 200


def test_no_gpu_node_says_so(node):
    store, history, client = node
    snap = sample_snapshot()
    tick(store, history, 0, replace(snap, devices=(), pods=(), containers=(), processes=(),
                                   status=replace(snap.status, gpus_on_pci_bus=0,
                                                  nvml_loaded=False)))
    html = client.get("/").get_data(as_text=True)
    assert "No GPU on this node&#39;s PCI bus" in html and "No tenant uses a GPU." in html


@pytest.mark.parametrize("name, mimetype", [("gpustats.js", "text/javascript"),
                                            ("gpustats.css", "text/css")])
def test_assets_cached_by_etag_and_gzip(node, name, mimetype):
    _store, _history, client = node
    resp = client.get(f"/assets/{name}")
    assert resp.status_code == 200 and resp.mimetype == mimetype
    assert "max-age" in resp.headers["Cache-Control"]
    assert client.get(f"/assets/{name}",
                      headers={"If-None-Match": resp.headers["ETag"]}).status_code == 304
    zipped = client.get(f"/assets/{name}", headers={"Accept-Encoding": "gzip"})
    assert gzip.decompress(zipped.data) == resp.data


def test_unknown_asset_is_404_json(node):
    _store, _history, client = node
    for path in ("/assets/nope.js", "/assets/..%2fapp.py", "/assets/"):
        resp = client.get(path)
        assert resp.status_code == 404 and resp.get_json()["error"] == "not_found"


def test_odd_spans_are_rendered_but_not_kept(node):
    store, history, client = node
    tick(store, history, 0)
    from gpustats.web import history as web_history
    for seconds in range(1, 30):
        assert client.get(f"/api/v1/history?seconds={seconds}").status_code == 200
    assert client.get("/api/v1/history").status_code == 200       # the whole window: kept
    rendered = [c.cell_contents for c in
                client.application.view_functions["history.history_view"].__closure__
                if isinstance(c.cell_contents, web_history._Rendered)][0]
    assert len(rendered._bodies) == web_history.KEPT_PER_TICK + 1


def test_page_revalidates_like_snapshot_bodies(node):
    """Weak comparison, a tag per content coding, GET and HEAD only: as /stats/summary does."""
    store, history, client = node
    tick(store, history, 0)
    plain = client.get("/").headers["ETag"]
    zipped = client.get("/", headers={"Accept-Encoding": "gzip"}).headers["ETag"]
    assert plain != zipped and zipped.endswith('.gz"')
    assert client.get("/", headers={"If-None-Match": f'"x", W/{plain}'}).status_code == 304
    assert client.head("/", headers={"If-None-Match": plain}).status_code == 304
    assert client.get("/", headers={"If-None-Match": zipped}).status_code == 200
    assert client.get("/", headers={"If-None-Match": zipped,
                                    "Accept-Encoding": "gzip"}).status_code == 304


def test_page_shows_tenants_of_every_kind_and_not_the_ended(node):
    """Pods, a Docker container, a service on two MIG instances, a user's sessions, a Slurm
    job and a process: in the GPU cards and in the tenant table, with their kind; the pod and
    the service that ended (kept for their counters) nowhere."""
    from gpustats.export.page import page_view
    from tests.support.tenant_snapshot import tenant_snapshot

    store, history, client = node
    snapshot = tenant_snapshot()
    page = page_view(snapshot)
    table = [(r.kind, r.tenant, r.namespace, r.gpus, r.power, r.energy) for r in page.tenants]
    assert table == [
        ("pod", "trainer-0", "ml", "0", "100 W", "1.00 kJ"),
        ("job", "job 4242", "bob", "1", "7.0 W", "70.0 J"),          # whose: its user
        ("session", "alice", "alice", "0", "6.0 W", "60.0 J"),
        ("service", "ollama.service", "–", "1", "5.0 W", "50.0 J"),  # no owner known here
        ("container", "jupyter", "–", "0", "4.0 W", "40.0 J"),
        ("pod", "u2", "–", "1", "2.0 W", "20.0 J"),
        ("process", "python3", "uid 1002", "0", "1.5 W", "15.0 J")]
    assert [r.tenant_is_id for r in page.tenants] == [False] * 5 + [True, False]
    assert dict(page.totals)["tenants on GPUs"] == "7"
    cards = {g.uuid: [(r.kind, r.tenant, r.container, r.instance) for r in g.containers]
             for g in page.gpus}
    # Beside a pod's container, the identity of another kind: a container's short ID, a job's
    # step, the UID of a tenant named by its user.
    assert sorted(cards["GPU-aaaa"]) == [
        ("container", "jupyter", "333333333333", ""), ("pod", "trainer-0", "trainer", ""),
        ("process", "python3", "–", ""), ("session", "alice", "uid 1000", "")]
    assert sorted(cards["GPU-mmmm"]) == [
        ("job", "job 4242", "step 0", "GI 8 · 3g.40gb"),
        ("pod", "u2", "222222222222", "GI 7 · 3g.40gb"),
        ("service", "ollama.service", "–", "GI 7 · 3g.40gb"),
        ("service", "ollama.service", "–", "GI 8 · 3g.40gb")]
    # The charts colour a tenant outside pods by the key its history series has.
    service = next(r for r in page.tenants if r.kind == "service")
    assert service.pod_key == "container:service:ollama.service"

    tick(store, history, 0, snapshot)
    html = client.get("/").get_data(as_text=True)
    for name in ("ollama.service", "alice", "job 4242", "python3", "jupyter", "trainer-0"):
        assert f"<bdi>{name}</bdi>" in html, name
    assert "old-0" not in html and "old.service" not in html and ">old<" not in html
    assert "Energy per tenant" in html


# ------------------------------------------------------------------ what the page shows, fixed
# (the tenants' order, the idle shares, the colours) and the script's chart model

def _with_energy(snapshot, energies):
    """``snapshot`` with the attributed energy of each tenant named in ``energies`` changed
    (its power left as it is)."""
    def acc(items, joules):
        return tuple(replace(a, attributed_energy_joules=joules) for a in items)

    pods = tuple(replace(p, accelerators=acc(p.accelerators, energies[p.name]))
                 if p.name in energies else p for p in snapshot.pods)
    containers = tuple(replace(c, accelerators=acc(c.accelerators, energies[c.name]))
                       if c.name in energies else c for c in snapshot.containers)
    return replace(snapshot, pods=pods, containers=containers)


def test_tenants_are_sorted_by_energy_total_not_by_power(node):
    """The table is headed "energy, total": the most energy first, whatever the power now;
    a tenant whose energy is unknown last."""
    from gpustats.export.page import page_view
    from tests.support.tenant_snapshot import tenant_snapshot

    # jupyter draws 4 W now but has used the most; the trainer (100 W now) the least.
    snapshot = _with_energy(tenant_snapshot(), {"jupyter": 5000.0, "trainer-0": 10.0})
    snapshot = replace(snapshot, containers=tuple(
        replace(c, accelerators=tuple(replace(a, attributed_energy_joules=None)
                                      for a in c.accelerators))
        if c.tenant is not None and c.tenant.kind == "process" else c
        for c in snapshot.containers))
    page = page_view(snapshot)
    order = [(r.tenant, r.energy, r.power) for r in page.tenants]
    assert order == [
        ("jupyter", "5.00 kJ", "4.0 W"), ("job 4242", "70.0 J", "7.0 W"),
        ("alice", "60.0 J", "6.0 W"), ("ollama.service", "50.0 J", "5.0 W"),
        ("u2", "20.0 J", "2.0 W"), ("trainer-0", "10.0 J", "100 W"),
        ("python3", "–", "1.5 W")]                       # unknown: last, and not 0

    store, history, client = node
    tick(store, history, 0, snapshot)
    (tenants,) = table_rows(client.get("/").get_data(as_text=True), "tenants")
    assert [(r["tenant"], r["energy, total"]) for r in tenants] == [
        (name, energy) for name, energy, _ in order]


def table_rows(html: str, kind: str) -> list[list[dict[str, str]]]:
    """Each table of class ``kind`` in the page as rows of {heading: cell text}."""
    import html as markup

    def text(cell: str) -> str:
        return markup.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
    tables = []
    for table in re.findall(rf'<table class="{kind} [^"]*">(.*?)</table>', html, re.S):
        head, body = table.split("</thead>")
        headings = [text(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", head)]
        tables.append([dict(zip(headings, map(text, re.findall(r"<td[^>]*>(.*?)</td>", row))))
                       for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)])
    return tables


def test_idle_shares_are_shown_for_every_holder_and_the_gpus_unallocated_idle(node):
    """Each holder's idle share (power now, energy in total) in its GPU card and in the tenant
    table; each GPU's idle that no tenant holds it for; absent ones as "–", never 0."""
    from gpustats.export.page import page_view
    from tests.support.tenant_snapshot import tenant_snapshot

    snapshot = tenant_snapshot()
    page = page_view(snapshot)
    cards = {g.uuid: g for g in page.gpus}
    rows = {(r.tenant, r.instance): (r.idle_share, r.idle_energy)
            for r in cards["GPU-aaaa"].containers + cards["GPU-mmmm"].containers}
    assert rows == {
        ("trainer-0", ""): ("10.0 W", "50.0 J"), ("jupyter", ""): ("2.0 W", "20.0 J"),
        ("alice", ""): ("3.0 W", "40.0 J"), ("python3", ""): ("0.5 W", "10.0 J"),
        ("u2", "GI 7 · 3g.40gb"): ("1.0 W", "5.0 J"),
        ("ollama.service", "GI 7 · 3g.40gb"): ("1.0 W", "5.0 J"),
        ("ollama.service", "GI 8 · 3g.40gb"): ("1.0 W", "5.0 J"),
        ("job 4242", "GI 8 · 3g.40gb"): ("2.0 W", "10.0 J")}
    tenants = {r.tenant: (r.idle_share, r.idle_energy) for r in page.tenants}
    assert tenants["ollama.service"] == ("2.0 W", "10.0 J")      # both instances summed
    assert tenants["trainer-0"] == ("10.0 W", "50.0 J")
    assert dict(cards["GPU-aaaa"].figures)["unallocated idle"] == "20.0 W · 345.0 J"
    assert dict(cards["GPU-mmmm"].figures)["unallocated idle"] == "5.0 W · 25.0 J"

    bare = replace(snapshot, devices=tuple(
        replace(d, unallocated_idle_power_watts=None, unallocated_idle_energy_joules=None)
        for d in snapshot.devices), pods=tuple(
        replace(p, accelerators=tuple(replace(a, idle_share_power_watts=None,
                                              idle_share_energy_joules=None)
                                      for a in p.accelerators)) for p in snapshot.pods))
    bare_page = page_view(bare)
    trainer = next(r for r in bare_page.tenants if r.tenant == "trainer-0")
    assert (trainer.idle_share, trainer.idle_energy) == ("–", "–")
    assert dict(bare_page.gpus[0].figures)["unallocated idle"] == "–"

    store, history, client = node
    tick(store, history, 0, snapshot)
    html = client.get("/").get_data(as_text=True)
    cards = table_rows(html, "containers")
    assert {(r["tenant"], r["idle share"], r["idle energy"]) for card in cards for r in card} \
        == {(name, *shares) for (name, _), shares in rows.items()}
    assert sum(map(len, cards)) == 8                            # every holder's entry
    (listed,) = table_rows(html, "tenants")
    assert {r["tenant"]: (r["idle share"], r["idle energy"]) for r in listed} == tenants
    assert "<dt>unallocated idle</dt><dd>20.0 W · 345.0 J</dd>" in html


def _lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a #rrggbb colour."""
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(v: float) -> float:
        return v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_at_least_twenty_tenant_colours_all_told_apart(node):
    """Twenty tenants or more get colours no two alike, and none like the greys of the power
    that is no tenant's; the page hands them to its script."""
    import itertools
    import json
    import math

    from gpustats.export.page import RESERVED_COLOURS, TENANT_COLOURS

    palette = list(TENANT_COLOURS)
    assert len(palette) >= 20 and len(set(palette)) == len(palette)
    for a, b in itertools.chain(itertools.combinations(palette, 2),
                                itertools.product(palette, RESERVED_COLOURS.values())):
        assert math.dist(_lab(a), _lab(b)) >= 15, (a, b)       # CIE76: clearly apart

    store, history, client = node
    tick(store, history, 0)
    html = client.get("/").get_data(as_text=True)
    given = json.loads(re.search(r'data-colours="([^"]*)"', html).group(1).replace("&#34;", '"'))
    assert given["tenants"] == palette and given["unallocated"] == RESERVED_COLOURS["unallocated"]

    # The script: each tenant shown keeps its colour; a new one takes the first free one.
    assigned = script_model("""
        const colours = new Map(), palette = data.palette;
        const first = [...model.assignColours(colours, data.keys, palette).values()];
        // Ten tenants leave, ten others come: no colour shown twice, the kept ones unchanged.
        const kept = data.keys.slice(10), fresh = data.keys.map(k => k + "-new").slice(0, 10);
        const before = new Map(colours);
        model.assignColours(colours, [...kept, ...fresh], palette);
        out({first, second: [...colours.values()],
             unchanged: kept.every(k => colours.get(k) === before.get(k))});
    """, {"palette": palette, "keys": [f"ns/pod-{n}" for n in range(30)]})
    assert assigned["first"][:len(palette)] == palette
    assert len(set(assigned["first"])) == 30                    # past the palette: more hues
    assert len(set(assigned["second"])) == 30 and assigned["unchanged"]


# The page script's chart model (the part of gpustats.js that needs no page) run under Node
# on history the app served: what the charts draw, checked without a browser.
SCRIPT = REPO_ROOT / "gpustats" / "web" / "static" / "gpustats.js"
_PRELUDE = """
const model = require(%s);
const data = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = value => process.stdout.write(JSON.stringify(value));
// As the page keeps it: each point's time as a number; MIG instances with their GPU.
function timed(points) { for (const p of points) p.t = Date.parse(p.time); return points; }
function series(doc) {
  const gpus = doc.gpus.map(g => ({meta: Object.assign({}, g, {migInstances: (g.migInstances || [])
      .map(m => Object.assign({}, m, {points: timed(m.points)}))}), points: timed(g.points)}));
  const containers = doc.containers.map(c => ({meta: c, points: timed(c.points)}));
  return {gpus, containers};
}
"""


def script_model(code: str, data: object) -> dict:
    import json
    import shutil
    import subprocess

    node_js = shutil.which("node") or shutil.which("nodejs")
    if node_js is None:
        pytest.skip("Node.js is not installed: the page script's chart model cannot run")
    program = _PRELUDE % json.dumps(str(SCRIPT)) + code
    done = subprocess.run([node_js, "-e", program], input=json.dumps(data),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# A GPU whose power falls: the reading at each tick's end is the new level, while the tick's
# energy (idle + active: what each holder is billed from) is still the level before, as on the
# simulator. Two pods hold it (idle 70 W: 35 W each); 20 W of each tick's active power is
# billed to no one. And a MIG GPU, instances of 40 and 20 of its 80 GiB, one pod on each.
IDLE = 70.0
LEVELS = (600.0, 600.0, 520.0, 300.0, 150.0, 150.0, 60.0, 60.0)
GIB = 1 << 30


def _ramp_snapshot(k: int):
    from gpustats.model.device import DeviceIdentity
    from gpustats.model.host import NodeStats
    from gpustats.model.snapshot import (
        ContainerAccelerator, ContainerStats, DeviceStats, MigInstanceStats, PodAccelerator,
        PodStats, Snapshot,
    )

    tick_power = LEVELS[k - 1] if k else None          # the tick's energy over its length
    active = None if tick_power is None else max(0.0, tick_power - IDLE)
    idle = None if tick_power is None else min(IDLE, tick_power)
    billed = None if active is None else max(0.0, active - 20.0)
    holders = {"big": 0.75, "small": 0.25}
    accelerators = {name: ContainerAccelerator(
        A, attributed_power_watts=None if billed is None else billed * part,
        idle_share_power_watts=None if idle is None else idle / 2)
        for name, part in holders.items()}
    mig_idle = 40.0
    mig = {7: ("mig-a", 200.0, 0.8, 40 * GIB), 8: ("mig-b", 100.0, 0.3 + 0.1 * k, 20 * GIB)}
    mig_accelerators = {name: ContainerAccelerator(
        M, gpu_instance_id=gi, attributed_power_watts=watts,
        idle_share_power_watts=mig_idle * size / (80 * GIB))
        for gi, (name, watts, _, size) in mig.items()}
    devices = (
        DeviceStats(identity=DeviceIdentity(0, A, "H100", 0, None, 80 * GIB),
                    power_watts=LEVELS[k], idle_power_watts=IDLE, active_power_watts=active,
                    memory_used_bytes=GIB, duty_cycle_percent=50, power_limit_watts=700.0),
        DeviceStats(identity=DeviceIdentity(1, M, "H100", 1, None, 80 * GIB),
                    power_watts=340.0, idle_power_watts=mig_idle, active_power_watts=300.0,
                    memory_used_bytes=GIB, power_limit_watts=700.0, sharing_mode="mig",
                    mig_instances=tuple(MigInstanceStats(gi, f"MIG-{gi}", f"{gi}g", size,
                                                         GIB, activity, watts)
                                        for gi, (_, watts, activity, size) in mig.items())),
    )
    pods = tuple(
        PodStats(f"uid-{name}", name, "ns", containers=(
            ContainerStats(name * 8, "main", "containerd", None, f"uid-{name}",
                           accelerators=(acc,)),),
                 accelerators=(PodAccelerator(acc.device_uuid, acc.attributed_power_watts),))
        for name, acc in {**accelerators, **mig_accelerators}.items())
    return Snapshot(sequence=k + 1, taken_at=T + k, monotonic=1.0 + k,
                    node=NodeStats("node-1", T - 3600), devices=devices, pods=pods)


@pytest.fixture
def ramp(node):
    """The history of the ramp as /api/v1/history serves it."""
    store, history, client = node
    for k in range(len(LEVELS)):
        snapshot = _ramp_snapshot(k)
        store.publish(snapshot)
        history.record(snapshot)
    return client.get("/api/v1/history").get_json()


def test_power_stack_is_of_the_same_tick_as_its_total(ramp):
    """Each tick's stack (per tenant: attributed + idle share; unallocated idle; unattributed)
    adds up to that tick's total, its energy over its length (idle + active), never to
    more: not the reading at the tick's end, which on a falling load is a tick ahead."""
    drawn = script_model("""
        const {gpus, containers} = series(data);
        out(gpus.map(g => { const m = model.powerModel(g, containers);
          return {times: m.times, total: m.total, unallocated: m.unallocated,
                  unattributed: m.unattributed,
                  tenants: Object.fromEntries(m.tenants.map(t => [t.label, t.values]))}; }))
    """, ramp)
    gpu, points = drawn[0], ramp["gpus"][0]["points"]
    assert gpu["total"][0] == points[0]["powerWatts"]         # no split yet: the reading
    assert all(v is None for v in gpu["tenants"]["big"][:1])
    ahead = 0
    for i in range(1, len(LEVELS)):
        point = points[i]
        same_tick = min(IDLE, LEVELS[i - 1]) + point["activePowerWatts"]
        assert gpu["total"][i] == pytest.approx(same_tick) == pytest.approx(LEVELS[i - 1])
        stack = (gpu["tenants"]["big"][i] + gpu["tenants"]["small"][i]
                 + gpu["unallocated"][i] + gpu["unattributed"][i])
        assert stack == pytest.approx(gpu["total"][i], abs=1e-6)
        assert stack <= gpu["total"][i] + 1e-6
        share = min(IDLE, LEVELS[i - 1]) / 2
        billed = max(0.0, LEVELS[i - 1] - IDLE - 20.0)
        assert gpu["tenants"]["big"][i] == pytest.approx(0.75 * billed + share, abs=2e-3)
        assert gpu["tenants"]["small"][i] == pytest.approx(0.25 * billed + share, abs=2e-3)
        assert gpu["unallocated"][i] == pytest.approx(0.0, abs=1e-6)
        ahead += point["powerWatts"] < stack - 1          # the reading: below the stack
    assert ahead >= 3                 # the case the old chart drew above its total line

    mig = drawn[1]                    # idle by instance size: 20 W, 10 W, 10 W unallocated
    for i in range(1, len(LEVELS)):
        assert mig["tenants"]["mig-a"][i] == pytest.approx(200.0 + 20.0)
        assert mig["tenants"]["mig-b"][i] == pytest.approx(100.0 + 10.0)
        assert mig["unallocated"][i] == pytest.approx(10.0)
        assert mig["total"][i] == pytest.approx(340.0)
        assert mig["unattributed"][i] == pytest.approx(0.0)


def test_mig_gpu_charts_its_instances_activity(ramp):
    """A MIG GPU has no duty cycle of its own: its chart is each instance's activity, and the
    GPU's as their mean by size; a GPU with a duty cycle keeps its duty chart."""
    drawn = script_model("""
        const {gpus} = series(data);
        out(gpus.map(g => model.activityModel(g)));
    """, ramp)
    whole, mig = drawn
    assert whole["kind"] == "duty" and whole["duty"] == [50] * len(LEVELS)
    assert mig["kind"] == "mig" and all(v is None for v in mig["duty"])
    instances = {i["label"]: i["values"] for i in mig["instances"]}
    assert list(instances) == ["GI 7 · 7g", "GI 8 · 8g"]
    assert instances["GI 7 · 7g"] == pytest.approx([80.0] * len(LEVELS))
    assert instances["GI 8 · 8g"] == pytest.approx([30.0 + 10 * k for k in range(len(LEVELS))])
    assert mig["gpu"] == pytest.approx([(80.0 * 2 + (30.0 + 10 * k)) / 3
                                        for k in range(len(LEVELS))])
