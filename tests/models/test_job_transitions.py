"""The job status machine: every legal move works and records one Event; every illegal one is refused."""
import itertools

import pytest

from zico.jobs.models import Event, Job
from zico.jobs.transitions import ALL_STATUSES, TERMINAL, TRANSITIONS, IllegalTransition, is_allowed
from zico.jobs.lifecycle import transition

ALL_PAIRS = list(itertools.product(ALL_STATUSES, ALL_STATUSES))
LEGAL = [(a, b) for a, b in ALL_PAIRS if is_allowed(a, b)]
ILLEGAL = [(a, b) for a, b in ALL_PAIRS if not is_allowed(a, b)]


def _job(personas, status):
    return Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn", status=status)


def test_the_table_names_every_status_and_only_known_ones():
    assert set(TRANSITIONS) == set(ALL_STATUSES)
    for targets in TRANSITIONS.values():
        assert targets <= set(ALL_STATUSES)


def test_terminal_statuses_have_no_way_out_and_every_other_status_can_be_cancelled():
    for s in ALL_STATUSES:
        assert (not TRANSITIONS[s]) == (s in TERMINAL)
        if s not in TERMINAL:
            assert is_allowed(s, "cancelled") and is_allowed(s, "failed")


def test_the_paper_path_and_requeue_are_legal():
    path = ["queued", "profiling", "ready", "placed", "running", "succeeded"]
    assert all(is_allowed(a, b) for a, b in zip(path, path[1:]))
    assert is_allowed("running", "lost") and is_allowed("lost", "queued")


@pytest.mark.parametrize("from_status,to_status", ILLEGAL)
def test_it_refuses_an_illegal_move_and_changes_nothing(personas, from_status, to_status):
    job = _job(personas, from_status)
    events = Event.objects.count()
    with pytest.raises(IllegalTransition) as err:
        transition(job, to_status, reason="test")
    assert repr(from_status) in str(err.value) and repr(to_status) in str(err.value)
    assert Job.objects.get(pk=job.pk).status == from_status
    assert Event.objects.count() == events


@pytest.mark.parametrize("from_status,to_status", LEGAL)
def test_it_makes_a_legal_move_and_records_one_event(personas, from_status, to_status):
    job = _job(personas, from_status)
    transition(job, to_status, reason="because", actor=personas.owner, note="x")
    row = Job.objects.get(pk=job.pk)
    assert row.status == job.status == to_status
    ev = Event.objects.get(job=job)
    assert ev.kind == "status_change" and ev.tenant_id == personas.tenant.pk and ev.actor_id == personas.owner.pk
    assert ev.details == {"from": from_status, "to": to_status, "reason": "because", "note": "x"}
    assert (row.finished_at is not None) == (to_status in TERMINAL)


def test_it_reads_the_status_from_the_database_not_a_stale_object(personas):
    job = _job(personas, "queued")
    stale = Job.objects.get(pk=job.pk)
    transition(job, "cancelled", reason="user")
    with pytest.raises(IllegalTransition):
        transition(stale, "profiling")
    assert Job.objects.get(pk=job.pk).status == "cancelled"


def test_running_counts_attempts_and_lost_counts_losses(personas):
    job = _job(personas, "placed")
    transition(job, "running")
    first_start = job.started_at
    transition(job, "lost", reason="no heartbeat")
    transition(job, "queued", reason="requeue")
    transition(job, "ready")
    transition(job, "placed")
    transition(job, "running")
    row = Job.objects.get(pk=job.pk)
    assert (row.attempts, row.lost_count) == (2, 1)
    assert row.started_at == first_start


def test_failed_needs_a_reason_and_keeps_it(personas):
    job = _job(personas, "running")
    with pytest.raises(ValueError, match="reason"):
        transition(job, "failed")
    assert Job.objects.get(pk=job.pk).status == "running"
    transition(job, "failed", reason="CUDA error: device-side assert", metrics={"peak_bytes": 123})
    row = Job.objects.get(pk=job.pk)
    assert row.failure_reason == "CUDA error: device-side assert" and row.metrics == {"peak_bytes": 123}


def test_it_rejects_an_unknown_status(personas):
    job = _job(personas, "queued")
    with pytest.raises(ValueError, match="unknown job status"):
        transition(job, "paused")
    assert Event.objects.filter(job=job).count() == 0
