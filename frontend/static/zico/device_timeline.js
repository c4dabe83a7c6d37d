// Device timeline page: polls the device's timeline JSON once a second (cursor + last event id), keeps
// per-job bands, pool and events for the chosen time range, and redraws the stacked chart, its legend
// (a list on the page: Budget and Pool first, then one entry per job id) and the summary.
(function () {
  "use strict";
  const Z = window.Zico;
  const me = document.getElementById("device-script");
  const chart = Z.charts.deviceTimeline(document.getElementById("device-chart"));
  let windowS = Number(me.dataset.window), cursor = "", sinceEvent = 0, liveOk = true, received = 0;
  let state = null;

  function trim(list, from) { return list.length && list[0][0] < from ? list.filter(p => p[0] >= from) : list; }

  function onData(d) {
    if (d.window !== windowS) return;  // an answer for the time range the user just left
    const fresh = cursor === "" || state === null;
    if (fresh) {
      state = { device: d.device, jobs: d.jobs, series: d.series, pool: d.pool, events: d.events };
    } else {
      Object.assign(state.jobs, d.jobs);
      for (const [id, pts] of Object.entries(d.series)) state.series[id] = (state.series[id] || []).concat(pts);
      state.pool = state.pool.concat(d.pool);
      // a marker with a group (an "OOM prevented" minute) replaces the one of that group already shown
      const groups = new Set(d.events.filter(e => e.group).map(e => e.group));
      state.events = state.events.filter(e => !e.group || !groups.has(e.group)).concat(d.events);
      state.device = d.device;
    }
    received += Object.values(d.series).reduce((n, s) => n + s.length, 0) + d.pool.length;
    const from = Date.now() / 1000 - windowS - 5;
    for (const id of Object.keys(state.series)) state.series[id] = trim(state.series[id], from);
    state.pool = trim(state.pool, from);
    state.events = state.events.filter(e => e.t >= from);
    cursor = d.live.cursor || "";
    if (d.events.length) sinceEvent = d.events[d.events.length - 1].id;
    liveOk = d.live.ok;
    renderLegend(chart.set(state, windowS));
    // the peak and the budget in force at that second (a budget changed in the window is not the peak's)
    const top = state.pool.reduce((m, p) => (p[2] || 0) > (m ? m[2] || 0 : 0) ? p : m, null);
    const peak = top ? top[2] : 0;
    const last = state.pool[state.pool.length - 1];
    const budget = last && last[3] ? last[3] : state.device.budget_bytes;
    const peakBudget = top && top[3] ? top[3] : budget;
    Z.fillSummary(document.getElementById("device-summary"), {
      peak_bytes: peak || null, peak_budget_bytes: peak ? peakBudget : null,
      peak_over_budget: peak ? (peak > peakBudget ? "yes: " + Z.bytes(peak - peakBudget) + " past it" : "no") : null,
      budget_bytes: budget, current_allocated_bytes: last ? last[1] : null,
      current_reserved_bytes: last ? last[2] : null,
      jobs: Object.keys(state.series).filter(id => state.series[id].length).length, samples: received,
    });
    renderEvents();
  }

  // The legend: one button per series, keyed by series id (so two jobs of one name keep two entries);
  // Budget and Pool reserved lead and never scroll away. A click shows or hides that series.
  const legend = document.getElementById("device-legend");
  const hidden = new Set();
  let legendKey = "";
  function renderLegend(entries) {
    const order = ["budget", "reserved", "delays", "oom"];
    entries.sort((a, b) => {
      const ia = order.indexOf(a.id), ib = order.indexOf(b.id);
      if (ia >= 0 || ib >= 0) return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
      return Number(a.id.slice(4)) - Number(b.id.slice(4));
    });
    const key = entries.map(e => `${e.id}:${e.name}`).join("|");
    if (key === legendKey) return;
    legendKey = key;
    legend.innerHTML = "";
    for (const e of entries) {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button"; b.dataset.series = e.id; b.setAttribute("aria-pressed", String(!hidden.has(e.name)));
      const sw = document.createElement("i"); sw.className = "swatch"; sw.style.background = e.color;
      const label = document.createElement("span"); label.textContent = e.name;
      b.append(sw, label);
      b.addEventListener("click", () => {
        if (hidden.has(e.name)) hidden.delete(e.name); else hidden.add(e.name);
        b.setAttribute("aria-pressed", String(!hidden.has(e.name)));
        chart.chart.dispatchAction({ type: hidden.has(e.name) ? "legendUnSelect" : "legendSelect", name: e.name });
      });
      li.append(b); legend.append(li);
    }
  }

  function renderEvents() {
    const ol = document.getElementById("event-log");
    ol.innerHTML = "";
    const evs = state.events.slice().sort((a, b) => b.t - a.t).slice(0, 50);
    if (!evs.length) { ol.innerHTML = '<li class="muted">No events in this range.</li>'; return; }
    for (const e of evs) {
      const li = document.createElement("li");
      const t = document.createElement("time"); t.textContent = Z.clock(e.t * 1000);
      const k = document.createElement("span"); k.className = "log-kind"; k.textContent = e.kind.replaceAll("_", " ");
      k.style.color = Z.charts.EVENT_COLORS[e.kind] || "";
      const l = document.createElement("span"); l.textContent = e.label;
      li.append(t, k, l); ol.append(li);
    }
  }

  const poller = Z.poll(me.dataset.url, () => ({ window: windowS, cursor, since_event: cursor ? sinceEvent : 0 }),
                        onData, ok => Z.showLive(liveOk, ok));
  document.querySelectorAll("#range button").forEach(b => b.addEventListener("click", () => {
    document.querySelectorAll("#range button").forEach(x => x.setAttribute("aria-pressed", String(x === b)));
    windowS = Number(b.dataset.window); cursor = ""; sinceEvent = 0; state = null; received = 0; poller.now();
  }));
})();
