// Job detail page: polls the job's memory JSON once a second for the live chart and its summary, and the
// job's panels (head, stats, curve, plan, log: server-rendered HTML) every 2 s, replacing each panel
// whose HTML changed and drawing the memory curve once it exists. The chart's default range is the job's
// own span (submitted .. finished, or .. now while it runs).
(function () {
  "use strict";
  const Z = window.Zico;
  const me = document.getElementById("job-detail-script");
  const budget = me.dataset.budget ? Number(me.dataset.budget) : null;
  const curveChartEl = document.getElementById("curve-chart");
  let curveChart = null, profileId = null;

  function drawCurve(curve, id) {
    if (!curve || id === profileId) return;
    profileId = id;
    curveChartEl.hidden = false;
    if (curveChart) curveChart.dispose();
    curveChart = Z.charts.memoryCurve(curveChartEl, curve, budget);
  }
  const curveEl = document.getElementById("curve-data");
  if (curveEl) drawCurve(JSON.parse(curveEl.textContent), Number(me.dataset.profile));

  const chart = Z.charts.jobMemory(document.getElementById("job-chart"), budget);
  const windowSel = document.getElementById("window");
  let points = [], cursor = "", windowV = windowSel.value, liveOk = true, range = null, finished = false;

  function onData(d) {
    if (String(d.window) !== windowV) return;  // an answer for the time range the user just left
    if (cursor === "") points = d.points; else points = points.concat(d.points);
    cursor = d.live.cursor || "";
    liveOk = d.live.ok;
    finished = d.job.span.finished !== null;
    const nowS = Date.now() / 1000;
    // the job's span grows with the clock while it has not finished; a fixed window slides
    range = windowV === "job" ? [d.range[0], finished ? d.range[1] : Math.max(d.range[1], nowS)]
                              : [nowS - Number(windowV), nowS];
    if (points.length && points[0][0] < range[0] - 5) points = points.filter(p => p[0] >= range[0] - 5);
    chart.set(points, range);
    const peakA = points.reduce((m, p) => Math.max(m, p[1] || 0), d.summary.peak_allocated_bytes || 0);
    const peakR = points.reduce((m, p) => Math.max(m, p[2] || 0), d.summary.peak_reserved_bytes || 0);
    const last = points[points.length - 1];
    const running = d.job.status === "running";
    Z.fillSummary(document.getElementById("job-summary"), {
      peak_allocated_bytes: peakA || null, peak_reserved_bytes: peakR || null, budget_bytes: budget,
      current_allocated_bytes: running && last ? last[1] : null, current_reserved_bytes: running && last ? last[2] : null,
      // live while it runs; otherwise the stored figure (a finished job's last sample can be iterations behind)
      iteration: running && last && last[3] !== null && last[3] !== undefined ? last[3] : d.job.iteration,
    });
  }

  const poller = Z.poll(me.dataset.url, () => ({ window: windowV, cursor }), onData, ok => Z.showLive(liveOk, ok));
  windowSel.addEventListener("change", () => { windowV = windowSel.value; cursor = ""; points = []; poller.now(); });

  // Panels: replace a panel only when its HTML changed (keeps focus and selection otherwise). Once the job
  // has ended and a poll changed nothing, polling stops: nothing more will happen to it.
  const shown = {};
  document.querySelectorAll("[data-panel]").forEach(el => { shown[el.dataset.panel] = null; });
  const panels = Z.poll(me.dataset.panelsUrl, () => ({}), d => {
    let changed = false;
    for (const [name, html] of Object.entries(d.html)) {
      const el = document.getElementById(`panel-${name}`);
      if (!el || shown[name] === html) continue;
      el.innerHTML = html;
      changed = changed || shown[name] !== null;  // the first answer replaces the page's own render
      shown[name] = html;
    }
    drawCurve(d.curve, d.profile);
    const ended = ["succeeded", "failed", "cancelled"].includes(d.job.status);
    if (ended && !changed && finished) panels.stop();
  }, () => {}, 2000);
})();
