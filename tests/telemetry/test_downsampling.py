"""The downsampler keeps at most one point per second per job and never hides a peak."""
from zico.telemetry.downsample import Downsampler


def _s(t, job=1, reserved=100, allocated=50, iteration=0, phase="forward", device="cpu.h.0"):
    return {"t": t, "job": job, "device": device, "reserved": reserved, "allocated": allocated,
            "iteration": iteration, "phase": phase}


def test_it_folds_five_hertz_samples_into_one_point_per_second_per_job():
    d = Downsampler(lag_s=0.0)
    samples = [_s(100 + k * 0.2, job=j, reserved=1000 + k) for k in range(15) for j in (1, 2)]
    out = d.add(samples) + d.flush(now=200)
    per_job = {}
    for p in out:
        per_job.setdefault(p.job, []).append(p.second)
    assert per_job == {1: [100, 101, 102], 2: [100, 101, 102]}
    assert all(len(set(v)) == len(v) for v in per_job.values())


def test_it_keeps_the_largest_bytes_of_a_second_and_its_last_iteration():
    d = Downsampler(lag_s=0.0)
    d.add([_s(10.0, reserved=5, allocated=1, iteration=3), _s(10.4, reserved=90, allocated=70, iteration=4),
           _s(10.8, reserved=20, allocated=10, iteration=5, phase="backward")])
    (p,) = d.flush(now=100)
    assert (p.reserved, p.allocated, p.iteration, p.phase, p.samples) == (90, 70, 5, "backward", 3)


def test_it_never_emits_a_second_twice_even_with_late_samples():
    d = Downsampler(lag_s=0.0)
    first = d.add([_s(10.1), _s(11.2)])
    assert [p.second for p in first] == [10]
    late = d.add([_s(10.9, reserved=10**9)])  # arrives after second 10 was emitted
    assert late == []
    rest = d.flush(now=100)
    assert [p.second for p in rest] == [11]
    assert all(p.reserved < 10**9 for p in first + rest)


def test_it_waits_for_the_lag_before_flushing_an_open_second():
    d = Downsampler(lag_s=2.0)
    d.add([_s(50.5)])
    assert d.flush(now=52.5) == []
    assert [p.second for p in d.flush(now=53.0)] == [50]


def test_device_rows_and_job_rows_are_separate_series():
    d = Downsampler(lag_s=0.0)
    d.add([_s(1.0, job=None, reserved=300), _s(1.1, job=7, reserved=100)])
    out = {p.job: p.reserved for p in d.flush(now=10)}
    assert out == {None: 300, 7: 100}


def test_malformed_samples_are_counted_and_skipped():
    d = Downsampler(lag_s=0.0)
    d.add([{"job": 1, "device": "cpu.h.0"}, {"t": "x", "device": "cpu.h.0"}, _s(3.0)])
    assert d.rejected == 2
    assert "t" in d.last_error or "malformed" in d.last_error
    assert [p.second for p in d.flush(now=10)] == [3]


def test_stacked_values_are_the_jobs_bytes_at_the_devices_peak_instant():
    # one second of a handover: job 1 frees 300 at .4, job 2 takes 230 at .6 (each tick shares one t)
    d = Downsampler(lag_s=0.0)
    for k, (a, b) in enumerate([(300, 0), (300, 0), (0, 0), (0, 230), (0, 230)]):
        t = 10 + k * 0.2
        d.add([_s(t, job=1, allocated=a), _s(t, job=2, allocated=b), _s(t, job=None, allocated=a + b)])
    out = {p.job: p for p in d.flush(now=100)}
    assert (out[1].allocated, out[2].allocated) == (300, 230)            # each job's own maximum
    assert (out[1].allocated_at_peak, out[2].allocated_at_peak) == (300, 0)
    assert out[1].allocated_at_peak + out[2].allocated_at_peak <= out[None].allocated


def test_without_a_device_row_the_peak_instant_is_where_the_jobs_sum_is_largest():
    d = Downsampler(lag_s=0.0)
    d.add([_s(5.0, job=1, allocated=100), _s(5.0, job=2, allocated=10),
           _s(5.5, job=1, allocated=0), _s(5.5, job=2, allocated=90)])
    out = {p.job: p.allocated_at_peak for p in d.flush(now=100)}
    assert out == {1: 100, 2: 10}
