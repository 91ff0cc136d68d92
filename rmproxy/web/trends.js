// Korral dashboard, Trends view: the last hour of one partition from
// /ws/v1/korral/partition/{p}/trends, drawn with the vendored uPlot (ui/vendor/uplot).
// Charts are kept between refreshes (setData) and are in window.korralCharts by name
// ("rate", "pending", "queue:<path>"), so what is drawn can be read back.
"use strict";

const CHART_COLOURS = { rate: "#2f6fb2", pending: "#d08a12", used: "#2f6fb2", guaranteed: "#2c9c5a", max: "#c9372c" };
const CHART_HEIGHT = 200;
const QUEUE_CHARTS = 24; // queues charted at once (the endpoint sends at most 50)
const charts = {};
window.korralCharts = charts;

function axisValues(resource) {
  return (u, vals) => vals.map((v) => (resource ? fmtQty(resource, v) : String(v)));
}

// One chart in ``el``: made once, then only its data changes while its series stay the same.
function drawChart(name, el, title, series, data, resource) {
  const shape = JSON.stringify([title, series.map((s) => s.label)]);
  let c = charts[name];
  if (c && c.korralShape === shape && el.contains(c.root)) {
    c.setData(data);
    return c;
  }
  if (c) c.destroy();
  el.innerHTML = "";
  c = new uPlot({
    title, width: 600, height: CHART_HEIGHT, scales: { x: { time: true } },
    series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.stroke, width: 2, dash: s.dash, points: { show: false } }))],
    axes: [{}, { size: 70, values: axisValues(resource) }],
  }, data, el);
  c.korralShape = shape;
  charts[name] = c;
  return c;
}

function dropChart(name) {
  if (charts[name]) { charts[name].destroy(); delete charts[name]; }
}

function resourcesOf(doc) {
  const kinds = new Set();
  Object.values(doc.queues).forEach((q) => Object.keys(q).forEach((k) => kinds.add(k)));
  return [...kinds].sort();
}

function renderTrends(doc) {
  const meta = document.getElementById("trends-meta");
  const n = doc.times.length;
  meta.textContent = `${n} samples, one every ${doc.interval} s, of [${doc.rmID}] ${doc.partition}`;
  const rate = document.getElementById("chart-rate"), pending = document.getElementById("chart-pending");
  if (!n) {
    Object.keys(charts).forEach(dropChart);
    rate.innerHTML = `<p class="empty muted">no samples yet (one every ${esc(doc.interval)} s)</p>`;
    pending.innerHTML = "";
    document.getElementById("queue-charts").innerHTML = "";
    return;
  }
  drawChart("rate", rate, "Allocations per second",
    [{ label: "allocations/s", stroke: CHART_COLOURS.rate }], [doc.times, doc.allocationsPerSecond]);
  drawChart("pending", pending, "Pending asks",
    [{ label: "pending asks", stroke: CHART_COLOURS.pending }], [doc.times, doc.pendingAsks]);
  renderQueueCharts(doc);
}

function renderQueueCharts(doc) {
  const sel = document.getElementById("trend-resource");
  const kinds = resourcesOf(doc);
  const wanted = kinds.includes(sel.value) ? sel.value : (kinds.includes("memory") ? "memory" : kinds[0]);
  if (sel.dataset.kinds !== kinds.join(",")) {
    sel.innerHTML = kinds.map((k) => `<option>${esc(k)}</option>`).join("");
    sel.dataset.kinds = kinds.join(",");
  }
  sel.value = wanted || "";
  const paths = Object.keys(doc.queues).filter((p) => doc.queues[p][wanted]).slice(0, QUEUE_CHARTS);
  const box = document.getElementById("queue-charts");
  const names = paths.map((p) => "queue:" + p);
  if (box.dataset.names !== names.join("\n")) {
    Object.keys(charts).filter((k) => k.startsWith("queue:")).forEach(dropChart);
    box.innerHTML = paths.map((p) => `<div class="chart" data-queue-chart="${esc(p)}"></div>`).join("")
      || '<p class="muted">no queue uses this resource</p>';
    box.dataset.names = names.join("\n");
  }
  paths.forEach((p, i) => {
    const cols = doc.queues[p][wanted];
    drawChart(names[i], box.children[i], `${p} (${wanted})`, [
      { label: "used", stroke: CHART_COLOURS.used },
      { label: "guaranteed", stroke: CHART_COLOURS.guaranteed, dash: [8, 3] },
      { label: "max", stroke: CHART_COLOURS.max, dash: [3, 2] },
    ], [doc.times, cols.used, cols.guaranteed, cols.max], wanted);
  });
}

document.getElementById("trend-resource").addEventListener("change", () => refresh());
