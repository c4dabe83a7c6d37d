"""The device agent's knobs, each written once here (environment variables documented in README.md)."""
from __future__ import annotations

import os
from dataclasses import dataclass


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


@dataclass(frozen=True)
class AgentSettings:
    """How the agent watches its job processes.

    Attributes:
        hang_timeout_s: a job that sends no progress message (ready, iteration_begin/end, mark, metric) for
            this long, outside gate waits, is killed as hung (``ZICO_JOB_HANG_TIMEOUT_S``, default 600 s: a
            first iteration of a big model on a loaded CPU can take minutes).
        startup_timeout_s: the same until the job's ``ready`` (importing torch, loading data and building the
            model) (``ZICO_JOB_STARTUP_TIMEOUT_S``, default 600 s).
        stop_grace_s: seconds between SIGTERM (and the ``stop`` message) and SIGKILL on cancel
            (``ZICO_JOB_STOP_GRACE_S``, default 10 s: enough to write a checkpoint).
        bypass_margin_bytes: anonymous memory a job may hold beyond what it held at ``hello`` (the interpreter,
            torch, the allocator client: its baseline) plus its allowed share, before it is stopped as allocating
            outside the allocator (``ZICO_JOB_BYPASS_MARGIN_BYTES``, default 512 MiB: the preloaded data set,
            torch's own small buffers and the host copies of a checkpoint live there too).
        rss_interval_s: how often each job's ``/proc/<pid>/status`` is sampled (0.25 s).
        stderr_lines: stderr lines kept for a failure reason (50).
        job_module: the module run with ``python -m`` for each job (``workers.jobproc``).
    """

    hang_timeout_s: float = 600.0
    startup_timeout_s: float = 600.0
    stop_grace_s: float = 10.0
    bypass_margin_bytes: int = 512 << 20
    rss_interval_s: float = 0.25
    stderr_lines: int = 50
    job_module: str = "workers.jobproc"

    @classmethod
    def from_env(cls, **overrides) -> "AgentSettings":
        """Settings from ``ZICO_JOB_*`` variables; raises ValueError naming a malformed one."""
        base = {"hang_timeout_s": _env_float("ZICO_JOB_HANG_TIMEOUT_S", cls.hang_timeout_s),
                "startup_timeout_s": _env_float("ZICO_JOB_STARTUP_TIMEOUT_S", cls.startup_timeout_s),
                "stop_grace_s": _env_float("ZICO_JOB_STOP_GRACE_S", cls.stop_grace_s),
                "bypass_margin_bytes": int(_env_float("ZICO_JOB_BYPASS_MARGIN_BYTES", cls.bypass_margin_bytes))}
        return cls(**{**base, **overrides})
