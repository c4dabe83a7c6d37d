"""The device timeline's markers under load: "OOM prevented" reports are one marker per job and minute with their
counts summed, and a later poll that sees a new report of a shown minute returns that minute's marker whole (same
group), so the page replaces it; other events stay one marker each."""
from datetime import datetime, timezone

import pytest

from zico.jobs.models import Event
from zico.web.timelines import OOM_MINUTE_S, device_events

pytestmark = pytest.mark.django_db


def _oom(cluster, job, t, count=3, waited=0.2, overruns=0):
    e = Event.record(Event.Kind.OOM_PREVENTED, job=job, device=cluster.device, count=count, waited_s=waited,
                     overruns=overruns)
    Event.objects.filter(pk=e.pk).update(time=datetime.fromtimestamp(t, tz=timezone.utc))
    return e


def test_oom_reports_are_one_marker_per_job_and_minute_and_a_later_poll_replaces_a_minute(cluster):
    minute = (int(datetime.now(timezone.utc).timestamp()) // OOM_MINUTE_S - 3) * OOM_MINUTE_S
    a, b = cluster.acme_job, cluster.rival_job
    for i in range(5):
        _oom(cluster, a, minute + 5 + i)
    _oom(cluster, b, minute + 7, count=2, overruns=1)
    last = _oom(cluster, a, minute + OOM_MINUTE_S + 1, count=4)
    evs = device_events(cluster.device, None, minute - 60)
    ooms = [e for e in evs if e["kind"] == Event.Kind.OOM_PREVENTED]
    assert [(e["job"], e["count"]) for e in ooms] == [(a.pk, 15), (b.pk, 2), (a.pk, 4)]  # by their newest ids
    first = next(e for e in ooms if e["count"] == 15)
    assert first["t"] == minute + 5 and first["label"].startswith(
        f"OOM prevented ×15 in 5 reports from {datetime.fromtimestamp(minute + 5, tz=timezone.utc):%H:%M:%S} UTC: "
        f"“{a}” waited 1.00 s for the budget")
    assert next(e for e in ooms if e["job"] == b.pk)["label"].endswith(
        "; granted past the budget ×1 (the deadlock rule)")
    assert [e["kind"] for e in evs if e["kind"] != Event.Kind.OOM_PREVENTED] == ["delay", "delay"]  # the fixture's
    assert evs[-1]["id"] == last.pk  # the poll's cursor: the newest event id

    newer = _oom(cluster, a, minute + OOM_MINUTE_S + 30, count=1)
    again = device_events(cluster.device, None, minute - 60, since_event=last.pk)
    assert [(e["group"], e["count"], e["id"]) for e in again] == [(ooms[-1]["group"], 5, newer.pk)]


def test_grants_past_the_budget_alone_are_said_as_such_not_as_oom_prevented_x0(cluster):
    minute = (int(datetime.now(timezone.utc).timestamp()) // OOM_MINUTE_S - 2) * OOM_MINUTE_S
    _oom(cluster, cluster.acme_job, minute + 1, count=0, overruns=3)
    (e,) = [e for e in device_events(cluster.device, None, minute - 60) if e["kind"] == Event.Kind.OOM_PREVENTED]
    assert e["label"] == f"Granted past the budget ×3: “{cluster.acme_job}”, by the deadlock rule"
    assert "×0" not in e["label"] and e["overruns"] == 3


def test_another_tenants_oom_reports_stay_unnamed_and_hidden_ones_absent(cluster, personas):
    minute = (int(datetime.now(timezone.utc).timestamp()) // OOM_MINUTE_S - 2) * OOM_MINUTE_S
    _oom(cluster, cluster.rival_job, minute + 1)
    _oom(cluster, cluster.acme_job, minute + 2)
    mine = device_events(cluster.device, {personas.tenant.pk}, minute - 60)
    assert [e["job"] for e in mine if e["kind"] == Event.Kind.OOM_PREVENTED] == [cluster.acme_job.pk]
