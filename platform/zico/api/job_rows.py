"""Fast path of the job list: the JSON of ``JobSerializer`` for a page of jobs, built from ``values()`` rows.

Note [Job list fast path]
    Profiling GET /api/jobs/ (25 rows) showed most of a request's CPU in building model instances (and the
    prefetched placements and profiles) and in DRF's per-row, per-field serializer machinery. The list
    therefore reads plain rows: one query for the page (tenant slug, owner username and the active
    placement's device as joins/subqueries of that query) and one for the page's latest profiles
    (``DISTINCT ON (job_id)``). Each value still goes through the ``to_representation`` of the very field
    ``JobSerializer`` (or ``ProfileSummarySerializer``) declares for it, so the JSON is the serializer's:
    same keys, same order, same formats (datetimes, decimals, choices).

    Drift: a column field added to ``JobSerializer.Meta.fields`` is picked up by itself. A field the fast
    path cannot read from a column (a ``SerializerMethodField`` or a relation other than ``tenant``,
    ``owner``, ``device``, ``profile``) makes :func:`fast_path_supported` false and the view falls back to
    the serializer, so a new field is never dropped; tests/api/test_job_list_fast_path.py fails on it, so
    that it gets a fast-path reader here, and compares both paths' JSON row for row.
"""
from __future__ import annotations

from functools import lru_cache

from django.db.models import F, OuterRef, QuerySet, Subquery
from rest_framework import serializers

from zico.cluster.models import Placement
from zico.jobs.models import Job, MemoryProfile

# JobSerializer fields the fast path reads from somewhere other than the job's own column of that name.
SPECIAL = {"tenant": "tenant__slug", "owner": "owner__username", "device": None, "profile": None}


@lru_cache(maxsize=None)
def _fields(serializer_class) -> dict:
    return dict(serializer_class().fields)  # built once: a serializer builds its fields per instance


@lru_cache(maxsize=None)
def _plan(serializer_class) -> tuple[tuple[str, ...], tuple[tuple[str, str, object], ...]] | None:
    """(columns to read, [(JSON key, row key, field)]) for ``serializer_class``; None when some declared
    field has no fast-path reader (Note [Job list fast path])."""
    fields = _fields(serializer_class)
    columns = {f.name for f in Job._meta.concrete_fields}
    out, reads = [], {}
    for name, field in fields.items():
        if name in SPECIAL:
            if name in ("tenant", "owner") and not isinstance(field, serializers.SlugRelatedField):
                return None
            if SPECIAL[name]:
                reads[f"_{name}"] = F(SPECIAL[name])
            out.append((name, f"_{name}", field))
        elif field.source == name and name in columns and not isinstance(
                field, (serializers.SerializerMethodField, serializers.RelatedField, serializers.BaseSerializer)):
            reads[name] = name
            out.append((name, name, field))
        else:
            return None
    return tuple(reads.items()), tuple(out)


def fast_path_supported(serializer_class) -> bool:
    return _plan(serializer_class) is not None


def _device_subquery():
    # The device of the job's newest active placement, as JobSerializer.get_device.
    return Subquery(Placement.objects.active().filter(jobs=OuterRef("pk")).order_by("-started_at")
                    .values("device_id")[:1])


class PageRows:
    """What DRF's paginator needs of a queryset (``count()``, a slice), for jobs ``qs`` (filtered, ordered):
    a slice is the page's ids (a narrow sort over the scoped jobs) and then their rows, in one query.

    Sorting the full rows (with ``params`` and ``metrics``) to keep 25 made PostgreSQL sort 2000 wide rows
    (18 ms for the load script's tenant); sorting ids first and reading 25 rows costs about a millisecond.
    """

    def __init__(self, qs: QuerySet, serializer_class):
        self.qs, self.serializer_class = qs, serializer_class

    def count(self) -> int:
        return self.qs.count()

    def __getitem__(self, page: slice) -> list[dict]:
        reads, _ = _plan(self.serializer_class)
        plain = [v for k, v in reads if isinstance(v, str)]
        named = {k: v for k, v in reads if not isinstance(v, str)}
        ids = self.qs.values("pk")[page]
        rows = Job.objects.filter(pk__in=Subquery(ids)).order_by(*self.qs.query.order_by or Job._meta.ordering)
        return list(rows.values("pk", *plain, **named, _device=_device_subquery()))


def _latest_profiles(job_ids: list[int], profile_serializer_class) -> dict[int, dict]:
    """{job id: ProfileSummarySerializer JSON of its newest profile} in one query."""
    fields = _fields(profile_serializer_class)
    rows = (MemoryProfile.objects.filter(job_id__in=job_ids).order_by("job_id", "-created_at", "-id")
            .distinct("job_id").values("job_id", *fields))
    out = {}
    for r in rows:
        out[r["job_id"]] = {k: (None if r[k] is None else f.to_representation(r[k])) for k, f in fields.items()}
    return out


def job_rows(rows: list[dict], serializer_class, profile_serializer_class) -> list[dict]:
    """The serializer's JSON (a list of dicts, key order as the serializer's) for ``rows`` (a slice of
    :class:`PageRows`); one more query for the profiles."""
    _, out = _plan(serializer_class)
    profiles = _latest_profiles([r["pk"] for r in rows], profile_serializer_class) if rows else {}
    result = []
    for r in rows:
        d = {}
        for key, src, field in out:
            if key == "profile":
                d[key] = profiles.get(r["pk"])
            elif key == "device":
                d[key] = r["_device"]
            else:
                v = r[src]
                d[key] = None if v is None else field.to_representation(v) if key not in ("tenant", "owner") \
                    else v
        result.append(d)
    return result
