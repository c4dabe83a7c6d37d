"""A script job's profile trace as the worker reads it: the rows its allocator wrote to the job's scratch dir,
untrusted, checked field by field and against what the device agent measured (Note [A profile is what the
agent measured] in workers.agent.agent), then turned into the job's memory curve."""
from __future__ import annotations

from typing import Any

from zico_allocator import TRACE_KINDS as ALLOCATOR_TRACE_KINDS

from workers.curves.capture import allocator_records_to_trace


def profiled_curve(dirs, job_id: int, warmup: int, device: str, meta: dict[str, Any],
                   held_peak_bytes: Any = None, iterations: int | None = None,
                   profile_s: float | None = None) -> dict[str, Any]:
    """The memory curve (DESIGN contract, source ``allocator-trace``) from the trace a script job's first
    iterations left in its scratch dir (workers.job.entry.PROFILE_TRACE), with ``held_peak_bytes`` (the bytes
    its pool held at most meanwhile, when known) stored in it for the one planning rule
    (``placement.gating.with_held_peak``, Note [One planning rule]). ``held_peak_bytes``, ``iterations`` and
    ``profile_s`` (seconds), when given, are the agent's measures the trace must not exceed
    (:func:`checked_trace_rows`). Raises ValueError saying why the trace is missing, claims more than was
    measured or holds no usable iteration."""
    import json
    from types import SimpleNamespace

    from placement.curves import CurveError
    from placement.gating import with_held_peak
    from zico_workloads.curves.trace import trace_curve

    from workers.job.entry import PROFILE_TRACE
    from workers.jobfiles import read_job_file

    held = held_peak_bytes if isinstance(held_peak_bytes, int) and held_peak_bytes > 0 else None
    try:
        rows = checked_trace_rows(json.loads(read_job_file(dirs.scratch_dir, PROFILE_TRACE),
                                             parse_constant=_no_constant),
                                  held, iterations, profile_s)
        records = [SimpleNamespace(kind=k, timestamp_s=t, job_allocated_bytes=a, delta_bytes=d, iteration=i,
                                   job=job_id) for k, t, a, d, i in rows]
        curve = trace_curve(allocator_records_to_trace(records, job_id), warmup=warmup, source="allocator-trace",
                            device=device if device == "cpu" else f"cuda:{device.partition(':')[2] or 0}",
                            meta=meta)
        if held is not None:
            curve = with_held_peak(curve, held)
    except (OSError, ValueError, TypeError, CurveError) as exc:
        raise ValueError(f"the script's profile trace is unusable: {type(exc).__name__}: {exc}") from None
    return curve.to_dict()


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number a trace may hold")


TRACE_KINDS = tuple(ALLOCATOR_TRACE_KINDS.values())  # the record kinds the allocator writes
TRACE_SPAN_SLACK_S = 1.0  # the job's allocator clock and the agent's are read at slightly different moments


def checked_trace_rows(rows: Any, held_peak_bytes: int | None = None, iterations: int | None = None,
                       profile_s: float | None = None) -> list[list]:
    """``rows`` (the decoded trace: a list of ``[kind, timestamp_s, job_allocated_bytes, delta_bytes,
    iteration]``), checked field by field and against what the agent measured (Note [A profile is what the
    agent measured] in workers.agent.agent): no allocated figure above ``held_peak_bytes`` (bytes), no more
    iterations started than ``iterations`` (+1: the one in flight), timestamps (seconds) spanning no more than
    ``profile_s`` (+ :data:`TRACE_SPAN_SLACK_S`). Returns ``rows``; raises ValueError naming the first row
    or figure that is wrong."""
    if not isinstance(rows, list):
        raise ValueError(f"the trace is a {type(rows).__name__}, not a list of rows")

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    starts, t_min, t_max = set(), None, None
    for n, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 5):
            raise ValueError(f"row {n} is not [kind, timestamp_s, allocated, delta, iteration]")
        kind, t, a, d, i = row
        if kind not in TRACE_KINDS:
            raise ValueError(f"row {n}: kind {kind!r:.40} is not a kind of the allocator's trace")
        if not (isinstance(t, (int, float)) and not isinstance(t, bool) and 0 <= t < 1e12):
            raise ValueError(f"row {n}: timestamp {t!r:.40} is not a number of seconds >= 0")
        if not (is_int(a) and a >= 0 and is_int(d) and is_int(i) and i >= -1):
            raise ValueError(f"row {n}: allocated, delta and iteration must be integers (allocated >= 0)")
        if held_peak_bytes is not None and a > held_peak_bytes:
            raise ValueError(f"row {n} claims {a} bytes allocated, more than the {held_peak_bytes} bytes the "
                             f"agent granted the job at most")
        if kind == "iteration_start":
            starts.add(i)
        t_min = t if t_min is None else min(t_min, t)
        t_max = t if t_max is None else max(t_max, t)
    if iterations is not None and len(starts) > iterations + 1:
        raise ValueError(f"the trace marks {len(starts)} iterations; the agent let {iterations} start")
    if profile_s is not None and t_min is not None and t_max - t_min > profile_s + TRACE_SPAN_SLACK_S:
        raise ValueError(f"the trace spans {t_max - t_min:.1f} s; the profile ran {profile_s:.1f} s")
    return rows
