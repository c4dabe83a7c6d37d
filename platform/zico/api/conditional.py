"""Conditional GET for API lists that are polled: a strong ETag of the body, 304 on a matching If-None-Match.

Note [Job list ETag]
    The job list is polled (every 2 s by a dashboard or script). Its ETag is a hash of the rendered JSON
    body, so it changes exactly when the answer does: a status, a progress figure, a placement's device,
    a new profile, the count. A client that sends the ETag back in ``If-None-Match`` gets
    ``304 Not Modified`` with no body when nothing changed; it then keeps the page it has. The page is
    still built (with the fast path, zico/api/job_rows.py, that costs a few milliseconds); what a 304
    saves is the transfer and the client's parsing. A validator computed without building the page
    (e.g. max(updated_at) + count) would not see a placement opening or a profile being stored, which
    change the page without touching the job row, so it would answer 304 for a changed page.

    ``Cache-Control: private, no-cache`` lets a browser keep the body but revalidate every time, so a
    page's ``fetch()`` polling gets the 304 handling by itself; ``Vary: Authorization`` keeps one
    token's page from answering another's.
"""
from __future__ import annotations

import hashlib

from django.utils.cache import get_conditional_response, patch_cache_control, patch_vary_headers


def with_etag(request, response):
    """``response`` (a 200 DRF Response) rendered, with ETag; or a 304 when ``request`` already has it."""
    if response.status_code != 200:
        return response
    response.render()
    etag = '"%s"' % hashlib.blake2b(response.content, digest_size=16).hexdigest()
    response["ETag"] = etag
    patch_cache_control(response, private=True, no_cache=True)
    patch_vary_headers(response, ["Authorization"])
    return get_conditional_response(getattr(request, "_request", request), etag=etag, response=response)
