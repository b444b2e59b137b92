/* gpustats page: live SVG charts from api/v1/history and the tables refreshed every tick.
   No library, no outside request: every URL is relative to the page. */
"use strict";
(function () {
  // ================================================================== the charts' data
  // Pure functions of the history (no page): what each chart draws. The tests load this part
  // alone (under Node, where there is no document) through module.exports.

  const model = (function () {
    function value(p, key) { return p[key] === undefined || p[key] === null ? null : p[key]; }

    function podKey(c) {
      if (c.pod) return (c.namespace || "") + "/" + c.pod;
      return c.podUid || "container:" + c.id;
    }

    function podLabel(c) {
      if (c.pod) return c.pod;
      if (c.podUid) return c.podUid.slice(0, 8);
      return c.name || c.id.slice(0, 12);
    }

    function instanceLabel(m) {
      return "GI " + m.gpuInstanceId + (m.profile ? " · " + m.profile : "");
    }

    // Each MIG instance's size as a part of its GPU, by memory (as the daemon splits idle).
    function instanceFractions(meta) {
      const out = new Map();
      if (!(meta.memoryTotal > 0)) return out;
      for (const m of meta.migInstances || []) {
        if (m.memoryTotal > 0) out.set(m.gpuInstanceId, m.memoryTotal / meta.memoryTotal);
      }
      return out;
    }

    // The power chart of one GPU, every figure of a point from that one tick: the tick's power
    // (its energy over its length: idle + active), stacked as each tenant's attributed power
    // plus its share of idle, the idle no tenant holds the GPU for, and the active power no
    // tenant is billed for. A tick's stack adds up to its total, never above it.
    //
    // The history gives each tick's idle and active power, each holder's attributed power and
    // idle share, and the idle no one held (as the daemon billed them: nothing is split here).
    // Where the GPU has no idle known, all of its power is active. A tick with an idle but no
    // unallocated idle recorded (its energy unread) shows the GPU's idle power, or its reading
    // when no power above idle was drawn, with no one holding it.
    // gpu: {meta, points: [{t, ...}]}; containers: [{meta, points}] (any GPU's).
    function powerModel(gpu, containers) {
      const meta = gpu.meta, points = gpu.points, n = points.length;
      const times = points.map(p => p.t), index = new Map(times.map((t, i) => [t, i]));
      const ticks = times.map(() => []);            // per tick: [container, point] on this GPU
      for (const c of containers) {
        if (c.meta.gpu !== meta.id) continue;
        for (const p of c.points) {
          const i = index.get(p.t);
          if (i !== undefined) ticks[i].push([c, p]);
        }
      }
      const total = new Array(n).fill(null);
      const unallocated = new Array(n).fill(null), unattributed = new Array(n).fill(null);
      const tenants = new Map();                    // pod key -> {key, label, values, idle, weight}
      const tenant = c => {
        const key = podKey(c.meta);
        let t = tenants.get(key);
        if (!t) {
          t = {key, label: podLabel(c.meta), values: new Array(n).fill(null),
               idle: new Array(n).fill(null), weight: 0};
          tenants.set(key, t);
        }
        return t;
      };
      for (let i = 0; i < n; i++) {
        const p = points[i], reading = value(p, "powerWatts");
        const active = value(p, "activePowerWatts"), idleWatts = value(p, "idlePowerWatts");
        if (active === null) { total[i] = reading; continue; }      // no split this tick
        const held = ticks[i].filter(([, q]) => value(q, "attributedPowerWatts") !== null ||
                                               value(q, "idleSharePowerWatts") !== null);
        const shares = held.map(([, q]) => value(q, "idleSharePowerWatts") || 0);
        const shared = shares.reduce((s, v) => s + v, 0);
        const recorded = value(p, "unallocatedIdlePowerWatts");
        let idle = 0;
        if (recorded !== null) idle = shared + recorded;
        else if (idleWatts !== null) {
          idle = active > 0 || reading === null ? idleWatts : Math.min(idleWatts, reading);
        }
        total[i] = idle + active;
        const rest = idle - shared;
        let attributed = 0;
        held.forEach(([c, q], k) => {
          const t = tenant(c), w = value(q, "attributedPowerWatts") || 0;
          t.values[i] = (t.values[i] || 0) + w + shares[k];
          t.idle[i] = (t.idle[i] || 0) + shares[k];
          t.weight += w + shares[k];
          attributed += w;
        });
        unallocated[i] = Math.max(0, rest);
        unattributed[i] = Math.max(0, active - attributed);
      }
      return {times, total, unallocated, unattributed,
              tenants: [...tenants.values()].sort((a, b) => b.weight - a.weight)};
    }

    // The duty cycle of a GPU; on a MIG GPU (no duty cycle of its own) its instances'
    // activity, one line each, and the GPU's as their mean weighted by size.
    function activityModel(gpu) {
      const meta = gpu.meta, points = gpu.points;
      const times = points.map(p => p.t), index = new Map(times.map((t, i) => [t, i]));
      const duty = points.map(p => value(p, "dutyCycle"));
      const migs = [...(meta.migInstances || [])].sort((a, b) => a.gpuInstanceId - b.gpuInstanceId);
      if (duty.some(v => v !== null) || !migs.length) return {kind: "duty", times, duty};
      const fractions = instanceFractions(meta);
      const instances = [];
      for (const m of migs) {
        const values = times.map(() => null);
        for (const p of m.points) {
          const i = index.get(p.t), r = value(p, "activityRatio");
          if (i !== undefined && r !== null) values[i] = r * 100;
        }
        if (values.some(v => v !== null)) {
          instances.push({id: m.gpuInstanceId, label: instanceLabel(m), values,
                          fraction: fractions.get(m.gpuInstanceId) ?? null});
        }
      }
      if (!instances.length) return {kind: "duty", times, duty};
      const gpuActivity = times.map((_, i) => {
        let sum = 0, weight = 0;
        for (const inst of instances) {
          const v = inst.values[i], f = inst.fraction ?? 1 / instances.length;
          if (v !== null) { sum += v * f; weight += f; }
        }
        return weight > 0 ? sum / weight : null;
      });
      return {kind: "mig", times, duty, instances, gpu: gpuActivity};
    }

    // Energy each tenant was attributed since the window began: its counters' growth, kept
    // after a container is gone. Returns {times, tenants: [{key, label, values, weight}]}.
    function energyModel(containers) {
      const all = new Set();
      for (const c of containers) for (const p of c.points) all.add(p.t);
      const times = [...all].sort((a, b) => a - b), n = times.length;
      const index = new Map(times.map((t, i) => [t, i]));
      const byPod = new Map();
      for (const c of containers) {
        const key = podKey(c.meta);
        let pod = byPod.get(key);
        if (!pod) {
          pod = {key, label: podLabel(c.meta), values: new Array(n).fill(0), weight: 0};
          byPod.set(key, pod);
        }
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
      return {times, tenants: [...byPod.values()].sort((a, b) => b.weight - a.weight)};
    }

    // A colour for each tenant shown (keys, in the order first seen): a tenant keeps its
    // colour while it is shown; one newly shown takes the first palette colour no shown tenant
    // has, so up to palette.length tenants never share a colour; past that, further hues.
    // colours: Map key -> colour, kept between calls and updated in place.
    function assignColours(colours, keys, palette) {
      const shown = new Set(keys);
      for (const key of [...colours.keys()]) if (!shown.has(key)) colours.delete(key);
      const used = new Set(colours.values());
      let next = 0, extra = 0;
      for (const key of shown) {
        if (colours.has(key)) continue;
        while (next < palette.length && used.has(palette[next])) next++;
        let colour = palette[next];
        if (colour === undefined) {
          do {
            colour = "hsl(" + Math.round((extra * 137.508 + 20) % 360) + "," +
                     (extra % 2 ? 45 : 65) + "%," + (extra % 3 === 1 ? 38 : 55) + "%)";
            extra++;
          } while (used.has(colour));
        }
        colours.set(key, colour);
        used.add(colour);
      }
      return colours;
    }

    return {value, podKey, podLabel, instanceLabel, instanceFractions, powerModel,
            activityModel, energyModel, assignColours};
  })();

  if (typeof document === "undefined") {           // loaded by the tests, not by a page
    if (typeof module === "object") module.exports = model;
    return;
  }

  // ================================================================== the page

  const {value, podKey, powerModel, activityModel, energyModel, assignColours} = model;
  const body = document.body;
  const interval = Math.max(0.2, parseFloat(body.dataset.interval) || 5);
  const windowSeconds = parseInt(body.dataset.historySeconds, 10) || 0;
  const SVG = "http://www.w3.org/2000/svg";
  let given = {};
  try { given = JSON.parse(body.dataset.colours || "{}"); } catch (err) { /* the defaults */ }
  const PALETTE = Array.isArray(given.tenants) ? given.tenants : [];
  const UNALLOCATED = given.unallocated || "#9aa3ad", UNATTRIBUTED = given.unattributed || "#cdd3db";
  const OTHERS = given.others || "#7f7f7f", LINE = "#3760a8", MEMORY = "#59a14f";
  // MIG instances' activity lines (instances are no tenants: not the tenants' colours).
  const INSTANCE_LINES = ["#3760a8", "#c0392b", "#1e8449", "#7d3c98", "#b9770e", "#117a8b", "#5d6d7e"];
  const MAX_LAYERS = 20;        // tenants drawn apart in one chart; the rest as one layer
  const GIB = 1073741824;

  const gpus = new Map();        // uuid -> {meta, points}
  const containers = new Map();  // container|gpu|instance -> {meta, points}
  const colours = new Map();     // pod key -> colour
  let latest = 0, lastFetched = 0;

  // ------------------------------------------------------------------ data

  // Appends the entry's points newer than the series' last; returns the series.
  function append(table, key, entry) {
    let series = table.get(key);
    if (!series) { series = {points: []}; table.set(key, series); }
    const last = series.points.length ? series.points[series.points.length - 1].t : -Infinity;
    for (const p of entry.points) {
      const t = Date.parse(p.time);
      if (t > last) { p.t = t; series.points.push(p); if (t > latest) latest = t; }
    }
    return series;
  }

  function merge(doc) {
    for (const g of doc.gpus) {
      // MIG instances' points are kept with their GPU's series, each instance's own.
      const series = append(gpus, g.id, g);
      const instances = new Map((series.meta && series.meta.migInstances || []).map(m => [m.gpuInstanceId, m]));
      for (const m of g.migInstances || []) {
        const before = instances.get(m.gpuInstanceId);
        const points = before ? before.points : [];
        const last = points.length ? points[points.length - 1].t : -Infinity;
        for (const p of m.points) {
          const t = Date.parse(p.time);
          if (t > last) { p.t = t; points.push(p); }
        }
        instances.set(m.gpuInstanceId, Object.assign({}, m, {points}));
      }
      series.meta = Object.assign({}, g, {points: undefined, migInstances: [...instances.values()]});
    }
    for (const c of doc.containers) {
      append(containers, c.id + "|" + c.gpu + "|" + (c.gpuInstanceId ?? ""), c).meta = c;
    }
    const cutoff = latest - windowSeconds * 1000;
    const trim = points => {
      let drop = 0;
      while (drop < points.length && points[drop].t < cutoff) drop++;
      if (drop) points.splice(0, drop);
    };
    for (const table of [gpus, containers]) {
      for (const [key, series] of table) {
        trim(series.points);
        if (!series.points.length) table.delete(key);
        else if (series.meta.migInstances) {
          for (const m of series.meta.migInstances) trim(m.points);
          series.meta.migInstances = series.meta.migInstances.filter(m => m.points.length);
        }
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

  // spec: {title, now, format, times, layers: [{label, color, values, note, idle}], stacked,
  // total: {label, values}, ymax}. A stacked chart never draws above its total.
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
    const cap = spec.stacked && spec.total ? spec.total.values : null;
    for (const layer of spec.layers) {
      if (spec.stacked) {
        const top = layer.values.map((v, i) => {
          const up = base[i] + (v > 0 ? v : 0);
          return cap && cap[i] !== null && cap[i] !== undefined ? Math.min(up, Math.max(base[i], cap[i])) : up;
        });
        let d = "";
        for (let i = 0; i < n; i++) d += (i ? "L" : "M") + x(times[i]).toFixed(1) + "," + y(top[i]).toFixed(1);
        for (let i = n - 1; i >= 0; i--) d += "L" + x(times[i]).toFixed(1) + "," + y(base[i]).toFixed(1);
        if (n) el("path", {d: d + "Z", fill: layer.color, "fill-opacity": 0.85, stroke: "none"}, svg);
        top.forEach((v, i) => { base[i] = v; });
      } else {
        line(svg, times, layer.values, x, y, layer.color, !spec.lines);
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
      const text = layer.label + (layer.note ? " " + layer.note : "");
      item.append(swatch, text);
      item.title = text;
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
        }
        if (color) el("path", {d: d, fill: "none", stroke: color, "stroke-width": 1.6}, svg);
        else el("path", {d: d, class: "total"}, svg);
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
      const idle = layer.idle ? layer.idle[i] : null;
      row.append(name, ": " + spec.format(v) + (idle ? " (" + spec.format(idle) + " of it idle share)" : ""));
      tip.appendChild(row);
    }
    tip.hidden = false;
    const left = cx / scale;
    tip.style.left = (left > rect.width / 2 ? Math.max(0, left - tip.offsetWidth - 8) : left + 8) + "px";
  }

  // ------------------------------------------------------------------ charts

  function last(values) {
    for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
    return null;
  }

  function capLayers(tenants, n) {
    // The largest MAX_LAYERS tenants (by weight), each in its colour; the rest summed as
    // "other tenants".
    const layers = tenants.slice(0, MAX_LAYERS).map(
      t => ({label: t.label, color: colours.get(t.key) || OTHERS, values: t.values, idle: t.idle}));
    if (tenants.length > MAX_LAYERS) {
      const rest = new Array(n).fill(null);
      for (const t of tenants.slice(MAX_LAYERS)) {
        t.values.forEach((v, i) => { if (v !== null) rest[i] = (rest[i] || 0) + v; });
      }
      layers.push({label: (tenants.length - MAX_LAYERS) + " other tenants", color: OTHERS, values: rest});
    }
    return layers;
  }

  function gpuCharts(uuid, series, holder) {
    const meta = series.meta;
    const power = powerModel(series, [...containers.values()]);
    const n = power.times.length;
    const peak = Math.max(0, ...power.total.filter(v => v !== null));
    const now = last(power.total);
    draw(holder, "power", {
      title: "power over each tick: per tenant (its idle share included), unallocated idle, unattributed",
      now: now === null ? "–" : fmt.watts(now), format: fmt.watts, times: power.times, stacked: true,
      ymax: niceMax(Math.max(meta.powerLimitWatts || 0, peak)),
      layers: [{label: "unallocated idle", color: UNALLOCATED, values: power.unallocated},
               ...capLayers(power.tenants, n),
               {label: "unattributed", color: UNATTRIBUTED, values: power.unattributed}],
      total: {label: "total", values: power.total}});

    const activity = activityModel(series);
    if (activity.kind === "mig") {
      const current = last(activity.gpu);
      draw(holder, "duty", {title: "activity of the MIG instances", lines: true,
        now: current === null ? "–" : fmt.pct(current), format: fmt.pct, times: activity.times, ymax: 100,
        layers: activity.instances.map((inst, k) => ({
          label: inst.label, color: INSTANCE_LINES[k % INSTANCE_LINES.length],
          values: inst.values, note: last(inst.values) === null ? "–" : fmt.pct(last(inst.values))})),
        total: {label: "GPU (by instance size)", values: activity.gpu}});
    } else {
      const duty = activity.duty;
      draw(holder, "duty", {title: "duty cycle", now: last(duty) === null ? "–" : fmt.pct(last(duty)),
        format: fmt.pct, times: activity.times, ymax: 100, layers: [{color: LINE, values: duty}]});
    }

    const points = series.points, times = power.times;
    const memory = points.map(p => { const v = value(p, "memoryUsed"); return v === null ? null : v / GIB; });
    const memoryTotal = meta.memoryTotal ? meta.memoryTotal / GIB : niceMax(Math.max(0, ...memory.filter(v => v !== null)));
    draw(holder, "memory", {title: "memory used", now: last(memory) === null ? "–" :
      fixed(last(memory), 1) + (meta.memoryTotal ? " / " + fmt.gib(memoryTotal) : " GiB"),
      format: fmt.gib, times, ymax: memoryTotal, layers: [{color: MEMORY, values: memory}]});
  }

  function podEnergyChart(holder) {
    const energy = energyModel([...containers.values()]);
    const times = energy.times, n = times.length;
    const layers = capLayers(energy.tenants, n);
    for (const layer of layers) layer.note = fmt.joules(layer.values[n - 1] || 0);
    const sum = times.map((_, i) => layers.reduce((s, l) => s + (l.values[i] || 0), 0));
    const seconds = n > 1 ? (times[n - 1] - times[0]) / 1000 : 0;
    draw(holder, "energy", {title: "attributed energy over the last " + span(seconds) + ", stacked by tenant",
      now: fmt.joules(sum[n - 1] || 0), format: fmt.joules, times, stacked: true,
      ymax: niceMax(Math.max(0, ...sum)), layers});
  }

  // A table wider than its card (long names, many columns) shows its rows as blocks instead
  // (CSS "stacked"), so that no column is cut; measured in table form each time.
  function fitTables() {
    for (const table of document.querySelectorAll("table.rows")) {
      table.classList.remove("stacked");
      const room = table.parentElement.clientWidth;
      if (table.getBoundingClientRect().width > room + 0.5) table.classList.add("stacked");
    }
  }

  function render() {
    if (windowSeconds > 0) drawCharts();  // history off: the tables only
    fitTables();
  }

  function drawCharts() {
    const cells = document.querySelectorAll("[data-pod]");
    assignColours(colours, [...[...containers.values()].map(c => podKey(c.meta)),
                            ...[...cells].map(cell => cell.dataset.pod)], PALETTE);
    for (const holder of document.querySelectorAll("[data-charts]")) {
      const key = holder.dataset.charts;
      if (key === "pods") podEnergyChart(holder);
      else if (gpus.has(key)) gpuCharts(key, gpus.get(key), holder);
    }
    for (const cell of cells) {
      const colour = colours.get(cell.dataset.pod);
      let swatch = cell.querySelector("i.swatch");
      if (!colour) { if (swatch) swatch.remove(); continue; }
      if (!swatch) {
        swatch = document.createElement("i");
        swatch.className = "swatch";
        cell.prepend(swatch);
      }
      swatch.style.background = colour;
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
    }
    render();
    let resizing = null;
    window.addEventListener("resize", () => { clearTimeout(resizing); resizing = setTimeout(render, 150); });
    setTimeout(tick, interval * 1000);
  }

  start();
})();
