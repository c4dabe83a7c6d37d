"""Helpers for tests and scripted checks of the worker side: a private Redis server and a private PostgreSQL
cluster that can be restarted, and a device worker process started the documented way
(``python -m workers.bootstrap``).

Tests use a private Redis (its own port, no persistence) or a private, throw-away PostgreSQL cluster (initdb in
a temporary directory, trust auth) whenever they stop or restart it, so they never disturb the shared servers
other tests use.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[2]


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


def postgres_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``initdb`` and ``pg_ctl``, or None."""
    found = [Path(d) for d in glob.glob("/usr/lib/postgresql/*/bin") if Path(d, "initdb").exists()]
    return max(found, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0, default=None)


class PostgresServer:
    """A throw-away PostgreSQL cluster on 127.0.0.1:``port``: ``initdb`` (trust auth, superuser ``postgres``)
    in a temporary directory, run with ``pg_ctl``; removed by :meth:`cleanup` (or the context manager).

    As root (initdb refuses to run as root) the cluster is created and run as the ``postgres`` system user
    through ``runuser``. ``fsync=off`` (safe against a server crash, not an OS crash): it is a test cluster.
    Raises RuntimeError if the binaries are missing or a ``pg_ctl``/``initdb`` step fails (the message holds
    the tool's output).
    """

    def __init__(self, port: int | None = None, bin_dir: Path | None = None):
        self.bin = bin_dir or postgres_bin_dir()
        if self.bin is None:
            raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
        self.port = port or free_port()
        self.dir: Path | None = None

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *cmd: str, timeout: float = 120) -> str:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        res = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=timeout, cwd="/tmp")
        if res.returncode != 0:
            raise RuntimeError(f"{Path(cmd[0]).name} failed ({res.returncode}): {res.stdout}{res.stderr}")
        return res.stdout

    def _init(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="zico-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--no-sync", "--no-instructions")

    def start(self) -> "PostgresServer":
        """Start the cluster (creating it on first use); returns once it accepts connections."""
        if self.dir is None:
            self._init()
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c full_page_writes=off")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log"),
                  "-o", opts, "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``: ``fast`` (clean, clients disconnected) or ``immediate`` (like a crash:
        the next start runs crash recovery). Raises ValueError on another mode."""
        if mode not in ("fast", "immediate", "smart"):
            raise ValueError(f"mode must be fast, immediate or smart, not {mode!r}")
        if self.dir is not None and (self.dir / "data" / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, down_s: float = 1.0, mode: str = "immediate") -> None:
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    def cleanup(self) -> None:
        """Stop the server (if running) and delete its directory."""
        try:
            self.stop("immediate")
        finally:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                self.dir = None

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()


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
