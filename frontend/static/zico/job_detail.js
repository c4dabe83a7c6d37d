// Job detail page: draws the memory curve, then polls the job's memory JSON once a second and keeps
// the live chart, its text summary, the status badge, the waiting reason and the progress figures up to date.
(function () {
  "use strict";
  const Z = window.Zico;
  const me = document.getElementById("job-detail-script");
  const budget = me.dataset.budget ? Number(me.dataset.budget) : null;
  const curveEl = document.getElementById("curve-data");
  if (curveEl) Z.charts.memoryCurve(document.getElementById("curve-chart"), JSON.parse(curveEl.textContent), budget);

  const chart = Z.charts.jobMemory(document.getElementById("job-chart"), budget);
  const windowSel = document.getElementById("window");
  let points = [], cursor = "", windowS = Number(windowSel.value), liveOk = true;

  function onData(d) {
    if (d.window !== windowS) return;  // an answer for the time range the user just left
    if (d.points && cursor === "") points = d.points; else points = points.concat(d.points);
    const from = Date.now() / 1000 - windowS;
    if (points.length && points[0][0] < from - 5) points = points.filter(p => p[0] >= from - 5);
    cursor = d.live.cursor || "";
    liveOk = d.live.ok;
    chart.set(points, windowS);
    const peak = points.reduce((m, p) => Math.max(m, p[2] || 0), d.summary.peak_bytes || 0);
    const last = points[points.length - 1];
    Z.fillSummary(document.getElementById("job-summary"), {
      peak_bytes: peak || null, budget_bytes: budget,
      current_allocated_bytes: last ? last[1] : null, current_reserved_bytes: last ? last[2] : null,
      iteration: last && last[3] !== null && last[3] !== undefined ? last[3] : d.job.iteration,  // live first
    });
    const s = d.job, badge = document.getElementById("job-status");
    badge.textContent = s.status; badge.className = `badge badge-${s.status}`;
    const waiting = document.getElementById("job-waiting");  // the scheduler's reason; gone once placed
    document.getElementById("job-waiting-reason").textContent = s.waiting_reason || "";
    waiting.hidden = !s.waiting_reason;
    document.getElementById("stat-progress").innerHTML = `${s.iteration} <span class="muted">/ ${s.iterations ?? "?"}</span>`;
    document.getElementById("progress-bar").style.width = `${Math.round(100 * (s.progress || 0))}%`;
    if (s.iterations_per_s) document.getElementById("stat-throughput").innerHTML = `${s.iterations_per_s.toFixed(2)} <span class="muted">it/s</span>`;
    if (peak) document.getElementById("stat-peak").textContent = Z.bytes(peak);
  }

  const poller = Z.poll(me.dataset.url, () => ({ window: windowS, cursor }), onData, ok => Z.showLive(liveOk, ok));
  windowSel.addEventListener("change", () => { windowS = Number(windowSel.value); cursor = ""; points = []; poller.now(); });
})();
