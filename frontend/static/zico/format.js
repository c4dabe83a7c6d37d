// Shared helpers of the pages: number formatting (bytes, seconds) and the 1 s JSON poller
// (see Note [Live updates by polling] in platform/zico/web/live.py).
(function () {
  "use strict";
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

  // bytes -> "1.50 GiB" (binary units, as torch.cuda and nvidia-smi report); "—" for null.
  function bytes(n) {
    if (n === null || n === undefined || Number.isNaN(n)) return "—";
    let i = 0, v = Number(n);
    while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
    return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(2)} ${UNITS[i]}`;
  }

  function clock(ms) {
    const d = new Date(ms);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  // Poll `url` with `params()` every `periodMs`, one request at a time. `onData(json)` gets each answer;
  // `onState(ok)` hears whether the server answered. A 401 (signed out) sends the page to sign-in.
  // An answer with an ETag is revalidated: the next request sends it in If-None-Match, and a 304 (nothing
  // changed) calls onState(true) without onData (Note [Job list ETag] in platform/zico/api/conditional.py).
  function poll(url, params, onData, onState, periodMs = 1000) {
    let timer = null, stopped = false, etag = null, lastQuery = null;
    async function tick() {
      try {
        const q = String(new URLSearchParams(params()));
        if (q !== lastQuery) { etag = null; lastQuery = q; }
        const headers = { Accept: "application/json" };
        if (etag) headers["If-None-Match"] = etag;
        const r = await fetch(`${url}?${q}`, { headers, credentials: "same-origin", cache: "no-store" });
        if (r.status === 401) { window.location = "/login/?next=" + encodeURIComponent(location.pathname); return; }
        if (r.status === 304) {
          onState(true);
        } else {
          if (!r.ok) throw new Error(`HTTP ${r.status}`);
          const data = await r.json();
          etag = r.headers.get("ETag");
          onData(data);
          onState(true);
        }
      } catch (e) {
        onState(false, e);
      }
      if (!stopped) timer = setTimeout(tick, periodMs);
    }
    tick();
    return { stop() { stopped = true; clearTimeout(timer); }, now() { clearTimeout(timer); tick(); } };
  }

  // Show the live indicator and the "Redis down" notice from a response's `live.ok`.
  function showLive(ok, serverOk) {
    const state = document.getElementById("live-state");
    const notice = document.getElementById("live-notice");
    if (state) {
      state.classList.toggle("on", ok && serverOk);
      state.classList.toggle("off", !(ok && serverOk));
      state.textContent = !serverOk ? "Server unreachable" : ok ? "Live" : "Stored data only";
    }
    if (notice) notice.hidden = ok || !serverOk;
  }

  function fillSummary(el, summary, extra) {
    if (!el) return;
    const all = Object.assign({}, summary, extra || {});
    el.querySelectorAll("dd[data-k]").forEach(dd => {
      const k = dd.dataset.k;
      if (!(k in all)) return;
      const v = all[k];
      dd.textContent = k.endsWith("_bytes") ? bytes(v) : (v === null || v === undefined ? "—" : String(v));
    });
  }

  window.Zico = Object.assign(window.Zico || {}, { bytes, clock, poll, showLive, fillSummary });
})();
