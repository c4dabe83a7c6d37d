"""The API's DRF exception handler: DRF's own, plus a JSON 413 for a request body over the size limit.

Django raises ``RequestDataTooBig`` (a SuspiciousOperation) when a body exceeds
``settings.DATA_UPLOAD_MAX_MEMORY_SIZE`` bytes; DRF's handler does not know it, so API clients got Django's
HTML 400 page. Here it becomes ``413 {"detail": "request body too large: the limit is N bytes ..."}``.
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
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
    return drf_exception_handler(exc, context)
