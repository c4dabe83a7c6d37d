"""Stores why waiting jobs wait: the scheduler round's bulk write of ``Job.waiting_reason`` (with
its kind and since when) and of one ``waiting`` Event per job whose reason changed.

Note [Waiting reasons]
~~~~~~~~~~~~~~~~~~~~~~
Every round gives each job it leaves waiting — ``ready`` jobs the policy did not place (its
``Decision.waiting``, placement.reasons), ``ready`` jobs whose placement the locked re-check
refused, ``queued`` jobs with no online device to profile on — one reason, and :func:`record`
writes those that differ from the stored one: the columns (what the API and the job page show)
and one ``waiting`` Event (what the job's log shows), so a reason that stays the same costs
nothing per round and the log records each change once, not each round. ``waiting_since`` is set
when a job is first given a reason and kept while the reason changes. Any status move clears all
three (zico.jobs.transitions), so a placed job shows no reason, and a job that goes back to waiting
is explained afresh.

A fixed number of queries whatever the number of jobs (none when nothing changed): the changed
jobs still in the status the round saw are locked and read (a job cancelled or placed meanwhile
keeps its move's cleared reason), one UPDATE sets each its own reason (joined with a ``VALUES``
list: a ``CASE`` on the id, as Django's ``bulk_update`` writes, took seconds to build for 500 jobs),
one bulk insert writes the Events.

Note [A waiting Event names no other tenant's job]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A reason's sentence never names a job of another tenant (Note [Waiting reasons] in placement.reasons), but
its figures keep the ids (``job_ids``, ``slowed_job_id``, ``job``) for the round's logs. The ``waiting``
Event is the job's, read by its tenant through ``/api/jobs/{id}/events/``, so :func:`record` writes into it
only the ids of the job's own tenant's jobs, and ``other_tenant_jobs``: how many of another tenant's it left
out (one query for the tenants of every id the round's figures name).
"""
from __future__ import annotations

from django.db import connection, transaction
from django.utils import timezone

from placement.reasons import WaitReason
from zico.jobs.models import Event, Job


def record(waiting: list[tuple[Job, WaitReason]], status: str, now=None) -> list[int]:
    """Store each job's reason where it changed, for jobs still in ``status``.

    Args:
        waiting: ``(job row as the round read it, its reason)``; the rows' ``waiting_*`` fields are
            compared with the reasons and updated in memory for the jobs written.
        status: the status the round saw them in (``ready`` or ``queued``).
        now: the time of the round (``waiting_since`` of newly waiting jobs).
    Returns:
        The ids of the jobs whose reason was written (and got a ``waiting`` Event).
    """
    changed = {job.pk: (job, r) for job, r in waiting if (job.waiting_reason, job.waiting_kind) != (r.text, r.kind)}
    if not changed:
        return []
    now = now or timezone.now()
    tenant_of = _tenants_of(r.figures for _, r in changed.values())
    with transaction.atomic():
        still = list(Job.objects.select_for_update().filter(pk__in=list(changed), status=status)
                     .order_by("pk").values_list("pk", "waiting_since"))
        if not still:
            return []
        ids = [pk for pk, _ in still]
        since = {pk: s or now for pk, s in still}
        _write_columns([(pk, changed[pk][1]) for pk in ids], now)
        Event.objects.bulk_create([
            Event(kind=Event.Kind.WAITING, time=now, job_id=pk, tenant_id=changed[pk][0].tenant_id,
                  details={"reason": changed[pk][1].text, "kind": changed[pk][1].kind,
                           "device": changed[pk][1].device,
                           **own_figures(changed[pk][1].figures, changed[pk][0].tenant_id, tenant_of)})
            for pk in ids])
    for pk in ids:
        job, r = changed[pk]
        job.waiting_reason, job.waiting_kind, job.waiting_since = r.text, r.kind, since[pk]
    return ids


_JOB_ID_KEYS = ("slowed_job_id", "job")  # figures naming one job (placement.reasons); "job_ids" names several


def _tenants_of(all_figures) -> dict[int, int]:
    """``{job id: tenant id}`` of every job the figures name (one query; none when they name none)."""
    ids = set()
    for figures in all_figures:
        ids.update(i for i in figures.get("job_ids") or () if isinstance(i, int))
        ids.update(figures[k] for k in _JOB_ID_KEYS if isinstance(figures.get(k), int))
    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "tenant_id")) if ids else {}


def own_figures(figures, tenant_id: int, tenant_of: dict[int, int]) -> dict:
    """A reason's ``figures`` as a ``tenant_id`` job's Event may carry them (Note [A waiting Event names no other
    tenant's job]): the ids of other tenants' jobs (or of jobs gone) left out and counted in
    ``other_tenant_jobs``."""
    out = dict(figures)
    hidden = set()
    if isinstance(out.get("job_ids"), list):
        hidden.update(i for i in out["job_ids"] if tenant_of.get(i) != tenant_id)
        out["job_ids"] = [i for i in out["job_ids"] if i not in hidden]
    for k in _JOB_ID_KEYS:
        if out.get(k) is not None and tenant_of.get(out[k]) != tenant_id:
            hidden.add(out[k])
            out[k] = None
    if hidden:
        out["other_tenant_jobs"] = len(hidden)
    return out


def _write_columns(rows: list[tuple[int, WaitReason]], now) -> None:
    """``UPDATE job SET waiting_reason, waiting_kind, waiting_since (kept if set) FROM (VALUES (id,
    text, kind), ...)``: one statement per ``max_query_params`` (one for PostgreSQL; SQLite and
    PostgreSQL both name a VALUES list's columns column1, column2, ...)."""
    table, q = Job._meta.db_table, connection.ops.quote_name
    limit = connection.features.max_query_params
    step = len(rows) if not limit else max(1, (limit - 1) // 3)
    with connection.cursor() as cur:
        for i in range(0, len(rows), step):
            chunk = rows[i:i + step]
            values = ", ".join(["(%s, %s, %s)"] * len(chunk))
            cur.execute(f"UPDATE {q(table)} SET {q('waiting_reason')} = v.column2, {q('waiting_kind')} = v.column3, "
                        f"{q('waiting_since')} = COALESCE({q(table)}.{q('waiting_since')}, %s) "
                        f"FROM (VALUES {values}) AS v WHERE {q(table)}.{q('id')} = v.column1",
                        [connection.ops.adapt_datetimefield_value(now),
                         *[x for pk, r in chunk for x in (pk, r.text, r.kind)]])
