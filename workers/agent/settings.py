"""The device agent's knobs, each written once here (environment variables documented in README.md).

Malformed values raise ValueError naming the variable (the worker refuses to start with that message)."""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from zico_contracts.userjob import LIMITS


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"{name}: expected a number > 0, got {raw!r}")
    return value


BYPASS_MARGIN_MAX_BYTES = 512 << 20
BYPASS_MARGIN_MIN_BYTES = 256 << 20


def device_bypass_margin(budget_bytes: int) -> int:
    """The bypass margin of a device whose budget is ``budget_bytes`` when ``ZICO_JOB_BYPASS_MARGIN_BYTES`` is unset.

    Note [A bound on memory outside the allocator]
        A job may hold its device budget's worth outside the allocator at most, between 256 MiB and 512 MiB: on a
        GPU or a large CPU pool 512 MiB, as before; on the demo's 323 MiB CPU device 323 MiB (512 MiB there was
        more than the device). The floor is what a normal job needs: measured above its baseline at ``hello``, a
        catalog job's anonymous memory grew 73 MiB (digits-cnn) and 129 MiB (tiny-lm) in a normal run (torch's
        own buffers, the autograd engine, the data set), so a smaller bound would stop healthy jobs.
    """
    return int(min(BYPASS_MARGIN_MAX_BYTES, max(BYPASS_MARGIN_MIN_BYTES, budget_bytes)))


def _env_int(name: str, default: int | None, minimum: int) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip().isdigit():
        raise ValueError(f"{name}: expected a whole number, got {raw!r}")
    value = int(raw)
    if value < minimum:
        raise ValueError(f"{name}: expected a number >= {minimum}, got {raw!r}")
    return value


# the smallest value each sandbox limit's knob accepts (zico_contracts.userjob.LIMITS: the knobs' names)
LIMIT_MINIMUMS = {"cpu_s": 1, "nofile": 64, "nproc": 16, "fsize_bytes": 1 << 20}
# ZICO_JOB_DISK_BYTES unset: min(DISK_BYTES_MAX, DISK_FREE_SHARE of the free space under the worker's jobs
# directory at its start / its slots) (AgentSettings.fit_disk)
DISK_BYTES_MAX = 64 << 30
DISK_BYTES_MIN = 1 << 20
DISK_FREE_SHARE = 0.5
UID_LIMIT = 2**32 - 1  # (uid_t)-1 means "unchanged" to setresuid; every job uid stays below it


