"""``manage.py runscheduler`` as real processes on the real PostgreSQL: two instances at once
never place a job twice, and SIGTERM ends the service cleanly."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from zico.cluster.models import Placement
from zico.jobs.models import Job
from zico.jobs.lifecycle import transition

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def scheduler_process(*args):
    """Start runscheduler on the test database (committed data: transaction=True tests)."""
    env = dict(os.environ)
    db = connection.settings_dict
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "zico.test_settings"
    return subprocess.Popen([sys.executable, "manage.py", "runscheduler", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.django_db(transaction=True)
def test_two_schedulers_at_once_never_place_a_job_twice(cluster, tenant, make_job):
    """Both processes run rounds every 20 ms for a few seconds while this test keeps finishing
    the placed jobs (freeing the devices) over a backlog of ready jobs, so the two race to fill
    the same devices again and again."""
    jobs = [make_job(tenant) for _ in range(40)]
    procs = [scheduler_process("--interval", "0.02") for _ in range(2)]
    try:
        for p in procs:
            assert "scheduler ready" in p.stdout.readline()
        finished, worst = 0, 0
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline and finished < len(jobs):
            for d in cluster:
                on_device = Job.objects.filter(placements__device=d, placements__ended_at__isnull=True,
                                               status__in=["placed", "running"]).distinct().count()
                worst = max(worst, on_device)
            for job in Job.objects.filter(pk__in=[j.pk for j in jobs], status="placed"):
                placement = job.active_placement()  # co-placed jobs share one placement
                transition(job, "running")
                transition(job, "succeeded")
                if placement is not None:
                    placement.end("test finished its jobs")
                finished += 1
            time.sleep(0.05)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert finished >= 8, "the schedulers kept placing jobs"
    for j in jobs:
        assert Placement.objects.filter(jobs=j).count() <= 1, f"job {j.pk} placed twice"
    assert worst <= 2, "a device held more jobs than its budget allows"
    for p in Placement.objects.all():
        assert p.plan["predicted_peak_bytes"] <= p.device.budget_bytes


@pytest.mark.django_db(transaction=True)
def test_sigterm_stops_the_service_cleanly(cluster, tenant):
    proc = scheduler_process("--interval", "0.2")
    first = proc.stdout.readline()
    assert "scheduler ready" in first
    time.sleep(0.5)  # a few rounds
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "received SIGTERM" in out and out.rstrip().endswith("scheduler stopped")


def test_an_unknown_policy_is_refused(db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="--policy"):
        call_command("runscheduler", "--policy", "lottery", "--rounds", "0")
