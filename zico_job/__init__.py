"""Zico's job-side API for a user's own training script; inside a Zico job ``import zico`` is this package.

    import zico
    zico.set_iterations_total(1000)          # optional: how many iterations the run will take
    for step in range(1000):
        with zico.iteration():               # optional: only for a loop without a torch optimizer
            ...
        zico.log(loss=loss, accuracy=acc)    # numbers, strings, None, or 0-d tensors / numpy scalars

Nothing here is needed: an unmodified script runs as a job, its iterations counted from its optimizer steps.
A loop that steps no torch optimizer (inference, evaluation, hand-written updates, another library's optimizer)
marks its iterations with ``zico.iteration()`` (Note [Explicit iterations] in ``workers.job.stepclock``).
Outside a Zico job every call does nothing but check its arguments (the script runs the same on a laptop). The
standard library and ``zico_contracts`` only:
the job process (``workers.job.entry``) attaches the sink that carries the values to the device agent as the
protocol's ``metric`` message (``zico_contracts.agent``), at most once a second with the latest values, and
the iteration marks to the job's clock.
"""
from __future__ import annotations

import math
import os
from typing import Any, Protocol

from zico_contracts.jobmetrics import check_user_metric

__all__ = ["log", "set_iterations_total", "iteration", "running", "job_id", "output_dir", "data_dir",
           "scratch_dir"]


class _Sink(Protocol):
    def log(self, values: dict[str, Any]) -> None: ...

    def set_iterations_total(self, total: int) -> None: ...

    def begin_iteration(self) -> None: ...

    def end_iteration(self) -> None: ...


_sink: _Sink | None = None


def _attach(sink: _Sink | None) -> None:
    """Called by the job process before the script runs (None detaches)."""
    global _sink
    _sink = sink


def _plain(name: str, value: Any) -> float | int | str | bool | None:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if not isinstance(value, float) and callable(getattr(value, "item", None)):
        value = value.item()  # a 0-d torch tensor or a numpy scalar
        if value is None or isinstance(value, (bool, int, str)):
            return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # nan / inf travel as text
    raise TypeError(f"zico.log: {name}={value!r:.60} is not a number, string, None or a one-element tensor")


def log(**values: Any) -> None:
    """Report training figures (``loss=0.31, accuracy=0.9``); they appear with the job's progress and final
    metrics. Raises TypeError naming a value that is not a number, string, None, bool or one-element tensor;
    ValueError naming a name the platform measures itself (``iterations_done``, ``slowdown``, ...:
    ``zico_contracts.jobmetrics``) or one over 100 characters."""
    plain = {check_user_metric(name): _plain(name, v) for name, v in values.items()}
    if _sink is not None and plain:
        _sink.log(plain)


def set_iterations_total(total: int) -> None:
    """How many iterations (optimizer steps, or ``zico.iteration()`` blocks) the whole run takes, for the job's
    progress. Raises ValueError for anything but an integer >= 0."""
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"zico.set_iterations_total: expected an integer >= 0, got {total!r}")
    if _sink is not None:
        _sink.set_iterations_total(total)


class iteration:
    """One training iteration, as a ``with`` block, for a loop that steps no torch optimizer::

        for batch in loader:
            with zico.iteration():
                loss = model(batch).sum()
                loss.backward()
                manual_update(model)

    Entering the block starts the iteration: one round trip to the device agent's coordinator, which may hold
    it back there (the time shift that keeps co-located jobs' memory peaks apart), so put the iteration's
    allocations inside the block. Leaving it ends the iteration (also when the body raises), and the job's
    progress counts one. The rule with an optimizer: from the first block on, the blocks are the job's
    iterations and optimizer steps count none (inside a block a step only marks its optimizer phase), so a
    loop may use both without counting twice; an iteration the optimizer's step had already begun when the
    first block is entered is that block's (Note [Explicit iterations] in ``workers.job.stepclock``).

    In a job, entering raises RuntimeError inside another block, and the stop of a cancelled job (a
    ``BaseException``) instead of starting. Outside a Zico job it does nothing."""

    __slots__ = ("_sink",)

    def __enter__(self) -> None:
        self._sink = _sink
        if self._sink is not None:
            self._sink.begin_iteration()

    def __exit__(self, *exc: Any) -> bool:
        if self._sink is not None:
            self._sink.end_iteration()
        return False


def running() -> bool:
    """True inside a Zico job process."""
    return _sink is not None


def job_id() -> int | None:
    """The Zico job id, or None outside a job."""
    raw = os.environ.get("ZICO_JOB_ID")
    return int(raw) if raw and raw.isdigit() else None


def output_dir() -> str:
    """Where the job writes what it keeps (checkpoints, results): ``$ZICO_OUTPUT_DIR``, else the current
    directory outside a job."""
    return os.environ.get("ZICO_OUTPUT_DIR", os.getcwd())


def data_dir() -> str | None:
    """The job's read-only data directory (``$ZICO_DATA_DIR``), or None when it has none."""
    return os.environ.get("ZICO_DATA_DIR")


def scratch_dir() -> str:
    """The job's private writable scratch space (``$ZICO_SCRATCH_DIR``), else the system's temp directory."""
    import tempfile

    return os.environ.get("ZICO_SCRATCH_DIR", tempfile.gettempdir())
