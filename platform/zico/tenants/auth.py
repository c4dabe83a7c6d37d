"""DRF authentication by personal API token: ``Authorization: Bearer zico_<prefix>_<secret>``.

``Token`` is accepted as the keyword too. A malformed, unknown or revoked token, or one whose
user is inactive, is refused with 401 (it never falls back to anonymous). Refused tokens are
counted per client IP (``RATE_LIMITS["api_bad_token"]``); past that limit the answer is 429.
"""
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from zico.ratelimits import count_bad_token

from .models import ApiToken

KEYWORDS = (b"bearer", b"token")


class ApiTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None  # not ours: let session auth (or anonymous) handle it
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Authorization header: expected 'Bearer <token>'")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Authorization header: token must be ASCII") from None
        token = ApiToken.authenticate(raw)
        if token is None:
            count_bad_token(request)  # raises Throttled (429) once this IP is over its limit
            raise exceptions.AuthenticationFailed("invalid or revoked API token")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("the token's user is inactive")
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describes the token scheme in the OpenAPI schema (drf-spectacular extension)."""

    target_class = "zico.tenants.auth.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "zico_<prefix>_<secret>"}
