"""Fast path of the job list: the JSON of ``JobSerializer`` for a page of jobs, read with one SQL statement.

Note [Job list fast path]
    Profiling GET /api/jobs/ (25 rows) showed most of a request's CPU in building model instances (and the
    prefetched placements and profiles), in DRF's per-row, per-field serializer machinery, and in compiling
    the ORM querysets (more than running them). The list therefore reads plain rows: the page's ids come
    from the view's queryset (scoping and filters stay the ORM's, ``Job.objects.visible_to``); the rows,
    tenant slug, owner username, the active placement's device (``ended_at IS NULL``, newest
    ``started_at``, as ``Placement.objects.active()`` and ``JobSerializer.get_device``) and the latest
    profile (newest ``created_at``, ``id``, as ``get_profile``) are one statement whose text is built once
    from the models' metadata. Each value still goes through the model field's ``from_db_value`` and the
    ``to_representation`` of the very serializer field ``JobSerializer`` (or ``ProfileSummarySerializer``)
    declares for it, so the JSON is the serializer's: same keys, same order, same formats.

    Drift: a column field added to ``JobSerializer.Meta.fields`` is picked up by itself. A field the fast
    path cannot read from a column (a ``SerializerMethodField`` or a relation other than ``tenant``,
    ``owner``, ``device``, ``profile``) makes :func:`fast_path_supported` false and the view falls back to
    the serializer, so a new field is never dropped; tests/api/test_job_list_fast_path.py fails on it, so
    that it gets a reader here, and compares both paths' JSON byte for byte.
"""
from __future__ import annotations

from functools import lru_cache

from django.db import connection
from django.db.models import QuerySet
from rest_framework import serializers

from zico.cluster.models import Placement
from zico.jobs.models import Job, MemoryProfile

# JobSerializer fields the fast path reads from somewhere other than the job's own column of that name.
SPECIAL = ("tenant", "owner", "device", "profile")


@lru_cache(maxsize=None)
def _fields(serializer_class) -> dict:
    return dict(serializer_class().fields)  # built once: a serializer builds its fields per instance


@lru_cache(maxsize=None)
def _plan(serializer_class) -> tuple[tuple[str, object], ...] | None:
    """[(JSON key, serializer field)] of ``serializer_class``; None when some declared field has no
    fast-path reader (Note [Job list fast path])."""
    columns = {f.name for f in Job._meta.concrete_fields} | {f.attname for f in Job._meta.concrete_fields}
    out = []
    for name, field in _fields(serializer_class).items():
        if name in ("tenant", "owner"):
            if not isinstance(field, serializers.SlugRelatedField) or field.source != name:
                return None
        elif name not in SPECIAL and not (field.source in (name, f"{name}_id") and field.source in columns
                                          and not isinstance(field, (serializers.SerializerMethodField,
                                                                     serializers.RelatedField,
                                                                     serializers.BaseSerializer))):
            return None
        out.append((name, field))
    return tuple(out)


def fast_path_supported(serializer_class) -> bool:
    """True when the page can be read with the one statement: PostgreSQL only (it uses ``LEFT JOIN
    LATERAL``; the demo's SQLite database takes the serializer's own path), and every field readable."""
    return connection.vendor == "postgresql" and _plan(serializer_class) is not None


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


