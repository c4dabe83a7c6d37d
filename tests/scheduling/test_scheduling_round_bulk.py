"""The bulk round: its SQL query count does not grow with the number of jobs and devices, and a
job moved by someone else while the round decides is skipped while its device mates still go
ahead (the claim inside Placement.open_many, then one job at a time)."""
from django.db import connection
from django.test.utils import CaptureQueriesContext

from placement.policies import MemoryAware
from zico.cluster.models import Device, Placement
from zico.jobs.models import Job
from zico.scheduling.service import Scheduler
from zico.jobs.lifecycle import transition

GiB = 1 << 30


def _more_devices(like: Device, n: int, first_index: int) -> list[Device]:
    return [Device.objects.create(node=like.node, index=i, kind="gpu", name="Test GPU",
                                  uuid=f"GPU-{like.node.host}-{i}", total_bytes=16 * GiB, budget_bytes=16 * GiB)
            for i in range(first_index, first_index + n)]


def test_the_query_count_of_a_round_does_not_grow_with_jobs_and_devices(cluster, tenant, make_job, broker):
    """Rounds placing 2 jobs on each of 2, then 4, then 8 new devices (the earlier ones full);
    the first round, with nothing yet on any device, skips the reads of resident jobs."""
    counts = []
    extra: list[Device] = []
    try:
        for n_new in (2, 4, 8):
            if n_new > 2:
                extra += _more_devices(cluster[0], n_new, first_index=10 + len(extra))
            jobs = [make_job(tenant) for _ in range(2 * n_new)]
            with CaptureQueriesContext(connection) as q:
                res = Scheduler().run_round()
            assert sorted(res.placed) == sorted(j.pk for j in jobs)
            counts.append(len(q.captured_queries))
    finally:
        for d in extra:
            broker.delete(d.queue)
    assert counts[1] == counts[2], counts


class CancelsDuringTheDecision(MemoryAware):
    """The memory-aware policy, while a user cancels the first job it puts on a shared device."""

    def decide(self, state):
        out = super().decide(state)
        victim = out.placements[0].job_id
        transition(Job.objects.get(pk=victim), "cancelled", reason="user changed their mind")
        self.victim = victim
        return out


def test_a_job_cancelled_while_the_round_decides_is_skipped_and_its_mate_still_placed(cluster, tenant, make_job,
                                                                                      queued_messages):
    jobs = [make_job(tenant) for _ in range(4)]  # two shifted pairs, one per 16 GiB device
    policy = CancelsDuringTheDecision()
    res = Scheduler(policy).run_round()
    others = [j.pk for j in jobs if j.pk != policy.victim]
    assert sorted(res.placed) == sorted(others)
    assert Job.objects.get(pk=policy.victim).status == "cancelled"
    assert not Placement.objects.filter(jobs__pk=policy.victim).exists()
    assert set(Job.objects.filter(pk__in=others).values_list("status", flat=True)) == {"placed"}
    # the victim's device mate went ahead alone, the other pair together
    sizes = sorted(Placement.objects.get(pk=pk).jobs.count() for pk in set(res.placed.values()))
    assert sizes == [1, 2]
    sent = sorted(args[0] for d in cluster for _, args in queued_messages(d.queue))
    assert sent == sorted(others)
