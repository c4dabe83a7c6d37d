"""transition_many, the bulk form of the job status machine: the same table and side effects as
one-at-a-time moves, one Event per job, all or nothing, and a query count that does not grow
with the number of jobs."""
import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from zico.jobs.models import Event, Job
from zico.jobs.transitions import ALL_STATUSES, IllegalTransition, is_allowed
from zico.jobs.lifecycle import transition_many
from zico.jobs.lifecycle import transition

LEGAL = [(a, b) for a, b in itertools.product(ALL_STATUSES, ALL_STATUSES) if is_allowed(a, b)]


def _jobs(personas, status, n=1):
    return [Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn", status=status)
            for _ in range(n)]


@pytest.mark.parametrize("from_status,to_status", LEGAL)
def test_a_bulk_move_leaves_the_same_rows_and_events_as_single_moves(personas, gpu, from_status, to_status):
    [single], bulk = _jobs(personas, from_status), _jobs(personas, from_status, 2)
    transition(single, to_status, reason="because", actor=personas.owner, device=gpu, note="x")
    transition_many(bulk, to_status, reason="because", actor=personas.owner, device=gpu,
                    details_by_job={j.pk: {"note": "x"} for j in bulk})
    fields = ["status", "attempts", "lost_count", "failure_reason"]
    want = Job.objects.filter(pk=single.pk).values(*fields).get()
    for job in bulk:
        row = Job.objects.get(pk=job.pk)
        assert Job.objects.filter(pk=job.pk).values(*fields).get() == want
        assert (row.finished_at is None) == (Job.objects.get(pk=single.pk).finished_at is None)
        assert (row.started_at is None) == (Job.objects.get(pk=single.pk).started_at is None)
        assert job.status == to_status and job.attempts == row.attempts  # in-memory object updated
    want_ev = Event.objects.get(job=single)
    for job in bulk:
        ev = Event.objects.get(job=job)
        assert (ev.kind, ev.tenant_id, ev.actor_id, ev.device_id, ev.details) == (
            want_ev.kind, want_ev.tenant_id, want_ev.actor_id, want_ev.device_id, want_ev.details)


def test_one_job_that_may_not_move_leaves_nothing_written(personas):
    ok, bad = _jobs(personas, "ready", 3), _jobs(personas, "running")
    events = Event.objects.count()
    with pytest.raises(IllegalTransition, match=f"job {bad[0].pk}: cannot move from 'running' to 'placed'"):
        transition_many(ok + bad, "placed")
    assert set(Job.objects.filter(pk__in=[j.pk for j in ok]).values_list("status", flat=True)) == {"ready"}
    assert Event.objects.count() == events
    assert all(j.status == "ready" for j in ok)


def test_it_reads_the_status_from_the_database_not_stale_objects(personas):
    [job] = _jobs(personas, "ready")
    stale = Job.objects.get(pk=job.pk)
    transition(job, "cancelled", reason="user")
    with pytest.raises(IllegalTransition, match="'cancelled'"):
        transition_many([stale], "placed")
    assert Job.objects.get(pk=job.pk).status == "cancelled"


def test_it_refuses_bad_input_by_name(personas):
    jobs = _jobs(personas, "running", 2)
    with pytest.raises(ValueError, match="reason"):
        transition_many(jobs, "failed")
    with pytest.raises(ValueError, match="unknown job status"):
        transition_many(jobs, "paused")
    with pytest.raises(ValueError, match="more than once"):
        transition_many([jobs[0], jobs[0]], "succeeded")
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True)) == {"running"}
    assert transition_many([], "succeeded") == []


def test_the_query_count_does_not_grow_with_the_number_of_jobs(personas):
    counts = []
    for n in (2, 40):
        jobs = _jobs(personas, "queued", n)
        with CaptureQueriesContext(connection) as q:
            transition_many(jobs, "ready")
        counts.append(len(q.captured_queries))
    assert counts[0] == counts[1]
    assert Job.objects.filter(status="ready").count() == 42


@pytest.mark.parametrize("bulk", [False, True])
def test_every_move_clears_the_waiting_reason_in_the_row_and_in_memory(personas, bulk):
    from django.utils import timezone

    [job] = _jobs(personas, "ready")
    Job.objects.filter(pk=job.pk).update(waiting_reason="tenant quota: 2 of 2 running jobs", waiting_kind="quota",
                                         waiting_since=timezone.now())
    job.refresh_from_db()
    if bulk:
        transition_many([job], "cancelled", reason="no longer needed")
    else:
        transition(job, "cancelled", reason="no longer needed")
    row = Job.objects.values("waiting_reason", "waiting_kind", "waiting_since").get(pk=job.pk)
    assert row == {"waiting_reason": "", "waiting_kind": "", "waiting_since": None}
    assert (job.waiting_reason, job.waiting_kind, job.waiting_since) == ("", "", None)
