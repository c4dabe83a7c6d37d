"""The API's DRF exception handler: DRF's own, plus a JSON 413 for a request body over the size limit.

Django raises ``RequestDataTooBig`` (a SuspiciousOperation) when a body exceeds
``settings.DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes; DRF's handler does not know it, so API clients got Django's
HTML 400 page. Here it becomes ``413 {"detail": "request body too large: the limit is N bytes ..."}``.

A viewset's object that is not found, or not visible to the caller (the two are not told apart, so that
another tenant's ids stay unknown), is a 404 naming what was asked for: ``no job 12 among the jobs you can
see``, not Django's ``No Job matches the given query.``
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import Http404
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc, context):
    """DRF ``EXCEPTION_HANDLER``: 413 for RequestDataTooBig, 400 for TooManyFieldsSent, else DRF's answer."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response({"detail": f"request body too large: the limit is {limit} bytes "
                                   "(DATA_UPLOAD_MAX_MEMORY_SIZE)"},
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, TooManyFieldsSent):
        return Response({"detail": f"too many form fields: the limit is {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
                                   "(DATA_UPLOAD_MAX_NUMBER_FIELDS)"}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404) and (detail := _not_found(context.get("view"))):
        return Response({"detail": detail}, status=status.HTTP_404_NOT_FOUND)
    return drf_exception_handler(exc, context)


def _not_found(view) -> str | None:
    """``no <model> <id> among the <models> you can see`` for a viewset whose object lookup (``get_object``)
    found nothing; None for any other 404 (DRF's own text then)."""
    lookup = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "pk")
    key = (getattr(view, "kwargs", None) or {}).get(lookup)
    if key is None or not hasattr(view, "get_queryset"):
        return None
    try:
        meta = view.get_queryset().model._meta
    except Exception:  # a view whose queryset cannot be built here: DRF's own answer
        return None
    if not str(key).isdigit():  # a slug is not echoed: a 404 says nothing of what another tenant calls things
        return f"no {meta.verbose_name} with that {lookup} among the {meta.verbose_name_plural} you can see"
    return f"no {meta.verbose_name} {key} among the {meta.verbose_name_plural} you can see"