@lru_cache(maxsize=None)
def _page_sql(serializer_class, profile_serializer_class) -> tuple[str, tuple, tuple]:
    """(SQL of a page with a ``{scope}`` hole for the page's ids, [(JSON key, column index, model field,
    serializer field)] of the job, the same of its profile); built once from the models' metadata."""
    out = _plan(serializer_class)
    job, user = Job._meta, Job._meta.get_field("owner").related_model._meta
    tenant = Job._meta.get_field("tenant").related_model._meta
    prof, place = MemoryProfile._meta, Placement._meta
    through = Placement._meta.get_field("jobs").remote_field.through._meta
    cols, job_cols = [], []
    for key, field in out:
        if key == "tenant":
            cols.append(f"t.{_q(tenant.get_field(field.slug_field).column)}")
            model_field = None
        elif key == "owner":
            cols.append(f"u.{_q(user.get_field(field.slug_field).column)}")
            model_field = None
        elif key == "device":
            cols.append(f"(SELECT p.{_q(place.get_field('device').column)} FROM {_q(place.db_table)} p "
                        f"JOIN {_q(through.db_table)} pj ON pj.{_q(through.get_field('placement').column)} = p.id "
                        f"WHERE pj.{_q(through.get_field('job').column)} = j.id AND p.{_q('ended_at')} IS NULL "
                        f"ORDER BY p.{_q('started_at')} DESC LIMIT 1)")
            model_field = None
        elif key == "profile":
            continue
        else:  # a column, by its name or (a foreign key's id, e.g. ``code`` from ``code_id``) its attname
            model_field = next(f for f in job.concrete_fields if field.source in (f.name, f.attname))
            cols.append(f"j.{_q(model_field.column)}")
        # the slug, the username and the device id are already their JSON: no serializer field to apply
        job_cols.append((key, len(cols) - 1, model_field, None if key in SPECIAL else field))
    prof_cols, prof_read = [], []
    for key, field in _fields(profile_serializer_class).items():
        model_field = prof.get_field(key)
        cols.append(f"mp.{_q(model_field.column)}")
        prof_read.append(_q(model_field.column))  # not the curve: the list never shows it
        prof_cols.append((key, len(cols) - 1, model_field, field))
    order = ", ".join(f"j.{_q(job.get_field(o.lstrip('-')).column)}{' DESC' if o.startswith('-') else ''}"
                      for o in job.ordering)
    prof_order = ", ".join(f"{_q(prof.get_field(o.lstrip('-')).column)}{' DESC' if o.startswith('-') else ''}"
                           for o in ("-created_at", "-id"))  # as JobSerializer.get_profile
    cols.append(f"row_number() OVER (ORDER BY {order}) AS zico_row")  # the page's order, for read()
    sql = (f"SELECT {', '.join(cols)} FROM {_q(job.db_table)} j "
           f"JOIN {_q(tenant.db_table)} t ON t.{_q(tenant.pk.column)} = j.{_q(job.get_field('tenant').column)} "
           f"LEFT JOIN {_q(user.db_table)} u ON u.{_q(user.pk.column)} = j.{_q(job.get_field('owner').column)} "
           f"LEFT JOIN LATERAL (SELECT {', '.join(prof_read)} FROM {_q(prof.db_table)} "
           f"WHERE {_q(prof.get_field('job').column)} = j.{_q(job.pk.column)} "
           f"ORDER BY {prof_order} LIMIT 1) mp ON true "
           f"WHERE j.{_q(job.pk.column)} IN ({{scope}}) ORDER BY {order}")
    return sql, tuple(job_cols), tuple(prof_cols)


def page_sql_text(serializer_class, profile_serializer_class) -> str:
    """The page statement's text (with its ``{scope}`` hole): part of the list's ETag, so that a change of
    the serializer's fields, and hence of the JSON, changes every ETag."""
    return _page_sql(serializer_class, profile_serializer_class)[0]


def _value(v, model_field, field):
    if model_field is not None and hasattr(model_field, "from_db_value"):
        v = model_field.from_db_value(v, None, connection)  # e.g. JSONField: text -> Python
    return None if v is None else field.to_representation(v) if field is not None else v