@dataclass(frozen=True)
class AgentSettings:
    """How the agent watches its job processes.

    Attributes:
        hang_timeout_s: a job that sends no progress message (ready, iteration_begin/end, mark, metric) and
            prints no line for this long, outside gate waits, is killed as hung (``ZICO_JOB_HANG_TIMEOUT_S``,
            default 600 s: a first iteration of a big model on a loaded CPU can take minutes; a user script
            that never steps an optimizer is alive as long as it prints or calls ``zico.log``).
        startup_timeout_s: the same until the job's ``ready`` (importing torch, loading data and building the
            model) (``ZICO_JOB_STARTUP_TIMEOUT_S``, default 600 s).
        stop_grace_s: seconds between SIGTERM (and the ``stop`` message) and SIGKILL on cancel
            (``ZICO_JOB_STOP_GRACE_S``, default 10 s: enough to write a checkpoint).
        bypass_margin_bytes: anonymous memory a job may hold beyond what it held at ``hello`` (the interpreter,
            torch, the allocator client: its baseline) plus its allowed share, before it is stopped as allocating
            outside the allocator (``ZICO_JOB_BYPASS_MARGIN_BYTES``; None, the default: the device's,
            :func:`device_bypass_margin`: the preloaded data set, torch's own small buffers and the host copies of
            a checkpoint live there too).
        rss_interval_s: how often each job's ``/proc/<pid>/status`` is sampled (0.25 s).
        stderr_lines: stderr lines kept to find where a crashed job was (its stack, printed by faulthandler) (50).
        reason_stderr_lines: the last stderr lines a failed job's reason ends with (20; a crash's from
            faulthandler's ``Fatal Python error`` on, up to ``stderr_lines``).
        script_module: the job process entry every job runs, inside its sandbox (``workers.job.entry``): a user's
            script, or a catalog job as the catalog project.
        output_line_bytes: a job's stdout/stderr line is cut to this many bytes before it reaches the log, the
            stderr tail and ``JobRun.on_output`` (``ZICO_JOB_OUTPUT_LINE_BYTES``, default 4096; the rest of the
            line is dropped and the line ends with ``... [N bytes cut]``).
        output_lines_per_s: the lines a second a job's stdout and stderr each reach the log and the relay at, on
            average, in bursts of ten seconds' worth (``ZICO_JOB_OUTPUT_LINES_PER_S``, default 1000); past it they
            are dropped and counted (Note [A job's output rate] in workers.agent.output).

    User-script sandbox (:mod:`workers.agent.sandbox`, docs/workers.md "User scripts and the sandbox"):

    Attributes:
        bwrap: the bubblewrap program (``ZICO_JOB_BWRAP``, default ``/usr/bin/bwrap``); missing, the agent refuses
            user scripts with a message saying so.
        uid_base, uid_count: job ``N`` runs as uid and gid ``uid_base + N % uid_count`` (``ZICO_JOB_UID_BASE``,
            default 2000000000; ``ZICO_JOB_UID_COUNT``, default 1000000): an id no account has, one per job, so no
            two running jobs share a uid and the process-count limit is each job's own.
        cpu_s: CPU seconds a job may use, all its threads together (``ZICO_JOB_CPU_S``, default 2592000, 30 days
            of one core; ``RLIMIT_CPU``: SIGXCPU, then SIGKILL one second later).
        nofile: open files (``ZICO_JOB_NOFILE``, default 4096; ``RLIMIT_NOFILE``).
        nproc: processes and threads of the job's uid (``ZICO_JOB_NPROC``, default 1024; ``RLIMIT_NPROC``): room for
            torch's thread pools on a many-core host and a DataLoader's workers; a script forking until the
            limit held ~6 MiB per process, so 4,096 ran a 24 GiB host out of memory before anything else
            stopped it (the memory watch now counts the job's processes too).
        fsize_bytes: the largest file the job may write (``ZICO_JOB_FSIZE_BYTES``, default 64 GiB;
            ``RLIMIT_FSIZE``: SIGXFSZ).
        disk_bytes: what a job's output and scratch directories may hold together, ``/tmp`` included
            (``ZICO_JOB_DISK_BYTES``, at least 1 MiB; unset, None: the worker fits it to its host at start,
            :meth:`fit_disk`, and an agent started outside a worker takes ``DISK_BYTES_MAX``). Where the host
            allows, each job's directories are a file system of this size (workers.jobdisk: a write past it
            fails with ENOSPC); in any case they are measured every ``disk_interval_s`` (1 s) while the job
            runs and the job stopped once they hold more (Note [A job's disk] in workers.agent.diskwatch).
    """

    hang_timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    stop_grace_s: float = 10.0
    bypass_margin_bytes: int | None = None
    rss_interval_s: float = 0.25
    stderr_lines: int = 50
    reason_stderr_lines: int = 20
    script_module: str = "workers.job.entry"
    output_line_bytes: int = 4096
    output_lines_per_s: float = 1000.0
    bwrap: str = "/usr/bin/bwrap"
    uid_base: int = 2_000_000_000
    uid_count: int = 1_000_000
    cpu_s: int = 30 * 86400
    nofile: int = 4096
    nproc: int = 1024
    fsize_bytes: int = 64 << 30
    disk_bytes: int | None = None
    disk_interval_s: float = 1.0

    def __post_init__(self):
        if self.uid_base < 1 or self.uid_count < 1 or self.uid_base + self.uid_count > UID_LIMIT:
            raise ValueError(f"ZICO_JOB_UID_BASE / ZICO_JOB_UID_COUNT: job uids {self.uid_base}.."
                             f"{self.uid_base + self.uid_count - 1} must lie within 1..{UID_LIMIT - 1}")

    @property
    def job_disk_bytes(self) -> int:
        """A job's disk limit (bytes): ``disk_bytes``, or ``DISK_BYTES_MAX`` where nothing fitted it."""
        return DISK_BYTES_MAX if self.disk_bytes is None else self.disk_bytes

    def fit_disk(self, free_bytes: int, slots: int) -> tuple["AgentSettings", str]:
        """``(these settings with disk_bytes set, why that figure)``: an explicit ``ZICO_JOB_DISK_BYTES`` as it
        is; unset, the smaller of ``DISK_BYTES_MAX`` and ``DISK_FREE_SHARE`` of ``free_bytes`` (the free space
        of the file system holding the worker's jobs directory) divided among ``slots`` jobs, at least
        ``DISK_BYTES_MIN``."""
        if self.disk_bytes is not None:
            return self, "ZICO_JOB_DISK_BYTES"
        share = int(free_bytes * DISK_FREE_SHARE) // max(1, slots)
        fitted = max(DISK_BYTES_MIN, min(DISK_BYTES_MAX, share))
        why = (f"ZICO_JOB_DISK_BYTES unset: the smaller of {DISK_BYTES_MAX >> 30} GiB and "
               f"{DISK_FREE_SHARE:g} of the {free_bytes >> 20} MiB free for the jobs directory over "
               f"{slots} slot{'s' if slots != 1 else ''}")
        return replace(self, disk_bytes=fitted), why

    def limits(self) -> dict[str, int]:
        """The sandbox's limits by name (``zico_contracts.userjob.LIMITS``): ``{"cpu_s": 2592000, ...}``."""
        return {name: getattr(self, name) for name in LIMITS}

    def job_uid(self, job_id: int) -> int:
        """The uid (and gid) job ``job_id`` runs as in its sandbox."""
        return self.uid_base + job_id % self.uid_count

    @classmethod
    def from_env(cls, **overrides) -> "AgentSettings":
        """Settings from ``ZICO_JOB_*`` variables; raises ValueError naming a malformed one."""
        base = {"hang_timeout_s": _env_float("ZICO_JOB_HANG_TIMEOUT_S", cls.hang_timeout_s),
                "startup_timeout_s": _env_float("ZICO_JOB_STARTUP_TIMEOUT_S", cls.startup_timeout_s),
                "stop_grace_s": _env_float("ZICO_JOB_STOP_GRACE_S", cls.stop_grace_s),
                "bypass_margin_bytes": (int(_env_float("ZICO_JOB_BYPASS_MARGIN_BYTES", 1.0))
                                        if os.environ.get("ZICO_JOB_BYPASS_MARGIN_BYTES") else None),
                "output_line_bytes": _env_int("ZICO_JOB_OUTPUT_LINE_BYTES", cls.output_line_bytes, 80),
                "output_lines_per_s": _env_float("ZICO_JOB_OUTPUT_LINES_PER_S", cls.output_lines_per_s),
                "bwrap": os.environ.get("ZICO_JOB_BWRAP") or cls.bwrap,
                "uid_base": _env_int("ZICO_JOB_UID_BASE", cls.uid_base, 1),
                "uid_count": _env_int("ZICO_JOB_UID_COUNT", cls.uid_count, 1),
                "disk_bytes": _env_int("ZICO_JOB_DISK_BYTES", None, DISK_BYTES_MIN),
                **{name: _env_int(LIMITS[name].knob, getattr(cls, name), minimum)
                   for name, minimum in LIMIT_MINIMUMS.items()}}
        return cls(**{**base, **overrides})
