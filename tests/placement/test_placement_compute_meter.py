"""A job's compute share measured from its run (placement.compute_meter, placement.compute_share): the device's
meter fed the simulator's timeline, whose contention model is exact (placement.device_sim), recovers the
shares the simulated jobs had; the 1/n floor, too little evidence and noise are told apart; runs combine."""
import dataclasses

import pytest

from placement.compute_meter import ComputeMeter, curve_identity, curve_share
from placement.compute_share import (DEFAULT_COMPUTE_SHARE, MAX_RUNS, MEASURED_KEY, SHARE_KEY, ShareEvidence,
                                     combine, estimate_share)
from placement.coordinator import Coordinator
from placement.curves import triangular_curve
from placement.device_sim import DeviceRun, UngatedGate
from placement.state import Job

GiB = 1 << 30


def curve(iteration_s=1.0, peak=4, persistent=1, rise=0.5, share=None):
    c = triangular_curve(persistent * GiB, peak * GiB, iteration_s, rise).to_dict()
    if share is not None:
        c["meta"] = {SHARE_KEY: share}
    return c


def simulate(jobs, gate=None, budget=100 * GiB, cores=2, cpu=True):
    """Run ``jobs`` = [(curve dict, true share, iterations, stored curve dict)] on the simulator, replay its
    timeline into a ComputeMeter (CPU readings: true share x cores x the job's speed), return each job's
    estimate. The meter sees only the stored curves (their ``meta`` shares), never the true shares."""
    from placement.curves import curve_from_dict

    trace = []
    run = DeviceRun(budget, gate, trace=trace, track_memory=False)
    for i, (c, share, n, _) in enumerate(jobs):
        run.add_job(Job(i, "t", curve_from_dict(c), iterations=n, compute_share=share))
    run.run_until_idle()
    clock = [0.0]
    meter = ComputeMeter(lambda: clock[0], cores=cores)
    computing, cpu_s, last = set(), [0.0] * len(jobs), [0.0]

    def advance(t):  # each computing job's CPU time: its share of the cores at the simulator's speed
        speed = 1 / max(1.0, sum(jobs[k][1] for k in computing))
        for k in computing:
            cpu_s[k] += (t - last[0]) * jobs[k][1] * cores * speed
        last[0] = t

    out = {}
    for t, jid, call, args, _ in trace:
        advance(t)
        clock[0] = t
        if call == "join":
            meter.join(jid, jobs[jid][3], (lambda k=jid: cpu_s[k]) if cpu else None)
        elif call == "mark" and args[0] == "iteration_start":
            meter.begin(jid)
            computing.add(jid)
        elif call == "mark" and args[0] == "iteration_end":
            meter.end(jid)
            computing.discard(jid)
        elif call == "leave":
            out[jid] = meter.leave(jid)
    return out


def test_two_identical_jobs_that_contend_give_their_share():
    c = curve()
    got = simulate([(c, 0.8, 20, c), (c, 0.8, 20, c)], UngatedGate())
    for est in got.values():  # both stretched 1.6x the whole time: (1 + 1 identical) x s = 1.6
        assert est.method == "contention" and est.share == pytest.approx(0.8, rel=1e-6)
        assert est.slowdown == pytest.approx(1.6, rel=1e-6) and est.identical == pytest.approx(1.0)


def test_a_job_beside_a_neighbour_of_known_share_gets_its_own_share():
    a, b = curve(1.0), curve(0.6, peak=3)
    got = simulate([(a, 0.7, 20, a), (b, 0.6, 10, curve(0.6, peak=3, share=0.6))], UngatedGate())
    est = got[0]  # b's stored share 0.6 is subtracted from the stretch (1.3): a's 0.7
    assert est.method == "contention" and est.share == pytest.approx(0.7, rel=1e-6)
    assert est.neighbours_share == pytest.approx(0.6) and est.solo_from == "run"  # a ran on alone after b


