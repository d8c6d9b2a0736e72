// The report page: reads the embedded tables (gzip JSON in base64, inflated by the browser),
// draws a layers x heads grid per model coloured by a chosen metric, and, for a clicked head,
// its profiles (and block map when the run has one, decoded then) for every model side by side; then the
// training series, Tables 4-5 and the run records. Every text from the data is set as text
// (textContent, or escaped in tooltips): nothing from the tables is read as markup.
"use strict";

const report = { tables: {}, folders: [], blockMaps: {}, charts: [], tokenViews: [], selected: null };

/** `s` with the characters HTML gives meaning to escaped (tooltips are HTML). */
function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

/** A number as the tables hold it (NaN and infinities came as strings). */
function num(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "number") return v;
  return { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity }[v] ?? null;
}

/** The rows of table `name` as objects (empty when the run does not have it). */
function rows(name) {
  const t = report.tables[name];
  if (!t) return [];
  const cols = Object.keys(t);
  const n = cols.length ? t[cols[0]].length : 0;
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    const r = {};
    for (const c of cols) r[c] = t[c][i];
    out[i] = r;
  }
  return out;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

/** The gzip-compressed bytes written in base64 `b64`, inflated (a `Response`). */
function inflate(b64) {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip")));
}

async function load() {
  return inflate(document.getElementById("report-data").textContent.trim()).json();
}

// ---- the overview: per model, layers x heads coloured by a metric --------------------

/** Per-head values of each metric: metric -> model -> Map("layer/head" -> value). */
function headValues() {
  const out = {};
  const put = (metric, model, layer, head, value) => {
    ((out[metric] ??= {})[model] ??= new Map()).set(`${layer}/${head}`, value);
  };
  for (const r of rows("attention")) {
    if (r.head === null || r.layer === null) continue;
    // the mean over queries, or the largest (max_logit's own statistic)
    if (r.stat === "mean" || (r.stat === "max" && r.metric === "max_logit")) {
      const name = r.stat === "mean" ? r.metric : `${r.metric} (max)`;
      put(name, r.model, r.layer, r.head, num(r.value));
    }
  }
  for (const r of rows("head_roles")) {
    put("role", r.model, r.layer, r.head, r.role);
  }
  return out;
}

function models() {
  const seen = new Set();
  for (const name of ["attention", "head_roles", "attention_series", "distance_profile"]) {
    for (const r of rows(name)) if (r.model !== null) seen.add(r.model);
  }
  return [...seen];
}

function drawOverview(values) {
  const select = document.getElementById("metric");
  const metrics = Object.keys(values);
  if (!metrics.length) {
    document.getElementById("grids").append(el("p", "No per-head metric in these results.", "note"));
    return;
  }
  for (const m of metrics) select.append(new Option(m, m));
  // the metric that tells sinks apart first, where the run has it per head
  select.value = ["first_token", "sink_importance", "entropy"].find((m) => metrics.includes(m)) ?? metrics[0];
  const draw = () => drawGrids(values, select.value, document.getElementById("log-scale").checked);
  select.addEventListener("change", draw);
  document.getElementById("log-scale").addEventListener("change", draw);
  draw();
}

const ROLES = ["sink", "local", "previous_token", "induction", "mixed"];

/** The value a grid cell is coloured by: a role's index, or the value (log10 if asked). */
function shade(v, isRole, logScale) {
  return isRole ? ROLES.indexOf(v) : logScale ? Math.log10(Math.max(v, 1e-12)) : v;
}

