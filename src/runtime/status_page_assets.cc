// The status page itself: one HTML document with its style and script inline. The script polls
// /api/status every second with the page's own ?token= and redraws; nothing else is fetched.
#include "runtime/status_page.h"

namespace pstrain {
namespace {

constexpr char kPage[] = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pstrain job</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em 2em; color: #222; background: #fafafa; }
h1 { font-size: 1.4em; margin: 0 0 .6em; }
h2 { font-size: 1.05em; margin: 1.4em 0 .4em; color: #444; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: .5em; }
.cell { background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: .4em .6em; }
.cell .k { color: #777; font-size: .85em; }
.cell .v { font-size: 1.2em; font-variant-numeric: tabular-nums; }
.row { display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }
table { border-collapse: collapse; background: #fff; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ddd; padding: .25em .7em; text-align: left; }
th { background: #f0f0f0; font-weight: 600; }
td.n { text-align: right; }
.state { font-weight: 600; }
.running, .evaluating { color: #1565c0; }
.done, .succeeded { color: #2e7d32; }
.failed, .lost { color: #c62828; }
.waiting, .starting { color: #888; }
#error { color: #c62828; font-weight: 600; }
#conn { color: #888; font-size: .85em; margin-left: 1em; }
.bar { height: .6em; background: #90caf9; display: inline-block; vertical-align: middle; }
svg { background: #fff; border: 1px solid #ddd; }
svg text { font-size: 11px; fill: #555; }
</style>
</head>
<body>
<h1>pstrain job <span id="state" class="state">loading</span><span id="conn"></span></h1>
<div id="error"></div>
<div class="grid" id="summary"></div>
<div class="row">
<div><h2>Cluster</h2>
<table id="tasks"><thead><tr><th>task</th><th>address</th><th>state</th><th>last heartbeat</th>
<th>steps</th><th>detail</th></tr></thead><tbody></tbody></table></div>
<div><h2>Loss</h2><svg id="chart" width="560" height="240" viewBox="0 0 560 240"></svg></div>
</div>
<div class="row">
<div><h2>Load per PS</h2>
<table id="ps"><thead><tr><th>ps</th><th>variables</th><th></th><th>tables</th><th>pushes</th>
</tr></thead><tbody></tbody></table></div>
<div><h2>Placement</h2>
<table id="placement"><thead><tr><th>variable or shard</th><th>ps</th><th>bytes</th></tr></thead>
<tbody></tbody></table></div>
</div>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const api = "api/status" + (token ? "?token=" + encodeURIComponent(token) : "");
const SVG = "http://www.w3.org/2000/svg";
let lastOk = 0;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}
function num(v, digits) {
  if (v === null || v === undefined) return "-";
  return v.toLocaleString("en-US", {maximumFractionDigits: digits || 0});
}
function bytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; ++i; }
  return (i ? b.toFixed(1) : b) + " " + units[i];
}
function duration(s) {
  if (s === null || s === undefined || s < 0) return "-";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, r = s % 60;
  return (h ? h + "h" : "") + (h || m ? m + "m" : "") + r + "s";
}
function fillRows(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows.map(cells => {
    const tr = el("tr");
    for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", String(c)));
    return tr;
  }));
}
function td(text, cls) { return el("td", text, cls); }

function summary(s) {
  const step = num(s.global_step) + (s.total_steps ? " / " + num(s.total_steps) : "");
  const items = [
    ["state", s.state, "state " + s.state, "job_state"], ["mode", s.mode], ["model", s.model],
    ["epoch", s.epochs ? s.epoch + " / " + s.epochs : "-"],
    ["global step", step, "", "global_step"],
    ["examples/s", num(s.examples_per_sec)], ["loss", num(s.loss, 4)],
    ["elapsed", duration(s.elapsed_seconds)], ["ETA", duration(s.eta_seconds)],
    ["workers alive", s.workers_alive]];
  document.getElementById("summary").replaceChildren(...items.map(([k, v, cls, id]) => {
    const c = el("div", undefined, "cell");
    c.appendChild(el("div", k, "k"));
    const val = el("div", String(v), "v " + (cls || ""));
    if (id) val.id = id;
    c.appendChild(val);
    return c;
  }));
}

function chart(points) {
  const svg = document.getElementById("chart");
  const W = 560, H = 240, L = 52, R = 12, T = 12, B = 30;
  const kids = [];
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    kids.push(e);
  };
  const pts = points.filter(p => p[2] !== null);
  add("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999"});
  add("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#999"});
  if (pts.length === 0) {
    add("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no loss reported yet");
  } else {
    const s0 = pts[0][1], s1 = Math.max(pts[pts.length - 1][1], s0 + 1);
    let lo = Math.min(...pts.map(p => p[2])), hi = Math.max(...pts.map(p => p[2]));
    if (hi - lo < 1e-9) { hi += 0.5; lo -= 0.5; }
    const x = st => L + (st - s0) / (s1 - s0) * (W - L - R);
    const y = v => T + (hi - v) / (hi - lo) * (H - T - B);
    for (const v of [lo, (lo + hi) / 2, hi]) {
      add("line", {x1: L, y1: y(v), x2: W - R, y2: y(v), stroke: "#eee"});
      add("text", {x: L - 4, y: y(v) + 4, "text-anchor": "end"}, v.toPrecision(3));
    }
    add("text", {x: L, y: H - 10}, "step " + num(s0));
    add("text", {x: W - R, y: H - 10, "text-anchor": "end"}, "step " + num(s1));
    const line = pts.map(p => x(p[1]).toFixed(1) + "," + y(p[2]).toFixed(1)).join(" ");
    add("polyline", {fill: "none", stroke: "#1565c0", "stroke-width": 1.5, points: line});
  }
  svg.replaceChildren(...kids);
}

function render(s) {
  const state = document.getElementById("state");
  state.textContent = s.state;
  state.className = "state " + s.state;
  document.getElementById("error").textContent = s.error || "";
  document.title = "pstrain " + s.state + " step " + s.global_step;
  summary(s);
  fillRows("tasks", s.tasks.map(t => [
    td(t.name), td(t.address), td(t.state, "state " + t.state),
    td(t.seconds_since_seen === null || t.seconds_since_seen < 0 ? "never" :
       duration(t.seconds_since_seen) + " ago", "n"),
    td(t.job === "worker" ? num(t.steps) : "", "n"), td(t.detail)]));
  const most = Math.max(1, ...s.ps.map(p => p.bytes));
  fillRows("ps", s.ps.map(p => {
    const bar = el("td"), b = el("span", undefined, "bar");
    b.style.width = Math.round(120 * p.bytes / most) + "px";
    bar.appendChild(b);
    return [td("ps:" + p.ps), td(bytes(p.bytes), "n"), bar, td(bytes(p.table_bytes), "n"),
            td(num(p.pushes), "n")];
  }));
  fillRows("placement",
           s.placement.map(p => [td(p.name), td("ps:" + p.ps), td(bytes(p.bytes), "n")]));
  chart(s.loss_curve);
}

async function poll() {
  try {
    const r = await fetch(api, {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    lastOk = Date.now();
    document.getElementById("conn").textContent = "";
  } catch (e) {
    const ago = lastOk ? " (last update " + duration((Date.now() - lastOk) / 1000) + " ago)" : "";
    document.getElementById("conn").textContent = "chief not answering: " + e.message + ago;
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
)PAGE";

}  // namespace

const char* StatusPageHtml() { return kPage; }

}  // namespace pstrain
