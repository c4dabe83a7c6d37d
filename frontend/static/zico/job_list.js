// Jobs list: refreshes each row's status, progress, throughput and peak every 2 s without a reload.
(function () {
  "use strict";
  const Z = window.Zico;
  const me = document.getElementById("job-list-script");
  const rows = new Map(Array.from(document.querySelectorAll("tr[data-job]")).map(r => [r.dataset.job, r]));
  if (!rows.size) return;
  const ids = Array.from(rows.keys()).slice(0, 200).join(",");
  Z.poll(me.dataset.url, () => ({ ids }), d => {
    for (const s of d.jobs) {
      const r = rows.get(String(s.id));
      if (!r) continue;
      const badge = r.querySelector('[data-field="status"]');
      badge.textContent = s.status; badge.className = `badge badge-${s.status}`;
      const pct = Math.round(100 * (s.progress || 0));
      const bar = r.querySelector(".progress");
      bar.setAttribute("aria-valuenow", pct); bar.firstElementChild.style.width = `${pct}%`;
      r.querySelector('[data-field="iteration"]').textContent = `${s.iteration} / ${s.iterations ?? "?"} iterations`;
      r.querySelector('[data-field="throughput"]').textContent = s.iterations_per_s ? `${s.iterations_per_s.toFixed(2)} it/s` : "—";
      r.querySelector('[data-field="peak"]').textContent = Z.bytes(s.peak_allocated_bytes);
    }
  }, () => {}, 2000);
})();
