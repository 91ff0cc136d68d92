// Korral dashboard. Reads only this rmproxy's REST API (same origin) and refreshes every
// REFRESH_MS. Every string from the cluster is inserted as text (esc), never as markup.
"use strict";

const REFRESH_MS = 2000;
const APPS_SHOWN = 1000; // application rows per partition (small summary rows)
const NODES_LISTED = 200; // node table rows (the heat map shows every node)
const WHY_ASKS = 10; // pending asks explained for the selected application (each costs O(nodes))
const state = { view: "overview", partition: null, partitions: [], timer: null, why: null };

function esc(v) {
  return String(v === undefined || v === null ? "" : v)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json().catch(() => null);
  if (!r.ok && !(body && body.HealthChecks)) {
    throw new Error(`${path}: ${r.status} ${body && body.message ? body.message : r.statusText}`);
  }
  return body;
}

function fmtRes(res) {
  if (!res) return "";
  return Object.keys(res).sort().map((k) => `${k}: ${fmtQty(k, res[k])}`).join(", ");
}

// One quantity as people read it; the same text as the CLI's common/units.py `human` (one rule:
// binary units for bytes, cores or millicores for vcore, thousands separators for counts, one
// decimal rounded half away from zero; tests/web/test_dashboard.py compares the two).
const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

function round1(v) {
  const r = Math.floor(Math.abs(v) * 10 + 0.5) / 10;
  return v < 0 && r ? -r : r;
}

function decimal1(v) {
  const r = round1(v);
  return Number.isInteger(r) ? String(r) : r.toFixed(1);
}

function thousands(text) {
  const [whole, frac] = text.split(".");
  return whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (frac === undefined ? "" : "." + frac);
}

function fmtQty(name, v) {
  if (name === "memory" || name === "ephemeral-storage") {
    let i = 0;
    while (Math.abs(round1(v)) >= 1024 && i < BYTE_UNITS.length - 1) { v /= 1024; i++; }
    return `${decimal1(v)} ${BYTE_UNITS[i]}`;
  }
  if (name === "vcore") {
    if (v && Math.abs(v) < 1000) return `${decimal1(v)}m`;
    const cores = decimal1(v / 1000);
    return `${cores} ${cores === "1" ? "core" : "cores"}`;
  }
  return thousands(Number.isInteger(v) ? String(v) : round1(v).toFixed(1));
}

