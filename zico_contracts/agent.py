"""The control protocol between a device agent and one job process it launched (version 1).

Transport: JSON lines (one UTF-8 JSON object per ``\\n``-terminated line) over an ``AF_UNIX`` stream
socketpair. The agent keeps one end; the job process inherits the other as a file descriptor whose number is
in the environment variable :data:`CONTROL_FD_ENV` (``ZICO_CONTROL_FD``). Every message is an object with a
``"type"`` and the fields listed in :data:`MESSAGES`; :func:`validate` checks both directions and raises
:class:`ProtocolError` naming the bad field. A message larger than :data:`MAX_LINE_BYTES` is refused.

Job -> agent::

    hello          {version, job_id, pid}              first message; version must be PROTOCOL_VERSION
    ready          {resumed_from, iterations}          the job is built (and resumed); training starts
                                                       (iterations 0: not known yet, a user script's case)
    iteration_begin {iteration}                        asks to start an iteration; blocks until go or stop
    mark           {kind, iteration}                   a phase mark inside an iteration (forward, backward, optimizer)
    iteration_end  {iteration[, marks]}                an iteration ended; marks: {phase: seconds since its begin}
    stats          {allocated, reserved, peak_allocated, peak_reserved, iteration, phase}   bytes; a few times a second
    metric         {values: {name: number|str|None}[, iterations_total]}   training figures (loss, accuracy,
                                                       iterations_done, ...); iterations_total: the job's own count
                                                       of iterations (optimizer steps) in the whole run, when it
                                                       says (a user script: ``zico.set_iterations_total``)
    profiled       {iterations, profile_s}             a script job's profile is complete: its allocator trace of the
                                                       first ``iterations`` iterations is in its scratch dir
                                                       (workers.job.entry.PROFILE_TRACE); the job goes on training
    done           {status, metrics[, reason, curve]}  last message; status succeeded|failed|cancelled|aborted;
                                                       curve: a profile run's memory curve (placement.curves JSON)

Agent -> job::

    go             {delay_s}                           answer to iteration_begin: start now (delay_s waited, >= 0)
    stop           {reason}                            checkpoint and end with done(cancelled|aborted)

A job that ends without ``done`` (a crash, a kill) is reported by the agent from its exit status.
"""
from __future__ import annotations

import json
import math
from typing import Any

PROTOCOL_VERSION = 1
CONTROL_FD_ENV = "ZICO_CONTROL_FD"
AGENT_FD_ENV = "ZICO_AGENT_FD"
MAX_LINE_BYTES = 1 << 20  # 1 MiB: a metric dict never needs more (a job's own lines go by stdout and stderr)

