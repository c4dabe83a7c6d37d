"""The database as the policies see it (zico.scheduling.snapshot)."""
import pytest

from zico.cluster.models import Placement
from zico.scheduling.snapshot import take_snapshot
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle


def test_a_job_counts_only_on_the_device_of_its_active_placement(cluster, tenant, make_job):
    job = make_job(tenant)
    old = lifecycle.place(cluster[0], [job])
    old.end("moved")
    transition(job, "ready")
    lifecycle.place(cluster[1], [job])
    state = take_snapshot().state
    running = {d.id: [j.id for j in d.running] for d in state.devices}
    assert running == {cluster[0].pk: [], cluster[1].pk: [job.pk]}


def test_ready_jobs_without_a_curve_are_not_offered_to_the_policy(cluster, tenant, make_job):
    with_curve, without = make_job(tenant), make_job(tenant, curve=False)
    assert [j.id for j in take_snapshot().state.queued] == [with_curve.pk]


def test_a_device_whose_job_has_no_curve_is_left_out(cluster, tenant, make_job):
    blind = make_job(tenant, curve=False)
    lifecycle.place(cluster[0], [blind])
    assert [d.id for d in take_snapshot().state.devices] == [cluster[1].pk]


def test_each_device_is_offered_with_the_share_its_workers_gate_leaves(cluster):
    cluster[1].gate_headroom = 0.2  # set on its row (staff, or its worker's --gate-headroom seeding a new row)
    cluster[1].save(update_fields=["gate_headroom"])
    shares = {d.id: d.group_share for d in take_snapshot().state.devices}
    assert shares[cluster[1].pk] == 0.8
    assert shares[cluster[0].pk] == 1 - cluster[0].gate_headroom == pytest.approx(0.9)  # the default headroom
