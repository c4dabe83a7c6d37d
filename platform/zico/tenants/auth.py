"""DRF authentication by API token (placeholder until the token model lands)."""
from rest_framework.authentication import BaseAuthentication


class ApiTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        return None
