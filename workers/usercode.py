"""A command job's code and files on the worker side: fetch and unpack its archive, relay its output to the
job's log stream, upload its output files. Used by :mod:`workers.runner`.

The contract is :mod:`zico_contracts.codejob` (the run spec's code fields, the job token) and
:mod:`zico_contracts.joblog` (the log stream); the web side's endpoints are ``code_url`` and ``files_url``.

* :func:`prepare` downloads the archive once per content hash (``<var>/code/<sha256>/``, checked against
  ``code_sha256`` and ``code_size_bytes``), unpacks it with the same checks the web side made at upload
  (:func:`zico_contracts.codearchive.extract_archive`), and makes the run's private ``output`` and
  ``scratch`` directories (``<var>/jobs/<id>/``, :func:`run_dirs`: a file system of their own where the worker
  has the disk quota, workers.jobdisk). Raises :class:`CodeFetchError` naming what failed.
* :class:`LogRelay` buffers the job's output lines and writes them to the job's log stream every
  ``FLUSH_S`` seconds (one pipeline per flush; a Redis outage drops lines and says so in a ``system`` line);
  it holds at most ``PENDING_MAX_LINES`` lines (Note [A job's output is bounded]).
* :func:`upload_outputs` sends every file under ``output`` to ``files_url`` before the outcome is reported
  (the web side takes files only until shortly after a job ended), within ``output_limits``.
"""
from __future__ import annotations

import collections
import hashlib
import logging
import os
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zico_contracts import joblog
from zico_contracts.codearchive import ArchiveError, ArchiveLimits, extract_archive
from zico_contracts.codejob import CodeSpec, auth_header

from . import jobdisk
from .joblines import neutral_paths

log = logging.getLogger(__name__)

FLUSH_S = 0.25
# Note [A job's output is bounded]
#   A job controls how much it prints: 20 MiB of bare carriage returns is 20 million (empty) lines. The agent's
#   LineCutter already caps each line (zico_contracts.joblog.LINE_MAX_BYTES); here the lines waiting for the next
#   flush are capped too: past PENDING_MAX_LINES the oldest waiting ones are dropped and counted (the newest,
#   a traceback or a final summary, are what a user reads), and the flush writes a system line saying how many
#   and why before them, so the worker holds at most PENDING_MAX_LINES x LINE_MAX_BYTES
#   (8 MiB) per job and each Redis pipeline at most PENDING_MAX_LINES + 1 entries, whatever the job prints
#   (8,000 lines a second get through; the stream keeps the last joblog.STREAM_MAXLEN of them).
PENDING_MAX_LINES = 2_000
HTTP_TIMEOUT_S = 60.0
CHUNK_BYTES = 1 << 20
SKIPPED_SHOWN = 20  # output files not kept, named in the job's metrics and log (the rest are counted)


class CodeFetchError(RuntimeError):
    """The job's code could not be fetched or unpacked; the message says why (the job then fails with it)."""


@dataclass
class JobDirs:
    """Where a command job runs: its unpacked code (read-only in the sandbox), output and scratch dirs."""

    code_dir: Path
    output_dir: Path
    scratch_dir: Path


