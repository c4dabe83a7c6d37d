"""Placement policies behind one interface, ``decide(state) -> Decision`` (the placements and,
for every queued job left out, why it waits: placement.reasons); ``place(state)`` is
``decide(state).placements``.

* :class:`FirstFitFifo` — the baseline: one job per device, FIFO order, first device that
  fits, with conservative backfill.
* :class:`MemoryAware` — Zico's policy: co-locate jobs in groups with the largest memory
  saving at bounded predicted slowdown, weighted fair share of device-memory-seconds.

Both respect tenant quotas and never put two tenants' jobs together unless both allow it.
Policies are pure: the same state gives the same decision; they do not mutate the state. (A
:class:`MemoryAware` given a planning budget cuts a decision short and continues it at its next call:
Note [Planning budget].)
"""
from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from typing import Hashable, Iterator, Protocol, Sequence

from . import reasons
from .gating import BUDGET_RTOL, held_floor, minimal_feasible_budget
from .groups import contention_factor, equal_periods, plan_group
from .reasons import WaitReason
from .state import ClusterState, Device, Job, JobId, Placement, SharingPlan
from .tenancy import Quotas, fair_order, fifo_order, may_share


@dataclass(frozen=True)
class Decision:
    """A policy's answer for one state: ``placements`` for some queued jobs, and ``waiting``, the
    reason of every other queued job (job id -> :class:`placement.reasons.WaitReason`)."""

    placements: list[Placement]
    waiting: dict[JobId, WaitReason]
    # queued jobs not yet considered: a decision cut short by its planning budget (Note [Planning budget])
    deferred: int = 0


class Policy(Protocol):
    name: str

    def decide(self, state: ClusterState, explain: bool = True) -> Decision:
        """Placements for (some of) ``state.queued`` and, with ``explain``, why each job left out
        waits (else ``waiting`` is empty); jobs left out stay queued."""

    def place(self, state: ClusterState) -> list[Placement]:
        """``decide(state, explain=False).placements`` (the simulator and benchmarks need no reasons)."""


class PlanCache:
    """Memoises :func:`plan_group` by the group's (curve key, compute share) list and budget,
    so equal workloads are evaluated once (the scale benchmark relies on it). ``misses`` counts the
    plans made, ``cpu_s`` the CPU seconds (this process's) spent making them."""

    def __init__(self) -> None:
        self._plans: dict[tuple, SharingPlan | None] = {}
        self.misses = 0
        self.cpu_s = 0.0

    def plan(self, jobs: Sequence[Job], budget_bytes: float) -> SharingPlan | None:
        """:func:`plan_group` of ``jobs`` (their ids in the plan)."""
        plan = self.shared(jobs, budget_bytes)
        return None if plan is None else dataclasses.replace(plan, job_ids=tuple(j.id for j in jobs))

    def shared(self, jobs: Sequence[Job], budget_bytes: float) -> SharingPlan | None:
        """The memoised plan itself, whose ``job_ids`` are those of the group it was first made for: for
        reading its figures (slowdowns, saving) without copying it; :meth:`plan` gives it ``jobs``' ids."""
        key = (tuple((j.curve_key, j.compute_share) for j in jobs), float(budget_bytes))
        if key not in self._plans:
            self.misses += 1
            t0 = time.process_time()
            self._plans[key] = plan_group(jobs, budget_bytes)
            self.cpu_s += time.process_time() - t0
        return self._plans[key]


def _fits_anywhere(job: Job, devices: Sequence[Device]) -> bool:
    return any(job.peak_bytes <= d.budget_bytes * (1 + BUDGET_RTOL) for d in devices)