function drawGrids(values, metric, logScale) {
  const box = document.getElementById("grids");
  for (const c of report.charts.splice(0)) c.dispose();
  box.replaceChildren();
  const byModel = values[metric] || {};
  const isRole = metric === "role";
  // one colour scale for every model, so that the grids compare
  let lo = Infinity, hi = -Infinity;
  for (const cells of Object.values(byModel)) {
    for (const v of cells.values()) {
      const s = shade(v, isRole, logScale);
      if (Number.isFinite(s)) { lo = Math.min(lo, s); hi = Math.max(hi, s); }
    }
  }
  for (const model of Object.keys(byModel)) {
    const cells = byModel[model];
    let layers = 0, heads = 0;
    const data = [];
    for (const [key, v] of cells) {
      const [l, h] = key.split("/").map(Number);
      layers = Math.max(layers, l);
      heads = Math.max(heads, h);
      data.push({ value: [h - 1, l - 1, shade(v, isRole, logScale)], exact: v });
    }
    const div = el("div", undefined, "grid");
    div.dataset.model = model;
    box.append(div);
    const chart = echarts.init(div, null, { renderer: "canvas" });
    report.charts.push(chart);
    chart.setOption({
      animation: false,
      title: { text: model, textStyle: { fontSize: 13, width: 330, overflow: "truncate" } },
      tooltip: {
        formatter: (p) => `${esc(model)}<br>layer ${p.data.value[1] + 1}, head ${p.data.value[0] + 1}<br>` +
          `${esc(metric)} = ${esc(typeof p.data.exact === "number" ? p.data.exact.toPrecision(8) : p.data.exact)}`,
      },
      grid: { left: 50, right: 80, top: 30, bottom: 40 },
      xAxis: { type: "category", name: "head", nameLocation: "middle", nameGap: 25, data: [...Array(heads).keys()].map((h) => h + 1) },
      yAxis: { type: "category", name: "layer", data: [...Array(layers).keys()].map((l) => l + 1) },
      visualMap: isRole
        ? { type: "piecewise", pieces: ROLES.map((r, i) => ({ value: i, label: r })), right: 0, top: "middle" }
        : { min: Number.isFinite(lo) ? lo : 0, max: Number.isFinite(hi) && hi > lo ? hi : lo + 1, calculable: true, right: 0,
            top: "middle", precision: 3, formatter: (v) => (logScale ? "1e" : "") + Number(v).toPrecision(3),
            inRange: { color: ["#f7fbff", "#6baed6", "#08306b"] } },
      series: [{ type: "heatmap", data, emphasis: { itemStyle: { borderColor: "#d62728", borderWidth: 2 } } }],
    });
    chart.on("click", (p) => selectHead(p.data.value[1] + 1, p.data.value[0] + 1).catch(shown));
  }
}

// ---- one head: its profiles and block map, every model side by side ------------------

async function selectHead(layer, head) {
  const started = performance.now();
  report.selected = { layer, head };
  const all = models();
  const maps = await Promise.all(all.map((model) => blockMapOf(model, layer, head)));
  if (report.selected.layer !== layer || report.selected.head !== head) return; // a later click won
  const section = document.getElementById("head");
  section.hidden = false;
  document.getElementById("head-title").textContent = `Layer ${layer}, head ${head}`;
  const box = document.getElementById("head-models");
  for (const c of report.headCharts || []) c.dispose();
  report.headCharts = [];
  box.replaceChildren();
  const profiles = all.map((model) => headProfiles(model, layer, head));
  const axes = sharedAxes(profiles);
  all.forEach((model, i) => {
    const column = el("div", undefined, "model-column");
    column.dataset.model = model;
    column.append(el("h3", model));
    box.append(column);
    headCharts(column, maps[i], profiles[i], axes);
  });
  tokensFollow(maps, layer, head);
  section.dataset.drawnMs = String(performance.now() - started);
  document.body.dataset.selected = `${layer}/${head}`;
}

function chartIn(column, cls) {
  const div = el("div", undefined, cls || "chart");
  column.append(div);
  const chart = echarts.init(div, null, { renderer: "canvas" });
  report.headCharts.push(chart);
  return chart;
}

/** One head's profiles in one model: each chart's key (what it shows, shared by the
 * models' charts of it), title, x axis, kind and points. */