function fmtTime(ns) {
  if (!ns) return "";
  return new Date(ns / 1e6).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function stateTag(s) { return `<span class="state ${esc(s)}">${esc(s)}</span>`; }

function partitionQuery() {
  const p = state.partition;
  return p ? `/ws/v1/partition/${encodeURIComponent(p.name)}` : null;
}

function rmParam(extra) {
  const q = new URLSearchParams(extra || {});
  if (state.partition) q.set("rmID", state.partition.rmID);
  return "?" + q.toString();
}

// ------------------------------------------------------------------ views

function renderPartitions(parts) {
  const rows = parts.map((p) => {
    const util = Object.keys(p.capacity.utilization || {}).sort()
      .map((k) => `${esc(k)} ${esc(p.capacity.utilization[k])}%`).join(", ");
    const apps = Object.keys(p.applications).filter((k) => k !== "total")
      .map((k) => `${esc(k)}: ${esc(p.applications[k])}`).join(", ");
    return `<tr><td>${esc(p.rmID)}</td><td>${esc(p.name)}</td><td>${stateTag(p.state)}</td>
      <td>${esc(p.totalNodes)}</td><td>${esc(p.totalContainers)}</td>
      <td>${esc(p.applications.total)} ${apps ? `<span class="muted">(${apps})</span>` : ""}</td>
      <td>${util}</td></tr>`;
  });
  document.querySelector("#partitions-table tbody").innerHTML =
    rows.join("") || `<tr><td colspan="7" class="muted">no partitions: no RM registered</td></tr>`;
}

function renderHealth(h) {
  const checks = (h.HealthChecks || []).map((c) =>
    `<div class="check">${stateTag(c.Succeeded ? "ok" : "bad")} ${esc(c.Name)}
      <span class="muted">${esc(c.Description)}</span>
      ${c.DiagnosisMessage ? `<span class="error">${esc(c.DiagnosisMessage)}</span>` : ""}</div>`);
  document.getElementById("health").innerHTML =
    `<p>${h.Healthy ? stateTag("ok") + " healthy" : stateTag("bad") + " not healthy"}</p>` + checks.join("");
}

function bars(q, capacity) {
  const names = new Set([...Object.keys(q.allocatedResource || {}), ...Object.keys(q.maxResource || {}),
    ...Object.keys(q.guaranteedResource || {}), ...Object.keys(q.pendingResource || {})]);
  return [...names].sort().map((k) => {
    const used = (q.allocatedResource || {})[k] || 0;
    const pend = (q.pendingResource || {})[k] || 0;
    const max = (q.maxResource || {})[k];
    const guar = (q.guaranteedResource || {})[k];
    const scale = max || capacity[k] || Math.max(used + pend, guar || 0, 1);
    const pct = (v) => Math.min(100, (100 * v) / scale);
    return `<div class="resrow"><span class="rname">${esc(k)}</span>
      <div class="bar" title="used ${esc(fmtQty(k, used))} / max ${max === undefined ? "unlimited" : esc(fmtQty(k, max))}">
        <span class="pend" style="width:${pct(used + pend)}%"></span>
        <span class="used" style="width:${pct(used)}%"></span>
        ${guar !== undefined ? `<i class="guarline" style="left:${pct(guar)}%"></i>` : ""}
      </div>
      <span class="nums">used ${esc(fmtQty(k, used))} · guaranteed ${guar === undefined ? "–" : esc(fmtQty(k, guar))}
        · max ${max === undefined ? "–" : esc(fmtQty(k, max))}${pend ? ` · pending ${esc(fmtQty(k, pend))}` : ""}</span></div>`;
  }).join("");
}

function renderQueue(q, capacity) {
  const kids = (q.children || []).map((c) => renderQueue(c, capacity)).join("");
  return `<div class="queue" data-queue="${esc(q.queuename)}">
    <span class="name">${esc(q.queuename)}</span> ${stateTag(q.status)}
    <span class="meta">${q.isLeaf ? "leaf" : "parent"}${q.isManaged ? "" : " · dynamic"}
      · running apps ${esc(q.runningApps)}${q.maxRunningApps ? " / " + esc(q.maxRunningApps) : ""}</span>
    ${bars(q, capacity)}
    ${kids ? `<div class="children">${kids}</div>` : ""}</div>`;
}

function renderApps(page) {
  const rows = page.items.map((a) => {
    const done = a.allocations;
    const pending = a.pendingCount;
    const pct = done + pending ? Math.round((100 * done) / (done + pending)) : 100;
    return `<tr data-app="${esc(a.applicationID)}" class="${pending ? "waits" : ""}"
      ${pending ? `onclick="location.hash='apps/'+encodeURIComponent(this.dataset.app)"` : ""}>
      <td>${esc(a.applicationID)}</td><td>${esc(a.queueName)}</td>
      <td>${esc(a.user)}</td><td>${stateTag(a.applicationState)}</td>
      <td><span class="progress" title="${pct}%"><span style="width:${pct}%"></span></span> ${pct}%</td>
      <td>${done}</td><td>${pending}</td><td>${esc(fmtRes(a.usedResource))}</td>
      <td>${esc(fmtTime(a.submissionTime))}</td></tr>`;
  });
  const more = page.total > page.items.length
    ? `<tr><td colspan="9" class="muted">showing ${page.items.length} of ${page.total} applications</td></tr>` : "";
  document.querySelector("#apps-table tbody").innerHTML =
    (rows.join("") + more) || `<tr><td colspan="9" class="muted">no applications</td></tr>`;
}

// Why the selected application's asks wait (``/ws/v1/korral/.../explain``), on demand only.
async function renderWhy(base, kbase) {
  const box = document.getElementById("why");
  if (!state.why || !base) { box.innerHTML = ""; return; }
  const app = await getJSON(`${base}/application/${encodeURIComponent(state.why)}${rmParam()}`);
  const keys = (app.requests || []).filter((r) => r.pendingCount > 0).slice(0, WHY_ASKS).map((r) => r.allocationKey);
  const answers = await Promise.all(keys.map((k) => getJSON(
    `${kbase}/application/${encodeURIComponent(state.why)}/allocation/${encodeURIComponent(k)}/explain${rmParam()}`)));
  const rows = answers.map((e) => {
    const held = [e.queueHeadroomBlockedBy && `headroom of queue ${e.queueHeadroomBlockedBy}`,
      e.limitBlockedBy && `limit: ${e.limitBlockedBy}`, e.reservedNode && `node ${e.reservedNode} reserved`]
      .filter(Boolean).join("; ");
    const nodes = Object.entries(e.nodes || {}).map(([stage, n]) => `${stage} ${n}`).join(", ");
    return `<tr data-ask="${esc(e.allocationKey)}"><td>${esc(e.allocationKey)}</td><td>${esc(e.pending)}</td>
      <td>${esc(e.state)}${e.reason ? ` <span class="muted">${esc(e.reason)}</span>` : ""}</td>
      <td>${esc(held) || '<span class="muted">–</span>'}</td><td>${esc(nodes)}</td></tr>`;
  });
  box.innerHTML = `<h2>Why ${esc(state.why)} waits</h2><table id="why-table"><thead><tr><th>Ask</th><th>Pending</th>
    <th>State</th><th>Held by</th><th>Nodes (by rejection stage)</th></tr></thead>
    <tbody>${rows.join("") || '<tr><td colspan="5" class="muted">no pending asks</td></tr>'}</tbody></table>`;
}

function heatColour(pct) {
  // green (0%) → yellow (50%) → red (100%)
  const p = Math.max(0, Math.min(100, pct));
  const hue = 120 - (120 * p) / 100;
  return `hsl(${hue}, 65%, ${p === 0 ? 70 : 45}%)`;
}

function renderNodes(heat, nodes) {
  const map = document.getElementById("heatmap");
  map.classList.toggle("small", heat.items.length > 400); // thousands of nodes: 10 px cells, no labels
  const mean = heat.items.length ? Math.round(heat.items.reduce((n, r) => n + r[1], 0) / heat.items.length) : 0;
  document.getElementById("heat-summary").textContent =
    `${heat.total} nodes · mean of the highest utilisation ${mean}% · ` +
    `${heat.items.filter((r) => !r[2] || !r[3]).length} not schedulable or not ready`;
  map.innerHTML = heat.items.map(([id, u, schedulable, ready]) =>
    `<div class="cell${schedulable && ready ? "" : " unsched"}" data-node="${esc(id)}"
      style="background:${heatColour(u)}" title="${esc(id)}: ${u}%${schedulable ? "" : " (not schedulable)"}${ready ? "" : " (not ready)"}">${u}</div>`).join("");
  const rows = nodes.map((n) => `<tr data-node="${esc(n.nodeID)}"><td>${esc(n.nodeID)}</td><td>${esc(n.hostName)}</td>
      <td>${n.schedulable ? "yes" : stateTag("draining")}</td><td>${esc(fmtRes(n.capacity))}</td>
      <td>${esc(fmtRes(n.allocated))}</td>
      <td>${Object.keys(n.utilized || {}).sort().map((k) => `${esc(k)} ${esc(n.utilized[k])}%`).join(", ")}</td>
      <td>${(n.allocations || []).length}</td></tr>`);
  const more = heat.total > nodes.length
    ? `<tr><td colspan="7" class="muted">listing ${nodes.length} of ${heat.total} nodes (the heat map shows all)</td></tr>` : "";
  document.querySelector("#nodes-table tbody").innerHTML =
    (rows.join("") + more) || `<tr><td colspan="7" class="muted">no nodes</td></tr>`;
}

function renderStack(s) {
  const p = s.rmproxy, b = s.broker;
  document.querySelector("#proxy-table tbody").innerHTML = `
    <tr><th>rmproxy</th><td>${esc(p.name)} (pid ${esc(p.pid)})</td>
      <td>${p.brokerConnected ? stateTag("ok") + " broker connected" : stateTag("bad") + " broker silent"}</td></tr>
    <tr><th>broker</th><td>${esc(p.broker)}</td>
      <td>routed ${esc(b.routed)} · bad frames ${esc(b.badFrames)} · rmproxies ${esc(b.rmproxies)}
      ${b.queueDepth === null || b.queueDepth === undefined ? "" : " · queue depth " + esc(b.queueDepth)}</td></tr>`;
  const age = (a) => (a === null || a === undefined ? '<span class="muted">n/a</span>' : esc(a.toFixed(1)) + " s");
  document.querySelector("#rmproxies-table tbody").innerHTML = (s.rmproxies || []).map((r) =>
    `<tr data-rmproxy="${esc(r.name)}"><td>${esc(r.name)}${r.self ? ' <span class="muted">(this one)</span>' : ""}</td>
      <td>${esc(r.host)}</td><td>${esc(r.pid)}</td><td>${age(r.heartbeatAge)}</td>
      <td>${esc((r.rms || []).join(", "))}</td></tr>`).join("")
    || `<tr><td colspan="5" class="muted">the broker reports no rmproxy</td></tr>`;
  document.querySelector("#workers-table tbody").innerHTML = s.workers.map((w) =>
    `<tr data-worker="${esc(w.name)}"><td>${esc(w.name)}</td><td>${esc(w.host)}</td><td>${esc(w.pid)}</td>
      <td>${w.partition ? esc(w.partition) : '<span class="muted">idle</span>'}</td>
      <td>${w.epoch === null || w.epoch === undefined ? "" : esc(w.epoch)}</td>
      <td>${age(w.heartbeatAge)}</td></tr>`).join("")
    || `<tr><td colspan="6" class="muted">no workers</td></tr>`;
  document.querySelector("#rms-table tbody").innerHTML = s.rms.map((r) =>
    `<tr data-rm="${esc(r.rmID)}"><td>${esc(r.rmID)}</td><td>${stateTag(r.state)}</td>
      <td>${r.proxy ? esc(r.proxy) : '<span class="muted">another rmproxy</span>'}</td>
      <td>${esc(r.partitions.join(", "))}</td><td>${esc(r.streams.join(", "))}</td></tr>`).join("")
    || `<tr><td colspan="5" class="muted">no RM registered</td></tr>`;
  document.querySelector("#resyncs-table tbody").innerHTML = s.resyncs.slice().reverse().map((r) =>
    `<tr><td>${esc(fmtTime(r.time))}</td><td>${esc(r.rmID)}</td><td>${esc(r.reason)}</td>
      <td>${r.durationSeconds === null ? "in progress" : esc(r.durationSeconds) + " s"}</td></tr>`).join("")
    || `<tr><td colspan="4" class="muted">none</td></tr>`;
}

// ------------------------------------------------------------------ refresh loop

async function refreshPartitions() {
  const parts = await getJSON("/ws/v1/partitions");
  state.partitions = parts;
  const sel = document.getElementById("partition");
  const key = (p) => `${p.rmID}|${p.name}`;
  const current = state.partition ? key(state.partition) : (parts[0] ? key(parts[0]) : null);
  sel.innerHTML = parts.map((p) => `<option value="${esc(key(p))}">[${esc(p.rmID)}] ${esc(p.name)}</option>`).join("");
  state.partition = parts.find((p) => key(p) === current) || parts[0] || null;
  if (state.partition) sel.value = key(state.partition);
  return parts;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const parts = await refreshPartitions();
    const base = partitionQuery();
    if (state.view === "overview") {
      renderPartitions(parts);
      renderHealth(await getJSON("/ws/v1/scheduler/healthcheck"));
    } else if (state.view === "queues") {
      const tree = base ? await getJSON(`${base}/queues${rmParam()}`) : null;
      document.getElementById("queue-tree").innerHTML = tree
        ? renderQueue(tree, state.partition.capacity.capacity || {}) : '<p class="muted">no partition</p>';
    } else if (state.view === "apps") {
      const kbase = base && base.replace("/ws/v1/", "/ws/v1/korral/");
      renderApps(kbase ? await getJSON(`${kbase}/applications${rmParam({ limit: APPS_SHOWN })}`)
        : { total: 0, items: [] });
      await renderWhy(base, kbase);
    } else if (state.view === "nodes") {
      const kbase = base && base.replace("/ws/v1/", "/ws/v1/korral/");
      if (kbase) {
        const [heat, nodes] = await Promise.all([getJSON(`${kbase}/heatmap${rmParam()}`),
          getJSON(`${base}/nodes${rmParam({ limit: NODES_LISTED })}`)]);
        renderNodes(heat, nodes);
      } else {
        renderNodes({ total: 0, items: [] }, []);
      }
    } else if (state.view === "trends") {
      const kbase = base && base.replace("/ws/v1/", "/ws/v1/korral/");
      if (kbase) renderTrends(await getJSON(`${kbase}/trends${rmParam()}`));
    } else if (state.view === "stack") {
      renderStack(await getJSON("/ws/v1/korral/processes"));
    }
    status.textContent = "updated " + new Date().toLocaleTimeString();
    status.className = "muted";
    document.body.dataset.loaded = state.view;
  } catch (e) {
    status.textContent = String(e.message || e);
    status.className = "error";
  }
}

function show(hash) {
  // "#apps/<application>" selects an application whose waiting asks are explained
  const [view, app] = hash.split("/");
  state.why = view === "apps" && app ? decodeURIComponent(app) : null;
  state.view = ["overview", "queues", "apps", "nodes", "trends", "stack"].includes(view) ? view : "overview";
  document.querySelectorAll(".view").forEach((v) => v.classList.toggle("active", v.id === `view-${state.view}`));
  document.querySelectorAll("#tabs a").forEach((a) => a.classList.toggle("active", a.dataset.view === state.view));
  refresh();
}

document.getElementById("partition").addEventListener("change", (e) => {
  const [rmID, name] = e.target.value.split("|");
  state.partition = state.partitions.find((p) => p.rmID === rmID && p.name === name) || null;
  refresh();
});
window.addEventListener("hashchange", () => show(location.hash.slice(1)));
show(location.hash.slice(1));
state.timer = setInterval(refresh, REFRESH_MS);
