"""The OpenAPI schema's error responses, written once: a drf-spectacular postprocessing hook adds them to
every operation, in the shapes the API really answers (tests/api/test_api_schema_conformance.py checks
real responses of every endpoint against the generated schema).

Which operation documents which error:
* 401 (no or bad credentials) and 429 (a rate limit, zico/ratelimits.py; with ``Retry-After``): every one;
* 403 (role too low, or staff only): every operation on a tenant, device, job or member that changes
  something, and every read that a role could refuse;
* 404 (not one of your tenants' objects, or gone): every path with an ``{id}``, ``{slug}`` or ``{username}``;
* 400 (a field named with what is wrong): every operation with a request body or query parameters;
* 409 (the object's state refuses it): cancel of an ended job, a device budget under its running jobs, a snapshot
  for a job that is profiled, placed or running;
* 413 (an upload over its size limit): a code archive, a worker's output file, a snapshot;
* 503 (try again later, with ``Retry-After``): an estimate asked for while too many wait, or without Redis.

The worker-facing paths (``/api/worker/...``, a job token instead of a user) document 403 on every method: a
token for another job, or a job that ended too long ago.

Bodies: ``{"detail": "..."}`` for 401/403/404/409/429 and for a malformed body; ``{"field": ["..."]}`` (or
nested, ``{"params": {"batch_size": ["..."]}}``) for a field-named 400. The device budget's 409 names its
field: ``{"budget_bytes": ["..."]}``.
"""
from __future__ import annotations

DETAIL = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
FIELD_ERRORS = {"type": "object", "description": "field name -> messages (a nested object for a dotted field)",
                "additionalProperties": {"oneOf": [{"type": "array", "items": {"type": "string"}},
                                                   {"type": "object"}]}}
COMPONENTS = {"ErrorDetail": DETAIL, "FieldErrors": FIELD_ERRORS}

# (path suffix, method) -> the 409 it may answer
CONFLICTS = {("/api/jobs/{id}/cancel/", "post"): "the job has already ended",
             ("/api/jobs/{id}/profile/", "post"): "the job is profiled, placed or running: a snapshot is attached "
                                                  "while it is queued or after it ended",
             ("/api/devices/{id}/", "patch"): "the budget is below what the device's running jobs need"}
# (path, method) -> the 413 it may answer
TOO_LARGE = {("/api/code/", "post"): "the archive is over ZICO_CODE_MAX_BYTES",
             ("/api/jobs/{id}/profile/", "post"): "the snapshot is over ZICO_SNAPSHOT_MAX_BYTES",
             ("/api/curves/", "post"): "the snapshot is over ZICO_SNAPSHOT_MAX_BYTES",
             ("/api/worker/jobs/{id}/files/", "post"): "the file is over ZICO_OUTPUT_MAX_FILE_BYTES, or the job's "
                                                      "outputs over ZICO_OUTPUT_MAX_BYTES"}

# (path, method) -> the 503 it may answer (with Retry-After)
UNAVAILABLE = {("/api/workloads/{key}/estimate/", "post"): "too many estimates are waiting, or Redis is unreachable; "
                                                          "Retry-After says when to ask again"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _response(description: str, *names: str) -> dict:
    schema = _ref(names[0]) if len(names) == 1 else {"oneOf": [_ref(n) for n in names]}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def add_error_responses(result, generator, request, public):
    """``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]`` entry: error responses on every operation (above)."""
    result.setdefault("components", {}).setdefault("schemas", {}).update(COMPONENTS)
    for path, operations in result.get("paths", {}).items():
        for method, op in operations.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            responses = op["responses"]
            responses.setdefault("401", _response("not signed in, or the API token is unknown or revoked",
                                                  "ErrorDetail"))
            responses.setdefault("429", _response("a rate limit is spent; Retry-After says when to retry "
                                                  "(the detail names the limit)", "ErrorDetail"))
            if "{" in path:
                responses.setdefault("404", _response("not found among the objects you may read", "ErrorDetail"))
            if method != "get" or path.startswith(("/api/tenants/{slug}", "/api/jobs/{id}", "/api/worker/")):
                responses.setdefault("403", _response("your role (or staff status) does not allow this",
                                                      "ErrorDetail"))
            if "requestBody" in op or op.get("parameters") or method in ("post", "patch", "put"):
                responses.setdefault("400", _response("bad input: the field (or parameter) is named with what is "
                                                      "wrong", "FieldErrors", "ErrorDetail"))
            if (path, method) in CONFLICTS:
                responses.setdefault("409", _response(CONFLICTS[path, method], "ErrorDetail", "FieldErrors"))
            if (path, method) in TOO_LARGE:
                responses.setdefault("413", _response(TOO_LARGE[path, method], "ErrorDetail"))
            if (path, method) in UNAVAILABLE:
                responses["503"] = _response(UNAVAILABLE[path, method], "ErrorDetail")
    return result