function headProfiles(model, layer, head) {
  const out = [];
  const bands = rows("distance_profile").filter((r) => r.model === model && r.layer === layer && r.head === head);
  if (bands.length) {
    out.push({ key: "distance", title: "attention by query-key distance", xName: "band", kind: "bar",
      points: bands.map((r) => [r.band, num(r.value)]) });
  }
  const keys = rows("key_received").filter((r) => r.model === model && r.layer === layer && r.head === head && r.stat === "mean");
  if (keys.length) {
    out.push({ key: "keys", title: "attention received per key (mean)", xName: "key", kind: "line", xScale: "log",
      points: keys.map((r) => [r.key_lo, num(r.value)]) });
  }
  const profile = rows("query_profile").filter((r) => r.model === model && r.layer === layer);
  if (profile.length) {
    out.push({ key: "query", title: `query ${profile[0].query}'s weights (layer ${layer}, heads' mean)`, xName: "key",
      kind: "line", points: profile.map((r) => [r.key, num(r.value)]) });
  }
  return out;
}

/** Per chart key, the y range every model's chart of it shares (from 0 when no value is
 * below it), so that bars of 0.3 and 0.7 side by side look as different as they are. */
function sharedAxes(profiles) {
  const axes = {};
  for (const p of profiles.flat()) {
    const ys = p.points.map(([, y]) => y).filter(Number.isFinite);
    if (!ys.length) continue;
    const a = axes[p.key] || (axes[p.key] = { min: 0, max: 0 });
    a.min = Math.min(a.min, ...ys);
    a.max = Math.max(a.max, ...ys);
  }
  for (const a of Object.values(axes)) {
    a.min = -niceCeiling(-a.min);
    a.max = niceCeiling(a.max);
  }
  return axes;
}

/** The smallest multiple of half a power of ten at or above v (0 for v <= 0): an axis end
 * with round labels. */
function niceCeiling(v) {
  if (!(v > 0)) return 0;
  const step = 10 ** Math.floor(Math.log10(v)) / 2;
  return Math.ceil(v / step - 1e-9) * step;
}

function headCharts(column, map, profiles, axes) {
  if (map) blockMap(chartIn(column, "chart map"), column, map);
  for (const p of profiles) {
    const chart = chartIn(column);
    chart.getDom().dataset.profile = p.key;
    lineChart(chart, p.title, p.xName, p.points, p.kind, p.xScale, axes[p.key]);
  }
  if (!map && !profiles.length) {
    column.append(el("p", "No per-head profile of this model in these results.", "note"));
  }
}

function lineChart(chart, title, xName, points, kind, xScale, yRange) {
  const categorical = typeof points[0][0] === "string";
  chart.setOption({
    animation: false,
    title: { text: title, textStyle: { fontSize: 12 } },
    tooltip: { trigger: "axis", formatter: (ps) => ps.map((p) => `${esc(p.value[0])}: ${esc(Number(p.value[1]).toPrecision(6))}`).join("<br>") },
    grid: { left: 60, right: 20, top: 35, bottom: 45 },
    xAxis: categorical ? { type: "category", name: xName, nameLocation: "middle", nameGap: 28 }
      : { type: xScale === "log" ? "log" : "value", name: xName, nameLocation: "middle", nameGap: 28, min: xScale === "log" ? 1 : undefined },
    yAxis: yRange && yRange.max > yRange.min ? { type: "value", min: yRange.min, max: yRange.max } : { type: "value" },
    series: [{ type: kind, data: xScale === "log" ? points.map(([x, y]) => [x + 1, y]) : points, showSymbol: points.length < 60 }],
  });
}

// ---- block maps: one byte per cell, decoded when a head is opened ----------------------
// (src/report/quantise.rs has the format: per map, the lower triangle's cells row by row,
// code 0 empty, 255 not finite, 1..254 a step of the map's log or linear scale, sent as
// differences from the row above, gzip, base64, in the #block-maps element.)

/** The value code `k` of map `m` stands for (null: empty cell). */
function mapValue(m, k) {
  if (k === 0) return null;
  if (k === 255) return NaN;
  if (m.scale === "log") return Math.exp(Math.log(m.lo) + ((k - 1) * (Math.log(m.hi) - Math.log(m.lo))) / 253);
  return m.lo + ((k - 1) * (m.hi - m.lo)) / 253;
}

