"""The user-script job contract: the spec a worker hands the device agent for a user's own training code, the
command forms a job may use, and the paths and variables the job sees inside its sandbox.

A user-script job is a :class:`workers.agent.JobRun` whose spec has ``"kind": "script"`` (:data:`SCRIPT_KIND`);
:func:`validate_spec` checks it (raises :class:`SpecError` naming the field)::

    kind        "script"
    code_dir    absolute path of the user's project, already extracted (mounted read-only at /job/code)
    argv        the command, a non-empty list of strings: ["python", "train.py", "--epochs", "2"] (parse_command)
    env         optional {NAME: value} strings added to the job's environment (names checked: ENV_NAME)
    device      "cpu" or "cuda:N"
    output_dir  absolute path, writable by the job (mounted at /job/output)
    scratch_dir absolute path, the job's private writable space (mounted at /job/scratch; /tmp lives there)
    data_dir    optional absolute path, read-only (mounted at /job/data)
    env_dir     optional absolute path, the job's own packages (zico_contracts.jobenv), read-only (mounted at
                /job/env, last on the job's import path)
    iterations  optional expected number of optimizer steps (>= 0), if the caller knows it

Inside the sandbox the job's spec carries the in-sandbox paths (:data:`SANDBOX_DIRS`) and the script finds them
in the environment as well (:data:`DIR_ENV`). The resource limits it runs under, with the worker's knob for each,
are :data:`LIMITS`. The standard library only: the web side may validate a command
at submission with the same rules the job process applies.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from .oom import format_bytes

SCRIPT_KIND = "script"

# host spec field -> the path it is mounted at inside the sandbox
SANDBOX_DIRS = {"code_dir": "/job/code", "data_dir": "/job/data", "output_dir": "/job/output",
                "scratch_dir": "/job/scratch", "env_dir": "/job/env"}
# the same paths as the job's environment variables
DIR_ENV = {"code_dir": "ZICO_CODE_DIR", "data_dir": "ZICO_DATA_DIR", "output_dir": "ZICO_OUTPUT_DIR",
           "scratch_dir": "ZICO_SCRATCH_DIR", "env_dir": "ZICO_ENV_DIR"}
JOB_ID_ENV = "ZICO_JOB_ID"



@dataclass(frozen=True)
class Limit:
    """One resource limit of the sandbox (``prlimit`` sets it, soft = hard, except CPU time: hard = soft + 1 s).

    ``resource``: the ``resource`` module's name (``RLIMIT_CPU``); ``knob``: the worker's environment variable
    that sets it; ``phrase``: the limit in words, ``{}`` its value; ``in_bytes``: the value is bytes;
    ``prlimit``: prlimit's option."""

    resource: str
    knob: str
    phrase: str
    in_bytes: bool
    prlimit: str

    def describe(self, value: int) -> str:
        """``"the CPU time limit of 8 s (ZICO_JOB_CPU_S)"``; bytes as KiB/MiB/GiB (zico_contracts.oom)."""
        return self.phrase.format(format_bytes(value) if self.in_bytes else value) + f" ({self.knob})"


