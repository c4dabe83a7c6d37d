// Job page: one chart per metric the job reports (zico.log; a catalog workload's loss and accuracy), fed from
// GET /data/jobs/{id}/metrics.json?after=<cursor> every 2 s (at once while `more`), each chart titled with its
// latest value. Up to MAX_CHARTS charts, in the order the names first appear; the others are named below them.
// Polling stops once the job has ended and every stored value has arrived.
(function () {
  "use strict";
  const Z = window.Zico;
  const me = document.getElementById("job-metrics-script");
  const grid = document.getElementById("metric-charts");
  const empty = document.getElementById("metrics-empty");
  const more = document.getElementById("metrics-more");
  const MAX_CHARTS = 12, PALETTE = ["#6366f1", "#14b8a6", "#f59e0b", "#ec4899", "#0ea5e9", "#84cc16"];
  const shown = new Map();  // name -> {chart, points, latest}
  const uncharted = new Set();
  let cursor = 0;

  function add(name) {
    const fig = document.createElement("figure");
    fig.className = "metric";
    fig.dataset.metric = name;
    const cap = document.createElement("figcaption");
    const title = document.createElement("span");
    title.className = "mono";
    title.textContent = name;
    const latest = document.createElement("span");
    latest.className = "muted metric-latest";
    cap.append(title, " ", latest);
    const el = document.createElement("div");
    el.className = "chart chart-xs";
    el.setAttribute("role", "img");
    el.setAttribute("aria-label", `${name} reported by the job, over its iterations`);
    fig.append(cap, el);
    grid.appendChild(fig);
    const entry = { chart: Z.charts.metric(el, name, PALETTE[shown.size % PALETTE.length]), points: [], latest };
    shown.set(name, entry);
    return entry;
  }

  const poller = Z.poll(me.dataset.url, () => ({ after: cursor }), d => {
    cursor = d.cursor;
    for (const [name, points] of Object.entries(d.series)) {
      let entry = shown.get(name);
      if (!entry && shown.size >= MAX_CHARTS) { uncharted.add(name); continue; }
      entry = entry || add(name);
      entry.points = entry.points.concat(points);
      const last = entry.points[entry.points.length - 1];
      entry.latest.textContent = `${Z.charts.num(last[2])} at iteration ${last[1]}`;
      entry.chart.set(entry.points);
    }
    empty.hidden = shown.size > 0;
    if (uncharted.size) {
      more.hidden = false;
      more.textContent = `Not charted (the first ${MAX_CHARTS} names are): ${Array.from(uncharted).join(", ")}`;
    }
    if (d.more) setTimeout(() => poller.now(), 0);  // after this answer's own next poll is set
    else if (d.job.finished) poller.stop();
  }, () => {}, 2000);
})();
