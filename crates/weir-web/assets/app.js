// Weir's dashboard: a job list and a job page, redrawn from the REST API every second.
// Plain DOM and SVG, no framework: the page must stay fast on a busy machine.
"use strict";

const app = document.getElementById("app");
const POLL_MS = 1000;
let timer = null;

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function num(n, digits = 0) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${num(n, i ? 1 : 0)} ${units[i]}`;
}
function ms(n) {
  if (n === null || n === undefined) return "–";
  if (n < 1000) return `${num(n)} ms`;
  const s = n / 1000;
  if (s < 120) return `${num(s, 1)} s`;
  const m = Math.floor(s / 60), h = Math.floor(m / 60);
  return h ? `${h} h ${m % 60} min` : `${m} min ${Math.floor(s % 60)} s`;
}
function time(t) {
  return t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "–";
}
function watermark(w) {
  return (w === null || w === undefined) ? "–" : time(w);
}
async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

async function jobList() {
  const { jobs } = await get("/jobs/overview");
  const rows = jobs.map(j => `<tr>
      <td><a href="#/jobs/${esc(j.jid)}">${esc(j.jid)}</a></td>
      <td><a href="#/jobs/${esc(j.jid)}">${esc(j.name)}</a></td>
      <td><span class="state ${esc(j.state)}">${esc(j.state)}</span></td>
      <td>${esc(time(j["start-time"]))}</td><td class="num">${esc(ms(j.duration))}</td>
      <td class="num">${num(j["rows-read"])}</td><td class="num">${num(j["rows-written"])}</td>
      <td class="num">${num(j.checkpoints)}</td><td class="num">${num(j.restarts)}</td>
      <td>${esc(j.guarantee)}</td></tr>`).join("");
  app.innerHTML = `<h1>Jobs</h1><section><table id="jobs">
    <thead><tr><th>Id</th><th>Name</th><th>State</th><th>Started</th><th class="num">Duration</th>
    <th class="num">Rows read</th><th class="num">Rows written</th><th class="num">Checkpoints</th>
    <th class="num">Restarts</th><th>Guarantee</th></tr></thead>
    <tbody>${rows || `<tr><td colspan="10" class="muted">No jobs yet.</td></tr>`}</tbody></table></section>`;
}

// Backpressure as Flink's UI colours it: OK below 10%, LOW below 50%, HIGH above.
function pressure(msPerSecond) {
  const ratio = (msPerSecond || 0) / 1000;
  if (ratio >= 0.5) return ["bp-high", "HIGH"];
  if (ratio >= 0.1) return ["bp-low", "LOW"];
  return ["bp-ok", "OK"];
}

// Layered layout: a vertex's column is one past its furthest input.
function graph(job) {
  const vs = job.vertices, nodes = job.plan.nodes;
  const col = {}, row = {}, perCol = {};
  for (const n of nodes) {
    col[n.id] = n.inputs.length ? Math.max(...n.inputs.map(i => (col[i.id] ?? 0) + 1)) : 0;
    row[n.id] = perCol[col[n.id]] = (perCol[col[n.id]] ?? -1) + 1;
  }
  const W = 230, H = 118, GX = 60, GY = 24;
  const cols = Math.max(0, ...Object.values(col)) + 1, rows = Math.max(0, ...Object.values(perCol)) + 1;
  const x = id => 10 + col[id] * (W + GX), y = id => 10 + row[id] * (H + GY);
  let svg = `<svg width="${cols * (W + GX) - GX + 20}" height="${rows * (H + GY) - GY + 20}" xmlns="http://www.w3.org/2000/svg">`;
  for (const n of nodes) for (const i of n.inputs) {
    const x1 = x(i.id) + W, y1 = y(i.id) + H / 2, x2 = x(n.id), y2 = y(n.id) + H / 2;
    svg += `<path class="edge" d="M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}"/>`;
    svg += `<text class="edge-label" x="${(x1 + x2) / 2 - 18}" y="${(y1 + y2) / 2 - 4}">${esc(i.ship_strategy)}</text>`;
  }
  for (const v of vs) {
    const m = v.metrics, [cls, label] = pressure(m["backpressured-ms-per-second"]);
    const name = v.name.length > 34 ? v.name.slice(0, 33) + "…" : v.name;
    svg += `<g class="vertex" data-vertex="${esc(v.id)}"><title>${esc(v.name)}</title>
      <rect class="${cls}" x="${x(v.id)}" y="${y(v.id)}" width="${W}" height="${H}" rx="6"/>
      <text class="title" x="${x(v.id) + 8}" y="${y(v.id) + 18}">${esc(name)}</text>
      <text x="${x(v.id) + 8}" y="${y(v.id) + 36}">parallelism ${v.parallelism} · backpressure ${label} ${num(m["backpressured-ms-per-second"] / 10)}%</text>
      <text class="rate" x="${x(v.id) + 8}" y="${y(v.id) + 54}">in ${num(m["read-records-per-second"])}/s · out ${num(m["write-records-per-second"])}/s</text>
      <text x="${x(v.id) + 8}" y="${y(v.id) + 72}">busy ${num(m["busy-ms-per-second"] / 10)}% · state ${bytes(m["state-size"])}</text>
      <text x="${x(v.id) + 8}" y="${y(v.id) + 90}">watermark ${esc(watermark(m.watermark))}<title>${esc(m.watermark === null ? "no watermark yet" : ms(m["watermark-lag-ms"]) + " behind the wall clock")}</title></text>
      <text class="muted rows" x="${x(v.id) + 8}" y="${y(v.id) + 108}">rows in ${num(m["read-records"])} · out ${num(m["write-records"])}</text></g>`;
  }
  return svg + "</svg>";
}

// Checkpoint duration (bars) and size (light bars) over the last checkpoints.
function chart(history) {
  const h = history.slice(0, 60).reverse();
  if (!h.length) return `<p class="muted">No checkpoint completed yet.</p>`;
  const W = 1160, H = 90, bw = Math.max(3, Math.floor(W / Math.max(h.length, 1)) - 2);
  const maxD = Math.max(1, ...h.map(c => c.end_to_end_duration)), maxS = Math.max(1, ...h.map(c => c.checkpointed_size));
  let svg = `<svg class="chart" width="${W}" height="${2 * H + 40}">`;
  svg += `<text x="0" y="10">duration (max ${ms(maxD)})</text><text x="0" y="${H + 32}">size written (max ${bytes(maxS)})</text>`;
  h.forEach((c, i) => {
    const d = Math.max(1, c.end_to_end_duration / maxD * (H - 16)), s = Math.max(1, c.checkpointed_size / maxS * (H - 16));
    svg += `<rect class="bar" x="${i * (bw + 2)}" y="${H - d + 4}" width="${bw}" height="${d}"><title>#${c.id}: ${ms(c.end_to_end_duration)}</title></rect>`;
    svg += `<rect class="bar2" x="${i * (bw + 2)}" y="${2 * H + 26 - s}" width="${bw}" height="${s}"><title>#${c.id}: ${bytes(c.checkpointed_size)}</title></rect>`;
  });
  return svg + "</svg>";
}