class PageRows:
    """What DRF's paginator needs of a queryset (``count()``, a slice), for jobs ``qs`` (scoped, filtered,
    default order): a slice is the serializer's JSON of that page, read with one SQL statement.

    The page's ids come from ``qs`` itself (so scoping and filters stay the ORM's), sorted narrow: sorting
    the full rows (with ``params`` and ``metrics``) to keep 25 made PostgreSQL sort 2000 wide rows (18 ms
    for the load script's tenant). The rows, tenant slug, owner username, active placement's device and
    latest profile are then one statement whose text is built once (:func:`_page_sql`): compiling ORM
    querysets for them cost more CPU than running them. :meth:`count_and_stamp` counts the list and hashes
    a page's rows in one statement, so that a poll can be answered 304 before the page is read (Note
    [Job list ETag] in zico/api/conditional.py); :meth:`read` counts, hashes and reads the page in one.
    """

    def __init__(self, qs: QuerySet, serializer_class, profile_serializer_class):
        self.qs, self.classes = qs, (serializer_class, profile_serializer_class)
        self._count: int | None = None
        self._rows: tuple[slice, list[dict]] | None = None  # (page, its JSON) from read()

    def _scope(self, page: slice) -> tuple[str, tuple]:
        return self.qs.order_by(*Job._meta.ordering).values("pk")[page].query.sql_with_params()

    def _statement(self, page: slice, select: str) -> tuple[str, tuple]:
        """``WITH page_rows AS (the page) <select>``, where ``select`` may use ``{count}`` (jobs in ``qs``)
        and ``{stamp}`` (md5 of the page's rows as text, sorted: each row holds the ordering keys, so the
        set of rows fixes the page; NULL for an empty page)."""
        template = _page_sql(*self.classes)[0]
        every, every_params = self.qs.order_by().values("pk").query.sql_with_params()
        scope, params = self._scope(page)
        sql = (f"WITH page_rows AS MATERIALIZED ({template.replace('{scope}', scope)}) "
               + select.format(count=f"(SELECT count(*) FROM ({every}) c)",
                               stamp="(SELECT md5(string_agg(r::text, '|' ORDER BY r::text)) FROM page_rows r)"))
        return sql, (*params, *every_params)

    def count_and_stamp(self, page: slice) -> tuple[int, str]:
        """(jobs in ``qs``, a hash of ``page``'s rows: '' for an empty page) in one statement, without reading
        the rows; :meth:`read` gives the same hash for the same rows."""
        sql, params = self._statement(page, "SELECT {count}, {stamp}")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            self._count, stamp = cursor.fetchone()
        return self._count, stamp or ""

    def read(self, page: slice) -> tuple[int, str, list[dict]]:
        """(jobs in ``qs``, the hash of :meth:`count_and_stamp`, ``page`` as the serializer's JSON) in one
        statement; a later slice ``page`` of this object answers these rows."""
        sql, params = self._statement(page, "SELECT n.n, h.h, page_rows.* FROM (SELECT {count} AS n) n "
                                            "CROSS JOIN (SELECT {stamp} AS h) h "
                                            "LEFT JOIN page_rows ON true ORDER BY page_rows.zico_row")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        self._count, stamp = rows[0][0], rows[0][1] or ""
        self._rows = (page, self._convert([r[2:] for r in rows if stamp]))  # no stamp: an empty page
        return self._count, stamp, self._rows[1]

    def count(self) -> int:
        if self._count is None:
            self._count = self.qs.count()
        return self._count

    def __getitem__(self, page: slice) -> list[dict]:
        if self._rows is not None and self._rows[0] == page:
            return self._rows[1]
        template = _page_sql(*self.classes)[0]
        scope, params = self._scope(page)
        with connection.cursor() as cursor:
            cursor.execute(template.replace("{scope}", scope), params)
            return self._convert(cursor.fetchall())

    def _convert(self, rows) -> list[dict]:
        _sql, job_cols, prof_cols = _page_sql(*self.classes)
        order = _plan(self.classes[0])
        pid = next(i for k, i, _m, _f in prof_cols if k == "id")
        result = []
        for r in rows:
            d = {k: _value(r[i], m, f) for k, i, m, f in job_cols}
            d["profile"] = None if r[pid] is None else {k: _value(r[i], m, f) for k, i, m, f in prof_cols}
            result.append({k: d[k] for k, _f in order})  # the serializer's key order
        return result
