// reel's dashboard: polls the same API as every client (GET /v1/library and /v1/jobs) with the
// token the operator gives, every 5 s, and redraws. The token stays in this tab's
// sessionStorage (a `#token=…` fragment is taken and removed from the address: fragments are
// never sent to the server). Every value is put in the page as text, never as HTML.
"use strict";

const EVERY_MS = 5000;
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("reel-token") || "";
let timer = null;

function takeFragment() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    token = decodeURIComponent(m[1]);
    sessionStorage.setItem("reel-token", token);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = new Error(body.error || r.statusText);
    e.status = r.status;
    throw e;
  }
  return body;
}

function bytes(n) {
  const units = ["B", "kB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function age(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fill(id, rows, draw, empty) {
  const tbody = $(id).querySelector("tbody");
  tbody.replaceChildren();
  for (const r of rows) {
    const tr = document.createElement("tr");
    draw(tr, r);
    tbody.appendChild(tr);
  }
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = cell(tr, empty);
    td.colSpan = $(id).querySelectorAll("th").length;
    td.className = "none";
    tbody.appendChild(tr);
  }
}

function drawLibrary(lib) {
  const now = lib.now_ms;
  fill("drives", lib.drives, (tr, d) => {
    tr.dataset.drive = d.drive;
    cell(tr, d.drive);
    const st = cell(tr, d.state, "state state-" + d.state);
    if (d.down) st.title = "out of service: " + d.down;
    cell(tr, d.barcode || "—");
    cell(tr, d.pool || "");
    cell(tr, d.since_ms ? age(now - d.since_ms) : "");
    cell(tr, d.work.map((w) => w.job + " (" + w.files + " files, " + bytes(w.bytes) + ")").join(", "));
    cell(tr, d.worker || "no worker");
  }, "no drive seen yet: is a worker running?");
  fill("queues", lib.queues, (tr, q) => {
    tr.dataset.rule = q.rule;
    cell(tr, q.mode);
    cell(tr, q.cartridge || q.pool || "");
    cell(tr, q.pool || "");
    cell(tr, q.files);
    cell(tr, bytes(q.bytes));
    cell(tr, age(q.oldest_age_ms));
    cell(tr, q.message, "why rule-" + q.rule);
  }, "nothing queued");
  fill("cartridges", lib.cartridges, (tr, c) => {
    tr.dataset.barcode = c.barcode;
    cell(tr, c.barcode);
    cell(tr, c.pool || "—");
    cell(tr, c.state);
    const td = cell(tr, "");
    const bar = document.createElement("span");
    bar.className = "bar";
    const i = document.createElement("i");
    const pct = c.capacity_bytes ? Math.min(100, (100 * c.used_bytes) / c.capacity_bytes) : 0;
    i.style.width = pct.toFixed(1) + "%";
    bar.appendChild(i);
    td.appendChild(bar);
    td.appendChild(document.createTextNode(bytes(c.used_bytes) + (c.capacity_bytes ? " of " + bytes(c.capacity_bytes) : "")));
    cell(tr, c.location || "outside the library");
    cell(tr, c.mount_count);
  }, "no cartridges");
  const grid = (id, kind) => {
    const g = $(id);
    g.replaceChildren();
    for (const e of lib.elements.filter((e) => e.kind === kind)) {
      const d = document.createElement("div");
      d.className = e.full ? "full" : "empty";
      const n = document.createElement("span");
      n.textContent = e.index;
      d.appendChild(n);
      d.appendChild(document.createTextNode(e.full ? (e.barcode || "(no label)") : "empty"));
      g.appendChild(d);
    }
  };
  grid("slots", "slot");
  grid("ie", "import_export");
  $("seen").textContent = lib.seen_ms ? "(read " + age(now - lib.seen_ms) + " ago)" : "(no worker has read the changer yet)";
}

function drawJobs(id, jobs, now, what) {
  fill(id, jobs, (tr, j) => {
    tr.dataset.job = j.id;
    cell(tr, j.id);
    cell(tr, j.kind);
    cell(tr, what(j), id === "failed" ? "reason" : "");
    cell(tr, age(now - (j.finished_ms || j.updated_ms || j.created_ms)));
  }, "none");
}

function progress(j) {
  const p = j.progress || {};
  if (p.objects_total) return (p.objects_done || 0) + " of " + p.objects_total + " objects, " + bytes(p.bytes_done || 0);
  return j.state;
}

async function refresh() {
  try {
    const [lib, running, failed, done] = await Promise.all([
      api("/v1/library"),
      api("/v1/jobs?state=running&limit=20"),
      api("/v1/jobs?state=failed&limit=10"),
      api("/v1/jobs?state=done&limit=10"),
    ]);
    drawLibrary(lib);
    drawJobs("running", running.jobs, lib.now_ms, progress);
    drawJobs("failed", failed.jobs, lib.now_ms, (j) => j.error || "");
    drawJobs("done", done.jobs, lib.now_ms, (j) => (j.progress && j.progress.objects_done) || "");
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
    $("status").className = "status";
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    showMain(true);
  } catch (e) {
    $("status").textContent = e.message;
    $("status").className = "status bad";
    if (e.status === 401 || e.status === 403) {
      forget();
    }
  }
}

function showMain(on) {
  $("main").hidden = !on;
  $("login").hidden = on;
  $("logout").hidden = !on;
}

function forget() {
  token = "";
  sessionStorage.removeItem("reel-token");
  if (timer) clearInterval(timer);
  timer = null;
  showMain(false);
}

function start() {
  if (timer) clearInterval(timer);
  refresh();
  timer = setInterval(refresh, EVERY_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  takeFragment();
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    sessionStorage.setItem("reel-token", token);
    start();
  });
  $("logout").addEventListener("click", forget);
  // A new `#token=…` given to an open page replaces the token.
  window.addEventListener("hashchange", () => {
    if (location.hash.includes("token=")) {
      takeFragment();
      start();
    }
  });
  if (token) start(); else showMain(false);
});