/** Map `m`'s codes: its text in the blob inflated, each row's differences added back. */
async function mapCodes(m) {
  report.mapsText ??= document.getElementById("block-maps").textContent;
  const d = new Uint8Array(await inflate(report.mapsText.slice(m.at, m.at + m.len)).arrayBuffer());
  const c = new Uint8Array(d.length);
  for (let a = 0, s = 0; s < d.length; s += ++a) {
    for (let b = 0; b <= a && s + b < d.length; b++) c[s + b] = (d[s + b] + (b < a ? c[s - a + b] : 0)) & 255;
  }
  return c;
}

/** The mean and max maps of a head (head null: over heads) of `model`, decoded; null if none. */
async function blockMapOf(model, layer, head) {
  const index = report.blockMaps[model];
  const find = (stat) => index?.maps.find((m) => m.layer === layer && m.head === head && m.stat === stat);
  const mean = find("mean");
  if (!mean) return null;
  const max = find("max");
  return { bounds: index.bounds, mean, max, meanCodes: await mapCodes(mean), maxCodes: max ? await mapCodes(max) : null };
}

/** A decoded value as the page states it: approximately, with the map's error bound. */
function approx(m, k) {
  const v = mapValue(m, k);
  if (v === null || Number.isNaN(v)) return v === null ? "(empty)" : "not finite";
  const bound = m.scale === "log" ? `± ${(100 * m.error).toPrecision(2)} %` : `± ${m.error.toPrecision(2)}`;
  return `${k === 1 && m.clipped ? "≤ " : "≈ "}${v.toPrecision(4)} (${bound})`;
}

/** The colour of code k: white to dark orange along the map's scale (codes are its steps). */
const RAMP = [[255, 255, 255], [253, 174, 107], [166, 54, 3]];
function codeColour(k) {
  const x = (2 * (k - 1)) / 253, i = Math.min(Math.floor(x), 1), f = x - i;
  return RAMP[i].map((c, j) => Math.round(c + f * (RAMP[i + 1][j] - c)));
}

/** The mean map as an image of one pixel per cell (empty and non-finite cells transparent). */
function mapImage(codes, g) {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = g;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(g, g);
  const palette = [...Array(256).keys()].map((k) => (k === 0 || k === 255 ? [0, 0, 0, 0] : [...codeColour(k), 255]));
  for (let a = 0, s = 0; a < g; s += ++a) {
    for (let b = 0; b <= a; b++) img.data.set(palette[codes[s + b]], 4 * (a * g + b));
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

/** The block holding position p (bounds: the G + 1 block edges), or -1. */
function blockAt(bounds, p) {
  let lo = 0, hi = bounds.length - 1;
  if (!(p >= bounds[0] && p < bounds[hi])) return -1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (bounds[mid] <= p) lo = mid; else hi = mid;
  }
  return lo;
}

/** A head's block map: an image on position axes (zoom and pan), values read out on hover. */
function blockMap(chart, column, map) {
  const { bounds, mean, max, meanCodes, maxCodes } = map;
  const g = bounds.length - 1, t = bounds[g];
  const image = mapImage(meanCodes, g);
  const hover = el("p", "", "note map-hover");
  column.append(hover);
  const scale = mean.scale === "log" ? "log" : "linear";
  chart.setOption({
    animation: false,
    title: { text: "block map (mean weight)", subtext: `white ${mean.lo.toPrecision(2)} to dark ${mean.hi.toPrecision(2)}, ${scale} scale`,
      textStyle: { fontSize: 12 }, subtextStyle: { fontSize: 11 } },
    grid: { left: 60, right: 30, top: 50, bottom: 70 },
    xAxis: { type: "value", min: 0, max: t, name: "key position", nameLocation: "middle", nameGap: 28 },
    yAxis: { type: "value", min: 0, max: t, inverse: true, name: "query position", nameLocation: "middle", nameGap: 45 },
    dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }, { type: "inside", yAxisIndex: 0, filterMode: "none" },
      { type: "slider", xAxisIndex: 0, bottom: 5, filterMode: "none" }],
    series: [{ type: "custom", clip: true, data: [[0, 0]], renderItem: (params, api) => {
      const [x0, y0] = api.coord([0, 0]), [x1, y1] = api.coord([t, t]);
      return { type: "image", style: { image, x: x0, y: Math.min(y0, y1), width: x1 - x0, height: Math.abs(y1 - y0) } };
    } }],
  });
  chart.getZr().on("mousemove", (e) => {
    const [k, q] = chart.convertFromPixel({ gridIndex: 0 }, [e.offsetX, e.offsetY]);
    const a = blockAt(bounds, q), b = blockAt(bounds, k);
    if (a < 0 || b < 0 || b > a) { hover.textContent = ""; return; }
    const i = (a * (a + 1)) / 2 + b;
    const ends = (x) => `${bounds[x]}..${bounds[x + 1] - 1}`;
    hover.textContent = `queries ${ends(a)}, keys ${ends(b)}: mean ${approx(mean, meanCodes[i])}` +
      (max ? `, max ${approx(max, maxCodes[i])}` : "");
    hover.dataset.cell = `${a}/${b}`;
  });
}

