"""The REST API as the ``zico`` command uses it: one requests session with the token, every failure turned into a
:class:`CliError` that says what happened (no server, a refused token, the API's own message for a 4xx)."""
from __future__ import annotations

from typing import Any

import requests

from .errors import CliError

TIMEOUT_S = (5.0, 60.0)  # connect, read


def normalise_url(url: str) -> str:
    """``url`` without a trailing slash; CliError unless it is http(s)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError(f"{url!r} is not a server URL: expected http://host[:port] or https://host")
    return url


def api_message(body: Any) -> str:
    """The API's error body as one line: ``detail``, or ``field: message`` pairs (nested fields dotted)."""
    if isinstance(body, dict):
        if isinstance(body.get("detail"), str) and len(body) == 1:
            return body["detail"]
        parts = []

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            elif isinstance(value, list):
                parts.append(f"{prefix}: {' '.join(str(v) for v in value)}")
            else:
                parts.append(f"{prefix}: {value}")

        walk("", body)
        return "; ".join(parts)
    return str(body)[:500]


class Api:
    """Requests to ``url`` with ``Authorization: Bearer <token>``."""

    def __init__(self, url: str, token: str):
        self.url = normalise_url(url)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["Accept"] = "application/json"

    def request(self, method: str, path: str, *, ok=(200,), stream=False, **kw) -> requests.Response:
        """The response of ``method path`` when its status is in ``ok``; CliError otherwise."""
        try:
            r = self.session.request(method, self.url + path, timeout=TIMEOUT_S, stream=stream, **kw)
        except requests.ConnectionError as exc:
            raise CliError(f"cannot reach the Zico server at {self.url} ({_reason(exc)})") from None
        except requests.Timeout:
            raise CliError(f"the Zico server at {self.url} did not answer in time") from None
        except requests.RequestException as exc:
            raise CliError(f"request to {self.url} failed: {exc}") from None
        if r.status_code in ok:
            return r
        try:
            message = api_message(r.json())
        except ValueError:
            message = r.text.strip()[:200] or r.reason
        if r.status_code == 401:
            raise CliError(f"the server refused the token ({message}); run `zico login {self.url}` with a valid one")
        if r.status_code == 404 and "application/json" not in r.headers.get("Content-Type", ""):
            raise CliError(f"{self.url}{path} is not a Zico API (HTTP 404)")
        raise CliError(f"{message} (HTTP {r.status_code})")

    def get(self, path: str, **params) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def post(self, path: str, body: dict | None = None, ok=(200, 201)) -> Any:
        return self.request("POST", path, json=body, ok=ok).json()


def _reason(exc: Exception) -> str:
    text = str(exc)
    for hint in ("Connection refused", "Name or service not known", "No route to host", "timed out"):
        if hint in text:
            return hint.lower()
    return text[:120]
