"""The lifecycle messages from device workers to the web side (the ``zico:control`` stream), typed.

Each stream entry's ``data`` field is one JSON object: ``msg`` (its kind, one of :data:`KINDS`), ``t`` (unix
seconds), ``device`` (the device key, zico_contracts.keys.device_key) and the kind's fields below. The worker
checks what it sends (workers.link.Link.emit) and the control consumer what it reads (zico.telemetry.handlers),
both with :func:`validate`, which raises :class:`LifecycleError` naming the field; an unknown field is refused
too, so a field added on one side is added here first. Standard library only.

==================  ============================================================================================
kind                fields (besides msg, t, device); ``?`` marks an optional one (``placement``: the run's
                    placement id, absent or null for a message of no run)
==================  ============================================================================================
worker_up           total_bytes, pid, started_at (unix s: when the worker process started), name?, uuid?, slots?,
                    budget_bytes? (none: the device total), gate_headroom? (both seed a new device row), kind?,
                    index?, host? (the device key says them too)
worker_down         (a clean shutdown of the worker)
job_started         job, placement?, resumed_from (iteration), iterations?, pid? (the job's own process)
job_progress        job, placement?, iteration, iterations?, iterations_per_s?, values? ({name: number|str|None})
job_environment     job, placement?, state (preparing|ready|failed), progress?, key?, packages?, build_s?, cached?
job_delay           job, placement?, iteration, delays, delay_s, delay_max_s?, gate_wait_s? (a run's totals so far)
job_finished        job, placement?, status (succeeded|failed|cancelled|aborted), reason?, metrics?
profile_done        job, placement? (a script's profile, measured as its run starts), curve (DESIGN contract)
                    or error, profile_s?, iterations?
telemetry_gap       start, end (unix s): Redis was unreachable from the worker
oom_prevented       job, count, overruns, waited_s (Note [OOM prevented] in workers.oom_watch)
==================  ============================================================================================

A job's out-of-memory error is no kind of its own: it is the reason of its ``job_finished`` (or the error of its
``profile_done``), which the web side rewrites as a sentence (zico_contracts.oom).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .agent import STATUSES


class LifecycleError(ValueError):
    """A lifecycle message that breaks this contract; ``field`` names what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def _int(minimum: int | None = 0) -> tuple[Callable[[Any], bool], str]:
    def check(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and (minimum is None or v >= minimum)
    return check, "an integer" + ("" if minimum is None else f" >= {minimum}")


def _num(minimum: float | None = 0.0) -> tuple[Callable[[Any], bool], str]:
    def check(v: Any) -> bool:
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and (minimum is None or v >= minimum))
    return check, "a finite number" + ("" if minimum is None else f" >= {minimum:g}")


def _opt(field: tuple[Callable[[Any], bool], str]) -> tuple[Callable[[Any], bool], str]:
    check, what = field
    return (lambda v: v is None or check(v)), f"{what} or null"


def _choice(*options: str) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: v in options), f"one of {', '.join(options)}"


def _values(v: Any) -> bool:
    """A job's own figures: numbers (NaN and infinities too: a diverged run's loss), strings, booleans, null."""
    return isinstance(v, dict) and all(isinstance(k, str) and (x is None or isinstance(x, (str, bool, int, float)))
                                       for k, x in v.items())


_STR = (lambda v: isinstance(v, str)), "a string"
_BOOL = (lambda v: isinstance(v, bool)), "true or false"
_OBJ = (lambda v: isinstance(v, dict)), "an object"
_JOB = _int(1)
_PLACEMENT = _opt(_int(1))

# kind -> (required fields, optional fields); each field -> (check, what it must be)
MESSAGES: dict[str, tuple[dict[str, tuple], dict[str, tuple]]] = {
    "worker_up": ({"total_bytes": _int(), "pid": _int(1), "started_at": _num()},
                  {"kind": _choice("gpu", "cpu"), "index": _int(), "host": _STR, "name": _STR, "uuid": _STR,
                   "slots": _int(1), "budget_bytes": _int(), "gate_headroom": _num()}),
    "worker_down": ({}, {}),
    "job_started": ({"job": _JOB, "resumed_from": _int()},
                    {"placement": _PLACEMENT, "iterations": _int(), "pid": _opt(_int(1))}),
    "job_progress": ({"job": _JOB, "iteration": _int()},
                     {"placement": _PLACEMENT, "iterations": _int(), "iterations_per_s": _opt(_num()),
                      "values": (_values, "an object of name -> number, string or null")}),
    "job_environment": ({"job": _JOB, "state": _choice("preparing", "ready", "failed")},
                        {"placement": _PLACEMENT, "progress": _STR, "key": _STR, "packages": ((lambda v: isinstance(v, list) and all(
                            isinstance(p, str) for p in v)), "a list of strings"), "build_s": _num(),
                         "cached": _BOOL}),
    "job_delay": ({"job": _JOB, "iteration": _int(-1), "delays": _int(), "delay_s": _num()},
                  {"placement": _PLACEMENT, "delay_max_s": _num(), "gate_wait_s": _num()}),
    "job_finished": ({"job": _JOB, "status": _choice(*STATUSES)},
                     {"placement": _PLACEMENT, "reason": _STR, "metrics": _OBJ}),
    "profile_done": ({"job": _JOB}, {"placement": _PLACEMENT, "curve": _OBJ, "error": _STR,
                                     "profile_s": _opt(_num()), "iterations": _opt(_int())}),
    "telemetry_gap": ({"start": _num(), "end": _num()}, {}),
    "oom_prevented": ({"job": _JOB, "count": _int(), "overruns": _int(), "waited_s": _num()}, {}),
}
KINDS = tuple(MESSAGES)
COMMON = {"t": _num(), "device": _STR}


def validate(msg: Any) -> dict[str, Any]:
    """Check one lifecycle message (``msg``, ``t``, ``device`` and its kind's fields); returns it. Raises
    LifecycleError naming the field: not an object, an unknown kind, a missing, unknown or ill-typed field, or a
    ``profile_done`` with neither or both of ``curve`` and ``error``."""
    if not isinstance(msg, dict):
        raise LifecycleError("message", f"expected a JSON object, got {type(msg).__name__}")
    kind = msg.get("msg")
    if kind not in MESSAGES:
        raise LifecycleError("msg", f"expected one of {', '.join(KINDS)}, got {kind!r:.60}")
    required, optional = MESSAGES[kind]
    for name, (check, what) in {**COMMON, **required}.items():
        if name not in msg:
            raise LifecycleError(name, f"missing in a {kind} message")
        if not check(msg[name]):
            raise LifecycleError(name, f"expected {what} in a {kind} message, got {msg[name]!r:.80}")
    for name, value in msg.items():
        if name == "msg" or name in COMMON or name in required:
            continue
        if name not in optional:
            raise LifecycleError(name, f"unknown field in a {kind} message")
        check, what = optional[name]
        if not check(value):
            raise LifecycleError(name, f"expected {what} in a {kind} message, got {value!r:.80}")
    if kind == "profile_done" and ("curve" in msg) == ("error" in msg):
        raise LifecycleError("curve", "a profile_done carries either a curve or an error")
    return msg