async function jobPage(id) {
  const [job, cps, exc, g] = await Promise.all([
    get(`/jobs/${id}`), get(`/jobs/${id}/checkpoints`), get(`/jobs/${id}/exceptions`), get(`/jobs/${id}/guarantee`),
  ]);
  const lag = job.vertices.flatMap(v => v["kafka-partitions"].map(p => ({ ...p, vertex: v.name })));
  const lagRows = lag.map(p => `<tr><td>${esc(p.vertex)}</td><td class="num">${p.subtask}</td><td>${esc(p.topic)}</td>
      <td class="num">${p.partition}</td><td class="num">${num(p["current-offset"])}</td>
      <td class="num">${num(p["end-offset"])}</td><td class="num lag">${num(p.lag)}</td></tr>`).join("");
  const cpRows = cps.history.slice(0, 10).map(c => `<tr><td class="num">${c.id}</td><td>${esc(c.status)}</td>
      <td>${esc(time(c.latest_ack_timestamp))}</td><td class="num">${ms(c.end_to_end_duration)}</td>
      <td class="num">${bytes(c.checkpointed_size)}</td><td class="num">${bytes(c.state_size)}</td></tr>`).join("");
  const excs = exc.exceptionHistory.entries.slice(0, 10).map(e => `<div class="exception">
      <b>${esc(e.exceptionName)}</b> · ${esc(time(e.timestamp))}${e.restarted ? " · restarted" : ""}<br>${esc(e.message)}</div>`).join("");
  app.innerHTML = `<p><a href="#/">Jobs</a> › ${esc(job.name)}</p>
    <h1>${esc(job.name)} <span class="state ${esc(job.state)}">${esc(job.state)}</span></h1>
    <div class="facts">
      <div><span>Job id</span>${esc(job.jid)}</div><div><span>Started</span>${esc(time(job["start-time"]))}</div>
      <div><span>Duration</span>${esc(ms(job.duration))}</div><div><span>Restarts</span>${num(job.restarts)}</div>
      <div><span>Checkpoints</span>${num(cps.counts.completed)} completed · ${num(cps.counts.failed)} failed</div>
      <div><span>Guarantee</span>${esc(job.guarantee)}</div></div>
    ${job.error ? `<div class="exception">${esc(job.error)}</div>` : ""}
    <section><h2>Operators</h2><div class="legend"><span><i style="background:#3a9a5b"></i>backpressure OK</span>
      <span><i style="background:#d9a21b"></i>LOW (≥10%)</span><span><i style="background:#d0452f"></i>HIGH (≥50%)</span></div>
      <div id="graph">${graph(job)}</div></section>
    <section><h2>Checkpoints</h2>${chart(cps.history)}
      <table id="checkpoints"><thead><tr><th class="num">Id</th><th>Status</th><th>Completed</th>
      <th class="num">Duration</th><th class="num">Written</th><th class="num">Full size</th></tr></thead>
      <tbody>${cpRows || `<tr><td colspan="6" class="muted">None yet.</td></tr>`}</tbody></table>
      ${cps.latest.failed ? `<p class="muted">Last failed: #${cps.latest.failed.id}: ${esc(cps.latest.failed.failure_message)}</p>` : ""}</section>
    <section><h2>Kafka lag</h2>${lag.length ? `<table id="lag"><thead><tr><th>Vertex</th><th class="num">Subtask</th>
      <th>Topic</th><th class="num">Partition</th><th class="num">Position</th><th class="num">End</th>
      <th class="num">Lag</th></tr></thead><tbody>${lagRows}</tbody></table>` : `<p class="muted">The job reads no Kafka topic.</p>`}</section>
    <section><h2>Exceptions</h2><div id="exceptions">${excs || `<p class="muted">None.</p>`}</div></section>
    <section><h2>Guarantee</h2><pre id="guarantee">${esc(g.report.join("\n") || g.delivered)}</pre></section>`;
}

async function render() {
  clearTimeout(timer);
  const route = location.hash.replace(/^#/, "") || "/";
  const m = route.match(/^\/jobs\/([^/]+)$/);
  try {
    await (m ? jobPage(decodeURIComponent(m[1])) : jobList());
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB")}`;
  } catch (e) {
    app.innerHTML = `<div class="exception">${esc(e.message)}</div>`;
  }
  timer = setTimeout(render, POLL_MS);
}

window.addEventListener("hashchange", render);
render();
