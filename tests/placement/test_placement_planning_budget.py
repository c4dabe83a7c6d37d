"""The memory-aware policy's planning budget (Note [Planning budget] in placement.policies): a decision cut
short and continued over several calls places exactly what one unbounded decision places; a changed state
starts a fresh decision."""
import dataclasses

from placement.curves import triangular_curve
from placement.policies import MemoryAware
from placement.state import ClusterState, Device, Job, Tenant

GB = 1e9
# unequal iteration times: groups over their budget are gating plans, each a coordinator run
CURVES = [triangular_curve(1 * GB, 5 * GB, 0.2), triangular_curve(1.5 * GB, 6 * GB, 0.3),
          triangular_curve(0.5 * GB, 4 * GB, 0.45, forward_fraction=0.4), triangular_curve(2 * GB, 7 * GB, 0.2)]


def _state():
    tenants = {"a": Tenant("a", weight=2.0, allow_cross_tenant=True), "b": Tenant("b", allow_cross_tenant=True),
               "c": Tenant("c", usage_byte_seconds=5e12)}
    devices = [Device(f"d{i}", budget) for i, budget in enumerate([16 * GB, 16 * GB, 12 * GB, 24 * GB])]
    queued = [Job(i, "abc"[i % 3], CURVES[i % 4], submitted_s=float(i), priority=i % 2, compute_share=0.3,
                  curve_key=i % 4) for i in range(24)]
    return ClusterState(tuple(devices), tuple(queued), tenants)


def _with(state, placements, usage=0.0):
    """``state`` once ``placements`` are made: each device runs its jobs (listed in another order, as a
    database may give them), the placed jobs leave the queue, every tenant's usage has grown by ``usage``."""
    jobs = {j.id: j for j in state.queued}
    on = {d.id: list(d.running) for d in state.devices}
    for p in placements:
        on[p.device_id].append(jobs[p.job_id])
    placed = {p.job_id for p in placements}
    return ClusterState(tuple(dataclasses.replace(d, running=tuple(reversed(on[d.id]))) for d in state.devices),
                        tuple(j for j in state.queued if j.id not in placed),
                        {k: dataclasses.replace(t, usage_byte_seconds=t.usage_byte_seconds + usage)
                         for k, t in state.tenants.items()})


def _continued(policy, state):
    """Calls of ``policy.decide`` until the decision is complete, each on the state with what was placed so far
    (usage growing between calls). Returns the placements, the last waiting reasons and the number of calls."""
    placements, calls = [], 0
    while True:
        d = policy.decide(state)
        calls += 1
        placements += d.placements
        if not d.deferred:
            return placements, d.waiting, calls
        state = _with(state, d.placements, usage=1e9 * calls)


def test_a_decision_continued_over_bounded_calls_places_what_one_unbounded_decision_places():
    state = _state()
    whole = MemoryAware(max_group=3).decide(state)
    assert any(p.plan.mode == "gating" and len(p.plan.job_ids) == 3 for p in whole.placements)  # not trivial
    for budget in (0.0, 0.002):
        placements, waiting, calls = _continued(MemoryAware(max_group=3, planning_budget_s=budget), state)
        assert calls > 1
        assert placements == whole.placements  # same jobs, devices and plans, in the same order
        assert waiting == whole.waiting


def test_a_budget_of_zero_stops_after_each_job_that_made_a_new_plan_and_always_makes_progress():
    policy = MemoryAware(max_group=3, planning_budget_s=0.0)
    d = policy.decide(_state())
    assert d.deferred == len(_state().queued) - 1 and policy.cache.misses >= 1


def test_a_changed_state_is_decided_afresh():
    state = _state()
    policy = MemoryAware(max_group=3, planning_budget_s=0.0)
    first = policy.decide(state)
    assert first.deferred
    # a job arrives before the next call: not the first state with the placements made
    arrived = Job(99, "a", CURVES[0], submitted_s=-1.0, priority=5, compute_share=0.3, curve_key=0)
    changed = _with(state, first.placements)
    changed = dataclasses.replace(changed, queued=changed.queued + (arrived,))
    placements, waiting, _ = _continued(policy, changed)
    whole = MemoryAware(max_group=3).decide(changed)
    assert placements == whole.placements and waiting == whole.waiting
    # and so does a device whose budget changed
    policy = MemoryAware(max_group=3, planning_budget_s=0.0)
    first = policy.decide(state)
    changed = _with(state, first.placements)
    changed = dataclasses.replace(changed, devices=(dataclasses.replace(changed.devices[0], budget_bytes=20 * GB),)
                                  + changed.devices[1:])
    placements, waiting, _ = _continued(policy, changed)
    assert placements == MemoryAware(max_group=3).decide(changed).placements
