"""A job's wall-clock limit: where it comes from, how it travels in a run spec, and the words of its stop.

The web side resolves a job's limit (:func:`resolve`) from up to three: the job's own request (``time_limit_s``
on POST /api/jobs/, ``zico submit --time-limit``), its tenant's maximum (``Tenant.max_time_limit_s``) and the
platform's (``ZICO_JOB_TIME_LIMIT_S``); the least of those set holds, and it travels in the run spec as
``wall_limit`` (:class:`WallLimit`, ``{"seconds", "source"}``). The device agent stops a job process that has
run past it (Note [A job's wall-clock limit] in workers.agent.agent) and the job fails with :func:`reason`.

Standard library only, like every module of this package: the web side and the device worker import it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

FIELD = "wall_limit"  # its key in the run spec
SOURCES = {  # where a limit came from -> the words the stop's reason names it with
    "job": "the job's own limit",
    "tenant": "the tenant's limit",
    "platform": "the platform's limit, ZICO_JOB_TIME_LIMIT_S",
}


class WallLimitError(ValueError):
    """A wall limit is malformed; ``field`` names the input (``wall_limit``, ``wall_limit.seconds``, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def positive_seconds(value: Any) -> bool:
    """True for a finite number of seconds > 0 (an int or a float, not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and value > 0)


@dataclass(frozen=True)
class WallLimit:
    """The most wall-clock seconds a job's process may run (``seconds``, > 0), and whose limit it is
    (``source``: a key of :data:`SOURCES`)."""

    seconds: float
    source: str

    def __post_init__(self):
        if not positive_seconds(self.seconds):
            raise WallLimitError(f"{FIELD}.seconds", f"expected a positive number of seconds, got {self.seconds!r}")
        if self.source not in SOURCES:
            raise WallLimitError(f"{FIELD}.source", f"expected one of {', '.join(SOURCES)}, got {self.source!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "source": self.source}

    @classmethod
    def from_dict(cls, value: Any) -> "WallLimit | None":
        """Parse a run spec's ``wall_limit`` (None: no limit). Raises WallLimitError naming the field."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise WallLimitError(FIELD, f"expected an object {{seconds, source}}, got {value!r}")
        return cls(value.get("seconds"), value.get("source"))


def resolve(*, job_s: float | None = None, tenant_s: float | None = None,
            platform_s: float | None = None) -> WallLimit | None:
    """The limit that holds: the least of those set (seconds; None: not set), with its source. On a tie the
    job's own request names it before the tenant's, the tenant's before the platform's. None when none is set.
    Raises WallLimitError naming the source of a value that is set but not a positive number of seconds."""
    best = None
    for source, value in (("job", job_s), ("tenant", tenant_s), ("platform", platform_s)):
        if value is None:
            continue
        if not positive_seconds(value):
            raise WallLimitError(source, f"expected a positive number of seconds, got {value!r}")
        if best is None or value < best.seconds:
            best = WallLimit(value, source)
    return best


def format_duration(seconds: float) -> str:
    """Seconds in words: ``"3 s"``, ``"1.5 s"``, ``"1 min 30 s"``, ``"1 h 0 min"``, ``"24 h 0 min"`` (under a
    minute to the hundredth of a second, above it to the second, from an hour on to the minute)."""
    if seconds < 60:
        return f"{round(seconds, 2):g} s"
    if seconds < 3600:
        m, s = divmod(int(round(seconds)), 60)
        return f"{m} min" + (f" {s} s" if s else "")
    h, m = divmod(int(round(seconds / 60)), 60)
    return f"{h} h {m} min"


def describe(limit: WallLimit) -> str:
    """``"1 h 0 min (the tenant's limit)"``."""
    return f"{format_duration(limit.seconds)} ({SOURCES[limit.source]})"


def reason(limit: WallLimit) -> str:
    """The failure reason of a job the agent stopped at ``limit``:
    ``"ran past its wall-clock limit of 1 h 0 min (the tenant's limit): stopped"``."""
    return f"ran past its wall-clock limit of {describe(limit)}: stopped"
