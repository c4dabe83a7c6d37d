"""Trace -> curve tests: plain records, iteration cutting, warm-up skipping, event-wise averaging."""
import numpy as np
import pytest

from placement.curves import CurveError
from zico_workloads.curves.trace import iteration_windows, records_to_trace, trace_curve

MiB = 1 << 20


def iteration_records(i, t0, dur, extra=0):
    """One iteration: +4 MiB at 10 %, +8 MiB at 30 % (the peak), both freed by 90 %."""
    at = lambda f: t0 + f * dur  # noqa: E731
    return [
        {"t": at(0.0), "kind": "mark", "mark": "iteration_start", "iteration": i},
        {"t": at(0.0), "kind": "mark", "mark": "phase", "phase": "forward", "iteration": i},
        {"t": at(0.1), "kind": "alloc", "bytes": 4 * MiB},
        {"t": at(0.3), "kind": "alloc", "bytes": 8 * MiB + extra},
        {"t": at(0.5), "kind": "mark", "mark": "phase", "phase": "backward", "iteration": i},
        {"t": at(0.6), "kind": "free", "bytes": 8 * MiB + extra},
        {"t": at(0.8), "kind": "mark", "mark": "phase", "phase": "optimizer", "iteration": i},
        {"t": at(0.9), "kind": "free", "bytes": 4 * MiB},
        {"t": at(1.0), "kind": "mark", "mark": "iteration_end", "iteration": i},
    ]


def test_steady_iterations_are_averaged_event_by_event_after_warmup():
    records = [{"t": 0.0, "kind": "alloc", "bytes": 100 * MiB}]  # the model, before any iteration
    records += iteration_records(0, 1.0, 5.0, extra=MiB)  # a different warm-up iteration
    records += iteration_records(1, 6.0, 1.0)
    records += iteration_records(2, 7.0, 3.0)
    curve = trace_curve(records_to_trace(records, initial_bytes=0), warmup=1)
    assert curve.peak_bytes == 112 * MiB  # not the warm-up's 113 MiB
    assert curve.persistent_bytes == 100 * MiB
    assert curve.iteration_s == pytest.approx(2.0)
    assert curve.meta["iterations_averaged"] == 2
    assert curve.at(0.2) == 104 * MiB and curve.at(0.35) == 112 * MiB and curve.at(0.95) == 100 * MiB
    assert curve.meta["phase_fractions"] == {"forward": 0.0, "backward": 0.5, "optimizer": 0.8}


def test_iterations_with_different_allocations_keep_the_highest_peak():
    records = iteration_records(0, 0.0, 1.0) + iteration_records(1, 1.0, 1.0, extra=2 * MiB) \
        + iteration_records(2, 2.0, 1.0)
    curve = trace_curve(records_to_trace(records), warmup=1)
    assert curve.peak_bytes == 14 * MiB
    assert curve.meta["iterations_averaged"] == 1
    assert curve.meta["iteration_peaks_bytes"] == [14 * MiB, 12 * MiB]


def test_records_of_other_jobs_are_ignored_when_a_job_is_named():
    mine = [dict(r, job=1) for r in iteration_records(0, 0.0, 1.0) + iteration_records(1, 1.0, 1.0)]
    other = [{"t": 1.35, "kind": "alloc", "bytes": 50 * MiB, "job": 2}]
    curve = trace_curve(records_to_trace(mine + other, job=1), warmup=1)
    assert curve.peak_bytes == 12 * MiB


def test_an_allocation_at_the_end_mark_time_belongs_to_that_iteration_and_not_the_next():
    records = iteration_records(0, 0.0, 1.0) + iteration_records(1, 1.0, 1.0)
    records.append({"t": 1.0, "kind": "alloc", "bytes": MiB})  # at iteration 0's end == iteration 1's start
    trace = records_to_trace(records)
    assert [w[0] for w in iteration_windows(trace)] == [0, 1]
    curve = trace_curve(trace, warmup=1)
    assert curve.persistent_bytes == MiB and curve.bytes[0] == MiB


@pytest.mark.parametrize("records, message", [
    ([{"t": "soon", "kind": "alloc", "bytes": 1}], r"trace\[0\]\.t"),
    ([{"t": 0.0, "kind": "alloc", "bytes": -5}], r"trace\[0\]\.bytes"),
    ([{"t": 0.0, "kind": "grow", "bytes": 5}], r"trace\[0\]\.kind"),
    ([{"t": 0.0, "kind": "mark", "mark": "lunch"}], r"trace\[0\]\.mark"),
    (["alloc"], r"trace\[0\]: expected a dict"),
])
def test_malformed_records_are_named(records, message):
    with pytest.raises(CurveError, match=message):
        records_to_trace(records)


def test_too_few_iterations_is_an_error():
    with pytest.raises(CurveError, match="need more than warmup=1"):
        trace_curve(records_to_trace(iteration_records(0, 0.0, 1.0)), warmup=1)
    assert np.isfinite(trace_curve(records_to_trace(iteration_records(0, 0.0, 1.0)), warmup=0).peak_bytes)