class FirstFitFifo:
    """One job per device, in FIFO order (priority, then submission), on the first empty device
    whose budget holds the job's peak.

    Backfill: a job that finds no device does not stop the jobs behind it; they take the free
    devices it cannot use (every free device left is too small for it, since devices only fill
    during a round), and it is considered first again next round, so a freed device big enough
    goes to it before anyone behind it. Jobs no device could ever hold, and jobs over their
    tenant's quota, are skipped.
    """

    name = "fifo"

    def __init__(self, cache: PlanCache | None = None) -> None:
        self.cache = cache or PlanCache()

    def place(self, state: ClusterState) -> list[Placement]:
        return self.decide(state, explain=False).placements

    def decide(self, state: ClusterState, explain: bool = True) -> Decision:
        free = [d for d in state.devices if not d.running]
        on = {d.id: list(d.running) for d in state.devices}  # what runs on each device, this round's placements too
        quotas = Quotas(state)
        out: list[Placement] = []
        waiting: dict[JobId, WaitReason] = {}
        explained: dict[tuple, WaitReason] = {}
        for job in fifo_order(state.queued):
            why = quotas.refusal(job)
            if why is None and not state.devices:
                why = reasons.no_device()
            elif why is None and not _fits_anywhere(job, state.devices):
                why = reasons.no_device_fits(job, state.devices)
            if why is not None:
                if explain:
                    waiting[job.id] = why
                continue
            big = [d for d in free if job.peak_bytes <= d.budget_bytes * (1 + BUDGET_RTOL)]
            # Note [Profile runs are tenants on their device] in placement.tenancy
            dev = next((d for d in big if may_share(job, [], state.tenants, d.profiling_tenants)), None)
            if dev is None and big:  # the free devices big enough are profiling a job of a tenant it may not meet
                if explain:
                    waiting[job.id] = reasons.tenants_do_not_share(job, big[0], [], state.tenants)
                continue
            if dev is None:  # every device big enough runs a job: name the first
                if explain:  # the same for every job of this curve and tenant until a job is placed
                    key = (job.curve_key, job.tenant, len(out))
                    if key not in explained:
                        peak = job.peak_bytes
                        first = next(d for d in state.devices if peak <= d.budget_bytes * (1 + BUDGET_RTOL))
                        explained[key] = reasons.busy(job, first, on[first.id], 1)
                    waiting[job.id] = explained[key]
                continue
            plan = self.cache.plan([job], dev.budget_bytes)
            out.append(Placement(job.id, dev.id, plan))
            free.remove(dev)
            on[dev.id].append(job)
            quotas.add(job)
        return Decision(out, waiting)


# Note [Planning budget]
# ~~~~~~~~~~~~~~~~~~~~~~
# A cold decision can be expensive: with groups of three, most of it is gating predictions (a coordinator
# run on a virtual clock per group with unequal iteration times), most of a cold service round's CPU
# (docs/benchmarks.md, "Placement at scale"). With ``planning_budget_s`` a decision counts the CPU its
# plan cache spends making new plans; once that reaches the budget (with 0: once any new plan was made),
# before the next job is considered,
# ``decide`` returns the placements made so far (``Decision.deferred``: how many jobs it has not
# considered) and keeps the decision in progress. The next ``decide`` continues it where it stopped when its
# state is the first one with those placements made (``_Pending.continued_by``: same devices, budgets and
# shares, each device running what it ran plus what was placed on it, the same queued jobs less those
# placed, the same tenants); then the placements of the sequence of calls are exactly those of one
# unbounded decision of the first state, plans and waiting reasons included: the calls run the same loop
# on the same working state, only split. Tenants' usage is left out of the comparison (a service
# snapshot's usage grows while jobs run): a continued decision keeps the fair-share order it began with.
# Any other change (a job arrived, finished or was refused under the service's locks, a budget changed)
# starts a fresh decision of the new state, cheaper than the first since the plans made so far are
# cached. Every call considers at least one job, so a decision always ends. Jobs not considered yet get
# no waiting reason from the call (they keep the one they had).