def prepare(code: CodeSpec, job_id: int, var_dir: Path, disks=None) -> JobDirs:
    """Fetch and unpack ``code`` (once per content hash) and make the run's directories, on the file system of its
    own that ``disks`` (workers.jobdisk.JobDisks; None: plain directories) gives it. Raises CodeFetchError."""
    import requests

    code_dir = Path(var_dir) / "code" / code.code_sha256
    if not (code_dir / ".complete").exists():
        tmp = code_dir.with_name(code_dir.name + f".part-{os.getpid()}-{threading.get_ident()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        archive = tmp.with_suffix(".archive")
        try:
            digest, size = hashlib.sha256(), 0
            with requests.get(code.code_url, headers=auth_header(code.job_token), stream=True,
                              timeout=HTTP_TIMEOUT_S) as r:
                if r.status_code != 200:
                    raise CodeFetchError(f"fetching the code from {code.code_url}: HTTP {r.status_code} "
                                         f"{r.text[:200]!r}")
                with open(archive, "wb") as f:
                    for chunk in r.iter_content(CHUNK_BYTES):
                        size += len(chunk)
                        if size > code.code_size_bytes:
                            raise CodeFetchError(f"the code archive is larger than the {code.code_size_bytes} "
                                                 "bytes the run spec says")
                        digest.update(chunk)
                        f.write(chunk)
            if digest.hexdigest() != code.code_sha256:
                raise CodeFetchError(f"the code archive's sha256 {digest.hexdigest()} is not the run spec's "
                                     f"{code.code_sha256}")
            extract_archive(archive, tmp, ArchiveLimits.from_dict(code.code_limits))
            (tmp / ".complete").write_text(code.code_sha256)
            try:
                tmp.rename(code_dir)  # atomic; a concurrent fetch of the same code may have won
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
        except (requests.RequestException, OSError, ArchiveError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CodeFetchError(f"the job's code could not be fetched or unpacked: {type(exc).__name__}: {exc}") \
                from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            archive.unlink(missing_ok=True)
    return run_dirs(code_dir, job_id, var_dir, disks)


def run_dirs(code_dir: Path, job_id: int, var_dir: Path, disks=None) -> JobDirs:
    """The run's fresh ``output`` and ``scratch`` directories in ``<var>/jobs/<id>/``, a file system of its own
    where ``disks`` (workers.jobdisk.JobDisks) has the quota (Note [A job's disk] in workers.agent.diskwatch); what
    an earlier run of the job left there is removed (a requeued run starts clean). Raises CodeFetchError."""
    run_dir = Path(var_dir) / "jobs" / str(job_id)
    try:
        jobdisk.make_run_dir(run_dir, disks)
    except OSError as exc:  # the tenant reads the reason: the host's paths stay in the worker's log
        log.error("job %s: its directories could not be made: %s", job_id, exc)
        raise CodeFetchError("the job's directories could not be made on the worker (its log says why)") from None
    dirs = JobDirs(Path(code_dir), run_dir / "output", run_dir / "scratch")
    for d in (dirs.output_dir, dirs.scratch_dir):
        d.mkdir(parents=True)
        os.chmod(d, 0o777)  # the sandbox's unprivileged uid writes here; nobody else sees run_dir's siblings
    return dirs


def script_spec(code: CodeSpec, dirs: JobDirs, device: str, data_dir: Path) -> dict[str, Any]:
    """The job process's spec (``workers.job.entry``, zico_contracts.userjob) for ``code`` in ``dirs``; the
    worker's data directory (read-only in the sandbox) is made if missing."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    return {"kind": "script", "code_dir": str(dirs.code_dir), "argv": list(code.command), "env": dict(code.env),
            "device": device, "output_dir": str(dirs.output_dir), "scratch_dir": str(dirs.scratch_dir),
            "data_dir": str(data_dir)}


class LogRelay:
    """The job's output lines, written to its log stream (zico_contracts.joblog) by a flusher thread."""

    def __init__(self, redis_client, job_id: int):
        self.redis, self.job_id = redis_client, job_id
        self._lines: collections.deque[dict[str, str]] = collections.deque(maxlen=PENDING_MAX_LINES)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.dropped = 0
        self.overflowed = 0  # lines dropped since the last flush: more than PENDING_MAX_LINES waiting
        self.overflowed_total = 0
        self.tail: list[str] = []  # the last stderr lines, for a failure reason
        self._thread = threading.Thread(target=self._run, name=f"job-{job_id}-log", daemon=True)
        self._thread.start()

    def line(self, stream: str, text: str) -> None:
        """One output line (``stream`` stdout, stderr or system); called from the agent's reader threads. Host
        paths in it are made neutral: the tenant reads it (Note [Host paths in what a tenant sees] in
        workers.joblines)."""
        entry = joblog.entry(neutral_paths(text), stream)
        with self._lock:
            if len(self._lines) == PENDING_MAX_LINES:
                self.overflowed += 1  # the deque drops its oldest line
            self._lines.append(entry)

    def _flush(self) -> None:
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
            if self.overflowed:
                lines.insert(0, joblog.entry(f"{self.overflowed} output lines dropped: the job printed more than "
                                             f"{PENDING_MAX_LINES} lines in {FLUSH_S} s", "system"))
                self.overflowed_total += self.overflowed
                self.overflowed = 0
        if not lines:
            return
        try:
            joblog.append(self.redis, self.job_id, lines)
        except Exception as exc:  # Redis is down: the lines are lost, the job goes on
            self.dropped += len(lines)
            log.warning("job %s: %d output lines not written to its log stream: %s", self.job_id, len(lines), exc)

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self._flush()

    def close(self) -> None:
        """Write what is left (and a note of what was dropped) and stop the flusher."""
        self._stop.set()
        self._thread.join(5)
        if self.dropped:
            self.line("system", f"{self.dropped} output lines were lost while the log store was unreachable")
        self._flush()


def upload_outputs(code: CodeSpec, output_dir: Path) -> dict[str, Any]:
    """Upload every regular file under ``output_dir`` (relative POSIX paths) to ``files_url``, within
    ``output_limits`` (``max_files``, ``max_bytes``, ``max_file_bytes``). Returns ``{"output_files",
    "output_bytes", "output_skipped": [reasons, the first SKIPPED_SHOWN], "output_skipped_count"}`` (the last two
    only when a file was not kept); never raises (an upload that fails is a reason)."""
    import requests

    limits = code.output_limits or {}
    max_files, max_bytes = int(limits.get("max_files", 1000)), int(limits.get("max_bytes", 1 << 30))
    max_file = int(limits.get("max_file_bytes", max_bytes))
    sent, total, skipped = 0, 0, []
    for path in sorted(p for p in Path(output_dir).rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(output_dir).as_posix()
        size = path.stat().st_size
        if sent >= max_files or total + size > max_bytes or size > max_file:
            skipped.append(f"{rel}: over the output limits ({max_files} files, {max_bytes} bytes, "
                           f"{max_file} bytes a file)")
            continue
        try:
            # never through a link, never blocking on a FIFO, a regular file only (as workers.jobfiles reads):
            # a name swapped for a link after the walk is refused, not followed as root
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise OSError(f"{rel} is not a regular file")
                r = requests.post(code.files_url, headers=auth_header(code.job_token), data={"path": rel},
                                  files={"file": (path.name, f)}, timeout=HTTP_TIMEOUT_S)
            if r.status_code not in (200, 201):
                skipped.append(f"{rel}: HTTP {r.status_code} {r.text[:200]}")
                continue
        except (requests.RequestException, OSError) as exc:
            skipped.append(f"{rel}: {type(exc).__name__}: {exc}")
            continue
        sent += 1
        total += size
    kept = {"output_files": sent, "output_bytes": total}
    return {**kept, "output_skipped": skipped[:SKIPPED_SHOWN], "output_skipped_count": len(skipped)} if skipped \
        else kept


def skipped_lines(uploaded: dict[str, Any]) -> list[str]:
    """The job-log lines (``system`` stream) that tell the user which output files were not kept, from
    :func:`upload_outputs`'s answer; [] when every file was."""
    count = int(uploaded.get("output_skipped_count") or 0)
    if not count:
        return []
    shown = list(uploaded.get("output_skipped") or [])
    head = f"{count} output file{'s' if count != 1 else ''} not kept" + (
        f" (the first {len(shown)} below)" if count > len(shown) else ":")
    return [head, *(f"  {why}" for why in shown)]


def cleanup(dirs: JobDirs, disks=None) -> None:
    """Remove the run's output and scratch directories (the code stays cached under its hash), and unmount the
    file system ``disks`` (workers.jobdisk.JobDisks) gave them. Never raises."""
    jobdisk.remove_run_dir(dirs.output_dir.parent, disks)

