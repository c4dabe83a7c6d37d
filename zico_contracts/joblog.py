"""A job's output lines: the capped Redis stream the device worker writes and the web side reads.

Key: :func:`log_stream_key` -> ``zico:job:<job id>:log`` (a Redis stream). One entry per line, with the
fields of :data:`FIELDS`, all strings (Redis stores strings)::

    t       unix seconds (a decimal number) when the line was read from the process
    stream  "stdout" | "stderr" | "system" (a note from the worker itself: "command exited with status 1")
    line    the text, UTF-8, without its newline; at most LINE_MAX_BYTES bytes (cut on a character boundary)
    cut     "1" when the line was cut (absent otherwise)

Writers append with :func:`append` (XADD ``MAXLEN ~ STREAM_MAXLEN`` per entry, then EXPIRE ``STREAM_TTL_S``),
so the stream holds about the last :data:`STREAM_MAXLEN` lines and disappears a week after the last one. A
reader pages with the entry ids (``XRANGE key (<id> +``); how many lines were trimmed away is XINFO STREAM's
``entries-added`` minus its ``length`` (Redis >= 7). When the job ends, the control consumer copies the stream
into the job's stored log on the web side (``zico.jobs.outputs.archive_log``) and deletes it: the worker
uploads no log of its own.

Standard library only: ``append`` takes any redis-py client (it calls ``pipeline``, ``xadd``, ``expire``).
"""
from __future__ import annotations

import time
from typing import Any, Iterable

PREFIX = "zico"  # as zico_contracts.keys.PREFIX
FIELDS = ("t", "stream", "line", "cut")
STREAMS = ("stdout", "stderr", "system")
STREAM_MAXLEN = 10_000  # lines kept in Redis (approximate trimming: a few more may stay)
STREAM_TTL_S = 7 * 24 * 3600
LINE_MAX_BYTES = 4096


def log_stream_key(job_id: int) -> str:
    """``zico:job:<job id>:log``. Raises ValueError for an id that is not a positive integer."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"job id: expected a positive integer, got {job_id!r}")
    return f"{PREFIX}:job:{job_id}:log"


def entry(line: str, stream: str = "stdout", t: float | None = None) -> dict[str, str]:
    """The stream entry for one output line (trailing ``\\r``/``\\n`` dropped, cut to LINE_MAX_BYTES).
    Raises ValueError for an unknown ``stream``."""
    if stream not in STREAMS:
        raise ValueError(f"stream: expected one of {STREAMS}, got {stream!r}")
    text = str(line).rstrip("\r\n")
    raw = text.encode("utf-8", "replace")
    fields = {"t": repr(float(time.time() if t is None else t)), "stream": stream}
    if len(raw) > LINE_MAX_BYTES:
        text = raw[:LINE_MAX_BYTES].decode("utf-8", "ignore")
        fields["cut"] = "1"
    fields["line"] = text
    return fields


def append(redis_client, job_id: int, entries: Iterable[dict[str, str]]) -> list[str]:
    """XADD each of ``entries`` (from :func:`entry`) to the job's stream in one pipeline, trimming to
    STREAM_MAXLEN, and refresh the key's expiry. Returns the new entry ids."""
    key = log_stream_key(job_id)
    pipe = redis_client.pipeline(transaction=False)
    n = 0
    for fields in entries:
        pipe.xadd(key, fields, maxlen=STREAM_MAXLEN, approximate=True)
        n += 1
    if not n:
        return []
    pipe.expire(key, STREAM_TTL_S)
    out = pipe.execute()[:n]
    return [i.decode() if isinstance(i, bytes) else i for i in out]


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def parse(entry_id: Any, fields: dict) -> dict[str, Any]:
    """One stream entry as ``{"id": str, "t": float | None, "stream": str, "line": str, "cut": bool}``;
    unknown streams read as "stdout", a missing or bad ``t`` as None (never raises)."""
    f = {_text(k): _text(v) for k, v in (fields or {}).items()}
    try:
        t = float(f.get("t", ""))
    except ValueError:
        t = None
    stream = f.get("stream")
    return {"id": _text(entry_id), "t": t, "stream": stream if stream in STREAMS else "stdout",
            "line": f.get("line", ""), "cut": f.get("cut") == "1"}
