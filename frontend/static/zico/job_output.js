// Job page, jobs with code: the command's output, polled from GET /api/jobs/{id}/logs/?after=<cursor> every
// 1.5 s (up to 1000 lines a poll) and appended as text (never as HTML: the lines are the job's).
// The page keeps the last MAX_LINES lines; polling stops once the log is `complete` (stored: nothing more comes).
// The platform's own lines (stream "system", which no job can write) read "[zico] ..." in their colour; a job's
// line that starts like one gets "[job] " before it (as `zico logs` shows them, zico_cli/follow.py render).
(function () {
  "use strict";
  const Z = window.Zico;
  const me = document.getElementById("job-output-script");
  const out = document.getElementById("job-output");
  const state = document.getElementById("output-state");
  const note = document.getElementById("output-note");
  const MAX_LINES = 2000;
  let cursor = null, lines = 0;

  function add(line) {
    const atBottom = out.scrollHeight - out.scrollTop - out.clientHeight < 8;
    const span = document.createElement("span");
    if (line.stream === "stderr") span.className = "err";
    let text = line.line;
    if (line.stream === "system") {
      span.className = "sys";
      text = "[zico] " + text;
    } else if (/^[\s\x00-\x1f\x7f]*(\x1b\[[0-9;?]*[A-Za-z][\s\x00-\x1f\x7f]*)*\[zico\]/.test(text)) {
      text = "[job] " + text;
    }
    span.textContent = text + "\n";
    out.appendChild(span);
    if (++lines > MAX_LINES) { out.removeChild(out.firstChild); lines--; }
    if (atBottom) out.scrollTop = out.scrollHeight;
  }

  const poller = Z.poll(me.dataset.url, () => (cursor ? { after: cursor, limit: 1000 } : { limit: 1000 }), d => {
    d.lines.forEach(add);
    cursor = d.cursor || cursor;
    if (d.note) { note.textContent = d.note; note.hidden = false; }
    const j = d.job;
    const done = j.iterations ? `${j.iteration}/${j.iterations}` : `${j.iteration}`;
    state.textContent = (d.complete ? "Ended" : d.live_ok ? "Live" : "Live output unavailable") +
      ` · ${j.status} · iteration ${done}`;
    if (d.complete) poller.stop();
  }, ok => { if (!ok) state.textContent = "Server unreachable"; }, 1500);
})();