// ---- tokens: a short run's text shaded by one query's attention ------------------------

/** Where a tokens view's weights come from: heatmap (layer L, mean over heads), or the
 * selected head's block map where its blocks are single tokens. */
function heatmapSource(model) {
  const cells = rows("heatmap").filter((r) => r.model === model);
  if (!cells.length) return null;
  const w = new Map(cells.map((r) => [`${r.query}/${r.key}`, num(r.value)]));
  const size = Math.max(...cells.map((r) => r.query)) + 1;
  const label = `layer ${cells[0].layer}, mean over heads and windows (heatmap)`;
  return { size, label, weight: (q, k) => [w.get(`${q}/${k}`) ?? null, ""] };
}

function headSource(map, layer, head) {
  const { bounds, mean, meanCodes } = map;
  if (!bounds.every((b, i) => b === i)) return null; // blocks of several tokens
  return { size: bounds.length - 1, label: `layer ${layer}, head ${head}, mean over windows (block map, quantised)`,
    weight: (q, k) => [mapValue(mean, meanCodes[(q * (q + 1)) / 2 + k]), approx(mean, meanCodes[(q * (q + 1)) / 2 + k])] };
}

function drawTokens() {
  const tokens = rows("tokens");
  const box = document.getElementById("tokens-body");
  for (const model of new Set(tokens.map((t) => t.model))) {
    const source = heatmapSource(model);
    if (!source) continue;
    document.getElementById("tokens").hidden = false;
    const wrap = el("div", undefined, "tokens-model");
    wrap.dataset.model = model;
    const note = el("p", "", "note");
    const text = el("p", undefined, "tokens-text");
    wrap.append(el("h3", model), note, text);
    box.append(wrap);
    const mine = tokens.filter((t) => t.model === model).sort((a, b) => a.position - b.position);
    const spans = mine.map((t) => {
      const span = el("span", t.text, "token");
      span.dataset.position = t.position;
      text.append(span);
      return span;
    });
    const view = { model, source, heat: source, query: Math.min(source.size, spans.length) - 1 };
    view.pick = (q) => {
      view.query = Math.min(q, view.source.size - 1);
      note.textContent = `query ${view.query} (${JSON.stringify(mine[view.query]?.text ?? "")}); weights: ${view.source.label}`;
      spans.forEach((span, k) => {
        const [w, stated] = k <= view.query ? view.source.weight(view.query, k) : [null, ""];
        span.classList.toggle("query", k === view.query);
        span.style.background = w === null || !Number.isFinite(w) ? "" : `rgba(166, 54, 3, ${Math.min(Math.max(w, 0), 1)})`;
        span.style.color = w > 0.5 ? "#fff" : "";
        span.dataset.weight = w === null ? "" : String(w);
        span.title = w === null ? "" : `key ${k}: ${stated || w.toPrecision(6)}`;
      });
    };
    text.addEventListener("click", (e) => e.target.dataset.position !== undefined && view.pick(Number(e.target.dataset.position)));
    report.tokenViews.push(view);
    view.pick(view.query);
  }
}

/** The tokens views follow the selected head where its block map is at token resolution. */
function tokensFollow(maps, layer, head) {
  for (const view of report.tokenViews) {
    const map = maps[models().indexOf(view.model)];
    view.source = (map && headSource(map, layer, head)) || view.heat;
    view.pick(view.query);
  }
}

