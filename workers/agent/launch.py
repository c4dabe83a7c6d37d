"""One job process as the agent sees it: launched with inherited sockets, its messages read, its stderr tailed.

:class:`JobProcess` starts the job process entry (``python -m workers.job.entry``) through its sandbox's command
(:mod:`.sandbox`: bwrap, or the same process unwrapped for Zico's own catalog project where no sandbox can run),
with the control socket's end (an
``AF_UNIX`` stream socketpair, :mod:`zico_contracts.agent`) and, with the agent pool, the allocator socket's
end passed through ``pass_fds`` (their numbers in ``ZICO_CONTROL_FD`` / ``ZICO_AGENT_FD``). Nothing is forked
from a thread-holding interpreter without an exec: ``subprocess`` execs at once, so the child starts clean
(Note [Allocator before CUDA, and never in a forked child] in ``workers.job.control``).

A reader thread decodes the job's messages and hands each to the agent's callback; two threads drain stdout
(to the log) and stderr (to the log and a tail of the last lines, for the failure reason), each line cut to a
size cap (:mod:`.output`) and handed to ``on_output(stream, line)`` as well.

In a sandbox the process launched is the outer bwrap, the job itself is found at its ``hello`` (:meth:`JobProcess.locate`), and signals and exit statuses go through the
sandbox as Note [Signals through the sandbox] says.
"""
from __future__ import annotations

import collections
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

from zico_contracts import agent as proto

from . import shmwatch
from .output import OutputDrain
from ..joblines import for_log

log = logging.getLogger(__name__)


def _proc_kib_field(path: str, name: str) -> int | None:
    """The ``name:`` line's kB figure of a /proc file, in bytes (None when gone, unreadable or missing)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_anon_bytes(pid: int) -> int | None:
    """``RssAnon`` of ``pid`` from ``/proc/<pid>/status`` in bytes (None when gone or unreadable)."""
    return _proc_kib_field(f"/proc/{pid}/status", "RssAnon")


def pss_anon_bytes(pid: int) -> int | None:
    """``Pss_Anon`` of ``pid`` from ``/proc/<pid>/smaps_rollup`` in bytes: its anonymous memory with each page
    shared copy-on-write after a fork divided among the processes sharing it, so the figures of a process
    tree add up to what the tree holds (None when gone or unreadable)."""
    return _proc_kib_field(f"/proc/{pid}/smaps_rollup", "Pss_Anon")


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (``/proc/<pid>/stat``), None when gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds ``pid`` has used so far, every thread included, ended ones too (its process CPU-time clock,
    ``clock_getcpuclockid(3)``: clock id ``(~pid << 3) | 2``, nanosecond resolution where ``/proc/<pid>/stat``
    counts 10 ms ticks); None when gone, unreadable or ``pid`` is None."""
    if pid is None:
        return None
    try:
        return time.clock_gettime((~int(pid) << 3) | 2)
    except (OSError, ValueError, OverflowError):
        return None


# the signals the kernel sends at a sandbox limit -> the limit (zico_contracts.userjob.LIMITS); python ignores
# SIGXFSZ (a write past the file size limit fails with EFBIG), but a program it runs may not
LIMIT_SIGNALS = {"SIGXCPU": "cpu_s", "SIGXFSZ": "fsize_bytes"}


def exit_signal(returncode: int, sandboxed: bool = False) -> str | None:
    """The name of the signal that killed the process (``"SIGSEGV"``), None when it exited. In a sandbox bwrap
    reports a job killed by signal N as 128 + N (Note [Signals through the sandbox])."""
    signum = -returncode if returncode < 0 else None
    if sandboxed and 128 < returncode < 128 + signal.NSIG:
        signum = returncode - 128
    if signum is None:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(returncode: int, sandboxed: bool = False) -> str:
    """``-11`` -> ``"killed by signal SIGSEGV"``, ``3`` -> ``"exited with code 3"`` (:func:`exit_signal`)."""
    name = exit_signal(returncode, sandboxed)
    return f"killed by signal {name}" if name else f"exited with code {returncode}"


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def crash_site(stderr_lines: list[str], code_dir: str) -> str:
    """`` (train.py, line 13)``: the innermost frame under ``code_dir`` of the crashing thread's stack that
    faulthandler printed (its "Current thread" block), or ``""``."""
    found, current = "", False
    for line in stderr_lines:
        if line.startswith(("Current thread", "Thread ")):
            current = line.startswith("Current thread")
        m = _FRAME.search(line) if current else None
        if m and m["file"].startswith(code_dir + "/") and not found:
            found = f" ({os.path.relpath(m['file'], code_dir)}, line {m['line']})"
    return found


