// Chart helpers on Apache ECharts: the shared look (palette, axes, tooltips) and the four charts
// (a job's memory over time, a job's memory curve, a device's stacked per-job timeline, one of a job's metrics).
(function () {
  "use strict";
  const Z = window.Zico;
  const PALETTE = ["#6366f1", "#14b8a6", "#f59e0b", "#ec4899", "#0ea5e9", "#84cc16", "#a855f7", "#ef4444", "#64748b"];
  const AXIS = { axisLine: { lineStyle: { color: "#cfd4e0" } }, axisLabel: { color: "#5f6b82", fontSize: 11 },
                 splitLine: { lineStyle: { color: "#eef0f6" } } };
  const EVENT_COLORS = { placement: "#4f46e5", delay: "#f59e0b", budget_change: "#dc2626", oom_prevented: "#db2777",
                         worker_lost: "#64748b" };

  function base(el) {
    const chart = echarts.init(el, null, { renderer: "canvas" });
    window.addEventListener("resize", () => chart.resize());
    return chart;
  }

  // Charts plot memory in one binary unit chosen from the largest value, so the axis gets round ticks
  // (0, 20, 40 GiB) instead of decimal fractions of 2^30.
  const UNITS = [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10], ["B", 1]];
  function unitFor(maxBytes) {
    for (const [name, div] of UNITS) if (maxBytes >= div) return { name, div };
    return { name: "GiB", div: 2 ** 30 };
  }

  // Every axis is named with its unit (issue 16): memory in the chart's binary unit, time as local clock time.
  const AXIS_NAME = { color: "#5f6b82", fontSize: 11 };
  function bytesAxis(unit) {
    return Object.assign({ type: "value", min: 0, name: `memory (${unit.name})`, nameTextStyle: AXIS_NAME,
      nameLocation: "end", nameGap: 10, axisLabel: { color: "#5f6b82", fontSize: 11,
      formatter: v => `${+v.toFixed(2)} ${unit.name}` } }, { axisLine: AXIS.axisLine, splitLine: AXIS.splitLine });
  }

  function timeAxis() {
    return Object.assign({ type: "time", name: "time (local, h:min:s)", nameLocation: "middle", nameGap: 26,
      nameTextStyle: AXIS_NAME, axisLabel: { color: "#5f6b82", fontSize: 11, hideOverlap: true,
      formatter: v => Z.clock(v) } }, { axisLine: AXIS.axisLine, splitLine: { show: false } });
  }

  // A job's colour depends only on its id (golden-angle hues), so it is the same in every time range and
  // on every page, and 20 jobs get 20 distinguishable colours.
  function jobColor(id) {
    const hue = (Number(id) * 137.508) % 360;
    return `hsl(${hue.toFixed(1)}, 62%, 52%)`;
  }

  function tooltip(unit) {
    return { trigger: "axis", backgroundColor: "rgba(15,23,42,.92)", borderWidth: 0, textStyle: { color: "#f8fafc", fontSize: 12 },
      valueFormatter: v => (v === null || v === undefined ? "—" : `${v.toFixed(2)} ${unit.name}`),
      axisPointer: { type: "line", lineStyle: { color: "#94a3b8" } } };
  }

  // A quiet note in the middle of an empty chart.
  function emptyNote(isEmpty) {
    return { graphic: [{ id: "empty", type: "text", left: "center", top: "middle", silent: true, invisible: !isEmpty,
      style: { text: "No memory samples in this range yet", fill: "#8a94a8", fontSize: 13 } }] };
  }

  function budgetLine(budget, unit) {
    if (!budget) return undefined;
    return { silent: true, symbol: "none", data: [{ yAxis: budget / unit.div }],
      lineStyle: { color: "#dc2626", type: "dashed", width: 1.5 },
      label: { formatter: `budget ${Z.bytes(budget)}`, position: "insideEndTop", color: "#dc2626", fontSize: 11 } };
  }

  // A job's allocated and reserved bytes over time; `points` are [t_s, allocated, reserved, iteration].
  function jobMemory(el, budget) {
    const chart = base(el);
    let unit = unitFor(budget || 0);
    chart.setOption({
      color: ["#6366f1", "#0f766e", "#94a3b8"], animation: false,
      grid: { left: 70, right: 20, top: 44, bottom: 76 },
      legend: { top: 0, left: 0, icon: "roundRect", itemWidth: 12, itemHeight: 8, textStyle: { color: "#334155" } },
      tooltip: tooltip(unit), xAxis: timeAxis(), yAxis: bytesAxis(unit),
      dataZoom: [{ type: "inside" }, { type: "slider", height: 18, bottom: 6, borderColor: "#e4e7ef", showDetail: false }],
      series: [
        { name: "Allocated", type: "line", showSymbol: false, sampling: "lttb", lineStyle: { width: 1.6 },
          areaStyle: { color: new echarts.graphic.LinearGradient(0, 0, 0, 1, [{ offset: 0, color: "rgba(99,102,241,.32)" }, { offset: 1, color: "rgba(99,102,241,.03)" }]) },
          data: [], markLine: budgetLine(budget, unit) },
        { name: "Reserved by this job", type: "line", step: "end", showSymbol: false, lineStyle: { width: 1, opacity: 0.8 }, data: [] },
        { name: "Iteration start", type: "scatter", symbol: "triangle", symbolSize: 7, itemStyle: { color: "#94a3b8" },
          tooltip: { valueFormatter: null, formatter: p => `iteration ${p.data[2]}<br>${Z.clock(p.data[0])}` }, data: [] },
      ],
    });
    return {
      chart,
      // `range` is [from_s, to_s] (the job's own span, or the last N seconds).
      set(points, range) {
        const from = range[0] * 1000, now = range[1] * 1000;
        const pts = points.filter(p => p[0] * 1000 >= from);
        unit = unitFor(Math.max(budget || 0, ...pts.map(p => p[2] || p[1] || 0)));
        const d = unit.div, marks = [];
        for (let i = 1; i < pts.length; i++) {
          // iteration starts sit on the time axis as a row of ticks
          if (pts[i][3] !== null && pts[i][3] !== pts[i - 1][3]) marks.push([pts[i][0] * 1000, 0, pts[i][3]]);
        }
        chart.setOption(Object.assign({
          tooltip: tooltip(unit), yAxis: bytesAxis(unit), xAxis: { min: from, max: now },
          series: [{ data: pts.map(p => [p[0] * 1000, p[1] / d]), markLine: budgetLine(budget, unit) },
                   { data: pts.map(p => [p[0] * 1000, p[2] / d]) }, { data: marks.slice(-300) }],
        }, emptyNote(pts.length === 0)));
      },
    };
  }

  // The DESIGN contract's memory curve: points [fraction, bytes] over one iteration of iteration_s seconds.
  function memoryCurve(el, curve, budget) {
    const chart = base(el);
    const T = curve.iteration_s, unit = unitFor(Math.max(curve.peak_bytes, budget || 0)), d = unit.div;
    chart.setOption({
      color: ["#6366f1"], animation: false, grid: { left: 70, right: 20, top: 30, bottom: 44 },
      tooltip: Object.assign(tooltip(unit), { axisPointer: { type: "cross" } }),
      xAxis: { type: "value", min: 0, max: T, name: "time into the iteration (s)", nameLocation: "middle", nameGap: 24,
               nameTextStyle: AXIS_NAME, axisLabel: { color: "#5f6b82", fontSize: 11,
               formatter: v => v.toFixed(T < 1 ? 2 : 1) }, axisLine: AXIS.axisLine, splitLine: { show: false } },
      yAxis: bytesAxis(unit),
      series: [{ name: "Held", type: "line", step: "start", showSymbol: false, lineStyle: { width: 1.6 },
        areaStyle: { color: "rgba(99,102,241,.15)" }, data: curve.points.map(p => [p[0] * T, p[1] / d]),
        markLine: { silent: true, symbol: "none", data: [
          { yAxis: curve.persistent_bytes / d, lineStyle: { color: "#64748b", type: "dotted" }, label: { formatter: "persistent", position: "insideStartTop", color: "#64748b", fontSize: 11 } },
          ...(budget ? [{ yAxis: budget / d, lineStyle: { color: "#dc2626", type: "dashed" }, label: { formatter: "budget", position: "insideEndTop", color: "#dc2626", fontSize: 11 } }] : []),
        ] } }],
    });
    return chart;
  }

  // A device's memory: one stacked band per job (allocated at the device's peak instant of each second, so
  // the bands never sum above the pool), the pool's reserved bytes, the budget line and event markers.
  // ECharts stacks by data index, so every band is laid on the same time grid. Series are named
  // "#<id> <label>" (two jobs of one name keep two legend entries); the legend is the page's own list
  // (device_timeline.js), so "Pool reserved" and "Budget" are never paged away by many jobs.
  function jobSeriesName(id, job) { return `#${id} ${(job && job.label) || "job"}`; }

  function deviceTimeline(el) {
    const chart = base(el);
    chart.setOption({
      animation: false, grid: { left: 76, right: 24, top: 30, bottom: 76 },
      legend: { show: false },
      tooltip: tooltip(unitFor(0)), xAxis: timeAxis(), yAxis: bytesAxis(unitFor(0)),
      dataZoom: [{ type: "inside" }, { type: "slider", height: 18, bottom: 6, borderColor: "#e4e7ef", showDetail: false }],
      series: [],
    });
    return {
      chart,
      set(state, windowS) {
        const now = Date.now(), from = now - windowS * 1000;
        const ids = Object.keys(state.series).sort((a, b) => Number(a) - Number(b));
        const grid = new Set();
        ids.forEach(id => state.series[id].forEach(p => { if (p[0] * 1000 >= from) grid.add(p[0]); }));
        const times = Array.from(grid).sort((a, b) => a - b);
        const pool = state.pool.filter(p => p[0] * 1000 >= from);
        const unit = unitFor(Math.max(state.device.budget_bytes || 0, ...pool.map(p => Math.max(p[2] || 0, p[3] || 0))));
        const d = unit.div;
        const series = ids.map(id => {
          const m = new Map(state.series[id].map(p => [p[0], p[1]]));
          return { id: `job-${id}`, name: jobSeriesName(id, state.jobs[id]), type: "line", stack: "jobs", showSymbol: false,
            step: "end", lineStyle: { width: 0.8 }, color: jobColor(id), emphasis: { focus: "series" },
            areaStyle: { opacity: 0.55 }, data: times.map(t => [t * 1000, (m.get(t) ?? 0) / d]) };
        });
        const budgetPts = pool.filter(p => p[3] !== null && p[3] !== undefined).map(p => [p[0] * 1000, p[3] / d]);
        const b = state.device.budget_bytes / d;
        const budgetData = budgetPts.length ? budgetPts : [[from, b], [now, b]];
        const events = state.events.filter(e => e.t * 1000 >= from);
        series.push({ id: "reserved", name: "Pool reserved", type: "line", step: "end", showSymbol: false, color: "#334155",
          lineStyle: { width: 1, opacity: 0.75 }, data: pool.map(p => [p[0] * 1000, p[2] / d]) });
        // Delays come every iteration and "OOM prevented" (one marker per job and minute) many times a minute
        // under load: ticks in a strip along the time axis, not lines across the plot.
        const STRIP = new Set(["delay", "oom_prevented"]);
        series.push({ id: "delays", name: "Delays", type: "scatter", symbol: "rect", symbolSize: [2, 8],
          itemStyle: { color: EVENT_COLORS.delay, opacity: 0.8 }, tooltip: { formatter: p => p.data[2] },
          data: events.filter(e => e.kind === "delay").slice(-600).map(e => [e.t * 1000, 0, e.label]) });
        series.push({ id: "oom", name: "OOM prevented", type: "scatter", symbol: "diamond", symbolSize: 8,
          itemStyle: { color: EVENT_COLORS.oom_prevented, opacity: 0.9 }, tooltip: { formatter: p => p.data[2] },
          data: events.filter(e => e.kind === "oom_prevented").slice(-600).map(e => [e.t * 1000, 0, e.label]) });
        series.push({ id: "budget", name: "Budget", type: "line", step: "end", showSymbol: false, color: "#dc2626",
          lineStyle: { width: 1.8 }, data: budgetData,
          markLine: { symbol: ["none", "none"], animation: false, label: { show: false },
            emphasis: { label: { show: true, formatter: p => p.name, color: "#0f172a", fontSize: 11 } },
            data: events.filter(e => !STRIP.has(e.kind)).slice(-200).map(e => ({
              name: e.label, xAxis: e.t * 1000, lineStyle: { color: EVENT_COLORS[e.kind] || "#64748b", type: [4, 3], width: 1, opacity: 0.55 } })) } });
        chart.setOption(Object.assign({ tooltip: tooltip(unit), yAxis: bytesAxis(unit), xAxis: { min: from, max: now },
                                        series }, emptyNote(times.length === 0 && pool.length === 0)),
                        { replaceMerge: ["series"] });
        return series.map(x => ({ id: x.id, name: x.name, color: x.color || (x.itemStyle && x.itemStyle.color) }));
      },
    };
  }

  // Compact numbers for a metric's axis and tooltip: 0.0123, 1.23e-5, 12.3k.
  function num(v) {
    if (v === null || v === undefined) return "—";
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    if (a >= 1e4) return `${+(v / 1e3).toFixed(1)}k`;
    return `${+v.toPrecision(4)}`;
  }

  // One of a job's own metrics (zico.log); `points` are [t_s, iteration, value]. The x axis is the job's
  // iterations (optimizer steps) once they advance within the series, else the clock (a script that never
  // steps, or a single value).
  function metric(el, name, color) {
    const chart = base(el);
    chart.setOption({
      color: [color], animation: false, grid: { left: 58, right: 16, top: 16, bottom: 40 },
      tooltip: { trigger: "axis", backgroundColor: "rgba(15,23,42,.92)", borderWidth: 0,
                 textStyle: { color: "#f8fafc", fontSize: 12 }, valueFormatter: num },
      xAxis: { type: "value" }, yAxis: Object.assign({ type: "value", scale: true,
        axisLabel: { color: "#5f6b82", fontSize: 11, formatter: num } }, { axisLine: AXIS.axisLine, splitLine: AXIS.splitLine }),
      series: [{ name, type: "line", showSymbol: false, symbolSize: 5, sampling: "lttb", lineStyle: { width: 1.6 }, data: [] }],
    });
    return {
      chart,
      set(points) {
        const bySteps = points.length > 1 && points[points.length - 1][1] > points[0][1];
        const xAxis = bySteps
          ? Object.assign({ type: "value", min: "dataMin", max: "dataMax", name: "iteration", nameLocation: "middle", nameGap: 24,
              nameTextStyle: AXIS_NAME, axisLabel: { color: "#5f6b82", fontSize: 11, hideOverlap: true } },
              { axisLine: AXIS.axisLine, splitLine: { show: false } })
          : Object.assign(timeAxis(), { min: "dataMin", max: "dataMax" });
        chart.setOption({ xAxis, series: [{ showSymbol: points.length < 60,
          data: points.map(p => (bySteps ? [p[1], p[2]] : [p[0] * 1000, p[2]])) }] });
      },
    };
  }

  Z.charts = { jobMemory, memoryCurve, deviceTimeline, metric, num, jobColor, jobSeriesName, EVENT_COLORS };
})();
