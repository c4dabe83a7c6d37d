"""The job status machine's vocabulary: the statuses and the one table of legal moves. The write that makes
a move, and the verbs that call it, are in zico.jobs.lifecycle; this module imports nothing from Django.

Note [Job status machine]
~~~~~~~~~~~~~~~~~~~~~~~~~
The happy path is  queued → profiling → ready → placed → running → succeeded.
The other moves a real cluster needs, and why:

* queued → ready          a memory curve is already known (uploaded torch snapshot, cached estimate)
* queued|profiling|ready|placed|running|lost → cancelled
                          a user or admin cancels; a running job is stopped by its worker
* queued|profiling|ready|placed|running|lost → failed
                          the spec cannot run (profiling OOM, import error, worker rejected the placement,
                          training raised, too many losses); ``reason`` is required and kept in failure_reason
* profiling|placed|running → lost
                          the worker holding the job stopped heart-beating (worker_lost)
* lost → queued           the job is requeued and resumes from its last checkpoint
* placed → ready          the scheduler unplaces a job before it starts (device drained or budget lowered);
                          its curve stays valid, so it goes back to ready rather than queued
* profiling → running     a script job profiled as its run starts (in a placement of its own) has its curve
                          measured and goes on training (Note [A script's profile is the start of its run]
                          in workers/runner.py)
* profiling → queued      a script job profiled beside other jobs under the platform's default bound (it
                          set no budget) was stopped at that bound: it waits to be profiled alone rather than
                          fail for a limit its user never set (Note [Where a script is profiled] in
                          zico.scheduling.service)
succeeded, failed and cancelled are terminal: nothing leaves them.

Every move (zico.jobs.lifecycle) runs in one transaction: the job row is locked (SELECT … FOR UPDATE), its *current*
status in the database is checked against the table, the row is updated and one ``status_change``
Event is written — so two racing callers cannot both move the same job, and a refused move
changes nothing.
"""
from __future__ import annotations


class JobStatus:
    """Status values (plain strings, stored in Job.status)."""

    QUEUED = "queued"
    PROFILING = "profiling"
    READY = "ready"
    PLACED = "placed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


S = JobStatus
ALL_STATUSES = (S.QUEUED, S.PROFILING, S.READY, S.PLACED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.LOST)
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
# Statuses in which a job holds (or is about to hold) device memory: counted by the running-jobs quota.
ON_DEVICE = frozenset({S.PLACED, S.RUNNING})

# The one table of legal moves: from-status -> statuses it may move to.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.PROFILING, S.READY, S.CANCELLED, S.FAILED}),
    S.PROFILING: frozenset({S.READY, S.RUNNING, S.CANCELLED, S.FAILED, S.LOST, S.QUEUED}),
    S.READY: frozenset({S.PLACED, S.CANCELLED, S.FAILED}),
    S.PLACED: frozenset({S.RUNNING, S.READY, S.CANCELLED, S.FAILED, S.LOST}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.LOST}),
    S.LOST: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


CANCELLABLE = frozenset(s for s, targets in TRANSITIONS.items() if S.CANCELLED in targets)


class IllegalTransition(ValueError):
    """A status move that the table does not allow; nothing was changed."""

    def __init__(self, job_id: int, from_status: str, to_status: str):
        allowed = ", ".join(sorted(TRANSITIONS.get(from_status, ()))) or "none (terminal)"
        super().__init__(f"job {job_id}: cannot move from {from_status!r} to {to_status!r} "
                         f"(allowed from {from_status!r}: {allowed})")
        self.job_id, self.from_status, self.to_status = job_id, from_status, to_status


def is_allowed(from_status: str, to_status: str) -> bool:
    return to_status in TRANSITIONS.get(from_status, frozenset())
