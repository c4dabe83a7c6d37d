"""Job environments on the device worker's host: a project's requirements (``zico_contracts.jobenv``) built once
into a directory layered on the worker's own Python environment, cached by key, least-recently-used evicted.

:meth:`EnvCache.acquire` returns an :class:`Env` for a project's requirements, building it first when no
environment of that key exists, and holds it (a shared ``flock`` on ``<root>/<key>.lock``; a build holds
``<key>.build``) until :meth:`Env.release`, so that eviction never removes an environment a running job has mounted. The sandbox
mounts ``Env.site`` read-only at ``/job/env``, after the platform's own paths on the job's import path.

A build (Note [Building a job environment]) runs two installer commands (``uv``, pinned in ``requirements.lock``)
on this host, outside any sandbox, with a clean environment (``PATH``, ``HOME``, the installer's cache and the
host's TLS and proxy variables: never ``DATABASE_URL``, ``REDIS_URL``, ``SECRET_KEY``...):

1. ``uv pip install --dry-run --python <worker's python> -r requirements`` resolves the requirements against
   the worker's installed packages: what is installed and satisfies stays, what is missing is listed as
   ``+ name==version``; a requirement that would replace an installed package (another torch, numpy...) is
   refused naming both versions, and one that cannot be resolved fails with the installer's message.
2. ``uv pip install --target <env>/site --no-deps`` installs exactly the missing packages.

Both take wheels only (``--only-binary :all:``): no package's own code runs during a build. Every output line
goes to ``on_line`` (the job's log). Limits: ``ZICO_JOBENV_BUILD_TIMEOUT_S`` for the whole build and
``ZICO_JOBENV_MAX_BYTES`` for the directory (checked twice a second; the installer is killed past either). A host
with no network sets ``ZICO_JOBENV_WHEELHOUSE``: wheels come from that directory only (``--no-index
--find-links``). The cache keeps at most ``ZICO_JOBENV_MAX_ENVS`` environments under ``ZICO_JOBENV_DIR``
(default ``<ZICO_VAR_DIR>/envs``). Raises :class:`BuildError` with the reason.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable

from zico_contracts import jobenv

from . import env as worker_env

PASSED_HOST_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
                   "https_proxy", "no_proxy")  # how this host reaches an index; nothing of the platform's
WATCH_S = 0.5
TAIL_LINES = 12  # the installer's last lines in a failure reason


class BuildError(RuntimeError):
    """The job's environment could not be built; the message says which requirement and why (the installer's
    own words). The job fails with it."""


@dataclass(frozen=True)
class Settings:
    """The build's knobs (``from_env``: the worker's environment, ``workers.env``)."""

    root: Path
    max_envs: int = 8
    max_bytes: int = 2 << 30
    timeout_s: float = 600.0
    wheelhouse: str = ""

    @classmethod
    def from_env(cls) -> "Settings":
        def number(name: str, default: str, kind=int):
            raw = worker_env.get(name, default)
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r}: expected a positive number") from None
            if value <= 0:
                raise ValueError(f"{name}={raw!r}: expected a positive number")
            return value

        return cls(Path(worker_env.get("ZICO_JOBENV_DIR", str(worker_env.var_dir() / "envs"))),
                   number("ZICO_JOBENV_MAX_ENVS", "8"), number("ZICO_JOBENV_MAX_BYTES", str(2 << 30)),
                   number("ZICO_JOBENV_BUILD_TIMEOUT_S", "600", float), worker_env.get("ZICO_JOBENV_WHEELHOUSE", ""))


def base_identity() -> str:
    """What a job environment is layered on: this interpreter's version and the worker's torch (part of the key)."""
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "none"
    return f"python {sys.version.split()[0]} torch {torch}"


def uv_binary() -> str:
    """The installer: ``uv`` beside this interpreter (the worker's environment installs it from requirements.lock)."""
    path = Path(sys.executable).parent / "uv"
    if not path.exists():
        raise BuildError(f"the job environment installer (uv) is not installed in the worker's environment "
                         f"({path}); install the pinned version from requirements.lock")
    return str(path)


@dataclass
class Env:
    """A built environment, held until :meth:`release`: ``key`` (sha256 hex), ``site`` (the directory on the job's
    import path), ``packages`` (``name==version`` installed into it; [] when the worker already had everything),
    ``build_s`` (this acquisition's build time, 0.0 when it was cached), ``cached``."""

    key: str
    site: Path
    packages: list[str]
    build_s: float
    cached: bool
    _lock_fd: int = field(default=-1, repr=False)

    def describe(self) -> dict:
        """The environment as a job's metrics record it: ``{"state": "ready", "key", "packages", "build_s",
        "cached"}``."""
        return {"state": "ready", "key": self.key, "packages": list(self.packages), "build_s": round(self.build_s, 3),
                "cached": self.cached}

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


class EnvCache:
    """The host's job environments under ``settings.root``: ``<key>/`` (``site/``, ``env.json``, ``.used``),
    ``<key>.lock``; the installer's download cache in ``.uv-cache``."""

    def __init__(self, settings: Settings):
        self.s = settings
        self.s.root.mkdir(parents=True, exist_ok=True)

    def acquire(self, requirements: list[jobenv.Requirement], on_line: Callable[[str], None]) -> Env:
        """The environment for ``requirements``, built if needed, held (shared lock) until released. Raises
        BuildError."""
        key = jobenv.environment_key(requirements, base_identity())
        build_fd = os.open(self.s.root / f"{key}.build", os.O_RDWR | os.O_CREAT, 0o600)
        lock_fd = os.open(self.s.root / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(build_fd, fcntl.LOCK_EX)  # one build of a key at a time on this host
            fcntl.flock(lock_fd, fcntl.LOCK_SH)  # held while the job runs: eviction skips it
            target, build_s, cached = self.s.root / key, 0.0, True
            if not (target / "env.json").exists():
                cached = False
                t0 = time.monotonic()
                self._build(key, requirements, target, on_line)
                build_s = time.monotonic() - t0
            info = json.loads((target / "env.json").read_text())
            (target / ".used").touch()
        except BaseException:
            os.close(lock_fd)
            raise
        finally:
            os.close(build_fd)
        env = Env(key, target / "site", list(info["packages"]), build_s, cached, lock_fd)
        self.evict(keep=key)
        return env

    def evict(self, keep: str = "") -> list[str]:
        """Remove the least recently used environments beyond ``max_envs`` (never ``keep`` nor one held by a job).
        Returns the removed keys."""
        envs = sorted((p for p in self.s.root.iterdir() if p.is_dir() and (p / "env.json").exists()),
                      key=lambda p: _mtime(p / ".used"))
        removed = []
        for p in envs[:max(0, len(envs) - self.s.max_envs)]:
            if p.name == keep:
                continue
            fds = [os.open(self.s.root / f"{p.name}.{kind}", os.O_RDWR | os.O_CREAT, 0o600)
                   for kind in ("build", "lock")]
            try:
                for fd in fds:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use by a job, or being built or acquired
            else:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
            finally:
                for fd in fds:
                    os.close(fd)
        return removed

    # Note [Building a job environment]: the module's docstring; resolve against the worker, install the rest
    def _build(self, key: str, requirements: list[jobenv.Requirement], target: Path,
               on_line: Callable[[str], None]) -> None:
        tmp = self.s.root / f"{key}.part"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        (tmp / "site").mkdir(parents=True)
        (tmp / "home").mkdir()
        deadline = time.monotonic() + self.s.timeout_s
        try:
            (tmp / "requirements.txt").write_text(jobenv.requirements_text(requirements))
            on_line(f"environment {key[:12]}: resolving {len(requirements)} requirement"
                    f"{'s' if len(requirements) != 1 else ''} against the worker's packages ({base_identity()})")
            lines = self._uv(["pip", "install", "--dry-run", "--python", sys.executable, "-r",
                              str(tmp / "requirements.txt")], tmp, deadline, on_line)
            adds = [ln.strip()[2:].strip() for ln in lines if ln.strip().startswith("+ ")]
            removes = [ln.strip()[2:].strip() for ln in lines if ln.strip().startswith("- ")]
            if removes:
                names = {r.split("==")[0] for r in removes}
                new = [a for a in adds if a.split("==")[0] in names]
                raise BuildError(f"the requirements would replace the worker's {', '.join(removes)} "
                                 f"with {', '.join(new) or 'other versions'}; a job's environment only adds "
                                 "packages to the worker's (its torch, CUDA libraries and allocator stay)")
            bad = [a for a in adds if jobenv.is_provided(a.split("==")[0])]
            if bad:
                raise BuildError(f"the requirements need {', '.join(bad)}, which only the worker provides")
            if adds:
                (tmp / "pinned.txt").write_text("".join(a + "\n" for a in adds))
                self._uv(["pip", "install", "--no-deps", "--target", str(tmp / "site"), "--python", sys.executable,
                          "-r", str(tmp / "pinned.txt")], tmp, deadline, on_line)
            (tmp / "env.json").write_text(json.dumps({"key": key, "base": base_identity(), "packages": adds,
                                                      "requirements": [r.text for r in requirements]}))
            shutil.rmtree(tmp / "home", ignore_errors=True)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _uv(self, args: list[str], tmp: Path, deadline: float, on_line: Callable[[str], None]) -> list[str]:
        """Run ``uv args`` in the clean environment within the deadline and the disk limit; every output line to
        ``on_line`` and returned. Raises BuildError with the installer's last lines on a failure."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp / "home"), "UV_CACHE_DIR": str(self.s.root / ".uv-cache"),
               "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "LANG": "C.UTF-8",
               **{k: os.environ[k] for k in PASSED_HOST_ENV if os.environ.get(k)}}
        source = (["--no-index", "--find-links", self.s.wheelhouse] if self.s.wheelhouse else [])
        argv = [uv_binary(), *args, "--only-binary", ":all:", *source]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=tmp, text=True, errors="replace", start_new_session=True)
        why: list[str] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(WATCH_S):
                if time.monotonic() > deadline:
                    why.append(f"the build ran past its time limit of {self.s.timeout_s:g} s "
                               "(ZICO_JOBENV_BUILD_TIMEOUT_S)")
                elif _du(tmp) > self.s.max_bytes:
                    why.append(f"the environment grew past its disk limit of {self.s.max_bytes} bytes "
                               "(ZICO_JOBENV_MAX_BYTES)")
                else:
                    continue
                os.killpg(proc.pid, 9)
                return

        watcher = threading.Thread(target=watch, name="jobenv-watch", daemon=True)
        watcher.start()
        lines = []
        try:
            for line in proc.stdout:
                line = line.rstrip("\n")
                lines.append(line)
                on_line(line)
            rc = proc.wait()
        finally:
            stop.set()
            watcher.join()
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
        if not why and _du(tmp) > self.s.max_bytes:  # a step quicker than the watch
            why.append(f"the environment grew past its disk limit of {self.s.max_bytes} bytes (ZICO_JOBENV_MAX_BYTES)")
        if why:
            raise BuildError(why[0])
        if rc != 0:
            tail = "\n".join(ln for ln in lines[-TAIL_LINES:] if ln.strip())
            raise BuildError(f"the installer could not build the job's environment (uv exit {rc}):\n{tail}")
        return lines


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _du(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def for_project(code_dir: Path, on_line: Callable[[str], None], cache: EnvCache | None = None) -> Env | None:
    """The held environment a project at ``code_dir`` asks for (None: it asks for none). Raises BuildError
    (its requirements broken, or the build failed)."""
    try:
        found = jobenv.requirements_in_dir(code_dir)
    except jobenv.RequirementsError as exc:
        raise BuildError(str(exc)) from None
    if found is None:
        return None
    source, requirements = found
    on_line(f"environment: {source} asks for {', '.join(r.text for r in requirements)}")
    if cache is None:
        try:
            cache = EnvCache(Settings.from_env())
        except ValueError as exc:  # a bad knob fails the job naming it, rather than the worker's task
            raise BuildError(f"the worker's job environment settings are wrong: {exc}") from None
    return cache.acquire(requirements, on_line)
