"""The job process's link to its device agent, for every job process (``workers.job.entry``): the control
socket's client (the gate round trip at each iteration start, sends from any thread), the allocator client
installed before torch allocates anything, dying with the parent, and the
allocator's last out-of-memory report. The protocol itself is :mod:`zico_contracts.agent`.

Note [Allocator before CUDA, and never in a forked child]
    PyTorch accepts a pluggable CUDA allocator only before its first CUDA allocation, and CUDA cannot be
    initialised again in a forked child ("Cannot re-initialize CUDA in forked subprocess"). So the device
    worker never initialises CUDA itself (it reads its GPU through NVML), runs Celery's *threads* pool
    (nothing is forked), and launches each job with ``subprocess`` (fork and exec at once: the job starts in
    a clean interpreter); the job process installs its allocator client before torch allocates anything.
    A fork handler in the worker hides the GPU from any child forked without an exec (workers.bootstrap).
"""
from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import sys
import threading
from typing import Any

from zico_contracts import agent as proto

from .stopped import RunStopped as Stopped  # the agent (or SIGTERM) asked the job to stop: cancelled or aborted

PR_SET_PDEATHSIG = 1


class Control:
    """The job's end of the control socket. Any thread may send (a lock keeps each line whole); only the
    training thread reads, inside :meth:`begin`.

    Note [Gate round trip in the training thread]
        The agent sends a job nothing but ``go`` (the answer to ``iteration_begin``) and ``stop``, and a stop
        takes effect at the next iteration start anyway. So no reader thread waits on the socket: ``begin``
        first reads whatever the agent sent meanwhile (a stop, or the end of the stream: the agent is gone),
        then sends ``iteration_begin`` and reads the answer itself. A reader thread handing ``go`` over through
        a condition variable cost one more thread wake-up per iteration, on the training's critical path
        (docs/benchmarks.md, "Measurements behind the notes"). A stop requested inside the process (SIGTERM, :meth:`request_stop`) wakes a ``begin`` that
        waits for its answer through a socketpair of its own.
    """

    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)
        self._send_lock = threading.Lock()
        self._reader = proto.LineReader(self.sock, proto.AGENT_TO_JOB)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.stop_status: str | None = None

    def send(self, msg_type: str, /, **fields: Any) -> None:
        line = proto.encode(msg_type, **fields)
        with self._send_lock:
            self.sock.sendall(line)

    def request_stop(self, status: str) -> None:
        """Stop at the next iteration start (safe from a signal handler and from any thread)."""
        if self.stop_status is None:
            self.stop_status = status
        try:
            self._wake_w.send(b"s")
        except OSError:  # full (a wake-up is pending already) or closed
            pass

    def _readable(self, timeout: float | None) -> bool:
        """True when a message (or the end of the stream) can be read; False on timeout or a wake-up."""
        if self._reader.buffered():
            return True
        ready, _, _ = select.select([self.sock, self._wake_r], [], [], timeout)
        if self._wake_r in ready:
            try:
                while self._wake_r.recv(64):
                    pass
            except OSError:
                pass
        return self.sock in ready

    def _receive(self) -> float | None:
        """Read one message: the delay of a ``go``, else None (a stop, or the agent gone, recorded)."""
        try:
            msg = self._reader.read()
        except (OSError, proto.ProtocolError):
            msg = None
        if msg is None:  # the agent closed the socket: it is gone or gave up on this job
            self.request_stop("aborted")
            return None
        if msg["type"] == "go":
            return msg["delay_s"]
        self.request_stop("aborted" if msg["reason"] == "aborted" else "cancelled")
        return None

    def begin(self, iteration: int) -> float:
        """The gate round trip: returns the delay the agent imposed (s); raises Stopped instead of starting."""
        while self.stop_status is None and self._readable(0):
            self._receive()  # a stop that came while the job trained (no go is ever due here)
        if self.stop_status:
            raise Stopped(self.stop_status)
        self.send("iteration_begin", iteration=iteration)
        while True:
            if self._readable(None):
                delay = self._receive()
                if delay is not None and not self.stop_status:
                    return delay
            if self.stop_status:
                raise Stopped(self.stop_status)


def die_with_parent(orphan_check: bool = True) -> None:
    """SIGKILL this process when its parent dies. ``orphan_check``: exit at once if the parent (the agent) is
    already gone; not in a sandbox, where the parent is the sandbox's own PID 1."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if orphan_check and os.getppid() == 1:  # the agent died before the prctl took effect
        os._exit(70)


def install_allocator(spec: dict[str, Any], scope: str = "bound"):
    """The allocator before any torch allocation: the agent's pool if offered, else one of this process.
    ``scope``: the CPU shim's (``zico_allocator.install_cpu``); a user script uses "all"."""
    import zico_allocator as za

    device = spec["device"]
    agent_fd = os.environ.get(proto.AGENT_FD_ENV)
    if agent_fd is not None and device.startswith("cuda"):  # the agent's VMM chunks, before CUDA initialises
        index = int(device.partition(":")[2] or 0)
        za.install_agent_client(int(agent_fd), device=index)
        za.install_cuda(index)
        return za, index
    if agent_fd is not None:  # the agent's pool: its limits hold whatever this process sets
        za.install_agent_client(int(agent_fd))
        # Scope "bound": the bound training thread's CPU tensors come from the agent's chunks, as in the job's
        # profile (the data set, loaded unbound, stays outside). A job that unbinds itself (bind(0)) or turns
        # the shim off allocates around the pool: the agent's bypass detection stops it (workers.agent.agent).
        za.install_cpu(scope=scope)
        return za, "cpu"
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        za.install_cuda(index)
        adev: Any = index
    else:
        za.install_cpu(spec.get("capacity_bytes"), scope=scope)
        adev = "cpu"
    if spec.get("budget_bytes"):
        za.set_budget(int(spec["budget_bytes"]), device=adev)
    return za, adev


def plain(values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` a ``done`` message can carry: None, numbers, strings and booleans."""
    return {k: v for k, v in values.items() if v is None or isinstance(v, (int, float, str, bool))}



def last_oom(spec: dict[str, Any]):
    """The allocator's last out-of-memory report on the spec's device (``zico_allocator.last_oom``), or None
    when the allocator is not loaded or has none."""
    za = sys.modules.get("zico_allocator")
    try:
        return za.last_oom(device="cpu" if spec["device"] == "cpu" else int(spec["device"].partition(":")[2] or 0))
    except Exception:
        return None
