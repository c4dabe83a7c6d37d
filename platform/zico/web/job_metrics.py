"""A job's own metrics (``zico.log`` figures, a catalog workload's loss) for the charts on its page: the stored
:class:`zico.telemetry.models.MetricPoint` rows, newest after a cursor, grouped by name."""
from __future__ import annotations

from typing import Any

from zico.jobs.models import Job
from zico.telemetry.models import MetricPoint

MAX_ROWS = 20_000  # per answer; the page asks again at once when ``more`` is true


def parse_after(raw: str | None) -> int:
    """The ``?after=`` cursor: a row id (>= 0); empty or absent means from the start. Raises ValueError."""
    if not raw:
        return 0
    try:
        after = int(raw)
    except ValueError:
        raise ValueError(f"after: expected a cursor from an earlier answer (an integer), got {raw!r}") from None
    if after < 0:
        raise ValueError(f"after: expected a cursor >= 0, got {after}")
    return after


def job_metrics(job: Job, after: int = 0) -> dict[str, Any]:
    """The job's metric values stored after row ``after`` (JSON-ready).

    Keys: ``series`` (``{name: [[t_s, iteration, value], ...]}``, unix seconds, in the order stored; names in
    the order they first appear), ``cursor`` (pass as ``?after=`` to get only newer values), ``more`` (true
    when more than :data:`MAX_ROWS` were waiting: ask again at once), ``job`` (``status``, ``finished``: the
    job has ended, so once ``more`` is false nothing new will come).
    """
    rows = list(MetricPoint.objects.filter(job=job, id__gt=after).order_by("id")
                .values_list("id", "name", "t", "iteration", "value")[:MAX_ROWS + 1])
    more = len(rows) > MAX_ROWS
    rows = rows[:MAX_ROWS]
    series: dict[str, list] = {}
    for _, name, t, iteration, value in rows:
        series.setdefault(name, []).append([t, iteration, value])
    return {"series": series, "cursor": rows[-1][0] if rows else after, "more": more,
            "job": {"status": job.status, "finished": job.is_finished}}