def test_gated_runs_with_partial_overlap_are_measured_from_compute_time_only():
    c = curve(1.0, peak=6, persistent=1, rise=0.6)
    # the coordinator (default gate) on 8 GiB, below the pair's 12 GiB of peaks: it holds one job back
    got = simulate([(c, 0.8, 20, c), (c, 0.8, 20, c)], budget=8 * GiB, cpu=False)
    for est in got.values():
        assert est.method == "contention" and est.share == pytest.approx(0.8, rel=1e-3)
        assert 0 < est.overlap_s < 0.9 * est.compute_s  # the gate held them apart part of the time


def test_no_contention_gives_only_the_1_over_n_bound_unless_utilisation_was_measured():
    c = curve()
    # two identical jobs of share 0.4: 0.8 of the device, nobody slows down; any share <= 1/2 fits
    blind = simulate([(c, 0.4, 20, c), (c, 0.4, 20, c)], UngatedGate(), cpu=False)
    assert {(e.method, e.share) for e in blind.values()} == {("bound", 0.5)}
    # ... and a job that ran alone through part of its run has its utilisation: CPU seconds / (wall x cores)
    seen = simulate([(c, 0.4, 20, c), (c, 0.4, 8, c)], UngatedGate())
    assert seen[0].method == "utilisation" and seen[0].share == pytest.approx(0.4, rel=1e-6)
    assert seen[0].bound == 0.5 and seen[0].utilisation == pytest.approx(0.4, rel=1e-6)
    assert seen[1].method == "bound"  # the shorter one never computed alone


def test_a_job_alone_on_its_device_is_measured_by_its_utilisation():
    c = curve()
    est = simulate([(c, 0.35, 10, c)])[0]
    assert (est.method, est.bound, est.slowdown) == ("utilisation", 1.0, None)
    assert est.share == pytest.approx(0.35, rel=1e-6) and est.solo_from == "run"
    assert simulate([(c, 0.35, 10, c)], cpu=False)[0] is None  # no readings: nothing to say


def test_gpu_utilisation_readings_count_only_while_the_job_computes_alone():
    t = [0.0]
    meter = ComputeMeter(lambda: t[0])
    meter.join(1, curve(1.0))
    meter.join(2, curve(1.0, peak=3))
    for i in range(6):  # job 1 iterates alone; a 5 Hz reader sees 70 % busy
        t[0] = i * 1.0
        meter.begin(1)
        for k in range(1, 6):
            t[0] = i + 0.2 * k - (0.0 if k < 5 else 0.01)
            meter.utilisation(0.7)
        t[0] = i + 1.0
        meter.end(1)
    meter.begin(2)  # job 2 computes, job 1 too: readings now are not job 1's alone
    meter.begin(1)
    t[0] += 0.5
    meter.utilisation(1.0)
    est = meter.leave(1)
    assert est.method == "utilisation" and est.share == pytest.approx(0.7, rel=1e-6)


def test_too_few_iterations_or_too_little_overlap_measure_nothing_from_step_times():
    ev = ShareEvidence(iterations=2, compute_s=3.0, overlap_s=3.0)
    assert estimate_share(ev, 1.0) is None
    # overlap worth 2 solo steps of 20 (under 4, and under a quarter of the compute): no stretch is read
    few = ShareEvidence(iterations=20, compute_s=24.0, alone_s=20.0, overlap_s=4.0, neighbours_share_s=2.0)
    assert estimate_share(few, 1.0) is None
    assert estimate_share(ShareEvidence(iterations=5, compute_s=5.0, alone_s=5.0), None) is None  # no solo time


@pytest.mark.parametrize("stretch, method", [(1.08, "bound"), (1.2, "contention")])
def test_a_stretch_within_the_noise_is_not_contention(stretch, method):
    # 10 iterations of solo 1 s all overlapped with an identical job: compute 10 x stretch
    ev = ShareEvidence(iterations=10, compute_s=10 * stretch, overlap_s=10 * stretch, identical_s=10 * stretch)
    est = estimate_share(ev, 1.0)
    assert est.method == method
    assert est.share == pytest.approx(0.5 if method == "bound" else stretch / 2)


