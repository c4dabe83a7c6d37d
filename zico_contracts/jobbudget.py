"""The default bound of a script job profiled beside other jobs: its knob, how the bound is worked out, how it
travels, and the words people read about it.

A job submitted without a budget of its own (``zico submit --budget``) whose script has no stored curve yet is
profiled as its run starts (Note [A script's profile is the start of its run] in workers/runner.py). Beside jobs
of known memory it runs under a *default bound* (Note [Where a script is profiled] in zico.scheduling.service):
at most :data:`FRACTION_ENV` (``ZICO_JOB_DEFAULT_BUDGET_FRACTION``) of the device's budget, and never more than
the device's budget leaves beside its jobs' peaks (:func:`default_bound`). The web side reads the knob
(:func:`fraction`), puts the bound in the run spec as ``job_budget_bytes`` with ``job_budget_default`` true
(zico_contracts.specs.RunSpec), and the device agent holds the job to it exactly as it holds a declared budget,
until the job's curve is stored (the job is then gated by its curve, as any job of known memory). A job the
agent stopped at its default bound is not failed for a limit its user never set: it goes back to the queue to be
profiled alone, once (:func:`requeue_reason`). The run tells the web side through its metrics
(:data:`REFUSALS_METRIC`, a name only the worker sets: zico_contracts.jobmetrics.WORKER_METRICS).

Why a fraction of the device budget and not bytes: devices differ by orders of magnitude (the demo's 323 MiB CPU
pool, an 80 GiB GPU); a figure in bytes right for one is useless or squeezing on the other. Why 0.5: a job
without a budget then never takes more than half a device while nothing is known of it, and half is left for
the jobs of known memory the scheduler plans; a script needing more is profiled alone after its first try.

Standard library only, like every module of this package: the web side and the device worker import it.
"""
from __future__ import annotations

import math

from .oom import format_bytes

FRACTION_ENV = "ZICO_JOB_DEFAULT_BUDGET_FRACTION"
DEFAULT_FRACTION = 0.5  # of the device's budget; 0 turns the default bound off (such a job is profiled alone)
SPEC_FIELD = "job_budget_default"  # the run spec's flag: job_budget_bytes is this default bound, not the job's own
REFUSALS_METRIC = "job_budget_refusals"  # allocations the agent refused for the job's own budget (a count)
CHUNK_BYTES = 2 << 20  # the agent pool's grant unit: a bound is a whole number of chunks


class BudgetKnobError(ValueError):
    """``ZICO_JOB_DEFAULT_BUDGET_FRACTION`` is set to something that is not a fraction in [0, 1]."""


def fraction(raw: str | None) -> float:
    """The knob's value from the environment's text (None or empty: :data:`DEFAULT_FRACTION`): a number in
    [0, 1], 0 turning the default bound off. Raises BudgetKnobError naming the variable and the value."""
    if raw is None or not raw.strip():
        return DEFAULT_FRACTION
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise BudgetKnobError(f"{FRACTION_ENV}={raw!r}: expected a fraction of the device's budget in [0, 1] "
                              "(0: a job without a budget is profiled alone)")
    return value


def default_bound(device_budget_bytes: int, peaks_bytes: float, share: float, floor_bytes: int) -> int | None:
    """The bound (bytes, a whole number of 2 MiB chunks) a job without a budget of its own is profiled under on a
    device whose budget is ``device_budget_bytes`` beside jobs whose curves' peaks sum to ``peaks_bytes``: the
    least of ``share`` of the budget and what the budget leaves beside the peaks. None when the bound is off
    (``share`` 0) or below ``floor_bytes`` (the web side's budget floor, 64 MiB: Note [Budget floor] in
    zico.cluster.models; too little room, so the job waits, or is profiled alone)."""
    if share <= 0:
        return None
    bound = min(share * device_budget_bytes, device_budget_bytes - peaks_bytes)
    bound = int(bound // CHUNK_BYTES) * CHUNK_BYTES
    return bound if bound >= floor_bytes else None


def describe(bound_bytes: int) -> str:
    """``"the 150.00 MiB default bound"``."""
    return f"the {format_bytes(bound_bytes)} default bound"


def requeue_reason(bound_bytes: int) -> str:
    """Why a job stopped at its default bound goes back to the queue (its status change's reason):
    ``"needed more than the 150.00 MiB default bound beside the device's jobs while profiled: it will be profiled
    alone; submit with --budget to say what it needs"``."""
    return (f"needed more than {describe(bound_bytes)} beside the device's jobs while profiled: it will be "
            "profiled alone; submit with --budget to say what it needs")


def stopped_at_bound(status: str, metrics: dict | None) -> bool:
    """Whether a run that ended with ``status`` and ``metrics`` (its ``job_finished``) was stopped at its own
    budget: it failed after the agent refused at least one allocation for that budget (:data:`REFUSALS_METRIC`)."""
    refusals = (metrics or {}).get(REFUSALS_METRIC)
    return (status == "failed" and isinstance(refusals, int) and not isinstance(refusals, bool)
            and refusals > 0)
