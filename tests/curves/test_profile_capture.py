"""Allocator-trace capture tests: a real CPU run through the Zico allocator gives exact persistent
bytes, and the estimate agrees with it (acceptance, for the small workloads; the large ones are in
docs/curve-accuracy.md)."""
import pytest

import zico_allocator as za
from workers.curves.capture import allocator_records_to_trace, profile_curve
from zico_workloads.curves.estimate import estimate_curve, round_up
from zico_workloads.curves.trace import trace_curve
from zico_workloads.models import DigitsCNN

MiB = 1 << 20


def test_a_real_profiling_run_holds_exactly_weights_and_momentum_between_iterations(tmp_path):
    curve = profile_curve("digits-cnn", {"batch_size": 32}, "cpu", tmp_path, warmup=1, steady=2)
    expected = 2 * sum(round_up(p.numel() * 4, 512) for p in DigitsCNN(16).parameters())
    assert curve.source == "allocator-trace" and curve.device == "cpu"
    assert curve.persistent_bytes == expected
    assert curve.peak_bytes == max(curve.meta["iteration_peaks_bytes"])
    assert curve.meta["phase_fractions"]["backward"] > 0


@pytest.mark.parametrize("key", ["digits-cnn", "tiny-lm"])
def test_estimate_and_allocator_trace_agree_on_peak_within_5_percent(tmp_path, key):
    real = profile_curve(key, {}, "cpu", tmp_path, warmup=1, steady=2)
    est = estimate_curve(key, {}, "cpu", tmp_path)
    assert abs(est.peak_bytes / real.peak_bytes - 1) < 0.05, (est.peak_bytes, real.peak_bytes)
    assert est.persistent_bytes == real.persistent_bytes


def rec(t, job, delta, total, kind, iteration=0):
    return za.TraceRecord(t, job, delta, total, total, total, iteration, -1, kind)


def test_running_totals_survive_lost_records_and_foreign_jobs():
    records = [
        rec(0.0, 5, 0, 10 * MiB, "iteration_start", 0), rec(0.1, 5, MiB, 11 * MiB, "alloc"),
        rec(0.2, 5, -MiB, 10 * MiB, "free"), rec(0.3, 5, 0, 10 * MiB, "iteration_end", 0),
        rec(1.0, 5, 0, 10 * MiB, "iteration_start", 1), rec(1.05, 6, 99 * MiB, 99 * MiB, "alloc"),
        # a record of job 5 was lost here (+2 MiB); the running total still says 14 MiB
        rec(1.1, 5, 2 * MiB, 14 * MiB, "alloc"), rec(1.2, 5, -4 * MiB, 10 * MiB, "free"),
        rec(1.25, 5, 0, 10 * MiB, "backward", 1), rec(1.3, 5, 0, 10 * MiB, "iteration_end", 1),
    ]
    curve = trace_curve(allocator_records_to_trace(records, 5), warmup=1)
    assert curve.peak_bytes == 14 * MiB and curve.persistent_bytes == 10 * MiB
    assert curve.meta["phase_fractions"]["backward"] == pytest.approx(0.25 / 0.3, abs=1e-4)


def test_a_stop_reason_ends_a_profiling_run_between_iterations_and_releases_its_memory(tmp_path):
    from workers.curves.capture import ProfileStopped

    seen = []

    def stop(done):
        seen.append(done)
        return "over the limit" if done == 2 else None

    with pytest.raises(ProfileStopped, match="over the limit"):
        profile_curve("digits-cnn", {"batch_size": 32}, "cpu", tmp_path, warmup=1, steady=3, job_id=9001, stop=stop)
    assert seen == [1, 2]  # asked after each iteration, never interrupted inside one
    assert za.memory_stats(device="cpu")["allocated_bytes.all.current"] == 0
