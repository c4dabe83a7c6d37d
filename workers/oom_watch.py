"""Counts the out-of-memory errors the shared allocator's budget rule prevented and reports them.

Note [OOM prevented]
    Definition: an *OOM prevented* is an allocation that would have crossed the device budget, waited for
    co-located jobs' frees (the allocator's budget wait, docs/allocator.md "the budget rule", step 3) and
    then succeeded. Without the shared pool's wait that request would have failed at once with PyTorch's
    ``OutOfMemoryError``, exactly as on a device where each job holds a fixed share. Waits that ended in an
    OOM (timed out) are not counted; waits that the deadlock rule ended by letting the job past the budget
    (``num_budget_overruns``) are counted apart in ``overruns``, because the budget was not kept for them.

    The allocator counts, per job, ``num_budget_waits`` (incremented when a wait starts), ``num_ooms`` and
    ``num_budget_overruns`` (``memory_stats(job=...)``), and whether the job is ``waiting`` now
    (``jobs()``). Once a second the reporter asks :class:`OomWatch` for what changed: waits that are over
    (all started ones, less one if the job still waits) minus the OOMs seen in the same interval (an OOM
    there may have ended one of those waits; so the count errs low, never high). Each nonzero change is one
    ``oom_prevented`` control message ``{job, count, overruns, waited_s}``; the control consumer stores it
    as one ``oom_prevented`` Event and ``/metrics`` sums their counts (``zico_oom_prevented``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Seen:
    waits: int = 0      # waits already classified
    ooms: int = 0
    overruns: int = 0
    waited_s: float = 0.0


class OomWatch:
    """Per-job counters of one device's allocator, turned into ``oom_prevented`` reports."""

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}

    def check(self, allocator: Any, job_ids: list[int], device=None) -> list[dict[str, Any]]:
        """Reports (``{"job", "count", "overruns", "waited_s"}``) for ``job_ids`` since the last check.

        ``allocator`` is the binding (``memory_stats(job=, device=)`` and ``jobs(device=)``). Never raises:
        an allocator without these calls (a test double) yields no report.
        """
        try:
            waiting = {int(k): bool(v.get("waiting")) for k, v in allocator.jobs(device=device).items()}
        except Exception:
            waiting = {}
        out = []
        for job in job_ids:
            try:
                st = allocator.memory_stats(job=job, device=device)
            except Exception:
                continue
            seen = self._seen.setdefault(job, _Seen())
            waits = int(st.get("num_budget_waits", 0))
            settled = waits - (1 if waiting.get(job) else 0)
            ooms, overruns = int(st.get("num_ooms", 0)), int(st.get("num_budget_overruns", 0))
            waited_s = float(st.get("budget_waited_s", 0.0))
            new_waits, new_ooms, new_overruns = settled - seen.waits, ooms - seen.ooms, overruns - seen.overruns
            count = max(0, new_waits - new_ooms - new_overruns)
            if count or new_overruns > 0:
                out.append({"job": job, "count": count, "overruns": max(0, new_overruns),
                            "waited_s": round(max(0.0, waited_s - seen.waited_s), 4)})
            self._seen[job] = _Seen(max(seen.waits, settled), ooms, overruns, waited_s)
        for job in list(self._seen):  # jobs that left the device
            if job not in job_ids:
                del self._seen[job]
        return out