class MemoryAware:
    """Zico's co-location policy.

    For each job in weighted-fair-share order: among devices whose group may take it (fewer
    than ``max_group`` jobs, tenants allow, a sharing plan exists under the budget, every
    job's predicted slowdown <= ``max_slowdown``) pick the group with the largest memory saving
    (sum of peaks minus predicted peak); while empty devices are at least as many as the jobs
    still to consider, an empty device (best fit) is taken instead, so an idle cluster spreads
    out and a busy one packs. Jobs that fit nowhere now are skipped (later jobs backfill) and
    come first again next round. Limit: nothing is reserved across rounds, so a big job can wait
    long if small jobs keep joining every device big enough for it before it empties.

    Args:
        max_group: most jobs per device (>= 1).
        max_slowdown: bound on every group member's predicted slowdown (>= 1).
        cache: a shared :class:`PlanCache` (the service keeps one across rounds).
        group_share: share of a device's budget a group of two or more jobs is planned against, in
            (0, 1], for a device that does not give its own (``Device.group_share``, which its
            worker registers); a job alone may use the whole budget. The scheduling service passes
            the share the workers' coordinators gate with by default (``1 - DEFAULT_GATE_HEADROOM``),
            so a group it plans is one the worker can run side by side rather than one job at a time.
        planning_budget_s: CPU seconds one :meth:`decide` may spend making new plans (cache misses) before
            it returns what it has decided so far and continues at the next call (Note [Planning budget]);
            None (the default): no limit, every decision complete.
    """

    name = "memory-aware"

    def __init__(self, max_group: int = 2, max_slowdown: float = 1.6, cache: PlanCache | None = None,
                 group_share: float = 1.0, planning_budget_s: float | None = None) -> None:
        if max_group < 1:
            raise ValueError(f"max_group must be >= 1, got {max_group}")
        if max_slowdown < 1:
            raise ValueError(f"max_slowdown must be >= 1, got {max_slowdown}")
        if not 0 < group_share <= 1:
            raise ValueError(f"group_share must lie in (0, 1], got {group_share}")
        if planning_budget_s is not None and not planning_budget_s >= 0:
            raise ValueError(f"planning_budget_s must be >= 0 or None, got {planning_budget_s}")
        self.max_group = max_group
        self.max_slowdown = max_slowdown
        self.cache = cache or PlanCache()
        self.group_share = float(group_share)
        self.planning_budget_s = planning_budget_s
        self._pending: _Pending | None = None  # a decision cut short, to continue (Note [Planning budget])

    def place(self, state: ClusterState) -> list[Placement]:
        return self.decide(state, explain=False).placements

    def decide(self, state: ClusterState, explain: bool = True) -> Decision:
        """The placements for ``state`` and why the other queued jobs wait. With a planning budget the
        decision may be cut short (``Decision.deferred`` > 0: that many jobs not yet considered); the next
        call continues it when its state is this one with the placements made so far (Note [Planning
        budget]), and otherwise decides afresh."""
        pending, self._pending = self._pending, None
        if pending is None or pending.explain != explain or not pending.continued_by(state):
            pending = self._start(state, explain)
        return self._run(pending)

    def _start(self, state: ClusterState, explain: bool) -> "_Pending":
        groups: dict[Hashable, list[Job]] = {d.id: list(d.running) for d in state.devices}
        budgets = {d.id: d.budget_bytes for d in state.devices}
        shares = {d.id: self.group_share if d.group_share is None else d.group_share for d in state.devices}
        rank = {d.id: k for k, d in enumerate(state.devices)}  # ties between equal empty devices: state order
        profiling = {d.id: d.profiling_tenants for d in state.devices}
        # devices with equal budget, share, group and profiling tenants are interchangeable: evaluate one of each
        buckets: dict[tuple, list[Hashable]] = {}
        for d in state.devices:
            buckets.setdefault(self._signature(d.budget_bytes, shares[d.id], groups[d.id], profiling[d.id]),
                               []).append(d.id)
        # what _choose looks at, kept as placements change it: the buckets with room (in the order of
        # ``buckets``), each device's group as the keys PlanCache and _bound go by, the empty devices' count
        rnd = _Round(groups, budgets, shares, rank,
                     {sig: ids for sig, ids in buckets.items() if len(sig[2]) < self.max_group},
                     {d: self._group_key(g) for d, g in groups.items()},
                     sum(len(ids) for sig, ids in buckets.items() if not sig[2]), profiling)
        return _Pending(state, explain, rnd, buckets, Quotas(state), fair_order(state), len(state.queued))

    def _run(self, p: "_Pending") -> Decision:
        """Consider ``p``'s jobs in fair-share order until none is left or the planning budget is spent."""
        state, explain, rnd, buckets, quotas, out, waiting = p.state, p.explain, p.rnd, p.buckets, p.quotas, p.out, \
            p.waiting
        groups, budgets, shares = rnd.groups, rnd.budgets, rnd.shares
        by_id = {d.id: d for d in state.devices}
        # Note [Waiting reasons] in placement.reasons: a reason depends on the job only through its curve,
        # compute share and tenant, and on the devices' groups, which change only when a job is placed
        explained = p.explained
        first, spent0, misses0 = len(out), self.cache.cpu_s, self.cache.misses
        considered = False
        for job in p.order:
            if considered and self.planning_budget_s is not None and self.cache.misses > misses0 and \
                    self.cache.cpu_s - spent0 >= self.planning_budget_s:
                # the budget is spent: this job is considered first when the decision continues (fair_order
                # has already counted its charge, as it would have had the decision gone on)
                p.order = itertools.chain((job,), p.order)
                self._pending = p
                return Decision(out[first:], dict(waiting), deferred=p.left)
            p.left -= 1
            left, considered = p.left, True
            why = quotas.refusal(job)
            if why is not None:
                if explain:
                    waiting[job.id] = why
                continue
            choice = self._choose(job, rnd, state, left)
            if choice is None:
                if explain:
                    key = (job.curve_key, job.compute_share, job.tenant, len(out))
                    if key not in explained:
                        explained[key] = self._explain(job, buckets, groups, shares, by_id, state)
                    waiting[job.id] = explained[key]
                continue
            dev_id, plan = choice
            sig = self._signature(budgets[dev_id], shares[dev_id], groups[dev_id], rnd.profiling[dev_id])
            buckets[sig].remove(dev_id)
            if not buckets[sig]:
                del buckets[sig]
                rnd.open.pop(sig, None)
            if not groups[dev_id]:
                rnd.empty -= 1
            groups[dev_id].append(job)
            rnd.keys[dev_id] = self._group_key(groups[dev_id])
            sig = self._signature(budgets[dev_id], shares[dev_id], groups[dev_id], rnd.profiling[dev_id])
            if sig not in buckets:
                buckets[sig] = []
                if len(groups[dev_id]) < self.max_group:
                    rnd.open[sig] = buckets[sig]
            buckets[sig].append(dev_id)
            out.append(Placement(job.id, dev_id, plan))
            quotas.add(job)
        return Decision(out[first:], waiting)

    @staticmethod
    def _signature(budget: float, share: float, group: Sequence[Job], profiling: frozenset = frozenset()) -> tuple:
        return (budget, share, tuple(sorted((str(j.curve_key), j.compute_share, str(j.tenant)) for j in group)),
                tuple(sorted(map(str, profiling))))

    @staticmethod
    def _group_key(group: Sequence[Job]) -> tuple:
        return tuple((j.curve_key, j.compute_share, j.tenant) for j in group)

    def _choose(self, job, rnd: "_Round", state, left):
        groups, budgets, rank = rnd.groups, rnd.budgets, rnd.rank
        best_empty = None
        candidates = []
        mine, peak = (job.curve_key, job.compute_share, job.tenant), job.peak_bytes
        for ids in rnd.open.values():
            dev_id = ids[0]
            group, budget, profiling = groups[dev_id], budgets[dev_id], rnd.profiling[dev_id]
            if not group:  # the smallest empty device that fits; equal ones by their order in the state
                if peak <= budget * (1 + BUDGET_RTOL) and (
                        best_empty is None or (budget, rank[dev_id]) < (budgets[best_empty], rank[best_empty])) \
                        and (not profiling or may_share(job, group, state.tenants, profiling)):
                    best_empty = dev_id
                continue
            budget *= rnd.shares[dev_id]
            key = (budget, rnd.keys[dev_id], profiling, mine)
            bound = rnd.bounds.get(key, _UNSEEN)
            if bound is _UNSEEN:
                bound = rnd.bounds[key] = self._bound(job, group, budget, state.tenants, profiling)
            if bound is not None:
                candidates.append((bound, dev_id, group + [job], budget))
        empty_count = rnd.empty
        if best_empty is not None and (not candidates or empty_count > left):
            return best_empty, self.cache.plan([job], budgets[best_empty])
        # branch and bound: plan the groups in order of their best possible saving and stop
        # once no remaining group can beat the best plan found
        candidates.sort(key=lambda c: -c[0])
        best = None
        for bound, dev_id, members, budget in candidates:
            if best is not None and bound <= best[0][0]:
                break
            plan = self.cache.shared(members, budget)
            if plan is None or max(plan.predicted_slowdown) > self.max_slowdown:
                continue
            score = (plan.saving_bytes, -max(plan.predicted_slowdown))
            if best is None or score > best[0]:
                best = (score, dev_id, members, budget)
        if best is not None:
            return best[1], self.cache.plan(best[2], best[3])
        if best_empty is not None:
            return best_empty, self.cache.plan([job], budgets[best_empty])
        return None


    def _bound(self, job, group, budget, tenants, profiling=frozenset()) -> float | None:
        """:func:`saving_bound` of ``group`` plus ``job`` under the group ``budget``, or None when :meth:`_choose`
        rules the pair out before planning: tenants that do not share (those ``profiling`` a job on the device
        too), a contention factor over the slowdown limit, or a budget below the group's minimal feasible
        budget. Depends on the jobs only through their curve keys, compute shares and tenants (as
        :class:`PlanCache` does)."""
        if not may_share(job, group, tenants, profiling):
            return None
        members = group + [job]
        if contention_factor([j.compute_share for j in members]) > self.max_slowdown:
            return None
        curves = [j.curve for j in members]
        if minimal_feasible_budget(curves) > budget * (1 + BUDGET_RTOL):
            return None
        return saving_bound(curves, budget)

    def _explain(self, job, buckets, groups, shares, by_id, state) -> WaitReason:
        """Why :meth:`_choose` found no device for ``job``: each device's refusal, the checks of
        :meth:`_choose` in its order, and the closest one (Note [Waiting reasons] in placement.reasons)."""
        if not state.devices:
            return reasons.no_device()
        # each refusal as (closeness, order, how to word it): only the closest one is worded
        refusals = []
        peak = job.peak_bytes  # a max over the curve's samples: once
        for n, ids in enumerate(buckets.values()):  # one device of each kind of device, as _choose
            dev = by_id[ids[0]]
            group = groups[dev.id]
            if peak > dev.budget_bytes * (1 + BUDGET_RTOL):
                refusals.append((reasons.closeness(reasons.NO_DEVICE_FITS), n,
                                 lambda: reasons.no_device_fits(job, state.devices)))
            elif not group and may_share(job, group, state.tenants, dev.profiling_tenants):
                continue  # an empty device that fits: _choose would have taken it
            elif len(group) >= self.max_group:
                refusals.append((reasons.closeness(reasons.DEVICE_BUSY), n,
                                 lambda dev=dev, group=group: reasons.busy(job, dev, group, self.max_group)))
            elif not may_share(job, group, state.tenants, dev.profiling_tenants):
                refusals.append((reasons.closeness(reasons.TENANTS_DO_NOT_SHARE), n, lambda dev=dev, group=group:
                                 reasons.tenants_do_not_share(job, dev, group, state.tenants)))
            else:
                members, budget = group + [job], dev.budget_bytes * shares[dev.id]
                factor = contention_factor([j.compute_share for j in members])
                need = minimal_feasible_budget([j.curve for j in members])
                if factor > self.max_slowdown:
                    refusals.append((reasons.closeness(reasons.SLOWDOWN_LIMIT, factor), n, lambda dev=dev, group=group,
                                     factor=factor: reasons.slowdown(job, dev, group, None, factor, self.max_slowdown)))
                elif need > budget * (1 + BUDGET_RTOL) or (plan := self.cache.shared(members, budget)) is None:
                    # Note [A budget reason names a device budget] in placement.reasons
                    refusals.append((reasons.closeness(reasons.NO_ROOM, need - budget), n, lambda dev=dev, group=group,
                                     need=need, budget=budget, members=members: reasons.no_room(
                                         job, dev, group, need, budget,
                                         held_floor([j.curve for j in members], 1 - shares[dev.id]))))
                else:
                    worst = max(range(len(members)), key=lambda k: plan.predicted_slowdown[k])
                    refusals.append((reasons.closeness(reasons.SLOWDOWN_LIMIT, plan.predicted_slowdown[worst]), n,
                                     lambda dev=dev, group=group, slowed=members[worst],
                                     factor=plan.predicted_slowdown[worst]:
                                     reasons.slowdown(job, dev, group, slowed, factor, self.max_slowdown)))
        return min(refusals, key=lambda r: r[:2])[2]()


