"""Racing writers: two threads on real PostgreSQL connections cannot both win a transition or a quota."""
import threading

import pytest
from django.db import connection

from zico.jobs.models import Event, Job
from zico.jobs.submission import JobSpecError, submit_job
from zico.jobs.transitions import IllegalTransition
from zico.tenants.models import Tenant
from tests.support.tenants import make_personas
from zico.jobs.lifecycle import transition

GIB = 1 << 30
pytestmark = pytest.mark.django_db(transaction=True)


def race(fn, n=2):
    """Run fn() in n threads released together; return what each returned or raised."""
    barrier, results = threading.Barrier(n), [None] * n

    def run(i):
        try:
            barrier.wait()
            results[i] = fn()
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_only_one_of_two_racing_transitions_wins():
    p = make_personas()
    job = Job.objects.create(tenant=p.tenant, owner=p.owner, workload="digits-cnn")
    results = race(lambda: transition(Job.objects.get(pk=job.pk), "profiling"))
    assert sum(isinstance(r, Job) for r in results) == 1
    assert sum(isinstance(r, IllegalTransition) for r in results) == 1
    assert Event.objects.filter(job=job).count() == 1


def test_two_racing_submissions_cannot_both_fit_under_the_quota():
    p = make_personas(acme_quota_bytes=10 * GIB)
    tenant = Tenant.objects.get(pk=p.tenant.pk)
    results = race(lambda: submit_job(tenant=tenant, owner=p.owner, workload="digits-cnn", budget_bytes=6 * GIB))
    assert sum(isinstance(r, Job) for r in results) == 1
    errors = [r for r in results if isinstance(r, JobSpecError)]
    assert len(errors) == 1 and errors[0].field == "budget_bytes"
    assert Job.objects.count() == 1
