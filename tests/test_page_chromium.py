"""The page in a real headless Chromium against the daemon on a simulated node with pods."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import fakeruntime
from tests.support.browser import HEADLESS, Browser, chromium
from tests.support.fakehost import build, container_id, pod_uid, write_scenario
from tests.support.paths import REPO_ROOT

# pid -> (pod number, container number) and the names the runtime gives them.
PLACEMENT = {4242: (1, 1), 4243: (2, 2), 5151: (3, 3)}
NAMES = {1: ("llm-train-0", "ml", "trainer"), 2: ("notebook-ada", "research", "jupyter"),
         3: ("embed-serve-7f9c", "serve", "server")}


def start_node(start_daemon, tmp_path: Path, *extra: str, names=NAMES,
               scenario: Path = REPO_ROOT / "examples" / "two-gpus.yaml"):
    """The two-GPU example (or ``scenario``) with three named pods on it (``names``: pod
    number -> (pod, namespace, container)); returns (daemon, runtime server)."""
    cgroup, proc = build(tmp_path / "host", PLACEMENT)
    socket = tmp_path / "containerd.sock"
    server = fakeruntime.serve(socket, {
        container_id(n): (pod, namespace, pod_uid(n), container)
        for n, (pod, namespace, container) in names.items()})
    daemon = start_daemon("--simulate", str(scenario),
                          "--cgroup-root", str(cgroup), "--proc-root", str(proc),
                          "--runtime-socket", str(socket), "--pod-resources-socket", "",
                          "--idle-power-watts", "120", "--housekeeping-interval", "0.5", *extra)
    daemon.wait_ready()
    daemon.wait_for(lambda s: {p["podRef"]["name"] for p in s["pods"]}
                    == {n[0] for n in names.values()}
                    and all(p.get("accelerators") for p in s["pods"]))
    return daemon, server


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_page_in_headless_chromium(start_daemon, tmp_path):
    binary = chromium()
    daemon, server = start_node(start_daemon, tmp_path)
    try:
        daemon.wait_ticks(4)                  # a few ticks of history for the charts
        url = daemon.base + "/"
        dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        assert "NVIDIA H100 80GB HBM3" in dom
        assert dom.count('class="model"') == 2            # every GPU's card
        for pod, _namespace, _container in NAMES.values():
            assert pod in dom
        # The script ran: charts were drawn as SVG with paths (3 per GPU, one for the pods).
        charts = re.findall(r'<figure class="chart" data-key="(\w+)"', dom)
        assert sorted(charts) == sorted(["duty", "power", "memory"] * 2 + ["energy"])
        assert dom.count("<path") >= 10
        for pod, _namespace, _container in NAMES.values():
            assert re.search(r"<div class=\"legend\">.*?" + re.escape(pod), dom, re.S)

        shot = tmp_path / "page.png"
        subprocess.run([binary, *HEADLESS, "--virtual-time-budget=5000",
                        "--window-size=1280,1400", f"--screenshot={shot}", url],
                       capture_output=True, text=True, timeout=120)
        data = shot.read_bytes()
        assert png_size(data) == (1280, 1400)
        assert len(data) > 40_000           # a page with text and charts, not a blank one
    finally:
        server.stop(0)


def test_page_without_history_still_shows_the_tables(start_daemon, tmp_path):
    binary = chromium()
    daemon, server = start_node(start_daemon, tmp_path, "--history-duration", "0")
    try:
        dom = subprocess.run([binary, *HEADLESS, "--virtual-time-budget=3000", "--dump-dom",
                              daemon.base + "/"], capture_output=True, text=True,
                             timeout=120).stdout
        assert "llm-train-0" in dom and "NVIDIA H100 80GB HBM3" in dom
        assert 'class="chart"' not in dom
        assert daemon.get("/api/v1/history")[0] == 404
    finally:
        server.stop(0)


def test_docs_screenshot_is_committed_and_shown():
    shot = REPO_ROOT / "docs" / "page.png"
    width, height = png_size(shot.read_bytes())
    assert width >= 1000 and height >= 800
    assert "docs/page.png" in (REPO_ROOT / "README.md").read_text()
    assert yaml.safe_load((REPO_ROOT / "examples" / "two-gpus.yaml").read_text())["devices"]


def test_daemon_history_end_to_end(start_daemon, tmp_path):
    """The history the real daemon records after each tick, as a client sees it."""
    daemon, server = start_node(start_daemon, tmp_path, "--history-duration", "30")
    try:
        body = daemon.wait_for(
            lambda b: all(len(c["points"]) >= 3 for c in b["containers"]) and b["containers"],
            path="/api/v1/history")
        assert [g["model"] for g in body["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
        assert {c["pod"] for c in body["containers"]} == {n[0] for n in NAMES.values()}
        trainer = next(c for c in body["containers"] if c["pod"] == "llm-train-0")
        last = trainer["points"][-1]
        assert last["attributedPowerWatts"] > 0 and last["processMemoryUsed"] == 2**30
        energies = [p["attributedEnergyJoules"] for p in trainer["points"]
                    if "attributedEnergyJoules" in p]        # absent before two readings
        assert len(energies) >= 2 and energies == sorted(energies)   # a counter: never back
        status, recent = daemon.get("/api/v1/history?seconds=1")
        assert status == 200 and 1 <= len(recent["gpus"][0]["points"]) <= 3
        status, error = daemon.get("/api/v1/history?seconds=31")
        assert status == 400 and "1 to 30" in error["message"]
    finally:
        server.stop(0)


# Kubernetes-long names (a pod name is up to 63 characters), to be shown at 420 px.
LONG_NAMES = {
    1: ("llm-finetune-llama-3-70b-instruct-lora-sweep-worker-0-7f9c8d6b5",
        "research-and-development", "trainer"),
    2: ("notebook-ada-lovelace-analytical-engine", "research-and-development", "jupyterlab"),
    3: ("embed-serve-7f9c8d6b5-x2x9q", "serving-production-eu-west", "model-server"),
}

# Measured in the page: what is wider than its table or the viewport, or cut; names broken
# over lines, or cut without their whole text in the cell's title; the energy columns.
LAYOUT = r"""(() => {
  const width = document.documentElement.clientWidth, problems = [];
  const where = el => (el.closest("[data-live]") || {dataset: {}}).dataset.live + " " +
                      el.tagName.toLowerCase() + "." + el.className + " " +
                      JSON.stringify((el.textContent || "").trim().slice(0, 40));
  if (document.documentElement.scrollWidth > width) {
    problems.push("page scrolls sideways: " + document.documentElement.scrollWidth + " > " + width);
  }
  const tables = [...document.querySelectorAll("table")];
  for (const table of tables) {
    const box = table.getBoundingClientRect(), room = table.parentElement.getBoundingClientRect();
    if (box.right > Math.min(width, room.right) + 0.5 ||
        table.scrollWidth > table.clientWidth + 1) {
      problems.push("table wider than its card: " + where(table) + " " + box.right + " > " +
                    room.right);
    }
    for (const cell of table.querySelectorAll("td, th")) {
      if (getComputedStyle(cell).display === "none" || cell.closest("thead") &&
          getComputedStyle(cell.closest("thead")).display === "none") continue;
      const r = cell.getBoundingClientRect();
      if (r.right > box.right + 0.5 || r.right > width || r.left < box.left - 0.5) {
        problems.push("cell outside its table: " + where(cell) + " " + r.left + ".." + r.right);
      }
      if (cell.scrollWidth > cell.clientWidth + 1) problems.push("cell cut: " + where(cell));
    }
  }
  const names = [...document.querySelectorAll("td.name bdi, h1 bdi")];
  for (const name of names) {
    const range = document.createRange();
    range.selectNodeContents(name);
    const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    if (lines.size > 1) problems.push("name broken over " + lines.size + " lines: " + where(name));
    const holder = name.closest("td") || name.closest("h1");
    const cut = name.scrollWidth > name.clientWidth + 1 ||
                holder.scrollWidth > holder.clientWidth + 1;
    if (cut && holder.title !== name.textContent) {
      problems.push("name cut without a title: " + where(name));
    }
  }
  for (const item of document.querySelectorAll(".legend span")) {
    const r = item.getBoundingClientRect(), fig = item.closest("figure").getBoundingClientRect();
    if (r.right > fig.right + 0.5) problems.push("legend outside its chart: " + where(item));
  }
  // A row shown as a block labels each cell with its column's heading.
  for (const table of tables) {
    const headings = [...table.querySelectorAll("thead th")].map(th => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      [...row.cells].forEach((cell, k) => {
        const label = getComputedStyle(cell, "::before");
        if (label.display === "none" || label.content === "none" || label.content === "normal") {
          if (getComputedStyle(table).display === "block" && !cell.classList.contains("lead")) {
            problems.push("cell without its label: " + where(cell));
          }
        } else if (label.content !== JSON.stringify(headings[k])) {
          problems.push("cell labelled " + label.content + ", not " + headings[k]);
        }
      });
    }
  }
  const column = (table, heading) => [...table.querySelectorAll("thead th")]
    .findIndex(th => th.textContent.trim() === heading);
  const energy = tables.flatMap(table => {
      const k = Math.max(column(table, "energy"), column(table, "energy, total"));
      return k < 0 ? [] : [...table.querySelectorAll("tbody tr")].map(row => row.cells[k]); })
    .map(cell => { const r = cell.getBoundingClientRect();
                   return {text: cell.textContent.trim(), left: r.left, right: r.right,
                           width: r.width, height: r.height,
                           shown: getComputedStyle(cell).display !== "none" &&
                                  getComputedStyle(cell).visibility !== "hidden"}; });
  return {width, problems, energy, tables: tables.length, names: names.length,
          layouts: tables.map(t => t.className + " " + getComputedStyle(t).display),
          swatches: [...document.querySelectorAll("table.tenants i.swatch")]
            .map(i => getComputedStyle(i).backgroundColor),
          cut: names.filter(n => n.scrollWidth > n.clientWidth + 1).length};
})()"""


def palette() -> set[str]:
    """The tenants' colours as the browser computes them ("rgb(78, 121, 167)")."""
    from gpustats.export.page import TENANT_COLOURS

    return {"rgb({}, {}, {})".format(*(int(c[i:i + 2], 16) for i in (1, 3, 5)))
            for c in TENANT_COLOURS}