// ---- training series, tables, run records -------------------------------------------

function drawSeries() {
  const series = rows("attention_series").filter((r) => r.stat === "mean" && r.head === null);
  if (!series.length) return;
  document.getElementById("series").hidden = false;
  const box = document.getElementById("series-charts");
  const plot = (title, lines) => {
    const div = el("div", undefined, "series-chart");
    box.append(div);
    echarts.init(div).setOption({
      animation: false,
      title: { text: title, textStyle: { fontSize: 13 } },
      tooltip: { trigger: "axis" },
      legend: { type: "scroll", bottom: 0 },
      grid: { left: 60, right: 20, top: 35, bottom: 60 },
      xAxis: { type: "value", name: "step", nameLocation: "middle", nameGap: 25 },
      yAxis: { type: "value" },
      series: [...lines].map(([name, pts]) => ({ name, type: "line", data: pts.sort((a, b) => a[0] - b[0]) })),
    });
  };
  const qk = new Map();
  const sink = new Map();
  for (const r of series) {
    if (r.layer === null && (r.metric === "qk_mean" || r.metric === "qk_abs_mean")) {
      const key = `${r.model} ${r.metric}`;
      (qk.get(key) || qk.set(key, []).get(key)).push([r.step, num(r.value)]);
    }
    if (r.layer !== null && r.metric === "first_token") {
      const key = `${r.model} layer ${r.layer}`;
      (sink.get(key) || sink.set(key, []).get(key)).push([r.step, num(r.value)]);
    }
  }
  if (qk.size) plot("QK^T over training", qk);
  if (sink.size) plot("first-token mass per layer over training (sink emergence)", sink);
}

function htmlTable(title, name, columns) {
  const data = rows(name);
  if (!data.length) return null;
  const wrap = el("div");
  wrap.append(el("h3", title));
  const table = el("table");
  const head = el("tr");
  for (const c of columns) head.append(el("th", c, typeof data[0][c] === "string" ? "text" : ""));
  table.append(head);
  for (const r of data) {
    const tr = el("tr");
    for (const c of columns) {
      const v = r[c];
      tr.append(el("td", v === null ? "" : typeof v === "number" ? String(+v.toPrecision(6)) : String(v), typeof v === "string" ? "text" : ""));
    }
    table.append(tr);
  }
  wrap.append(table);
  return wrap;
}

function drawTables() {
  const parts = [];
  const first = (name) => (report.tables[name] ? Object.keys(report.tables[name]) : []);
  for (const [title, name] of [["Tables 1-3", "paper_tables"], ["Table 4: gradient-norm statistics", "grad_stats"],
    ["Table 5: gradient-norm spikes", "spikes"], ["Head roles", "head_roles"]]) {
    const t = htmlTable(title, name, first(name));
    if (t) parts.push(t);
  }
  if (!parts.length) return;
  document.getElementById("paper-tables").hidden = false;
  document.getElementById("tables-body").append(...parts);
}

function drawRecords() {
  const box = document.getElementById("records-body");
  for (const f of report.folders) {
    box.append(el("h3", f.path));
    box.append(el("pre", f.record ? JSON.stringify(f.record, null, 2) : "(no run.json)"));
  }
}

async function main() {
  const started = performance.now();
  const data = await load();
  report.tables = data.tables;
  report.folders = data.folders;
  report.blockMaps = data.block_maps || {};
  document.getElementById("folders").textContent = data.folders.map((f) => f.path).join(" · ");
  for (const note of data.notes || []) document.querySelector("header").append(el("p", note, "note"));
  drawOverview(headValues());
  drawTokens();
  drawSeries();
  drawTables();
  drawRecords();
  document.body.dataset.ready = String(performance.now() - started);
  // since the page began to load (parsing the file and the charting library included)
  requestAnimationFrame(() => { document.body.dataset.drawnAt = String(performance.now()); });
}

function shown(e) {
  document.body.prepend(el("p", `The report could not be drawn: ${e}`, "note"));
  throw e;
}

main().catch(shown);
