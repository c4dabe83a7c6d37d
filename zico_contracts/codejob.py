"""A job that is "a command in a project": the command and environment rules, and the run-spec fields that carry
it from the scheduler to the device worker. Standard library only; the web side validates submissions with
:func:`validate_command` / :func:`validate_env` and builds the fields with :meth:`CodeSpec.to_spec`; the worker
reads them with :meth:`CodeSpec.from_spec`.

Run-spec fields (present in ``zico.device.run_job`` and ``zico.device.profile_job`` specs only for a job with
code; such a spec has ``workload: ""`` and ``params: {}``)::

    code_url         str   GET it (with the job token) for the archive's bytes
    code_sha256      str   64 lowercase hex digits: check the download against it before extracting
    code_format      str   "tar.gz" | "zip"
    code_size_bytes  int   the archive's size
    code_limits      obj   zico_contracts.codearchive.ArchiveLimits.to_dict(): pass to extract_archive
    command          [str] argv, run in the extracted project directory (no shell)
    env              obj   name -> value, already checked by validate_env; set them, then the worker's own
    job_token        str   the credential of every worker-facing request of this job (AUTH_SCHEME below)
    files_url        str   POST output files there (multipart: ``path``, ``file``), one request per file
    output_limits    obj   {"max_files", "max_bytes", "max_file_bytes"}: what the web side accepts

Worker-facing requests send ``Authorization: JobToken <job_token>`` (:func:`auth_header`). The token names the
job and expires (``ZICO_WORKER_TOKEN_TTL_S``); it is refused once the job has ended more than
``ZICO_WORKER_UPLOAD_GRACE_S`` ago, so output files are uploaded *before* the run's ``job_finished``.

Note [Job environment rule]
    A job's ``env`` may set at most :data:`ENV_MAX_VARS` variables; a name matches ``[A-Z_][A-Z0-9_]*`` (at most
    :data:`ENV_NAME_MAX` characters), a value is text of at most :data:`ENV_VALUE_MAX_BYTES` UTF-8 bytes without
    NUL. Names the platform owns are refused, because setting them would change how the worker runs the job
    rather than what the job does: every name starting with ``ZICO_`` (the platform's own), ``LD_`` and
    ``DYLD_`` (the dynamic loader: preloading a library around the shared allocator), ``PYTHON`` (the
    interpreter's start-up: ``PYTHONPATH``, ``PYTHONSTARTUP``, ...), ``PYTORCH_CUDA_ALLOC`` and the names in
    :data:`RESERVED_ENV_NAMES` (``CUDA_VISIBLE_DEVICES`` picks the device, ``PATH`` and ``HOME`` the job's
    tools and files). Everything else (``WANDB_MODE``, ``OMP_NUM_THREADS``, ``HF_HOME``, ``MY_SEED``) is the
    job's business.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

AUTH_SCHEME = "JobToken"
OUTPUT_DIR_ENV = "ZICO_OUTPUT_DIR"  # suggested: where the job writes files that are uploaded when it ends

COMMAND_MAX_ARGS = 256
COMMAND_ARG_MAX_BYTES = 4096
COMMAND_MAX_BYTES = 32 * 1024
ENV_MAX_VARS = 64
ENV_NAME_MAX = 128
ENV_VALUE_MAX_BYTES = 4096
ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
RESERVED_ENV_PREFIXES = ("ZICO_", "LD_", "DYLD_", "PYTHON", "PYTORCH_CUDA_ALLOC")
RESERVED_ENV_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "TMPDIR",
                                "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})
FORMATS = ("tar.gz", "zip")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class CodeSpecError(ValueError):
    """A command, an env or a run spec's code fields break the rules; ``field`` names the input
    (``command``, ``command[2]``, ``env``, ``env.NAME``, ``code_url``, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _utf8(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def validate_command(value: Any) -> list[str]:
    """``value`` as argv: a non-empty list of non-empty strings without NUL, at most :data:`COMMAND_MAX_ARGS`
    items, each at most :data:`COMMAND_ARG_MAX_BYTES` and all together :data:`COMMAND_MAX_BYTES` UTF-8 bytes.
    Raises CodeSpecError naming ``command`` or ``command[i]``."""
    if not isinstance(value, list):
        raise CodeSpecError("command", f"expected a list of strings (argv), got {_kind(value)}")
    if not value:
        raise CodeSpecError("command", "must not be empty: name the program to run, e.g. [\"python\", \"train.py\"]")
    if len(value) > COMMAND_MAX_ARGS:
        raise CodeSpecError("command", f"at most {COMMAND_MAX_ARGS} arguments, got {len(value)}")
    for i, arg in enumerate(value):
        if not isinstance(arg, str):
            raise CodeSpecError(f"command[{i}]", f"expected a string, got {_kind(arg)}")
        if not arg and i == 0:
            raise CodeSpecError("command[0]", "the program name must not be empty")
        if "\x00" in arg:
            raise CodeSpecError(f"command[{i}]", "NUL character")
        if _utf8(arg) > COMMAND_ARG_MAX_BYTES:
            raise CodeSpecError(f"command[{i}]", f"longer than {COMMAND_ARG_MAX_BYTES} bytes")
    if sum(_utf8(a) + 1 for a in value) > COMMAND_MAX_BYTES:
        raise CodeSpecError("command", f"longer than {COMMAND_MAX_BYTES} bytes in all")
    return list(value)


def reserved_env_reason(name: str) -> str | None:
    """Why ``name`` may not be set by a job (Note [Job environment rule]), or None when it may."""
    if name in RESERVED_ENV_NAMES:
        return f"{name} is set by the worker"
    for prefix in RESERVED_ENV_PREFIXES:
        if name.startswith(prefix):
            return f"names starting with {prefix} are reserved for the platform"
    return None


def validate_env(value: Any) -> dict[str, str]:
    """``value`` as the job's environment (Note [Job environment rule]); None or {} is no variable.
    Raises CodeSpecError naming ``env`` or ``env.<NAME>``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CodeSpecError("env", f"expected an object of NAME -> value, got {_kind(value)}")
    if len(value) > ENV_MAX_VARS:
        raise CodeSpecError("env", f"at most {ENV_MAX_VARS} variables, got {len(value)}")
    out = {}
    for name, v in value.items():
        shown = str(name)[:60]
        if not isinstance(name, str) or len(name) > ENV_NAME_MAX or not ENV_NAME_RE.fullmatch(name):
            raise CodeSpecError(f"env.{shown}", f"a name is [A-Z_][A-Z0-9_]* (at most {ENV_NAME_MAX} characters)")
        if why := reserved_env_reason(name):
            raise CodeSpecError(f"env.{name}", f"reserved: {why}")
        if not isinstance(v, str):
            raise CodeSpecError(f"env.{name}", f"expected a string value, got {_kind(v)}")
        if "\x00" in v:
            raise CodeSpecError(f"env.{name}", "NUL character in the value")
        if _utf8(v) > ENV_VALUE_MAX_BYTES:
            raise CodeSpecError(f"env.{name}", f"value longer than {ENV_VALUE_MAX_BYTES} bytes")
        out[name] = v
    return out


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), f"a {type(v).__name__}")


@dataclass(frozen=True)
class CodeSpec:
    """The code fields of a run spec (module docstring)."""

    code_url: str
    code_sha256: str
    code_format: str
    code_size_bytes: int
    command: list[str]
    job_token: str
    files_url: str
    env: dict[str, str] = field(default_factory=dict)
    code_limits: dict[str, Any] = field(default_factory=dict)
    output_limits: dict[str, int] = field(default_factory=dict)

    FIELDS = ("code_url", "code_sha256", "code_format", "code_size_bytes", "code_limits", "command", "env",
              "job_token", "files_url", "output_limits")

    def to_spec(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "CodeSpec | None":
        """The code fields of ``spec``, or None when it has no ``code_url`` (a catalog job). Raises
        CodeSpecError naming the field that is missing or malformed."""
        if spec.get("code_url") is None:
            return None
        for name in ("code_url", "files_url", "job_token"):
            v = spec.get(name)
            if not isinstance(v, str) or not v:
                raise CodeSpecError(name, f"expected a non-empty string, got {v!r:.60}")
        for name in ("code_url", "files_url"):
            if not spec[name].startswith(("http://", "https://")):
                raise CodeSpecError(name, "expected an http(s) URL")
        sha = spec.get("code_sha256")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise CodeSpecError("code_sha256", "expected 64 lowercase hex digits")
        if spec.get("code_format") not in FORMATS:
            raise CodeSpecError("code_format", f"expected one of {FORMATS}, got {spec.get('code_format')!r:.40}")
        size = spec.get("code_size_bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise CodeSpecError("code_size_bytes", f"expected a positive integer, got {size!r:.40}")
        for name in ("code_limits", "output_limits"):
            if not isinstance(spec.get(name, {}), dict):
                raise CodeSpecError(name, "expected an object")
        return cls(spec["code_url"], sha, spec["code_format"], size, validate_command(spec.get("command")),
                   spec["job_token"], spec["files_url"], validate_env(spec.get("env")),
                   dict(spec.get("code_limits") or {}), dict(spec.get("output_limits") or {}))


def auth_header(token: str) -> dict[str, str]:
    """The header of a worker-facing request: ``{"Authorization": "JobToken <token>"}``."""
    return {"Authorization": f"{AUTH_SCHEME} {token}"}
