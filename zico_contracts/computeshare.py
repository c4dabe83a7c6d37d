"""A run's compute-share measurement as it travels from the device worker to the web side: the ``compute_share``
entry of a ``job_finished`` message's ``metrics`` (zico_contracts.lifecycle).

The device agent measures it while the job runs beside others (placement.compute_meter; what the figures mean:
Note [Measured compute share] in placement.compute_share, whose ``ShareEstimate.to_dict()`` makes the object);
the control consumer checks it with :func:`validate` and stores it with the job's memory curve, where the
scheduler reads it. A run that showed too little sends none. Fields (seconds unless said)::

    share             number in (0, 1]   the run's estimate of the job's compute share
    method            str                contention | utilisation | bound
    bound             number in (0, 1]   the most the step times allow (1.0: no bound)
    iterations        int >= 1           steady iterations measured (the run's first left out)
    solo_step_s       number > 0         the solo step time compared with
    solo_from         str                run (the run's iterations that overlapped nothing) | curve (its iteration_s)
    compute_s         number >= 0        compute time of those iterations (gate waits excluded)
    alone_s           number >= 0        of it, with no other job computing
    overlap_s         number >= 0        of it, beside other computing jobs
    neighbours_share  number >= 0        their shares' sum, time-weighted over overlap_s (identical jobs not in it)
    identical         number >= 0        identical jobs computing beside it, time-weighted
    slowdown          number > 0 | null  how much its overlapped compute was stretched (null: too little overlap)
    utilisation       number in (0, 1] | null   busy share of the device while it computed alone
    utilisation_s     number >= 0        the seconds that utilisation was read over
    device            str                the torch device it ran on: "cpu" or "cuda:N"

Standard library only.
"""
from __future__ import annotations

import math
import re
from typing import Any

METRIC = "compute_share"  # the key in job_finished's metrics
METHODS = ("contention", "utilisation", "bound")
SOLO_FROM = ("run", "curve")


class ShareError(ValueError):
    """A measurement is malformed; ``field`` names the bad field, and the message starts with it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_SHARE = (lambda v: _num(v) and 0 < v <= 1, "a number in (0, 1]")
_SECONDS = (lambda v: _num(v) and v >= 0, "a number >= 0")
FIELDS: dict[str, tuple] = {
    "share": _SHARE,
    "method": (lambda v: v in METHODS, f"one of {', '.join(METHODS)}"),
    "bound": _SHARE,
    "iterations": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1"),
    "solo_step_s": (lambda v: _num(v) and v > 0, "a number > 0"),
    "solo_from": (lambda v: v in SOLO_FROM, f"one of {', '.join(SOLO_FROM)}"),
    "compute_s": _SECONDS,
    "alone_s": _SECONDS,
    "overlap_s": _SECONDS,
    "neighbours_share": _SECONDS,
    "identical": _SECONDS,
    "slowdown": (lambda v: v is None or (_num(v) and v > 0), "null or a number > 0"),
    "utilisation": (lambda v: v is None or _SHARE[0](v), "null or a number in (0, 1]"),
    "utilisation_s": _SECONDS,
    "device": (lambda v: isinstance(v, str) and re.fullmatch(r"cpu|cuda:\d+", v) is not None, '"cpu" or "cuda:N"'),
}


def validate(measurement: Any) -> dict[str, Any]:
    """Check a measurement (the object above); returns it with exactly the listed fields. Raises ShareError
    naming the first missing or bad field (``compute_share`` itself when it is not an object)."""
    if not isinstance(measurement, dict):
        raise ShareError(METRIC, f"expected an object, got {type(measurement).__name__}")
    for name, (ok, what) in FIELDS.items():
        if name not in measurement:
            raise ShareError(name, "missing")
        if not ok(measurement[name]):
            raise ShareError(name, f"expected {what}, got {measurement[name]!r}")
    return {name: measurement[name] for name in FIELDS}


def device_kind(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` of a torch device name (a measurement's or a memory curve's ``device``)."""
    return "cuda" if str(device).startswith("cuda") else "cpu"