def namespace_pid(pid: int) -> int | None:
    """The innermost pid of ``pid`` (the last ``NSpid`` of ``/proc/<pid>/status``), None when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, nearest first (from ``/proc/<p>/task/<p>/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        try:
            kids = [int(k) for k in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, ValueError):
            kids = []
        out += kids
        todo += kids
    return out


class JobProcess:
    """A launched job process. ``on_message(msg)`` runs in the reader thread for every valid message;
    ``on_protocol_error(exc)`` for a message that breaks the protocol (the agent then kills the job);
    ``on_output(stream, line)`` in a drain thread for every line of stdout (``"stdout"``) and stderr
    (``"stderr"``), each cut to ``output_line_bytes``. ``sandbox`` (a :class:`workers.agent.sandbox.Sandbox`)
    gives the command running ``python -m job_module`` with the job's spec (in-sandbox paths) as a file.
    ``share_env``: the job's share of a CPU device (zico_contracts.cpushare.job_environment), set in its
    environment (the job's own ``env`` in its spec is applied after, inside the job, and wins)."""

    def __init__(self, job_id: int, sandbox, job_module: str, on_message: Callable[[dict], None],
                 on_protocol_error: Callable[[Exception], None], agent_fd: int | None = None,
                 stderr_lines: int = 50, on_output: Callable[[str, str], None] | None = None,
                 output_line_bytes: int = 4096, share_env: dict[str, str] | None = None,
                 output_lines_per_s: float = 1000.0):
        self.job_id = job_id
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self.sandboxed = sandbox.wrapped  # False: Note [No sandbox for Zico's own code]
        self._send_lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        fds = [theirs.fileno()] + ([agent_fd] if agent_fd is not None else [])
        job_env = {proto.CONTROL_FD_ENV: str(theirs.fileno()), "PYTHONUNBUFFERED": "1",
                   **({proto.AGENT_FD_ENV: str(agent_fd)} if agent_fd is not None else {}), **(share_env or {})}
        argv, child_env, extra = sandbox.command(job_module, job_env)  # the environment is the sandbox's alone
        try:
            self.proc = subprocess.Popen(argv, pass_fds=fds + extra, env=child_env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                                         start_new_session=True)
        finally:
            theirs.close()  # the child has its copy; EOF on ours now means the child is gone
            for fd in extra + ([agent_fd] if agent_fd is not None else []):
                os.close(fd)
        self.pid = self.proc.pid
        self.job_pid: int | None = None if self.sandboxed else self.pid  # the job's own process (host pid)
        self._wrappers: set[int] = set()  # the sandbox's processes between the launched one and the job
        self.started = time.monotonic()
        self._on_message, self._on_protocol_error = on_message, on_protocol_error
        self._on_output = on_output
        self._line_bytes = output_line_bytes
        self._lines_per_s = output_lines_per_s
        self._threads = [threading.Thread(target=self._read, name=f"job-{job_id}-control", daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stdout, "stdout"),
                                          name=f"job-{job_id}-stdout", daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stderr, "stderr"),
                                          name=f"job-{job_id}-stderr", daemon=True)]

    def locate(self, pid_in_job: int) -> int | None:
        """The host pid of the job's own process, from the pid it sent in ``hello`` (its pid in the sandbox's
        PID namespace); sets :attr:`job_pid`. Unsandboxed, that pid is the launched process itself."""
        if not self.sandboxed:
            return self.job_pid
        for pid in descendants(self.pid):
            if namespace_pid(pid) == pid_in_job:
                self.job_pid = pid
                up = parent_pid(pid)
                while up is not None and up != self.pid and up not in self._wrappers:
                    self._wrappers.add(up)
                    up = parent_pid(up)
                return pid
        return None

    def anon_bytes(self) -> int | None:
        """Anonymous memory the job holds, in bytes, every process it started included (Note [Memory outside
        the allocator] in workers.agent.agent): the job's ``RssAnon`` while it runs alone (cheap), else the sum
        of ``Pss_Anon`` over the job and every other process in its sandbox (children, and orphans the sandbox's
        init adopted; the sandbox's own bwrap processes left out). None before the job is located or once it is
        gone."""
        if self.job_pid is None:
            return None
        tree = descendants(self.pid) if self.sandboxed else descendants(self.job_pid)
        others = [p for p in tree if p != self.job_pid and p not in self._wrappers]
        if not others:
            return rss_anon_bytes(self.job_pid)
        own = pss_anon_bytes(self.job_pid)
        if own is None:
            return None
        return own + sum(b for p in others if (b := pss_anon_bytes(p)) is not None)

    def shared_bytes(self, exclude: set[tuple[int, int]]) -> int | None:
        """Shared memory the job holds outside the agent pool, in bytes (Note [Shared memory of a job] in
        workers.agent.shmwatch): the shared-memory objects every process of the job opens or maps, the pool's
        chunks (``exclude``) left out, plus what its sandbox's ``/dev/shm`` tmpfs holds. None before the job is
        located."""
        if self.job_pid is None:
            return None
        tree = descendants(self.pid) if self.sandboxed else descendants(self.job_pid)
        pids = [self.job_pid, *(p for p in tree if p != self.job_pid and p not in self._wrappers)]
        shm = shmwatch.tmpfs_used_bytes(f"/proc/{self.job_pid}/root/dev/shm") if self.sandboxed else 0
        return shmwatch.shared_bytes(pids, exclude) + shm

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
        """Signal the job's process group (the job and anything it started). In a sandbox any signal but
        SIGKILL goes to the job's own process once it is known (Note [Signals through the sandbox])."""
        try:
            if self.sandboxed and sig != signal.SIGKILL and self.job_pid is not None:
                os.kill(self.job_pid, sig)
            else:
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

    def _drain(self, stream, name: str) -> None:
        """Cut ``stream`` into lines and hand on those the output rate admits (Note [A job's output rate] in
        :mod:`.output`), until EOF."""
        drain = OutputDrain(name, self._line_bytes, self._lines_per_s,
                            on_cut=self.stderr_tail.extend if name == "stderr" else None)
        fd = stream.fileno()
        debug = log.isEnabledFor(logging.DEBUG)
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            for kind, line in drain.feed(data):
                if debug and kind != "system":  # Note [A job's lines in the worker's log]
                    log.debug("%s", for_log(self.job_id, kind, line))
                self._emit(kind, line)
            if not data:
                break
        stream.close()

    def _emit(self, stream: str, line: str) -> None:
        if self._on_output is not None:
            try:
                self._on_output(stream, line)
            except Exception:  # a broken callback must not stop the drain (the job would block)
                log.exception("job %s: on_output failed", self.job_id)

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

    def tail(self, lines: int = 50, width: int = 200, crashed: bool = False) -> str:
        """The last ``lines`` stderr lines, each cut to ``width`` characters (a module list can be long).
        ``crashed``: from faulthandler's ``Fatal Python error`` on, when the kept lines hold it (its stacks may be
        longer than ``lines``)."""
        kept = list(self.stderr_tail)
        fatal = [i for i, line in enumerate(kept) if line.startswith("Fatal Python error")] if crashed else []
        chosen = kept[fatal[-1]:] if fatal else kept[-lines:]
        return "\n".join(line if len(line) <= width else line[:width] + "..." for line in chosen)