# The limits a user-script job runs under, by AgentSettings' field names (workers.agent.sandbox sets them,
# workers.agent.settings reads the knobs, the job process and the agent name them in failure reasons).
LIMITS = {
    "cpu_s": Limit("RLIMIT_CPU", "ZICO_JOB_CPU_S", "the CPU time limit of {} s", False, "cpu"),
    "nofile": Limit("RLIMIT_NOFILE", "ZICO_JOB_NOFILE", "the limit of {} open files", False, "nofile"),
    "nproc": Limit("RLIMIT_NPROC", "ZICO_JOB_NPROC", "the limit of {} processes and threads", False, "nproc"),
    "fsize_bytes": Limit("RLIMIT_FSIZE", "ZICO_JOB_FSIZE_BYTES", "the file size limit of {}", True, "fsize"),
}

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Names a spec's env may not set: the sandbox's own (the control fds, the paths above, the import path the
# job-side code lives on) and the interpreter's location.
RESERVED_ENV_PREFIXES = ("ZICO_",)
RESERVED_ENV = frozenset({"PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "HOME",
                          "TMPDIR"})
MAX_ENV_VALUE_CHARS = 32768
MAX_ARGV = 1024

PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?\Z")
ACCEPTED_PYTHON_FLAGS = ("-u", "-B")  # no-ops in a job: output is unbuffered, the code dir is read-only
RUNNABLE = ("a job runs `python script.py ...`, `python -m module ...` or `script.py ...`, "
            "with the Python environment of the device's workers")


class SpecError(ValueError):
    """A user-script spec that cannot run; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class CommandError(ValueError):
    """A command (``argv``) a job cannot run, with a message meant for the user who wrote it."""


@dataclass(frozen=True)
class Command:
    """What ``argv`` runs: ``kind`` "script" (a file, ``target`` its path as given), "module" (``python -m``) or
    "program" (``target`` is neither a Python interpreter nor a ``.py`` file: no job can run it, and the job
    process fails it as ``command not found`` or as not Python); ``args`` become ``sys.argv[1:]``; ``python``
    is True when the command named the interpreter."""

    kind: str
    target: str
    args: tuple[str, ...]
    python: bool


def parse_command(argv: list[str]) -> Command:
    """``["python", "train.py", "--lr", "1e-3"]`` -> Command("script", "train.py", ("--lr", "1e-3"), True).

    Runnable: ``python[3[.N]] [-u] [-B] script.py args...``, ``python ... -m module args...`` and
    ``script.py args...`` (a path ending in ``.py``). Any other first word gives kind "program" (the job
    process looks it up on the sandbox's PATH to say which failure it is). Raises CommandError, naming the
    problem, for an argv that is not a non-empty list of strings or a python invocation it cannot run
    (an unsupported option, ``-m`` without a module, no script).
    """
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise CommandError("the command must be a non-empty list of strings")
    first, rest = argv[0], argv[1:]
    if first.endswith(".py"):
        return Command("script", first, tuple(rest), False)
    if not PYTHON_NAME.match(os.path.basename(first)):
        return Command("program", first, tuple(rest), False)
    i = 0
    while i < len(rest) and rest[i].startswith("-"):
        flag = rest[i]
        if flag == "-m":
            if i + 1 >= len(rest) or not rest[i + 1]:
                raise CommandError("python -m needs a module name")
            return Command("module", rest[i + 1], tuple(rest[i + 2:]), True)
        if flag not in ACCEPTED_PYTHON_FLAGS:
            raise CommandError(f"python option {flag} is not supported in a job's command "
                               f"(supported: {', '.join(ACCEPTED_PYTHON_FLAGS)}, -m module)")
        i += 1
    if i >= len(rest):
        raise CommandError("python needs a script to run (an interactive interpreter cannot be a job)")
    return Command("script", rest[i], tuple(rest[i + 1:]), True)


def _abs_path(spec: dict, name: str, required: bool) -> None:
    value = spec.get(name)
    if value is None and not required:
        return
    if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
        raise SpecError(name, f"expected an absolute path, got {value!r:.120}")


def validate_spec(spec: Any) -> dict[str, Any]:
    """Check a user-script spec (fields above); returns it. Raises SpecError naming the field, CommandError
    (as a SpecError on ``argv``) for a command no job can run."""
    if not isinstance(spec, dict):
        raise SpecError("spec", f"expected an object, got {type(spec).__name__}")
    if spec.get("kind") != SCRIPT_KIND:
        raise SpecError("kind", f"expected {SCRIPT_KIND!r}, got {spec.get('kind')!r}")
    for name in ("code_dir", "output_dir", "scratch_dir"):
        _abs_path(spec, name, True)
    _abs_path(spec, "data_dir", False)
    _abs_path(spec, "env_dir", False)
    argv = spec.get("argv")
    if isinstance(argv, list) and len(argv) > MAX_ARGV:
        raise SpecError("argv", f"at most {MAX_ARGV} words, got {len(argv)}")
    try:
        parse_command(argv)
    except CommandError as exc:
        raise SpecError("argv", str(exc)) from None
    env = spec.get("env") or {}
    if not isinstance(env, dict):
        raise SpecError("env", f"expected an object of NAME -> string, got {type(env).__name__}")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise SpecError("env", f"{key!r} is not a variable name")
        if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
            raise SpecError("env", f"{key} is set by Zico and cannot be overridden")
        if not isinstance(value, str) or "\0" in value or len(value) > MAX_ENV_VALUE_CHARS:
            raise SpecError("env", f"{key}: expected a string without NUL of at most {MAX_ENV_VALUE_CHARS} "
                                   f"characters")
    device = spec.get("device")
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda:\d+", device):
        raise SpecError("device", f"expected 'cpu' or 'cuda:N', got {device!r}")
    iterations = spec.get("iterations")
    if iterations is not None and (isinstance(iterations, bool) or not isinstance(iterations, int)
                                   or iterations < 0):
        raise SpecError("iterations", f"expected an integer >= 0, got {iterations!r}")
    return spec