STATUSES = ("succeeded", "failed", "cancelled", "aborted")
PHASES = ("setup", "wait", "forward", "backward", "optimizer", "checkpoint", "done")
MARK_KINDS = ("forward", "backward", "optimizer")


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``field`` names what is wrong (``"type"``, ``"iteration"``, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _int(v: Any, minimum: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _choice(options):
    return lambda v: v in options


def _marks(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _num(x) and x >= 0 for k, x in v.items())


def _values(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and (x is None or _str(x) or _num(x) or isinstance(x, bool))
                                       for k, x in v.items())


def _metrics(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) for k in v)


# type -> (required fields, optional fields); each field -> (check, what it must be)
_BYTES = (_int, "an integer >= 0 (bytes)")
MESSAGES: dict[str, tuple[dict[str, tuple], dict[str, tuple]]] = {
    "hello": ({"version": (_int, "an integer"), "job_id": (lambda v: _int(v, 1), "a positive integer"),
               "pid": (lambda v: _int(v, 1), "a positive integer")}, {}),
    "ready": ({"resumed_from": (_int, "an integer >= 0"), "iterations": (_int, "an integer >= 0")}, {}),
    "iteration_begin": ({"iteration": (_int, "an integer >= 0")}, {}),
    "mark": ({"kind": (_choice(MARK_KINDS), f"one of {MARK_KINDS}"), "iteration": (_int, "an integer >= 0")}, {}),
    "iteration_end": ({"iteration": (_int, "an integer >= 0")},
                      {"marks": (_marks, "an object of phase -> seconds >= 0")}),
    "stats": ({"allocated": _BYTES, "reserved": _BYTES, "peak_allocated": _BYTES, "peak_reserved": _BYTES,
               "iteration": (lambda v: _int(v, -1), "an integer >= -1"),
               "phase": (_choice(PHASES), f"one of {PHASES}")}, {}),
    "metric": ({"values": (_values, "an object of name -> number, string or null")},
               {"iterations_total": (_int, "an integer >= 0")}),
    "profiled": ({"iterations": (_int, "an integer >= 0"), "profile_s": (lambda v: _num(v) and v >= 0,
                                                                          "a number >= 0 (seconds)")},
                 {"peak_reserved": _BYTES}),  # the bytes its pool held at most: stored with the curve
    "done": ({"status": (_choice(STATUSES), f"one of {STATUSES}"), "metrics": (_metrics, "an object")},
             {"reason": (_str, "a string"), "curve": (lambda v: isinstance(v, dict), "a memory curve object")}),
    "go": ({"delay_s": (lambda v: _num(v) and v >= 0, "a number >= 0 (seconds)")}, {}),
    "stop": ({"reason": (_str, "a string")}, {}),
}
JOB_TO_AGENT = ("hello", "ready", "iteration_begin", "mark", "iteration_end", "stats", "metric", "profiled",
                "done")
AGENT_TO_JOB = ("go", "stop")


def validate(msg: Any, direction: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Check one decoded message; returns it. ``direction`` (JOB_TO_AGENT / AGENT_TO_JOB) limits the types.

    Raises ProtocolError naming the field: not an object, unknown type, a missing, unknown or ill-typed field,
    or (hello) another protocol version.
    """
    if not isinstance(msg, dict):
        raise ProtocolError("message", f"expected a JSON object, got {type(msg).__name__}")
    kind = msg.get("type")
    allowed = direction or tuple(MESSAGES)
    if kind not in allowed:
        raise ProtocolError("type", f"expected one of {allowed}, got {kind!r}")
    required, optional = MESSAGES[kind]
    for name, (check, what) in required.items():
        if name not in msg:
            raise ProtocolError(name, f"missing in a {kind} message")
        if not check(msg[name]):
            raise ProtocolError(name, f"expected {what} in a {kind} message, got {msg[name]!r:.80}")
    for name in msg:
        if name == "type" or name in required:
            continue
        if name not in optional:
            raise ProtocolError(name, f"unknown field in a {kind} message")
        check, what = optional[name]
        if not check(msg[name]):
            raise ProtocolError(name, f"expected {what} in a {kind} message, got {msg[name]!r:.80}")
    if kind == "hello" and msg["version"] != PROTOCOL_VERSION:
        raise ProtocolError("version", f"protocol version {msg['version']} is not {PROTOCOL_VERSION}")
    return msg


def encode(msg_type: str, /, **fields: Any) -> bytes:
    """One message as a JSON line (validated first). Raises ProtocolError."""
    msg = validate({"type": msg_type, **fields})
    line = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("message", f"{len(line)} bytes is more than {MAX_LINE_BYTES}")
    return line


def decode(line: bytes, direction: tuple[str, ...] | None = None) -> dict[str, Any]:
    """One JSON line -> a validated message. Raises ProtocolError (``"message"`` for bad JSON or size)."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError("message", f"{len(line)} bytes is more than {MAX_LINE_BYTES}")
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError("message", f"not JSON: {exc}") from None
    return validate(msg, direction)


class LineReader:
    """Splits a stream socket's bytes into lines; :meth:`read` returns the next message or None at EOF."""

    def __init__(self, sock, direction: tuple[str, ...] | None = None):
        self.sock = sock
        self.direction = direction
        self._buf = b""

    def buffered(self) -> bool:
        """True when a whole message is already buffered (the next :meth:`read` returns without a recv)."""
        return b"\n" in self._buf

    def read(self) -> dict[str, Any] | None:
        """Block for the next message. Returns None at end of stream; raises ProtocolError, OSError."""
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE_BYTES:
                raise ProtocolError("message", f"a line longer than {MAX_LINE_BYTES} bytes")
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return decode(line, self.direction)
