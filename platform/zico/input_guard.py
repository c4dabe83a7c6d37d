"""Refuse requests whose path or query string holds a NUL character, with a 400 naming where.

PostgreSQL text cannot hold NUL (0x00), so such a value reaching a filter (``/api/jobs/?status=%00``,
``/api/tenants/acme/members/%00/``) failed as a 500 (found by tests/fuzz). Form fields and JSON bodies
are already guarded by Django's and DRF's ``ProhibitNullCharactersValidator`` on every CharField.
"""
from django.http import JsonResponse


class RejectNulMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = None
        if "\x00" in request.path:
            where = "the URL path"
        else:
            for key, values in request.GET.lists():
                if "\x00" in key or any("\x00" in v for v in values):
                    where = f"query parameter {key.replace(chr(0), '')!r}"
                    break
        if where is not None:
            return JsonResponse({"detail": f"{where} contains a NUL character"}, status=400)
        return self.get_response(request)