def measure_layout(binary: str, url: str, width: int) -> dict:
    with Browser(binary, width, 2000) as page:
        page.open(url)
        page.wait_for("document.querySelectorAll('figure.chart svg path').length > 6 && "
                      "document.querySelectorAll('td i.swatch').length >= 6")
        return page.evaluate(LAYOUT)


def test_page_holds_at_420_px(start_daemon, tmp_path):
    """At 420 px wide (rows as blocks), and at 1280 (the tables as tables): no table column
    cut or out of the viewport (the energy columns shown whole), no name broken within a word
    (a name too long is cut, its whole text in its cell's title)."""
    binary = chromium()
    daemon, server = start_node(start_daemon, tmp_path, names=LONG_NAMES)
    try:
        daemon.wait_ticks(4)                 # a few ticks: the charts and their colours
        for width, layout in ((420, "block"), (1280, "table")):
            found = measure_layout(binary, daemon.base + "/", width)
            assert found["width"] == width
            assert found["problems"] == [], width
            assert found["tables"] == 3 and found["names"] >= 13
            assert all(shown.endswith(" " + layout) for shown in found["layouts"]), found
            assert found["cut"] >= 1         # the longest pod name does not fit: cut, titled
            # Each tenant in a colour of the page's palette, no two alike.
            assert len(set(found["swatches"])) == 3 and set(found["swatches"]) <= palette()
            # Energy in every GPU card's rows (3 pods) and in the tenants' (3): seen, whole.
            assert len(found["energy"]) == 6
            for cell in found["energy"]:
                assert cell["shown"] and cell["width"] > 0 and cell["height"] > 0, cell
                assert cell["left"] >= 0 and cell["right"] <= width, cell
                assert re.fullmatch(r"[0-9.]+ k?J", cell["text"]), cell
    finally:
        server.stop(0)


