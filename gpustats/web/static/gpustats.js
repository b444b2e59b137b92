/* gpustats page: live SVG charts from api/v1/history and the tables refreshed every tick.
   No library, no outside request: every URL is relative to the page. */
"use strict";
(function () {
  const body = document.body;
  const interval = Math.max(0.2, parseFloat(body.dataset.interval) || 5);
  const windowSeconds = parseInt(body.dataset.historySeconds, 10) || 0;
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                   "#b07aa1", "#ff9da7", "#9c755f", "#6b9ac4", "#d37295", "#8cd17d"];
  const IDLE = "#9aa3ad", UNATTRIBUTED = "#cdd3db", OTHERS = "#7f7f7f", LINE = "#3760a8";
  const MAX_LAYERS = 8;
  const GIB = 1073741824;

  const gpus = new Map();        // uuid -> {meta, points}
  const containers = new Map();  // container|gpu|instance -> {meta, points}
  const colors = new Map();      // pod key -> colour
  let latest = 0, lastFetched = 0;

  // ------------------------------------------------------------------ data

  function podKey(c) {
    if (c.pod) return (c.namespace || "") + "/" + c.pod;
    return c.podUid || "container:" + c.id;
  }

  function podLabel(c) {
    if (c.pod) return c.pod;
    if (c.podUid) return c.podUid.slice(0, 8);
    return c.name || c.id.slice(0, 12);
  }

  function colorOf(key) {
    if (!colors.has(key)) colors.set(key, PALETTE[colors.size % PALETTE.length]);
    return colors.get(key);
  }

  function append(table, key, entry) {
    let series = table.get(key);
    if (!series) { series = {points: []}; table.set(key, series); }
    series.meta = entry;
    const last = series.points.length ? series.points[series.points.length - 1].t : -Infinity;
    for (const p of entry.points) {
      const t = Date.parse(p.time);
      if (t > last) { p.t = t; series.points.push(p); if (t > latest) latest = t; }
    }
  }

  function merge(doc) {
    for (const g of doc.gpus) append(gpus, g.id, g);
    for (const c of doc.containers) {
      append(containers, c.id + "|" + c.gpu + "|" + (c.gpuInstanceId ?? ""), c);
    }
    const cutoff = latest - windowSeconds * 1000;
    for (const table of [gpus, containers]) {
      for (const [key, series] of table) {
        let drop = 0;
        while (drop < series.points.length && series.points[drop].t < cutoff) drop++;
        if (drop) series.points.splice(0, drop);
        if (!series.points.length) table.delete(key);
      }
    }
  }

  // ------------------------------------------------------------------ formatting

  function fixed(v, digits) {
    return v.toFixed(Math.abs(v) >= 100 || Number.isInteger(v) ? 0 : digits);
  }
  const fmt = {
    pct: v => fixed(v, 1) + " %",
    watts: v => fixed(v, 1) + " W",
    gib: v => fixed(v, 1) + " GiB",
    joules: v => {
      for (const [unit, size] of [["GJ", 1e9], ["MJ", 1e6], ["kJ", 1e3]]) {
        if (Math.abs(v) >= size) return (v / size).toFixed(2) + " " + unit;
      }
      return (v ? v.toFixed(1) : "0") + " J";
    },
  };

  function clock(t) { return new Date(t).toLocaleTimeString([], {hour12: false}); }

  function span(seconds) {
    if (seconds >= 90) return Math.round(seconds / 60) + " min";
    return Math.max(1, Math.round(seconds)) + " s";
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const step = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * step >= v) return m * step;
    return 10 * step;
  }

  // ------------------------------------------------------------------ drawing

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function figureFor(holder, key) {
    let fig = holder.querySelector("figure[data-key='" + key + "']");
    if (fig) return fig;
    fig = document.createElement("figure");
    fig.className = "chart";
    fig.dataset.key = key;
    const cap = document.createElement("figcaption");
    cap.append(document.createElement("span"), document.createElement("b"));
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("role", "img");
    const legend = document.createElement("div");
    legend.className = "legend";
    const tip = document.createElement("div");
    tip.className = "tip";
    tip.hidden = true;
    fig.append(cap, svg, legend, tip);
    holder.appendChild(fig);
    svg.addEventListener("mousemove", e => hover(fig, e));
    svg.addEventListener("mouseleave", () => { tip.hidden = true; fig.cursor.setAttribute("visibility", "hidden"); });
    return fig;
  }

  // spec: {title, now, format, times, layers: [{label, color, values}], stacked, total, ymax}
  function draw(holder, key, spec) {
    const fig = figureFor(holder, key);
    fig.spec = spec;
    fig.querySelector("figcaption span").textContent = spec.title;
    fig.querySelector("figcaption b").textContent = spec.now;
    const svg = fig.querySelector("svg");
    svg.setAttribute("aria-label", spec.title + ": " + spec.now);
    const width = Math.max(200, svg.clientWidth || fig.clientWidth || 600), height = 120;
    const m = {l: 48, r: 4, t: 6, b: 16}, w = width - m.l - m.r, h = height - m.t - m.b;
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.replaceChildren();
    const times = spec.times, n = times.length;
    const t0 = n ? times[0] : 0, t1 = n ? times[n - 1] : 1;
    const x = t => m.l + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * w;
    const ymax = spec.ymax > 0 ? spec.ymax : 1;
    const y = v => m.t + h - Math.min(v, ymax) / ymax * h;
    fig.geometry = {x, m, w, t0, t1};
    for (const frac of [0, 0.5, 1]) {
      el("line", {class: "grid", x1: m.l, x2: m.l + w, y1: y(ymax * frac), y2: y(ymax * frac)}, svg);
      el("text", {class: "axis", x: m.l - 4, y: y(ymax * frac) + 3, "text-anchor": "end"}, svg)
        .textContent = spec.format(ymax * frac);
    }
    if (n) {
      el("text", {class: "axis", x: m.l, y: height - 3}, svg).textContent = clock(t0);
      el("text", {class: "axis", x: m.l + w, y: height - 3, "text-anchor": "end"}, svg).textContent = clock(t1);
    }
    const base = new Array(n).fill(0);
    for (const layer of spec.layers) {
      if (spec.stacked) {
        const top = layer.values.map((v, i) => base[i] + (v > 0 ? v : 0));
        let d = "";
        for (let i = 0; i < n; i++) d += (i ? "L" : "M") + x(times[i]).toFixed(1) + "," + y(top[i]).toFixed(1);
        for (let i = n - 1; i >= 0; i--) d += "L" + x(times[i]).toFixed(1) + "," + y(base[i]).toFixed(1);
        if (n) el("path", {d: d + "Z", fill: layer.color, "fill-opacity": 0.85, stroke: "none"}, svg);
        top.forEach((v, i) => { base[i] = v; });
      } else {
        line(svg, times, layer.values, x, y, layer.color, true);
      }
    }
    if (spec.total) line(svg, times, spec.total.values, x, y, null, false);
    fig.cursor = el("line", {class: "cursor", y1: m.t, y2: m.t + h, visibility: "hidden"}, svg);
    const legend = fig.querySelector(".legend");
    legend.replaceChildren();
    for (const layer of spec.layers.concat(spec.total ? [spec.total] : [])) {
      if (!layer.label) continue;
      const item = document.createElement("span");
      const swatch = document.createElement("i");
      swatch.style.background = layer.color || "currentColor";
      item.append(swatch, layer.label + (layer.note ? " " + layer.note : ""));
      legend.appendChild(item);
    }
  }

  function line(svg, times, values, x, y, color, fill) {
    let run = [];
    const flush = () => {
      if (run.length) {
        const d = run.map((p, i) => (i ? "L" : "M") + p[0].toFixed(1) + "," + p[1].toFixed(1)).join("");
        if (fill) {
          el("path", {d: d + "L" + run[run.length - 1][0].toFixed(1) + "," + y(0).toFixed(1) + "L" +
                     run[0][0].toFixed(1) + "," + y(0).toFixed(1) + "Z", fill: color, "fill-opacity": 0.18}, svg);
          el("path", {d: d, fill: "none", stroke: color, "stroke-width": 1.6}, svg);
        } else {
          el("path", {d: d, class: "total"}, svg);
        }
      }
      run = [];
    };
    values.forEach((v, i) => { if (v === null || v === undefined) flush(); else run.push([x(times[i]), y(v)]); });
    flush();
  }

  function hover(fig, event) {
    const spec = fig.spec, g = fig.geometry, tip = fig.querySelector(".tip");
    if (!spec || !spec.times.length) return;
    const svg = fig.querySelector("svg");
    const rect = svg.getBoundingClientRect();
    const scale = (svg.viewBox.baseVal.width || rect.width) / rect.width;
    const px = (event.clientX - rect.left) * scale;
    const t = g.t0 + (px - g.m.l) / g.w * (g.t1 - g.t0);
    let i = 0;
    while (i + 1 < spec.times.length && Math.abs(spec.times[i + 1] - t) < Math.abs(spec.times[i] - t)) i++;
    const cx = g.x(spec.times[i]);
    fig.cursor.setAttribute("x1", cx);
    fig.cursor.setAttribute("x2", cx);
    fig.cursor.setAttribute("visibility", "visible");
    tip.replaceChildren();
    const head = document.createElement("div");
    head.textContent = clock(spec.times[i]);
    tip.appendChild(head);
    for (const layer of spec.layers.concat(spec.total ? [spec.total] : [])) {
      const v = layer.values[i];
      if (v === null || v === undefined || !layer.label) continue;
      const row = document.createElement("div"), name = document.createElement("bdi");
      name.textContent = layer.label;         // isolated: a right-to-left name keeps its place
      row.append(name, ": " + spec.format(v));
      tip.appendChild(row);
    }
    tip.hidden = false;
    const left = cx / scale;
    tip.style.left = (left > rect.width / 2 ? Math.max(0, left - tip.offsetWidth - 8) : left + 8) + "px";
  }

  // ------------------------------------------------------------------ charts

  function value(p, key) { return p[key] === undefined ? null : p[key]; }

  function last(values) {
    for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
    return null;
  }

  function capLayers(byPod, n) {
    // The largest MAX_LAYERS tenants by mean; the rest summed as "other tenants".
    const ranked = [...byPod.values()].sort((a, b) => b.weight - a.weight);
    const layers = ranked.slice(0, MAX_LAYERS);
    if (ranked.length > MAX_LAYERS) {
      const rest = new Array(n).fill(0);
      for (const p of ranked.slice(MAX_LAYERS)) p.values.forEach((v, i) => { rest[i] += v || 0; });
      layers.push({label: (ranked.length - MAX_LAYERS) + " other tenants", color: OTHERS, values: rest});
    }
    return layers;
  }

  function gpuCharts(uuid, series, holder) {
    const points = series.points, meta = series.meta;
    const times = points.map(p => p.t), index = new Map(times.map((t, i) => [t, i]));
    const n = times.length;
    const byPod = new Map(), attributed = new Array(n).fill(0);
    for (const c of containers.values()) {
      if (c.meta.gpu !== uuid) continue;
      const key = podKey(c.meta);
      let pod = byPod.get(key);
      if (!pod) {
        pod = {label: podLabel(c.meta), color: colorOf(key), values: new Array(n).fill(0), weight: 0};
        byPod.set(key, pod);
      }
      for (const p of c.points) {
        const i = index.get(p.t), w = value(p, "attributedPowerWatts");
        if (i === undefined || w === null) continue;
        pod.values[i] += w;
        pod.weight += w;
        attributed[i] += w;
      }
    }
    const idle = points.map(p => value(p, "idlePowerWatts"));
    // Active watts less what the GPU's containers are billed: the GPU's unattributed power.
    // Both are the tick's energy over its length, so the difference is never below 0 (the
    // clamp only absorbs rounding).
    const unattributed = points.map((p, i) => {
      const active = value(p, "activePowerWatts");
      return active === null ? null : Math.max(0, active - attributed[i]);
    });
    const total = points.map(p => value(p, "powerWatts"));
    const peak = Math.max(0, ...total.filter(v => v !== null));
    draw(holder, "power", {
      title: "power: idle, per tenant, unattributed", now: last(total) === null ? "–" : fmt.watts(last(total)),
      format: fmt.watts, times, stacked: true, ymax: niceMax(Math.max(meta.powerLimitWatts || 0, peak)),
      layers: [{label: "idle", color: IDLE, values: idle}, ...capLayers(byPod, n),
               {label: "unattributed", color: UNATTRIBUTED, values: unattributed}],
      total: {label: "total", values: total}});

    const duty = points.map(p => value(p, "dutyCycle"));
    draw(holder, "duty", {title: "duty cycle", now: last(duty) === null ? "–" : fmt.pct(last(duty)),
      format: fmt.pct, times, ymax: 100, layers: [{color: LINE, values: duty}]});

    const memory = points.map(p => { const v = value(p, "memoryUsed"); return v === null ? null : v / GIB; });
    const memoryTotal = meta.memoryTotal ? meta.memoryTotal / GIB : niceMax(Math.max(0, ...memory.filter(v => v !== null)));
    draw(holder, "memory", {title: "memory used", now: last(memory) === null ? "–" :
      fixed(last(memory), 1) + (meta.memoryTotal ? " / " + fmt.gib(memoryTotal) : " GiB"),
      format: fmt.gib, times, ymax: memoryTotal, layers: [{color: "#59a14f", values: memory}]});
  }

  function podEnergyChart(holder) {
    const all = new Set();
    for (const c of containers.values()) for (const p of c.points) all.add(p.t);
    const times = [...all].sort((a, b) => a - b), n = times.length;
    const index = new Map(times.map((t, i) => [t, i]));
    const byPod = new Map();
    for (const c of containers.values()) {
      const key = podKey(c.meta);
      let pod = byPod.get(key);
      if (!pod) {
        pod = {label: podLabel(c.meta), color: colorOf(key), values: new Array(n).fill(0), weight: 0};
        byPod.set(key, pod);
      }
      // Energy since the window began: the counter's growth, kept after the container is gone.
      let base = null, carried = 0, start = n;
      for (const p of c.points) {
        const e = value(p, "attributedEnergyJoules"), i = index.get(p.t);
        if (e === null || i === undefined) continue;
        if (base === null) { base = e; start = i; }
        for (let k = start; k < i; k++) pod.values[k] += carried;
        carried = e - base;
        start = i;
      }
      for (let k = start; k < n; k++) pod.values[k] += carried;
      pod.weight += carried;
    }
    const layers = capLayers(byPod, n);
    for (const layer of layers) layer.note = fmt.joules(layer.values[n - 1] || 0);
    const sum = times.map((_, i) => layers.reduce((s, l) => s + (l.values[i] || 0), 0));
    const seconds = n > 1 ? (times[n - 1] - times[0]) / 1000 : 0;
    draw(holder, "energy", {title: "attributed energy over the last " + span(seconds) + ", stacked by tenant",
      now: fmt.joules(sum[n - 1] || 0), format: fmt.joules, times, stacked: true,
      ymax: niceMax(Math.max(0, ...sum)), layers});
  }

  function render() {
    if (windowSeconds <= 0) return;       // history off: the tables only
    for (const holder of document.querySelectorAll("[data-charts]")) {
      const key = holder.dataset.charts;
      if (key === "pods") podEnergyChart(holder);
      else if (gpus.has(key)) gpuCharts(key, gpus.get(key), holder);
    }
    for (const cell of document.querySelectorAll("[data-pod]")) {
      if (cell.querySelector("i.swatch") || !colors.has(cell.dataset.pod)) continue;
      const swatch = document.createElement("i");
      swatch.className = "swatch";
      swatch.style.background = colors.get(cell.dataset.pod);
      cell.prepend(swatch);
    }
  }

  // ------------------------------------------------------------------ refresh

  async function refreshTables() {
    const response = await fetch("./", {cache: "no-cache", headers: {Accept: "text/html"}});
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.querySelector("[data-gpus]"), shown = document.querySelector("[data-gpus]");
    if (fresh && shown && fresh.dataset.gpus !== shown.dataset.gpus) { location.reload(); return; }
    for (const part of doc.querySelectorAll("[data-live]")) {
      const old = document.querySelector("[data-live='" + CSS.escape(part.dataset.live) + "']");
      if (old) old.replaceWith(document.adoptNode(part));
    }
  }

  async function fetchHistory(seconds) {
    const url = "api/v1/history" + (seconds ? "?seconds=" + seconds : "");
    const response = await fetch(url, {cache: "no-cache"});
    if (!response.ok) return false;
    merge(await response.json());
    lastFetched = Date.now();
    return true;
  }

  async function tick() {
    try {
      if (windowSeconds > 0) {
        // The last few ticks, or what was missed since the last answer (a hidden tab polls
        // less often), rounded up to a power of two so that all pages ask the same few spans
        // and the server renders each once per tick.
        const behind = lastFetched ? (Date.now() - lastFetched) / 1000 + 2 * interval : windowSeconds;
        let seconds = Math.ceil(3 * interval);
        while (seconds < behind) seconds *= 2;
        await fetchHistory(Math.min(windowSeconds, seconds));
      }
      await refreshTables();
      render();
    } catch (err) {
      // The daemon restarting or the network hiccuping: keep what is shown, try next tick.
    }
    setTimeout(tick, interval * 1000);
  }

  async function start() {
    if (windowSeconds > 0) {
      try { await fetchHistory(0); } catch (err) { /* charts come with the next tick */ }
      render();
    }
    let resizing = null;
    window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(render, 150); });
    setTimeout(tick, interval * 1000);
  }

  start();
})();
