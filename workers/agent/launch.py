"""One job process as the agent sees it: launched with inherited sockets, its messages read, its stderr tailed.

:class:`JobProcess` starts ``python -m <job module> --spec JSON`` with the control socket's end (an
``AF_UNIX`` stream socketpair, :mod:`zico_contracts.agent`) and, with the agent pool, the allocator socket's
end passed through ``pass_fds`` (their numbers in ``ZICO_CONTROL_FD`` / ``ZICO_AGENT_FD``). Nothing is forked
from a thread-holding interpreter without an exec: ``subprocess`` execs at once, so the child starts clean
(Note [Allocator before CUDA, and never in a forked child] in ``workers.jobproc``).

A reader thread decodes the job's messages and hands each to the agent's callback; two threads drain stdout
(to the log) and stderr (to the log and a tail of the last lines, for the failure reason).
"""
from __future__ import annotations

import collections
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from zico_contracts import agent as proto

log = logging.getLogger(__name__)


def rss_anon_bytes(pid: int) -> int | None:
    """``RssAnon`` of ``pid`` from ``/proc/<pid>/status`` in bytes (None when gone or unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def describe_exit(returncode: int) -> str:
    """``-11`` -> ``"killed by signal SIGSEGV"``, ``3`` -> ``"exited with code 3"``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by signal {name}"
    return f"exited with code {returncode}"


class JobProcess:
    """A launched job process. ``on_message(msg)`` runs in the reader thread for every valid message;
    ``on_protocol_error(exc)`` for a message that breaks the protocol (the agent then kills the job)."""

    def __init__(self, job_id: int, spec: dict[str, Any], job_module: str, on_message: Callable[[dict], None],
                 on_protocol_error: Callable[[Exception], None], agent_fd: int | None = None,
                 stderr_lines: int = 50, env: dict[str, str] | None = None):
        self.job_id = job_id
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._send_lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        fds = [theirs.fileno()] + ([agent_fd] if agent_fd is not None else [])
        child_env = {**os.environ, **(env or {}), proto.CONTROL_FD_ENV: str(theirs.fileno()),
                     "PYTHONUNBUFFERED": "1"}
        child_env.pop(proto.AGENT_FD_ENV, None)
        if agent_fd is not None:
            child_env[proto.AGENT_FD_ENV] = str(agent_fd)
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", job_module, "--spec", json.dumps(spec)],
                                         pass_fds=fds, env=child_env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                                         start_new_session=True)
        finally:
            theirs.close()  # the child has its copy; EOF on ours now means the child is gone
            if agent_fd is not None:
                os.close(agent_fd)
        self.pid = self.proc.pid
        self.started = time.monotonic()
        self._on_message, self._on_protocol_error = on_message, on_protocol_error
        self._threads = [threading.Thread(target=self._read, name=f"job-{job_id}-control", daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stdout, False),
                                          name=f"job-{job_id}-stdout", daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stderr, True),
                                          name=f"job-{job_id}-stderr", daemon=True)]

    def start(self) -> "JobProcess":
        """Start reading the job's messages and output (after the caller holds this object)."""
        for t in self._threads:
            t.start()
        return self

    def send(self, msg_type: str, /, **fields: Any) -> bool:
        """Send one message to the job; False when it is gone."""
        try:
            line = proto.encode(msg_type, **fields)
            with self._send_lock:
                self.sock.sendall(line)
            return True
        except OSError:
            return False

    def signal(self, sig: int) -> None:
        """Signal the job's process group (the job and anything it started)."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _read(self) -> None:
        reader = proto.LineReader(self.sock, proto.JOB_TO_AGENT)
        try:
            while (msg := reader.read()) is not None:
                self._on_message(msg)
        except proto.ProtocolError as exc:
            self._on_protocol_error(exc)
        except OSError:
            pass

    def _drain(self, stream, is_stderr: bool) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            if is_stderr:
                self.stderr_tail.append(line)
            log.debug("job %s %s: %s", self.job_id, "stderr" if is_stderr else "stdout", line)
        stream.close()

    def wait(self, timeout: float | None) -> int | None:
        """The exit status once the process ended, else None after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def finish(self, timeout: float = 5.0) -> None:
        """After the exit: let the reader and drain threads see EOF, then close our socket end."""
        for t in self._threads:
            t.join(timeout)
        self.sock.close()

    def tail(self, lines: int = 50, width: int = 200) -> str:
        """The last ``lines`` stderr lines, each cut to ``width`` characters (a module list can be long)."""
        return "\n".join(line if len(line) <= width else line[:width] + "..." for line in list(self.stderr_tail)[-lines:])