# Every power chart's data as drawn: per tick, the stacked layers and the total line.
POWER_CHARTS = r"""(() => [...document.querySelectorAll("figure.chart[data-key='power']")]
  .map(f => ({times: f.spec.times, stacked: f.spec.stacked, total: f.spec.total.values,
              layers: f.spec.layers.map(l => ({label: l.label, values: l.values}))})))()"""


def test_power_stack_never_above_its_total_in_chromium(start_daemon, tmp_path):
    """On GPUs whose power steps between busy and idle every second (and idles below the
    configured idle), every power chart's stack at each tick stays at or below that tick's
    total: each tick's stack adds up to the tick's own total."""
    binary = chromium()
    scenario = yaml.safe_load((REPO_ROOT / "examples" / "two-gpus.yaml").read_text())
    for device in scenario["devices"]:
        device["idle_cycle"] = {"watts": 85, "busy_seconds": 1, "idle_seconds": 1,
                                "start": "busy"}
    path = tmp_path / "stepping.yaml"
    write_scenario(path, scenario)
    daemon, server = start_node(start_daemon, tmp_path, scenario=path)
    try:
        daemon.wait_ticks(8)                 # two busy/idle cycles, 0.5 s ticks
        with Browser(binary, 1280, 1400) as page:
            page.open(daemon.base + "/")
            charts = page.wait_for(
                f"(() => {{ const c = {POWER_CHARTS}; "
                "return c.length === 2 && c.every(x => x.times.length >= 6) && c; })()")
        assert [c["stacked"] for c in charts] == [True, True]
        stacked_ticks = 0
        for chart in charts:
            labels = [layer["label"] for layer in chart["layers"]]
            for i, total in enumerate(chart["total"]):
                values = [layer["values"][i] for layer in chart["layers"]]
                stack = sum(v for v in values if v is not None and v > 0)
                if total is None:
                    assert stack == 0
                    continue
                assert stack <= total + 0.01, (i, total, list(zip(labels, values)))
                if stack:
                    stacked_ticks += 1
                    assert stack == pytest.approx(total, abs=0.01), (i, total, values)
            assert labels[0] == "unallocated idle" and labels[-1] == "unattributed", labels
        assert stacked_ticks >= 8
    finally:
        server.stop(0)