_UNSEEN = object()


@dataclass
class _Round:
    """MemoryAware.decide's working state for _choose: each device's group (this round's placements
    included), budget, group share and rank in the state; the buckets of interchangeable devices with room
    (``open``, signature -> device ids, in the order of decide's ``buckets``); each device's group as
    ``(curve key, compute share, tenant)`` per job (``keys``); ``_bound`` per group budget, group key,
    profiling tenants and job key (``bounds``); how many devices are empty (``empty``); each device's
    ``profiling_tenants`` (``profiling``)."""

    groups: dict
    budgets: dict
    shares: dict
    rank: dict
    open: dict
    keys: dict
    empty: int
    profiling: dict  # device id -> its profiling tenants (Note [Profile runs are tenants on their device])
    bounds: dict = dataclasses.field(default_factory=dict)


@dataclass
class _Pending:
    """A decision of :meth:`MemoryAware.decide` in progress: the state it decides for, its working state
    (``rnd``, ``buckets``, ``quotas``), the jobs still to consider in fair-share order (``order``, ``left`` of
    them), and what it decided so far (``out``, ``waiting``, ``explained``: Note [Waiting reasons])."""

    state: ClusterState
    explain: bool
    rnd: _Round
    buckets: dict
    quotas: Quotas
    order: Iterator[Job]
    left: int
    out: list = dataclasses.field(default_factory=list)
    waiting: dict = dataclasses.field(default_factory=dict)
    explained: dict = dataclasses.field(default_factory=dict)

    def continued_by(self, state: ClusterState) -> bool:
        """Whether ``state`` is this decision's state with its placements made: the same devices (budgets,
        group shares, profiling tenants), each running what it ran plus the jobs placed on it, the same queued
        jobs less those placed, the same tenants (their usage aside: Note [Planning budget]). Jobs are compared by id,
        tenant, curve key, compute share, priority, submission time and iterations."""
        placed = {p.job_id: p.device_id for p in self.out}
        before = {d.id: d for d in self.state.devices}
        if {d.id for d in state.devices} != before.keys() or len(state.queued) != len(self.state.queued) - len(placed):
            return False
        on: dict[Hashable, list[Job]] = {d: list(dev.running) for d, dev in before.items()}
        queued = []
        for job in self.state.queued:
            if job.id in placed:
                on[placed[job.id]].append(job)
            else:
                queued.append(job)
        for d in state.devices:
            old = before[d.id]
            if (d.budget_bytes, d.group_share, d.profiling_tenants) != \
                    (old.budget_bytes, old.group_share, old.profiling_tenants) or \
                    sorted(map(_job_print, d.running)) != sorted(map(_job_print, on[d.id])):
                return False
        if sorted(map(_job_print, state.queued)) != sorted(map(_job_print, queued)):
            return False
        return {t: dataclasses.replace(v, usage_byte_seconds=0.0) for t, v in state.tenants.items()} == \
            {t: dataclasses.replace(v, usage_byte_seconds=0.0) for t, v in self.state.tenants.items()}


def _job_print(job: Job) -> tuple:
    return (str(job.id), str(job.tenant), str(job.curve_key), job.compute_share, job.priority, job.submitted_s,
            job.iterations)


def saving_bound(curves: Sequence, budget_bytes: float) -> float:
    """Upper bound of the saving :func:`plan_group` can report, exact for gating plans: with
    unequal iteration times and a sum of peaks over the budget the plan gates, and a gating
    plan's predicted peak is the budget."""
    total = sum(c.peak_bytes for c in curves)
    if total > budget_bytes * (1 + BUDGET_RTOL) and not equal_periods(curves):
        return total - budget_bytes
    return saving_upper_bound(curves)


def saving_upper_bound(curves: Sequence) -> float:
    """Most bytes a group can save: sum of peaks minus a lower bound of any combined peak,
    ``max_i(peak_i + sum_{j != i} min_j)`` (every job holds at least its curve's minimum)."""
    lows = [float(c.bytes.min()) for c in curves]
    low_total = sum(lows)
    return sum(c.peak_bytes for c in curves) - max(c.peak_bytes + low_total - lo for c, lo in zip(curves, lows))
