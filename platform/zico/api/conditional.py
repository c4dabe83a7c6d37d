"""Conditional GET for lists that are polled: a strong ETag, and 304 on a matching If-None-Match.

Note [Job list ETag]
    The job list is polled (every 2 s by a dashboard or script). Its ETag changes exactly when the answer
    does — a status, a progress figure, a placement's device, a new profile, the count — and is computed
    without building the page: PostgreSQL hashes the page's rows as it reads them, in the statement that
    also counts the list (zico/api/job_rows.py, ``PageRows.count_and_stamp``); the ETag is a hash of that,
    the count, the page's absolute URL (the ``next``/``previous`` links) and the text of the page's SQL
    (which changes with the serializer's fields). A client that sends the ETag back in ``If-None-Match``
    gets ``304 Not Modified`` with no body when nothing changed: no rows converted, no JSON rendered.

    Why the rows and not a version stamp such as ``max(updated_at)`` + count: a placement opening or a
    profile being stored changes the page without touching the job row, and a queryset ``update()``
    does not bump ``updated_at``; the hash covers every column the page shows, so it cannot answer 304
    for a changed page. The hash is read before the page: a job changing in between gives a body newer
    than its ETag, so the next poll gets a 200 again (never a stale 304).

    ``Cache-Control: private, no-cache`` lets a browser keep the body but revalidate every time;
    ``Vary: Authorization`` keeps one token's page from answering another's. Lists without a cheap stamp
    (the serializer's path on SQLite, the pages' status JSON) hash the rendered body instead
    (:func:`with_body_etag`): that saves the transfer and the client's work, not the server's.
"""
from __future__ import annotations

import hashlib

from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers


def etag_of(*parts: object) -> str:
    """A strong ETag (quoted, 32 hex digits) of ``parts`` (each written with ``str``)."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(str(part).encode())
        h.update(b"\x00")
    return '"%s"' % h.hexdigest()


def mark(response, etag: str):
    """``response`` with ``etag`` and the revalidate-every-time caching headers; returns it."""
    response["ETag"] = etag
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ["Authorization"])
    return response


def not_modified(request, etag: str):
    """The 304 (or 412 for a failed If-Match) ``request`` gets for a page whose ETag is ``etag``, marked;
    None when the page has to be sent."""
    response = get_conditional_response(getattr(request, "_request", request), etag=etag)
    return None if response is None else mark(response, etag)


def with_body_etag(request, response):
    """``response`` (a 200, DRF or Django) rendered, with an ETag of its body; or a 304 when ``request``
    already has it. Any other status is returned as it is."""
    if response.status_code != 200 or response.has_header("ETag"):
        return response
    if hasattr(response, "render"):
        response.render()
    return not_modified(request, etag := etag_of(response.content)) or mark(response, etag)