def test_a_job_slower_than_the_model_allows_saturates_the_device():
    ev = ShareEvidence(iterations=10, compute_s=40.0, alone_s=6.0, overlap_s=34.0, neighbours_share_s=17.0)
    est = estimate_share(ev, 1.0)  # stretched 34 / 4 = 8.5x beside a neighbour of 0.5: clipped to the device
    assert est.method == "contention" and est.share == 1.0 and est.slowdown == pytest.approx(8.5)


def test_a_run_slower_alone_than_its_solo_time_has_no_step_time_estimate():
    # 12 s alone for 10 iterations of a 1 s solo step: the solo time does not hold for this run
    ev = ShareEvidence(iterations=10, compute_s=40.0, alone_s=12.0, overlap_s=28.0, neighbours_share_s=14.0)
    assert estimate_share(ev, 1.0) is None
    est = estimate_share(dataclasses.replace(ev, busy_s=3.0, busy_wall_s=12.0), 1.0)
    assert (est.method, est.share, est.slowdown) == ("utilisation", 0.25, None)


def test_runs_combine_contention_first_weighted_by_overlap_and_a_repeat_is_not_counted():
    m = lambda share, method, bound=1.0, overlap=10.0, util_s=0.0: {  # noqa: E731
        "share": share, "method": method, "bound": bound, "overlap_s": overlap, "utilisation_s": util_s,
        "slowdown": None, "utilisation": None}
    meta = combine({}, m(0.5, "bound", bound=0.5), job=1, placement=1)
    assert (meta[SHARE_KEY], meta[MEASURED_KEY]["method"]) == (0.5, "bound")
    meta = combine(meta, m(0.3, "utilisation", bound=0.6, util_s=5.0), job=2, placement=2)
    assert meta[SHARE_KEY] == 0.3  # a utilisation under the lowest bound
    assert combine(meta, m(0.9, "contention"), job=2, placement=2) is None  # the same run again
    meta = combine(meta, m(0.9, "contention", overlap=30.0), job=3, placement=3)
    meta = combine(meta, m(0.5, "contention", overlap=10.0), job=4, placement=4)
    assert meta[SHARE_KEY] == pytest.approx(0.8)  # (0.9 x 30 + 0.5 x 10) / 40
    for k in range(MAX_RUNS):
        meta = combine(meta, m(0.6, "utilisation", util_s=1.0), job=10 + k, placement=1)
    assert len(meta[MEASURED_KEY]["runs"]) == MAX_RUNS and meta[SHARE_KEY] == 0.6  # the old ones have aged out


def test_an_experiments_copies_measurement_is_replaced_by_the_first_run():
    legacy = {SHARE_KEY: 0.52, MEASURED_KEY: {"solo_step_s": 0.1, "colocated_step_s": 0.104, "copies": 2}}
    meta = combine(legacy, {"share": 0.7, "method": "contention", "bound": 1.0, "overlap_s": 3.0,
                            "utilisation_s": 0.0}, job=1, placement=1)
    assert meta[SHARE_KEY] == 0.7 and len(meta[MEASURED_KEY]["runs"]) == 1


def test_neighbours_are_taken_at_their_stored_share_and_identical_curves_ignore_meta():
    assert curve_share(curve(share=0.3)) == 0.3 and curve_share(curve()) == DEFAULT_COMPUTE_SHARE
    assert curve_share(None) == DEFAULT_COMPUTE_SHARE and curve_share(curve(share=1.5)) == DEFAULT_COMPUTE_SHARE
    assert curve_identity(curve(share=0.3)) == curve_identity(curve()) != curve_identity(curve(2.0))
    assert curve_identity(None) is None
