"""Helpers for tests and scripted checks of the worker side: a private Redis server that can be restarted,
and a device worker process started the documented way (``python -m workers.bootstrap``).

Tests use a private Redis (its own port, no persistence) whenever they stop or restart it, so they never
disturb the shared Redis other tests use.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throw-away ``redis-server`` on 127.0.0.1:``port`` (no persistence). Raises RuntimeError if the
    binary is missing or the server does not answer within 10 s."""

    def __init__(self, port: int | None = None):
        if not shutil.which("redis-server"):
            raise RuntimeError("redis-server is not installed")
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, down_s: float = 1.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_worker(args: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start ``python -m workers.bootstrap ARGS`` (the documented way) with ``env``, output to ``log_path``."""
    log = open(log_path, "ab")
    return subprocess.Popen([sys.executable, "-m", "workers.bootstrap", *args], cwd=REPO, env={**os.environ, **env},
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Send ``sig`` to ``proc`` (only that process) and wait; SIGKILL after ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
